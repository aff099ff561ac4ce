defmodule Overworld.Transport.HTTP do
  @moduledoc false
  # HTTP/1.1 on a passive gen_tcp socket: requests read with `packet: :http_bin` (the VM's own
  # parser), bodies by Content-Length, responses written in one send. Limits: 8 KiB per request
  # or header line, 64 headers, a body of at most `max_body` bytes, `timeout` ms for a whole
  # request (a slow sender is cut off).

  defmodule Request do
    @moduledoc false
    defstruct [:method, :path, :query, :version, :peer, headers: %{}, body: <<>>]

    @type t :: %__MODULE__{
            method: binary,
            path: binary,
            query: binary,
            version: {non_neg_integer, non_neg_integer},
            headers: %{optional(binary) => binary},
            body: binary
          }
  end

  @max_headers 64
  @line 8192

  @typedoc "Why a request could not be read: answered with the status, or the peer left."
  @type failure :: {:error, 400 | 408 | 411 | 413 | 431 | 505, String.t()} | {:error, :closed}

  @doc false
  @spec read(:gen_tcp.socket(), pos_integer, non_neg_integer) :: {:ok, Request.t()} | failure
  def read(sock, timeout, max_body) do
    deadline = System.monotonic_time(:millisecond) + timeout
    # exit_on_close: false, or a line over `packet_size` (emsgsize) closes the socket in the
    # driver before the 431 can be written.
    :ok = :inet.setopts(sock, packet: :http_bin, packet_size: @line, exit_on_close: false)

    with {:ok, req} <- request_line(sock, deadline),
         {:ok, req} <- headers(sock, req, 0, deadline),
         :ok <- :inet.setopts(sock, packet: :raw),
         {:ok, body} <- body(sock, req.headers, max_body, deadline) do
      {:ok, %{req | body: body}}
    end
  end

  defp recv(sock, n, deadline) do
    case deadline - System.monotonic_time(:millisecond) do
      left when left > 0 ->
        case :gen_tcp.recv(sock, n, left) do
          {:error, :timeout} -> {:error, 408, "request timeout"}
          {:error, :emsgsize} -> {:error, 431, "request line or header too long"}
          {:error, _} -> {:error, :closed}
          ok -> ok
        end

      _ ->
        {:error, 408, "request timeout"}
    end
  end

  defp request_line(sock, deadline) do
    case recv(sock, 0, deadline) do
      {:ok, {:http_request, method, {:abs_path, target}, {1, minor} = v}} when minor in [0, 1] ->
        {path, query} =
          case :binary.split(target, "?") do
            [p, q] -> {p, q}
            [p] -> {p, ""}
          end

        {:ok, %Request{method: method(method), path: path, query: query, version: v}}

      {:ok, {:http_request, _, _, {1, _}}} ->
        {:error, 400, "unsupported request target"}

      {:ok, {:http_request, _, _, _}} ->
        {:error, 505, "HTTP version not supported"}

      # Empty lines before a request are allowed (RFC 9112 §2.2).
      {:ok, {:http_error, line}} when line in ["\r\n", "\n"] ->
        request_line(sock, deadline)

      {:ok, _} ->
        {:error, 400, "malformed request line"}

      error ->
        error
    end
  end

  defp method(m) when is_atom(m), do: Atom.to_string(m)
  defp method(m) when is_binary(m), do: m

  defp headers(_sock, _req, n, _deadline) when n > @max_headers,
    do: {:error, 431, "too many headers"}

  defp headers(sock, req, n, deadline) do
    case recv(sock, 0, deadline) do
      {:ok, :http_eoh} ->
        {:ok, req}

      {:ok, {:http_header, _, name, _, value}} ->
        name = header_name(name)

        headers =
          case req.headers do
            %{^name => old} -> Map.put(req.headers, name, old <> ", " <> value)
            h -> Map.put(h, name, value)
          end

        headers(sock, %{req | headers: headers}, n + 1, deadline)

      {:ok, _} ->
        {:error, 400, "malformed header"}

      error ->
        error
    end
  end

  defp header_name(name) when is_atom(name), do: name |> Atom.to_string() |> String.downcase()
  defp header_name(name) when is_binary(name), do: String.downcase(name)

  defp body(sock, headers, max_body, deadline) do
    case headers do
      %{"transfer-encoding" => _} ->
        {:error, 411, "chunked request bodies are not supported: send Content-Length"}

      %{"content-length" => len} ->
        case Integer.parse(len) do
          {0, ""} -> {:ok, <<>>}
          {n, ""} when n > max_body -> {:error, 413, "body larger than #{max_body} bytes"}
          {n, ""} when n > 0 -> recv(sock, n, deadline)
          _ -> {:error, 400, "invalid Content-Length"}
        end

      _ ->
        {:ok, <<>>}
    end
  end

  @doc false
  # Whether the connection stays open after the response (HTTP/1.1 by default, 1.0 on request).
  @spec keep_alive?(Request.t()) :: boolean
  def keep_alive?(%Request{version: v, headers: h}) do
    conn = h |> Map.get("connection", "") |> String.downcase()

    case v do
      {1, 1} -> not String.contains?(conn, "close")
      _ -> String.contains?(conn, "keep-alive")
    end
  end

  @doc false
  @spec response(pos_integer, [{binary, iodata}], iodata, boolean) :: iodata
  def response(status, headers, body, keep_alive?) do
    [
      "HTTP/1.1 ",
      Integer.to_string(status),
      " ",
      reason(status),
      "\r\ncontent-length: ",
      Integer.to_string(IO.iodata_length(body)),
      if(keep_alive?, do: "\r\n", else: "\r\nconnection: close\r\n"),
      Enum.map(headers, fn {k, v} -> [k, ": ", v, "\r\n"] end),
      "\r\n",
      body
    ]
  end

  @doc false
  @spec reason(pos_integer) :: binary
  def reason(101), do: "Switching Protocols"
  def reason(200), do: "OK"
  def reason(204), do: "No Content"
  def reason(400), do: "Bad Request"
  def reason(401), do: "Unauthorized"
  def reason(404), do: "Not Found"
  def reason(405), do: "Method Not Allowed"
  def reason(408), do: "Request Timeout"
  def reason(411), do: "Length Required"
  def reason(413), do: "Content Too Large"
  def reason(426), do: "Upgrade Required"
  def reason(431), do: "Request Header Fields Too Large"
  def reason(500), do: "Internal Server Error"
  def reason(503), do: "Service Unavailable"
  def reason(505), do: "HTTP Version Not Supported"
  def reason(_), do: "Unknown"

  @doc false
  # A JSON error body: {"error": code, "message": text}.
  @spec error_body(binary, binary) :: iodata
  def error_body(code, message), do: :jiffy.encode(%{error: code, message: message})
end

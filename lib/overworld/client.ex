defmodule Overworld.Client do
  @moduledoc """
  A minimal client of `Overworld.Server` in Elixir, over real sockets: device authentication
  over HTTP, the WebSocket upgrade, masked client frames and the protocol's messages. The bot
  swarm (`mix overworld.bots`), the connection benchmark (`mix overworld.bench.ccu`) and the
  tests use it; games use the TypeScript SDK.

      {:ok, %{"token" => token}} = Overworld.Client.authenticate_device("127.0.0.1", 4000, "device-0001")
      {:ok, conn} = Overworld.Client.connect("127.0.0.1", 4000, "/ws")
      :ok = Overworld.Client.send_msg(conn, %{type: :hello, version: Overworld.Protocol.version(), token: token})
      {:ok, {:binary, handshake}, conn} = Overworld.Client.recv(conn, 5_000)
  """
  import Bitwise

  defstruct [:sock, buf: <<>>]

  @type t :: %__MODULE__{sock: :gen_tcp.socket(), buf: binary}
  @type frame ::
          {:binary | :text | :ping | :pong, binary} | {:close, non_neg_integer | nil, binary}

  @doc """
  One HTTP request on a new connection: `{:ok, status, headers, body}` (header names in lower
  case). Options: `:ip` (local address to connect from), `:timeout` (ms, default 10,000),
  `:headers` (more request headers, `[{name, value}]`).
  """
  @spec request(String.t(), :inet.port_number(), binary, binary, iodata, keyword) ::
          {:ok, pos_integer, map, binary} | {:error, term}
  def request(host, port, method, path, body \\ "", opts \\ []) do
    timeout = Keyword.get(opts, :timeout, 10_000)

    with {:ok, sock} <- tcp(host, port, opts) do
      req = [
        method,
        " ",
        path,
        " HTTP/1.1\r\nhost: ",
        host,
        "\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: ",
        Integer.to_string(IO.iodata_length(body)),
        "\r\n",
        for({name, value} <- Keyword.get(opts, :headers, []), do: [name, ": ", value, "\r\n"]),
        "\r\n",
        body
      ]

      result =
        with :ok <- :gen_tcp.send(sock, req),
             {:ok, status, headers} <- response_head(sock, timeout),
             {:ok, body} <- response_body(sock, status, headers, timeout),
             do: {:ok, status, headers, body}

      :gen_tcp.close(sock)
      result
    end
  end

  @doc "Device authentication: the decoded JSON answer, or `{:error, {status, body}}`."
  @spec authenticate_device(String.t(), :inet.port_number(), binary, keyword) ::
          {:ok, map} | {:error, term}
  def authenticate_device(host, port, device_id, opts \\ []) do
    body = :jiffy.encode(%{device_id: device_id})

    case request(host, port, "POST", "/api/v1/auth/device", body, opts) do
      {:ok, 200, _, json} -> {:ok, :jiffy.decode(json, [:return_maps])}
      {:ok, status, _, json} -> {:error, {status, json}}
      error -> error
    end
  end

  @doc """
  Opens a WebSocket (`path` with its query, e.g. `"/ws?zone=goblins"`). Options: `:ip` (local
  address), `:timeout`, `:headers` (extra request headers), `:active` (socket mode after the
  upgrade, default false). `{:error, {:status, status, body}}` when the upgrade is refused.
  """
  @spec connect(String.t(), :inet.port_number(), binary, keyword) :: {:ok, t} | {:error, term}
  def connect(host, port, path, opts \\ []) do
    timeout = Keyword.get(opts, :timeout, 10_000)
    key = Base.encode64(:crypto.strong_rand_bytes(16))

    with {:ok, sock} <- tcp(host, port, opts) do
      req = [
        "GET ",
        path,
        " HTTP/1.1\r\nhost: ",
        host,
        "\r\nupgrade: websocket\r\nconnection: Upgrade\r\nsec-websocket-version: 13\r\n",
        "sec-websocket-key: ",
        key,
        "\r\n",
        Enum.map(Keyword.get(opts, :headers, []), fn {k, v} -> [k, ": ", v, "\r\n"] end),
        "\r\n"
      ]

      with :ok <- :gen_tcp.send(sock, req),
           {:ok, 101, headers} <- response_head(sock, timeout),
           true <-
             headers["sec-websocket-accept"] == :cow_ws.encode_key(key) || {:error, :bad_accept},
           :ok <- :inet.setopts(sock, packet: :raw, active: Keyword.get(opts, :active, false)) do
        {:ok, %__MODULE__{sock: sock}}
      else
        {:ok, status, headers} ->
          # (Not read until closed: the upgrade's connection stays open.)
          body =
            case response_body(sock, status, Map.put_new(headers, "content-length", "0"), timeout) do
              {:ok, b} -> b
              _ -> ""
            end

          :gen_tcp.close(sock)
          {:error, {:status, status, body}}

        error ->
          :gen_tcp.close(sock)
          error
      end
    end
  end

  defp tcp(host, port, opts) do
    base = [:binary, packet: :raw, active: false, nodelay: true]
    base = if ip = opts[:ip], do: [{:ip, ip} | base], else: base
    :gen_tcp.connect(String.to_charlist(host), port, base, Keyword.get(opts, :timeout, 10_000))
  end

  defp response_head(sock, timeout) do
    :ok = :inet.setopts(sock, packet: :http_bin)

    case :gen_tcp.recv(sock, 0, timeout) do
      {:ok, {:http_response, _, status, _}} -> headers(sock, status, %{}, timeout)
      {:ok, other} -> {:error, {:bad_response, other}}
      error -> error
    end
  end

  defp headers(sock, status, acc, timeout) do
    case :gen_tcp.recv(sock, 0, timeout) do
      {:ok, :http_eoh} ->
        :ok = :inet.setopts(sock, packet: :raw)
        {:ok, status, acc}

      {:ok, {:http_header, _, name, _, value}} ->
        name = if is_atom(name), do: Atom.to_string(name), else: name
        headers(sock, status, Map.put(acc, String.downcase(name), value), timeout)

      {:ok, other} ->
        {:error, {:bad_header, other}}

      error ->
        error
    end
  end

  # The body: `content-length` bytes, or chunks (`transfer-encoding: chunked`, as a server
  # that streams a large answer sends it), or, with neither, all until the server closes
  # (the request said `connection: close`).
  defp response_body(_sock, status, _headers, _timeout) when status in [204, 304], do: {:ok, ""}

  defp response_body(sock, _status, headers, timeout) do
    cond do
      String.downcase(Map.get(headers, "transfer-encoding", "")) =~ "chunked" ->
        chunks(sock, timeout, [])

      length = headers["content-length"] ->
        case Integer.parse(length) do
          {0, ""} -> {:ok, ""}
          {n, ""} when n > 0 -> :gen_tcp.recv(sock, n, timeout)
          _ -> {:error, :bad_length}
        end

      true ->
        until_closed(sock, timeout, [])
    end
  end

  defp chunks(sock, timeout, acc) do
    :ok = :inet.setopts(sock, packet: :line)

    with {:ok, line} <- :gen_tcp.recv(sock, 0, timeout),
         [size | _] = String.split(String.trim(line), ";"),
         {n, ""} <- Integer.parse(size, 16) do
      :ok = :inet.setopts(sock, packet: :raw)

      case n do
        # The last chunk (trailers are not read: the connection closes).
        0 ->
          {:ok, acc |> Enum.reverse() |> IO.iodata_to_binary()}

        n ->
          with {:ok, data} <- :gen_tcp.recv(sock, n + 2, timeout),
               <<chunk::binary-size(n), "\r\n">> <- data do
            chunks(sock, timeout, [chunk | acc])
          else
            {:error, _} = error -> error
            _ -> {:error, :bad_chunk}
          end
      end
    else
      {:error, _} = error -> error
      _ -> {:error, :bad_chunk}
    end
  end

  defp until_closed(sock, timeout, acc) do
    case :gen_tcp.recv(sock, 0, timeout) do
      {:ok, data} -> until_closed(sock, timeout, [data | acc])
      {:error, :closed} -> {:ok, acc |> Enum.reverse() |> IO.iodata_to_binary()}
      error -> error
    end
  end

  ## Frames

  @doc "Sends a protocol message (`Overworld.Protocol.encode/1`) in a masked binary frame."
  @spec send_msg(t, map) :: :ok | {:error, term}
  def send_msg(%__MODULE__{sock: sock}, msg),
    do: :gen_tcp.send(sock, frame(2, Overworld.Protocol.encode(msg)))

  @doc "Sends raw bytes."
  @spec send_raw(t, iodata) :: :ok | {:error, term}
  def send_raw(%__MODULE__{sock: sock}, data), do: :gen_tcp.send(sock, data)

  @doc """
  A client frame. Options (to build broken frames on purpose): `:fin` (default true),
  `:rsv` (0..7, default 0), `:mask` (default true).
  """
  @spec frame(0..15, iodata, keyword) :: binary
  def frame(opcode, payload, opts \\ []) do
    payload = IO.iodata_to_binary(payload)
    fin = if Keyword.get(opts, :fin, true), do: 1, else: 0
    rsv = Keyword.get(opts, :rsv, 0)
    masked? = Keyword.get(opts, :mask, true)
    n = byte_size(payload)

    len =
      cond do
        n < 126 -> <<n::7>>
        n < 65_536 -> <<126::7, n::16>>
        true -> <<127::7, n::64>>
      end

    if masked? do
      <<key::32>> = mask = :crypto.strong_rand_bytes(4)

      <<fin::1, rsv::3, opcode::4, 1::1, len::bitstring, mask::binary,
        mask(payload, key)::binary>>
    else
      <<fin::1, rsv::3, opcode::4, 0::1, len::bitstring, payload::binary>>
    end
  end

  defp mask(payload, key) do
    words = div(byte_size(payload), 4)
    <<body::binary-size(words * 4), tail::binary>> = payload
    head = for <<w::32 <- body>>, into: <<>>, do: <<bxor(w, key)::32>>
    <<k1, k2, k3, _>> = <<key::32>>
    ks = [k1, k2, k3]
    tail = for {b, k} <- Enum.zip(:binary.bin_to_list(tail), ks), into: <<>>, do: <<bxor(b, k)>>
    head <> tail
  end

  @doc "Receives the next frame (passive socket)."
  @spec recv(t, timeout) :: {:ok, frame, t} | {:error, term}
  def recv(%__MODULE__{} = c, timeout) do
    case parse(c.buf) do
      {:ok, frame, rest} ->
        {:ok, frame, %{c | buf: rest}}

      :more ->
        case :gen_tcp.recv(c.sock, 0, timeout) do
          {:ok, data} -> recv(%{c | buf: c.buf <> data}, timeout)
          error -> error
        end
    end
  end

  @doc """
  The first server frame in `buf`: `{:ok, frame, rest}` or `:more`. Server frames are not
  masked and not fragmented.
  """
  @spec parse(binary) :: {:ok, frame, binary} | :more
  def parse(<<_fin::1, _rsv::3, op::4, 0::1, 126::7, n::16, rest::binary>>),
    do: payload(op, n, rest)

  def parse(<<_fin::1, _rsv::3, op::4, 0::1, 127::7, n::64, rest::binary>>),
    do: payload(op, n, rest)

  def parse(<<_fin::1, _rsv::3, op::4, 0::1, n::7, rest::binary>>) when n < 126,
    do: payload(op, n, rest)

  def parse(_), do: :more

  defp payload(op, n, rest) when byte_size(rest) >= n do
    <<data::binary-size(n), rest::binary>> = rest
    {:ok, typed(op, data), rest}
  end

  defp payload(_op, _n, _rest), do: :more

  defp typed(1, data), do: {:text, data}
  defp typed(2, data), do: {:binary, data}
  defp typed(8, <<code::16, reason::binary>>), do: {:close, code, reason}
  defp typed(8, _), do: {:close, nil, ""}
  defp typed(9, data), do: {:ping, data}
  defp typed(10, data), do: {:pong, data}
  defp typed(_, data), do: {:binary, data}

  @doc "Closes the socket."
  @spec close(t) :: :ok
  def close(%__MODULE__{sock: sock}), do: :gen_tcp.close(sock)
end

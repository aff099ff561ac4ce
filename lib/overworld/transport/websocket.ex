defmodule Overworld.Transport.WebSocket do
  @moduledoc false
  # RFC 6455 on the server side: the upgrade checks and the frame reader (parsing and
  # unmasking by `:cow_ws` from Debian's erlang-cowlib), and server frames (never masked).
  #
  # The reader takes the bytes received so far and answers one event at a time; it insists on
  # masked client frames, no reserved bits (no extension is negotiated), known opcodes,
  # unfragmented control frames of at most 125 bytes, continuations only inside a fragmented
  # message, valid UTF-8 in text messages and close reasons, valid close codes, and a message
  # size limit over all of a message's fragments. Each violation names its close code.

  alias Overworld.Transport.HTTP.Request

  defstruct frag: :undefined, acc: [], size: 0, utf8: 0, max: 65_536

  @type t :: %__MODULE__{
          frag: term,
          acc: iodata,
          size: non_neg_integer,
          utf8: non_neg_integer,
          max: pos_integer
        }

  @type event ::
          {:message, :binary | :text, binary, binary, t}
          | {:ping, binary, binary, t}
          | {:pong, binary, t}
          | {:close, non_neg_integer | nil, binary}
          | {:error, 1002 | 1007 | 1009, String.t()}
          | {:more, binary, t}
          | :more

  @doc false
  @spec new(pos_integer) :: t
  def new(max), do: %__MODULE__{max: max}

  @doc false
  # Checks an upgrade request: {:ok, accept key} or {:error, status, extra headers, message}.
  @spec upgrade(Request.t()) :: {:ok, binary} | {:error, pos_integer, list, String.t()}
  def upgrade(%Request{method: "GET", headers: h, version: {1, 1}}) do
    cond do
      not token?(h, "upgrade", "websocket") ->
        {:error, 426, [{"upgrade", "websocket"}], "expected Upgrade: websocket"}

      not token?(h, "connection", "upgrade") ->
        {:error, 400, [], "expected Connection: upgrade"}

      Map.get(h, "sec-websocket-version") != "13" ->
        {:error, 426, [{"sec-websocket-version", "13"}], "unsupported WebSocket version"}

      not valid_key?(Map.get(h, "sec-websocket-key")) ->
        {:error, 400, [], "missing or invalid Sec-WebSocket-Key"}

      true ->
        {:ok, :cow_ws.encode_key(h["sec-websocket-key"])}
    end
  end

  def upgrade(%Request{method: "GET"}), do: {:error, 400, [], "WebSocket needs HTTP/1.1"}
  def upgrade(%Request{}), do: {:error, 405, [{"allow", "GET"}], "use GET to upgrade"}

  defp token?(headers, name, token) do
    headers
    |> Map.get(name, "")
    |> String.downcase()
    |> String.split(",")
    |> Enum.any?(&(String.trim(&1) == token))
  end

  defp valid_key?(key) when is_binary(key) do
    match?({:ok, <<_::binary-size(16)>>}, Base.decode64(String.trim(key)))
  end

  defp valid_key?(_), do: false

  @doc false
  @spec upgrade_response(binary) :: iodata
  def upgrade_response(accept) do
    [
      "HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n",
      "sec-websocket-accept: ",
      accept,
      "\r\n\r\n"
    ]
  end

  @doc false
  # The next event from the bytes received so far: `:more` when they do not hold a whole
  # frame, `{:more, rest, ws}` when they held fragments of a message (kept in `ws`) and then
  # part of a frame.
  @spec next(binary, t) :: event
  def next(buf, %__MODULE__{} = ws) do
    case :cow_ws.parse_header(buf, %{}, ws.frag) do
      :more ->
        :more

      :error ->
        {:error, 1002, "protocol error (reserved bits, opcode, control frame or continuation)"}

      {_type, _frag, _rsv, _len, :undefined, _rest} ->
        {:error, 1002, "client frames must be masked"}

      # Control frames (at most 125 bytes, checked by `:cow_ws`) may come between the
      # fragments of a message: they do not count towards its size.
      {type, _frag, _rsv, len, _mask, _rest}
      when type in [:text, :binary, :fragment] and ws.size + len > ws.max ->
        {:error, 1009, "message larger than #{ws.max} bytes"}

      {_type, _frag, _rsv, len, _mask, rest} when byte_size(rest) < len ->
        :more

      {type, frag, rsv, len, mask, rest} ->
        <<payload::binary-size(len), rest::binary>> = rest
        utf8 = if type == :fragment, do: ws.utf8, else: 0

        case :cow_ws.parse_payload(payload, mask, utf8, 0, type, len, frag, %{}, rsv) do
          {:ok, code, reason, _utf8, <<>>} when type == :close ->
            {:close, code, reason}

          {:ok, data, utf8, <<>>} ->
            event(type, frag, data, utf8, rest, ws)

          {:error, :badencoding} ->
            {:error, 1007, "invalid UTF-8"}

          {:error, _} ->
            {:error, 1002, "invalid frame"}
        end
    end
  end

  defp event(:close, _frag, _data, _utf8, _rest, _ws), do: {:close, nil, <<>>}
  defp event(:ping, _frag, data, _utf8, rest, ws), do: {:ping, data, rest, ws}
  defp event(:pong, _frag, _data, _utf8, rest, ws), do: {:pong, rest, ws}

  defp event(type, _frag, data, _utf8, rest, ws) when type in [:text, :binary],
    do: {:message, type, data, rest, ws}

  # A fragment is kept in the state; when the bytes after it do not hold a whole frame yet,
  # the caller gets that state (`{:more, rest, ws}`), so fragments are parsed once each however
  # the message trickles in.
  defp event(:fragment, {:nofin, _, _} = frag, data, utf8, rest, ws) do
    ws = %{ws | frag: frag, acc: [ws.acc | data], size: ws.size + byte_size(data), utf8: utf8}

    case next(rest, ws) do
      :more -> {:more, rest, ws}
      event -> event
    end
  end

  defp event(:fragment, {:fin, type, _}, data, _utf8, rest, ws) do
    message = IO.iodata_to_binary([ws.acc | data])
    {:message, type, message, rest, %{ws | frag: :undefined, acc: [], size: 0, utf8: 0}}
  end

  @doc false
  # A server frame (unmasked) around iodata.
  @spec frame(0..15, iodata) :: iodata
  def frame(opcode, payload), do: frame(opcode, payload, IO.iodata_length(payload))

  @doc false
  # The same when the payload's size is known.
  @spec frame(0..15, iodata, non_neg_integer) :: iodata
  def frame(opcode, payload, size) do
    case size do
      n when n < 126 -> [<<1::1, 0::3, opcode::4, 0::1, n::7>> | payload]
      n when n < 65_536 -> [<<1::1, 0::3, opcode::4, 0::1, 126::7, n::16>> | payload]
      n -> [<<1::1, 0::3, opcode::4, 0::1, 127::7, n::64>> | payload]
    end
  end

  @doc false
  @spec binary(iodata) :: iodata
  def binary(payload), do: frame(2, payload)

  @doc false
  @spec close(non_neg_integer, binary) :: iodata
  def close(code, reason), do: frame(8, [<<code::16>>, truncate(reason)])

  # A control frame's payload is at most 125 bytes: a code and 123 bytes of reason.
  defp truncate(reason) when byte_size(reason) <= 123, do: reason
  defp truncate(reason), do: binary_part(reason, 0, 123)
end

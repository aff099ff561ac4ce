defmodule Overworld.Protocol do
  @moduledoc """
  Wire messages (docs/protocol.md): one message per WebSocket binary frame, an opcode byte
  first. Messages are maps with a `:type`.

  Client → server: `:hello` (`version`, `token`), `:input` (`seq`, `ack`, `payload`),
  `:client_event` (`seq`, `payload`), `:ping` (`client_time`), `:resync` (`reason`,
  `last_tick`), `:request` (`id`, `method`, `body`: JSON text), `:match_send` (`match_id`,
  `op`, `payload`).

  Server → client: `:handshake` (`version`, `tick_rate`, `entity_id`, `width`, `height`,
  `cell_size`, `cols`, `rows`, `templates`, `input`: an input layout or nil, `extensions`:
  `[{type, bytes}]`), `:event` (the server's RELIABLE: `seq`, `payload`), `:pong`
  (`client_time`, `server_tick`), `:error` (`code`, `message`), `:response` (`id`, `status`,
  `body`: JSON text), `:match_data` (`match_id`, `messages`: `[{op, sender, payload}]`),
  `:notify` (`kind`, `body`: JSON text). Snapshots come with interest
  management (`Overworld.Protocol.Snapshot`).

  `decode/1` never raises and never creates atoms: bad bytes answer `{:error, reason}`;
  decoded templates carry their names as strings.

      iex> bin = Overworld.Protocol.encode(%{type: :ping, client_time: 1234})
      iex> {bin, Overworld.Protocol.decode(bin)}
      {<<0x43, 210, 9>>, {:ok, %{type: :ping, client_time: 1234}}}
      iex> Overworld.Protocol.decode(<<0x43>>)
      {:error, :truncated}
      iex> Overworld.Protocol.decode(<<0x7F, 1, 2>>)
      {:error, {:unknown_opcode, 127}}
  """
  import Bitwise, only: [<<<: 2]
  import Overworld.Protocol.Codec
  alias Overworld.Template
  alias Overworld.Template.Field

  @version 2

  @doc "The protocol version this server speaks."
  @spec version() :: pos_integer
  def version, do: @version

  @doc """
  A HANDSHAKE message (for `encode/1`): this version's, with `fields` over the defaults of a
  connection that joined no zone (no entity, no grid, no template, no input layout, no
  extension).

      iex> Overworld.Protocol.handshake(entity_id: 7) |> Map.take([:version, :entity_id, :cols, :input])
      %{version: 2, entity_id: 7, cols: 0, input: nil}
  """
  @spec handshake(keyword) :: map
  def handshake(fields \\ []) do
    Map.merge(
      %{
        type: :handshake,
        version: @version,
        tick_rate: 0,
        entity_id: 0,
        width: 0,
        height: 0,
        cell_size: 0,
        cols: 0,
        rows: 0,
        templates: [],
        input: nil,
        extensions: []
      },
      Map.new(fields)
    )
  end

  @types %{uint: 0, int: 1, fixed: 2, angle: 3, enum: 4, bool: 5}
  @type_names Map.new(@types, fn {k, v} -> {v, k} end)

  @type message :: %{required(:type) => atom, optional(atom) => term}

  @doc "Encodes a message."
  @spec encode(message) :: binary
  def encode(%{type: :hello, version: v, token: t}), do: <<0x40, v::16, string(t)::binary>>

  def encode(%{type: :input, seq: s, ack: a, payload: p}),
    do: <<0x41, varint(s)::binary, varint(a)::binary, p::binary>>

  def encode(%{type: :client_event, seq: s, payload: p}),
    do: <<0x42, varint(s)::binary, p::binary>>

  def encode(%{type: :ping, client_time: t}), do: <<0x43, varint(t)::binary>>
  def encode(%{type: :resync, reason: r, last_tick: t}), do: <<0x44, r::8, varint(t)::binary>>

  def encode(%{type: :request, id: id, method: m, body: b}),
    do: <<0x45, varint(id)::binary, string(m)::binary, b::binary>>

  def encode(%{type: :match_send, match_id: id, op: op, payload: p}),
    do: <<0x46, string(id)::binary, varint(op)::binary, p::binary>>

  def encode(%{type: :response, id: id, status: st, body: b}),
    do: <<0x06, varint(id)::binary, st::16, b::binary>>

  def encode(%{type: :match_data, match_id: id, messages: ms}),
    do: IO.iodata_to_binary(match_data(id, Enum.map(ms, &match_message/1)))

  def encode(%{type: :notify, kind: k, body: b}), do: <<0x08, string(k)::binary, b::binary>>

  def encode(%{type: :handshake} = m) do
    IO.iodata_to_binary([
      <<0x01, m.version::16, m.tick_rate::16>>,
      varint(m.entity_id),
      varint(m.width),
      varint(m.height),
      varint(m.cell_size),
      varint(m.cols),
      varint(m.rows),
      <<length(m.templates)::8>>,
      Enum.map(m.templates, &schema/1),
      case Map.get(m, :input) do
        nil -> <<0>>
        t -> [<<1>>, schema(t)]
      end,
      extensions(Map.get(m, :extensions, []))
    ])
  end

  def encode(%{type: :event, seq: s, payload: p}), do: <<0x03, varint(s)::binary, p::binary>>

  def encode(%{type: :pong, client_time: t, server_tick: k}),
    do: <<0x04, varint(t)::binary, varint(k)::binary>>

  def encode(%{type: :error, code: c, message: msg}), do: <<0x05, c::16, string(msg)::binary>>

  @doc """
  A MATCH_DATA frame's iodata from messages already encoded (`match_message/1`): a match
  encodes each message once and joins them per recipient.
  """
  @spec match_data(binary, [iodata]) :: iodata
  def match_data(match_id, encoded),
    do: [0x07, string(match_id), varint(length(encoded)) | encoded]

  @doc """
  One message of a MATCH_DATA frame: `{op, sender, payload}` (sender: a user id, "" for the
  server).

      iex> Overworld.Protocol.match_message({3, "u1", "hi"}) |> IO.iodata_to_binary()
      <<3, 2, "u1", 2, "hi">>
  """
  @spec match_message({non_neg_integer, binary, binary}) :: iodata
  def match_message({op, sender, payload}),
    do: [varint(op), string(sender), varint(byte_size(payload)), payload]

  @doc false
  # Extensions (room for later versions' additions): a varint count, then per extension its
  # type (varint), byte length (varint) and bytes; a reader skips the types it does not know.
  @spec extensions([{non_neg_integer, binary}]) :: iodata
  def extensions(list),
    do: [varint(length(list)) | Enum.map(list, fn {t, b} -> [varint(t), string(b)] end)]

  @doc false
  @spec read_extensions(binary) :: {:ok, [{non_neg_integer, binary}], binary} | {:error, atom}
  def read_extensions(bin) do
    with {:ok, n, rest} <- read_varint(bin), do: read_n(rest, n, &read_extension/1)
  end

  defp read_extension(bin) do
    with {:ok, type, rest} <- read_varint(bin),
         {:ok, bytes, rest} <- read_string(rest, 65_536),
         do: {:ok, {type, bytes}, rest}
  end

  defp schema(%Template{} = t) do
    [
      <<t.id::8>>,
      string(to_string(t.name)),
      <<length(t.fields)::8>>,
      Enum.map(t.fields, &field/1)
    ]
  end

  defp field(%Field{} = f) do
    [
      string(to_string(f.name)),
      <<Map.fetch!(@types, f.type)::8, f.bits::8, f.diff_bits::8>>,
      varint(zigzag(f.min)),
      varint(f.step),
      values(f)
    ]
  end

  defp values(%Field{type: :enum, values: vs}), do: [<<length(vs)::8>>, Enum.map(vs, &value/1)]
  defp values(%Field{}), do: []

  defp value(v) when is_atom(v), do: [<<0>>, string(Atom.to_string(v))]
  defp value(v) when is_integer(v), do: [<<1>>, varint(zigzag(v))]

  @doc "Decodes a message; never raises."
  @spec decode(binary) :: {:ok, message} | {:error, term}
  def decode(<<0x40, v::16, rest::binary>>) do
    with {:ok, token, rest} <- read_string(rest, 4096),
         :ok <- empty(rest),
         do: {:ok, %{type: :hello, version: v, token: token}}
  end

  def decode(<<0x41, rest::binary>>) do
    with {:ok, s, rest} <- read_varint(rest),
         {:ok, a, payload} <- read_varint(rest),
         do: {:ok, %{type: :input, seq: s, ack: a, payload: payload}}
  end

  def decode(<<0x42, rest::binary>>) do
    with {:ok, s, payload} <- read_varint(rest),
         do: {:ok, %{type: :client_event, seq: s, payload: payload}}
  end

  def decode(<<0x43, rest::binary>>) do
    with {:ok, t, rest} <- read_varint(rest),
         :ok <- empty(rest),
         do: {:ok, %{type: :ping, client_time: t}}
  end

  def decode(<<0x44, r::8, rest::binary>>) do
    with {:ok, t, rest} <- read_varint(rest),
         :ok <- empty(rest),
         do: {:ok, %{type: :resync, reason: r, last_tick: t}}
  end

  def decode(<<0x45, rest::binary>>) do
    with {:ok, id, rest} <- read_varint(rest),
         {:ok, method, body} <- read_string(rest, 64),
         do: {:ok, %{type: :request, id: id, method: method, body: body}}
  end

  def decode(<<0x46, rest::binary>>) do
    with {:ok, id, rest} <- read_string(rest, 128),
         {:ok, op, payload} <- read_varint(rest),
         do: {:ok, %{type: :match_send, match_id: id, op: op, payload: payload}}
  end

  def decode(<<0x06, rest::binary>>) do
    case read_varint(rest) do
      {:ok, id, <<status::16, body::binary>>} ->
        {:ok, %{type: :response, id: id, status: status, body: body}}

      {:ok, _, _} ->
        {:error, :truncated}

      error ->
        error
    end
  end

  def decode(<<0x07, rest::binary>>) do
    with {:ok, id, rest} <- read_string(rest, 128),
         {:ok, n, rest} <- read_varint(rest),
         {:ok, ms, rest} <- read_n(rest, n, &read_match_message/1),
         :ok <- empty(rest),
         do: {:ok, %{type: :match_data, match_id: id, messages: ms}}
  end

  def decode(<<0x08, rest::binary>>) do
    with {:ok, kind, body} <- read_string(rest, 64),
         do: {:ok, %{type: :notify, kind: kind, body: body}}
  end

  def decode(<<0x01, v::16, rate::16, rest::binary>>) do
    with {:ok, id, rest} <- read_varint(rest),
         {:ok, w, rest} <- read_varint(rest),
         {:ok, h, rest} <- read_varint(rest),
         {:ok, c, rest} <- read_varint(rest),
         {:ok, cols, rest} <- read_varint(rest),
         {:ok, rows, rest} <- read_varint(rest),
         {:ok, n, rest} <- byte(rest),
         {:ok, templates, rest} <- read_n(rest, n, &read_template/1),
         {:ok, input, rest} <- read_input(rest),
         {:ok, extensions, rest} <- read_extensions(rest),
         :ok <- empty(rest) do
      {:ok,
       %{
         type: :handshake,
         version: v,
         tick_rate: rate,
         entity_id: id,
         width: w,
         height: h,
         cell_size: c,
         cols: cols,
         rows: rows,
         templates: templates,
         input: input,
         extensions: extensions
       }}
    end
  end

  def decode(<<0x03, rest::binary>>) do
    with {:ok, s, payload} <- read_varint(rest),
         do: {:ok, %{type: :event, seq: s, payload: payload}}
  end

  def decode(<<0x04, rest::binary>>) do
    with {:ok, t, rest} <- read_varint(rest),
         {:ok, k, rest} <- read_varint(rest),
         :ok <- empty(rest),
         do: {:ok, %{type: :pong, client_time: t, server_tick: k}}
  end

  def decode(<<0x05, c::16, rest::binary>>) do
    with {:ok, msg, rest} <- read_string(rest),
         :ok <- empty(rest),
         do: {:ok, %{type: :error, code: c, message: msg}}
  end

  def decode(<<op, _::binary>>) when op in [0x01, 0x05, 0x40, 0x44], do: {:error, :truncated}
  def decode(<<op, _::binary>>), do: {:error, {:unknown_opcode, op}}
  def decode(<<>>), do: {:error, :empty}
  def decode(_), do: {:error, :not_a_binary}

  defp empty(<<>>), do: :ok
  defp empty(_rest), do: {:error, :trailing_bytes}

  defp byte(<<b::8, rest::binary>>), do: {:ok, b, rest}
  defp byte(_), do: {:error, :truncated}

  defp read_match_message(bin) do
    with {:ok, op, rest} <- read_varint(bin),
         {:ok, sender, rest} <- read_string(rest, 255),
         {:ok, payload, rest} <- read_string(rest, 1 <<< 24),
         do: {:ok, {op, sender, payload}, rest}
  end

  defp read_n(bin, 0, _fun), do: {:ok, [], bin}

  defp read_n(bin, n, fun) do
    Enum.reduce_while(1..n, {:ok, [], bin}, fn _, {:ok, acc, bin} ->
      case fun.(bin) do
        {:ok, item, rest} -> {:cont, {:ok, [item | acc], rest}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, items, rest} -> {:ok, Enum.reverse(items), rest}
      error -> error
    end
  end

  defp read_input(<<0, rest::binary>>), do: {:ok, nil, rest}
  defp read_input(<<1, rest::binary>>), do: read_template(rest)
  defp read_input(<<_, _::binary>>), do: {:error, :bad_input_layout}
  defp read_input(_), do: {:error, :truncated}

  defp read_template(<<id::8, rest::binary>>) do
    with {:ok, name, rest} <- read_string(rest, 255),
         {:ok, n, rest} <- byte(rest),
         {:ok, fields, rest} <- read_n(rest, n, &read_field/1) do
      if fields == [],
        do: {:error, :bad_template},
        else: {:ok, %Template{id: id, name: name, kinds: [], fields: fields}, rest}
    end
  end

  defp read_template(_), do: {:error, :truncated}

  defp read_field(bin) do
    with {:ok, name, rest} <- read_string(bin, 255),
         {:ok, <<type::8, bits::8, diff::8>>, rest} <- take(rest, 3),
         {:ok, type} <- type(type),
         {:ok, min, rest} <- read_varint(rest),
         {:ok, step, rest} <- read_varint(rest),
         {:ok, values, rest} <- read_values(type, rest),
         :ok <- valid_field(type, bits, diff, step, values) do
      {:ok,
       %Field{
         name: name,
         type: type,
         bits: bits,
         min: unzigzag(min),
         step: step,
         values: values,
         diff_bits: diff,
         # What the wire can carry (the declared range is not sent).
         max: if(values, do: length(values) - 1, else: (1 <<< bits) - 1),
         source: nil
       }, rest}
    end
  end

  defp take(bin, n) do
    case bin do
      <<b::binary-size(n), rest::binary>> -> {:ok, b, rest}
      _ -> {:error, :truncated}
    end
  end

  defp type(t) do
    case Map.fetch(@type_names, t) do
      {:ok, name} -> {:ok, name}
      :error -> {:error, {:unknown_field_type, t}}
    end
  end

  defp read_values(:enum, bin) do
    with {:ok, n, rest} <- byte(bin), do: read_n(rest, n, &read_value/1)
  end

  defp read_values(:bool, rest), do: {:ok, [false, true], rest}
  defp read_values(_type, rest), do: {:ok, nil, rest}

  defp read_value(<<0, rest::binary>>), do: read_string(rest, 255)

  defp read_value(<<1, rest::binary>>) do
    with {:ok, u, rest} <- read_varint(rest), do: {:ok, unzigzag(u), rest}
  end

  defp read_value(<<_tag, _::binary>>), do: {:error, :bad_enum_value}
  defp read_value(_), do: {:error, :truncated}

  defp valid_field(type, bits, diff, step, values) do
    cond do
      bits < 1 or bits > 53 -> {:error, :bad_field_bits}
      diff > bits -> {:error, :bad_field_bits}
      type in [:enum, :bool] and diff != 0 -> {:error, :bad_field_bits}
      type == :bool and bits != 1 -> {:error, :bad_field_bits}
      step < 1 -> {:error, :bad_field_step}
      type == :enum and length(values) < 2 -> {:error, :bad_enum_values}
      type == :enum and length(values) > 1 <<< bits -> {:error, :bad_enum_values}
      true -> :ok
    end
  end
end

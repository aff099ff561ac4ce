defmodule Overworld.ProtocolTest do
  use ExUnit.Case, async: true
  doctest Overworld.Protocol
  doctest Overworld.Protocol.Codec

  alias Overworld.Protocol
  alias Overworld.Protocol.Codec
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.Prop

  import :proper_types, only: [integer: 2, binary: 0, non_neg_integer: 0, exactly: 1]

  @max 9_007_199_254_740_991

  defp u(max), do: integer(0, max)

  # One generator per message kind.
  defp message do
    :proper_types.oneof([
      :proper_types.tuple([exactly(:hello), u(65_535), binary()]),
      :proper_types.tuple([exactly(:input), u(@max), u(@max), binary()]),
      :proper_types.tuple([exactly(:client_event), u(@max), binary()]),
      :proper_types.tuple([exactly(:ping), u(@max)]),
      :proper_types.tuple([exactly(:resync), u(255), u(@max)]),
      :proper_types.tuple([exactly(:event), u(@max), binary()]),
      :proper_types.tuple([exactly(:pong), u(@max), u(@max)]),
      :proper_types.tuple([exactly(:error), u(65_535), binary()]),
      :proper_types.tuple([
        exactly(:handshake),
        u(65_535),
        u(1000),
        u(@max),
        u(@max),
        u(@max),
        u(@max),
        u(@max),
        u(@max),
        :proper_types.boolean(),
        :proper_types.list(:proper_types.tuple([u(@max), binary()]))
      ])
    ])
  end

  defp to_message({:hello, v, t}), do: %{type: :hello, version: v, token: t}
  defp to_message({:input, s, a, p}), do: %{type: :input, seq: s, ack: a, payload: p}
  defp to_message({:client_event, s, p}), do: %{type: :client_event, seq: s, payload: p}
  defp to_message({:ping, t}), do: %{type: :ping, client_time: t}
  defp to_message({:resync, r, t}), do: %{type: :resync, reason: r, last_tick: t}
  defp to_message({:event, s, p}), do: %{type: :event, seq: s, payload: p}
  defp to_message({:pong, t, k}), do: %{type: :pong, client_time: t, server_tick: k}
  defp to_message({:error, c, m}), do: %{type: :error, code: c, message: m}

  defp to_message({:handshake, v, r, id, w, h, c, cols, rows, input?, extensions}),
    do: %{
      type: :handshake,
      version: v,
      tick_rate: r,
      entity_id: id,
      width: w,
      height: h,
      cell_size: c,
      cols: cols,
      rows: rows,
      templates: Wire.__templates__(),
      input: if(input?, do: Wire.__input__()),
      extensions: extensions
    }

  # What a decoded handshake compares equal to: names as strings, no kinds or sources, and a
  # field's max what the wire can carry (the declared range is not sent).
  defp as_decoded(%{type: :handshake, templates: ts, input: input} = m),
    do: %{m | templates: Enum.map(ts, &as_decoded/1), input: input && as_decoded(input)}

  defp as_decoded(%Overworld.Template{} = t) do
    %{
      t
      | name: to_string(t.name),
        kinds: [],
        fields:
          Enum.map(t.fields, fn f ->
            values =
              f.values &&
                Enum.map(f.values, fn v ->
                  if is_atom(v) and not is_boolean(v), do: to_string(v), else: v
                end)

            max = if values, do: length(values) - 1, else: Bitwise.bsl(1, f.bits) - 1
            %{f | name: to_string(f.name), source: nil, values: values, max: max}
          end)
    }
  end

  defp as_decoded(m), do: m

  test "every message kind round-trips (property)" do
    Prop.check(
      :proper.forall(message(), fn raw ->
        m = to_message(raw)
        Protocol.decode(Protocol.encode(m)) == {:ok, as_decoded(m)}
      end),
      2_000
    )
  end

  test "a decoded handshake describes the templates well enough to decode their records" do
    m = to_message({:handshake, 2, 30, 7, 1000, 1000, 12_288, 2, 2, true, []})
    {:ok, decoded} = Protocol.decode(Protocol.encode(m))

    for {t, d} <- Enum.zip(Wire.__templates__(), decoded.templates) do
      # Every field at the top of what it carries (an enum: its last value).
      q =
        t.fields
        |> Enum.map(&if(&1.values, do: &1.max, else: Bitwise.bsl(1, &1.bits) - 1))
        |> List.to_tuple()

      bits = Overworld.Template.encode_keyframe(t, q)
      assert Overworld.Template.decode_keyframe(d, bits) == {:ok, q, <<>>}
    end
  end

  # Valid messages with bytes flipped, cut or appended, and plain random bytes.
  @doc false
  def junk do
    mutated =
      :proper_types.bind(
        :proper_types.tuple([message(), non_neg_integer(), u(255), u(3)]),
        fn {raw, at, byte, how} ->
          bin = Protocol.encode(to_message(raw))
          at = rem(at, byte_size(bin))

          exactly(
            case how do
              0 ->
                binary_part(bin, 0, at) <>
                  <<byte>> <> binary_part(bin, at + 1, byte_size(bin) - at - 1)

              1 ->
                binary_part(bin, 0, at)

              2 ->
                bin <> <<byte>>

              3 ->
                <<byte>> <> binary_part(bin, 1, byte_size(bin) - 1)
            end
          )
        end,
        false
      )

    :proper_types.oneof([binary(), mutated, :proper_types.bitstring()])
  end

  @doc false
  def junk_property do
    :proper.forall(junk(), fn bin ->
      case Protocol.decode(bin) do
        {:ok, %{type: _}} -> true
        {:error, _} -> true
      end
    end)
  end

  test "varints: the 53-bit limit, overlong and truncated input" do
    assert Codec.read_varint(Codec.varint(@max)) == {:ok, @max, <<>>}
    assert_raise FunctionClauseError, fn -> Codec.varint(@max + 1) end

    assert Codec.read_varint(<<255, 255, 255, 255, 255, 255, 255, 255, 1>>) ==
             {:error, :varint_too_long}

    assert Codec.read_varint(<<128>>) == {:error, :truncated}
    assert Codec.read_string(<<5, "ab">>) == {:error, :truncated}
    assert Codec.read_string(<<200, 1, "x">>, 10) == {:error, :string_too_long}
  end

  test "trailing bytes after a fixed-size message are an error" do
    assert Protocol.decode(Protocol.encode(%{type: :ping, client_time: 1}) <> <<0>>) ==
             {:error, :trailing_bytes}

    assert Protocol.decode(<<>>) == {:error, :empty}
  end

  test "a handshake whose enum or bool has diff_bits, or whose bool is wider than a bit, is refused" do
    # The template with both.
    [_, t] = Wire.__templates__()
    m = to_message({:handshake, 2, 30, 7, 1000, 1000, 12_288, 2, 2, false, []})

    for type <- [:enum, :bool] do
      i = Enum.find_index(t.fields, &(&1.type == type))
      bad = %{t | fields: List.update_at(t.fields, i, &%{&1 | diff_bits: 1})}

      assert Protocol.decode(Protocol.encode(%{m | templates: [bad]})) ==
               {:error, :bad_field_bits}
    end

    # A bool is one bit.
    i = Enum.find_index(t.fields, &(&1.type == :bool))
    wide = %{t | fields: List.update_at(t.fields, i, &%{&1 | bits: 2})}
    assert Protocol.decode(Protocol.encode(%{m | templates: [wide]})) == {:error, :bad_field_bits}
  end
end

defmodule Overworld.ProtocolFuzzTest do
  # Not async: the atom count is the node's. Processes left by other tests (a server shutting
  # down, a logger formatting a report) may still load a module and make its atoms; a decoder
  # making atoms from its input would make new ones on every run of new random inputs, so one
  # run of the two without any new atom is required.
  use ExUnit.Case, async: false
  alias Overworld.Test.Prop

  test "decoding random and mutated bytes never raises and creates no atom (property, 2 x 50,000 cases)" do
    # Warm up (PropEr and the generators load their modules once).
    Prop.check(Overworld.ProtocolTest.junk_property(), 200)

    deltas =
      for _run <- 1..2 do
        atoms = :erlang.system_info(:atom_count)
        Prop.check(Overworld.ProtocolTest.junk_property(), 50_000)
        :erlang.system_info(:atom_count) - atoms
      end

    assert 0 in deltas, "new atoms in both runs: #{inspect(deltas)}"
  end
end

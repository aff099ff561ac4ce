defmodule Overworld.TemplateTest do
  use ExUnit.Case, async: true
  doctest Overworld.Template
  doctest Overworld.Template.Field

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Template
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.Prop

  defp templates, do: Wire.__templates__()

  # Random quantized values for a template (each within its field's bits).
  defp values(t) do
    t.fields
    |> Enum.map(fn f -> :proper_types.integer(0, Bitwise.bsl(1, f.bits) - 1) end)
    |> :proper_types.tuple()
  end

  defp template_and(fun) do
    :proper_types.bind(:proper_types.elements(templates()), fun, false)
  end

  test "keyframes round-trip for every template (property)" do
    Prop.check(
      :proper.forall(
        template_and(&:proper_types.tuple([:proper_types.exactly(&1), values(&1)])),
        fn {t, q} ->
          bits = Template.encode_keyframe(t, q)

          bit_size(bits) == Enum.sum(Enum.map(t.fields, & &1.bits)) and
            Template.decode_keyframe(t, bits) == {:ok, q, <<>>}
        end
      ),
      500
    )
  end

  test "deltas round-trip for every template, and are empty when nothing changed (property)" do
    Prop.check(
      :proper.forall(
        template_and(
          &:proper_types.tuple([
            :proper_types.exactly(&1),
            values(&1),
            values(&1),
            :proper_types.bool()
          ])
        ),
        fn {t, old, new, trailing?} ->
          case Template.encode_delta(t, old, new) do
            nil ->
              old == new

            bits ->
              tail = if trailing?, do: <<5::3>>, else: <<>>

              Template.decode_delta(t, old, <<bits::bitstring, tail::bitstring>>) ==
                {:ok, new, tail}
          end
        end
      ),
      1000
    )
  end

  test "small changes travel as short differences; angles wrap around" do
    [walker | _] = templates()
    old = {1000, 2000, 255, 1}
    # x +3, y -5, heading 255 -> 1 (wraps: +2), state unchanged.
    new = {1003, 1995, 1, 1}
    bits = Template.encode_delta(walker, old, new)
    # mask 4 + x (1 + 4) + y (1 + 4) + heading (1 + 3)
    assert bit_size(bits) == 4 + 5 + 5 + 4
    assert Template.decode_delta(walker, old, bits) == {:ok, new, <<>>}
    # A big jump sends the full value.
    far = {60_000, 2000, 255, 1}
    assert bit_size(Template.encode_delta(walker, old, far)) == 4 + 1 + 16

    assert Template.decode_delta(walker, old, Template.encode_delta(walker, old, far)) ==
             {:ok, far, <<>>}
  end

  test "quantizing entities: sources, clamping, and what the client sees" do
    [walker, everything] = templates()
    e = entity(kind: :walker, x: 1024 * 10 + 15, y: -5, heading: 65535, state: :flee)
    q = Template.quantize(walker, e)
    # 10 m + 15/1024 m at 1/64 m floors to 640; negative clamps to 0.
    assert q == {640, 0, 255, 2}
    assert Template.to_map(walker, q) == %{x: 10 * 1024, y: 0, heading: 65280, state: :flee}

    thing = entity(kind: :thing, x: 0, vx: 100, heading: 16384, state: 3, data: {42, -7})
    q = Template.quantize(everything, thing)
    map = Template.to_map(everything, q)
    assert map.level == 42 and map.hp == -7 and map.mode == 3 and map.alive == true
    assert map.x == 0 and map.vx == 100 and map.heading == 16384
    other = entity(kind: :other_thing, data: {500, 5000}, state: :unknown)
    m = Template.to_map(everything, Template.quantize(everything, other))
    # Out of range values clamp; an unknown enum value is the first one.
    assert m.level == 127 and m.hp == -50 + 2047 and m.mode == 1 and m.alive == false
  end

  test "decoders answer errors on truncated or inconsistent input, never raise (property)" do
    Prop.check(
      :proper.forall(
        template_and(
          &:proper_types.tuple([:proper_types.exactly(&1), values(&1), :proper_types.bitstring()])
        ),
        fn {t, old, junk} ->
          k = Template.decode_keyframe(t, junk)
          d = Template.decode_delta(t, old, junk)

          match?({:ok, _, _}, k) or
            (k == {:error, :truncated} and
               (match?({:ok, _, _}, d) or match?({:error, _}, d)))
        end
      ),
      2000
    )

    [walker | _] = templates()
    assert Template.decode_delta(walker, {1, 2}, <<0::4>>) == {:error, :bad_baseline}
    assert Template.decode_keyframe(walker, <<1, 2, 3>>) == {:error, :truncated}
  end

  describe "declarations are checked at compile time" do
    defp compile(body) do
      Code.compile_string("""
      defmodule Overworld.TemplateTest.Bad#{System.unique_integer([:positive])} do
        use Overworld.Template
        #{body}
      end
      """)
    end

    test "with messages that say what is wrong" do
      cases = [
        {"template :a, id: 1 do\n field :x, :fixed, max: 10, precision: 1/64\n field :x, :angle\n end",
         "field :x is declared twice"},
        {"template :a, id: 1 do\n field :x, :fixed, min: 10, max: 10, precision: 1/64\n end",
         ":fixed needs numbers :min < :max"},
        {"template :a, id: 1 do\n field :x, :fixed, max: 10, precision: 0.1\n end",
         "power of two fraction"},
        {"template :a, id: 1 do\n field :x, :float\n end", "unknown field type :float"},
        {"template :a, id: 1 do\n field :hp, :uint, max: 10\n end", ":hp is not an entity field"},
        {"template :a, id: 300 do\n field :x, :angle\n end", ":id to be an integer in 0..255"},
        {"template :a, id: 1 do\n field :state, :enum, values: [:a]\n end",
         "at least two :values"},
        {"template :a, id: 1 do\n field :x, :angle\n end\n template :b, id: 1 do\n field :x, :angle\n end",
         "two templates have the id 1"},
        {"template :a, id: 1, kinds: [:k] do\n field :x, :angle\n end\n template :b, id: 2, kinds: [:k] do\n field :x, :angle\n end",
         "entity kind :k is in two templates"},
        {"template :a, id: 1 do\n end", "declares no field"}
      ]

      for {body, message} <- cases do
        error = assert_raise CompileError, fn -> compile(body) end
        assert Exception.message(error) =~ message
      end
    end
  end
end

defmodule Overworld.Template.CompiledTest do
  # The compiled encoders produce exactly the bits of the generic ones.
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Template
  alias Overworld.Test.Prop

  @modules [Overworld.Template.Test.Wire, Overworld.Protocol.Vectors.Wire]

  defp any_value do
    :proper_types.oneof([
      :proper_types.integer(-3_000_000, 3_000_000),
      :proper_types.integer(),
      :proper_types.elements([
        nil,
        :idle,
        :wander,
        :flee,
        :chase,
        :dead,
        true,
        false,
        1,
        2,
        3,
        1.5
      ])
    ])
  end

  defp entity_gen do
    :proper_types.bind(
      :proper_types.list(any_value()),
      fn _ ->
        :proper_types.tuple(
          List.duplicate(any_value(), 7) ++
            [:proper_types.elements([:walker, :thing, :other_thing, :vector, :x])]
        )
      end,
      false
    )
  end

  test "quantize, keyframe and delta agree with the generic functions (property)" do
    Prop.check(
      :proper.forall(
        :proper_types.tuple([:proper_types.elements(@modules), entity_gen(), entity_gen()]),
        fn {mod, {x, y, vx, vy, h, st, d, kind}, {x2, y2, vx2, vy2, h2, st2, d2, _}} ->
          a =
            entity(
              kind: kind,
              x: x,
              y: y,
              vx: vx,
              vy: vy,
              heading: h,
              state: st,
              data: {d, d2, st}
            )

          b =
            entity(
              kind: kind,
              x: x2,
              y: y2,
              vx: vx2,
              vy: vy2,
              heading: h2,
              state: st2,
              data: {d2, d, st2}
            )

          mod.__templates__()
          |> Enum.with_index()
          |> Enum.all?(fn {t, i} ->
            qa = mod.__quantize__(i, a)
            qb = mod.__quantize__(i, b)

            qa == Template.quantize(t, a) and qb == Template.quantize(t, b) and
              mod.__keyframe__(i, qa) == Template.encode_keyframe(t, qa) and
              mod.__delta__(i, qa, qb) == Template.encode_delta(t, qa, qb) and
              mod.__delta__(i, qa, qa) == nil and
              mod.__same__(i, a, a) and
              (not mod.__same__(i, a, b) or qa == qb) and
              mod.__same__(i, a, entity(a, vx: vx2, vy: vy2, rng: 7)) ==
                not Enum.any?(
                  t.fields,
                  &((&1.source == :vx and vx != vx2) or (&1.source == :vy and vy != vy2))
                )
          end)
        end
      ),
      1_000
    )
  end
end

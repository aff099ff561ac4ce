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

  # Random quantized values for a template (each within its field's bits; an enum's index one
  # of its values).
  defp values(t) do
    t.fields
    |> Enum.map(fn f ->
      :proper_types.integer(0, if(f.values, do: f.max, else: Bitwise.bsl(1, f.bits) - 1))
    end)
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
    other = entity(kind: :other_thing, data: {500, 5000}, state: 1)
    m = Template.to_map(everything, Template.quantize(everything, other))
    # Out of range values clamp (values that cannot be quantized raise: see below).
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
            (k in [{:error, :truncated}, {:error, :bad_enum_index}] and
               (match?({:ok, _, _}, d) or match?({:error, _}, d)))
        end
      ),
      2000
    )

    [walker | _] = templates()
    assert Template.decode_delta(walker, {1, 2}, <<0::4>>) == {:error, :bad_baseline}
    assert Template.decode_keyframe(walker, <<1, 2, 3>>) == {:error, :truncated}
  end

  test "an enum index past the enum's values is refused, in keyframes, deltas and inputs" do
    [_walker, everything] = templates()
    # mode: enum of 3 values in 2 bits; index 3 names none.
    q = {1, 2, 3, 4, 5, 2, 1}
    bits = Template.encode_keyframe(everything, q)
    assert {:ok, ^q, <<>>} = Template.decode_keyframe(everything, bits)
    bad = Template.encode_keyframe(everything, put_elem(q, 5, 3))
    assert Template.decode_keyframe(everything, bad) == {:error, :bad_enum_index}
    # A delta carrying the enum whole.
    delta = Template.encode_delta(everything, q, put_elem(q, 5, 3))
    assert Template.decode_delta(everything, q, delta) == {:error, :bad_enum_index}
  end

  test "an input decodes to values within the declared range; what the wire carries past it is clamped" do
    layout = Wire.__input__()
    # turn: int -127..127 in 8 bits: q 255 (128) is on the wire, and decodes as 127.
    assert Template.encode_input(layout, %{turn: 128, jump: false}) == <<255, 0>>
    assert Template.decode_input(layout, <<255, 0>>) == {:ok, %{turn: 127, jump: false}}
    assert Template.decode_input(layout, <<254, 128>>) == {:ok, %{turn: 127, jump: true}}
    assert Template.decode_input(layout, <<0, 0>>) == {:ok, %{turn: -127, jump: false}}
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
        1.5,
        "1"
      ])
    ])
  end

  # Mostly a value some template accepts, now and then any value: the quantizers must then
  # raise the same error.
  defp value(good), do: :proper_types.frequency([{9, good}, {1, any_value()}])

  defp int,
    do:
      :proper_types.oneof([:proper_types.integer(-3_000_000, 3_000_000), :proper_types.integer()])

  defp entity_gen do
    :proper_types.tuple(
      List.duplicate(value(int()), 5) ++
        [
          value(:proper_types.elements([:idle, :wander, :flee, :chase, :dead, 1, 2, 3])),
          # The data tuple, or now and then missing elements.
          :proper_types.frequency([
            {9, :proper_types.tuple([value(int()), value(int()), value(:proper_types.bool())])},
            {1, :proper_types.elements([nil, {}, {1}])}
          ]),
          :proper_types.elements([:walker, :thing, :other_thing, :vector, :x])
        ]
    )
  end

  # The values, or the error (equal errors: the same template, field and value).
  defp outcome(quantize) do
    {:ok, quantize.()}
  rescue
    e in Template.Error -> {:error, e}
  end

  test "quantize, keyframe and delta agree with the generic functions, errors too (property)" do
    Prop.check(
      :proper.forall(
        :proper_types.tuple([:proper_types.elements(@modules), entity_gen(), entity_gen()]),
        fn {mod, {x, y, vx, vy, h, st, d, kind}, {x2, y2, vx2, vy2, h2, st2, d2, _}} ->
          a = entity(kind: kind, x: x, y: y, vx: vx, vy: vy, heading: h, state: st, data: d)

          b =
            entity(kind: kind, x: x2, y: y2, vx: vx2, vy: vy2, heading: h2, state: st2, data: d2)

          mod.__templates__()
          |> Enum.with_index()
          |> Enum.all?(fn {t, i} ->
            qa = outcome(fn -> mod.__quantize__(i, a) end)
            qb = outcome(fn -> mod.__quantize__(i, b) end)

            qa == outcome(fn -> Template.quantize(t, a) end) and
              qb == outcome(fn -> Template.quantize(t, b) end) and
              encoders_agree(mod, t, i, qa, qb) and
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

  defp encoders_agree(mod, t, i, {:ok, qa}, {:ok, qb}) do
    mod.__keyframe__(i, qa) == Template.encode_keyframe(t, qa) and
      mod.__delta__(i, qa, qb) == Template.encode_delta(t, qa, qb) and
      mod.__delta__(i, qa, qa) == nil
  end

  defp encoders_agree(_mod, _t, _i, _qa, _qb), do: true

  test "a value that cannot be quantized raises the same error, generic or compiled" do
    mod = Overworld.Template.Test.Wire
    [walker, everything] = mod.__templates__()
    ok = entity(kind: :walker, x: 1024, y: 2048, heading: 100, state: :idle)

    cases = [
      {walker, 0, entity(ok, heading: 1.5),
       "template :walker, field :heading: expected an integer, got: 1.5"},
      {walker, 0, entity(ok, x: nil),
       "template :walker, field :x: expected an integer, got: nil"},
      {walker, 0, entity(ok, y: "2"),
       ~s(template :walker, field :y: expected an integer, got: "2")},
      {walker, 0, entity(ok, state: :sleeping),
       "template :walker, field :state: expected one of [:idle, :wander, :flee, :chase], got: :sleeping"},
      # A {:data, i} source without its element: not an integer.
      {everything, 1, entity(ok, state: 1, data: {7}),
       "template :everything, field :hp: expected an integer, got: nil"},
      {everything, 1, entity(ok, state: 1, data: :none),
       "template :everything, field :level: expected an integer, got: nil"},
      {everything, 1, entity(ok, state: 4, data: {1, 2}),
       "template :everything, field :mode: expected one of [1, 2, 3], got: 4"}
    ]

    for {t, i, e, message} <- cases do
      generic = assert_raise Template.Error, message, fn -> Template.quantize(t, e) end
      compiled = assert_raise Template.Error, message, fn -> mod.__quantize__(i, e) end
      assert generic == compiled
    end

    # A bool outside [false, true] (the vectors' `flag`, from {:data, 2}).
    vectors = Overworld.Protocol.Vectors.Wire
    [every_type | _] = vectors.__templates__()
    e = entity(x: 0, vx: 0, state: :idle, data: {1, 2, nil})
    message = "template :every_type, field :flag: expected one of [false, true], got: nil"
    assert_raise Template.Error, message, fn -> Template.quantize(every_type, e) end
    assert_raise Template.Error, message, fn -> vectors.__quantize__(0, e) end
    assert vectors.__quantize__(0, entity(e, data: {1, 2, true})) |> elem(6) == 1
  end
end

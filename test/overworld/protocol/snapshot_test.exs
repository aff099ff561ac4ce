defmodule Overworld.Protocol.SnapshotTest do
  # A client view fed the server's snapshots holds exactly the server's quantized state.
  use ExUnit.Case, async: true
  alias Overworld.Protocol.Snapshot
  alias Overworld.Protocol.Snapshot.View

  doctest Overworld.Protocol.Snapshot.View
  alias Overworld.Protocol.Vectors.Wire
  alias Overworld.Test.Prop

  import Bitwise

  @templates Wire.__templates__()

  defp random_q(ti, seed) do
    t = Enum.at(@templates, ti)

    {vals, seed} =
      Enum.map_reduce(t.fields, seed, fn f, s ->
        s = Overworld.Random.next(s)
        max = if f.values, do: length(f.values), else: 1 <<< f.bits
        {rem(s, max), s}
      end)

    {List.to_tuple(vals), seed}
  end

  # A world: id => {cell, template index, values}. One step moves, changes, spawns, despawns.
  defp step(world, seed, cells) do
    {world, seed} =
      Enum.reduce(Enum.sort(world), {%{}, seed}, fn {id, {cell, ti, q}}, {acc, s} ->
        s = Overworld.Random.next(s)

        case rem(s, 10) do
          0 ->
            {acc, s}

          1 ->
            {Map.put(acc, id, {rem(s >>> 8, cells), ti, q}), s}

          n when n < 6 ->
            {q, s} = random_q(ti, s)
            {Map.put(acc, id, {cell, ti, q}), s}

          _ ->
            {Map.put(acc, id, {cell, ti, q}), s}
        end
      end)

    s = Overworld.Random.next(seed)
    new = rem(s, 3)

    Enum.reduce(1..new//1, {world, s}, fn _, {w, s} ->
      s = Overworld.Random.next(s)
      id = 1 + rem(s, 5_000)
      ti = rem(s >>> 5, length(@templates))
      {q, s} = random_q(ti, s)
      {Map.put_new(w, id, {rem(s >>> 9, cells), ti, q}), s}
    end)
  end

  defp by_cell(world) do
    world
    |> Enum.group_by(fn {_id, {cell, _, _}} -> cell end, fn {id, {_, ti, q}} -> {id, ti, q} end)
    |> Map.new(fn {c, es} -> {c, Enum.sort(es)} end)
  end

  test "a view applying keyframes then deltas reproduces the server state, step by step (property)" do
    Prop.check(
      :proper.forall(
        :proper_types.tuple([:proper_types.integer(1, 1 <<< 30), :proper_types.integer(1, 12)]),
        fn {seed, cells} ->
          {world, seed} =
            Enum.reduce(1..30, {%{}, seed}, fn id, {w, s} ->
              ti = rem(s, 2)
              {q, s} = random_q(ti, s)
              {Map.put(w, id * 7, {rem(s, cells), ti, q}), s}
            end)

          first = by_cell(world)
          blocks = for {c, es} <- first, do: Snapshot.keyframe_block(c, es, @templates)
          msg = Snapshot.encode(1, 0, blocks, []) |> IO.iodata_to_binary()
          {:ok, view} = Snapshot.apply(%View{}, msg, @templates)

          {ok?, _, _, _} =
            Enum.reduce(2..20, {view.cells == first, view, world, seed}, fn tick,
                                                                            {ok?, view, world,
                                                                             seed} ->
              old = by_cell(world)
              {world, seed} = step(world, seed, cells)
              new = by_cell(world)

              blocks =
                for c <- Enum.uniq(Map.keys(old) ++ Map.keys(new)),
                    b =
                      Snapshot.delta_block(
                        c,
                        Map.get(old, c, []),
                        Map.get(new, c, []),
                        @templates
                      ),
                    b != nil,
                    do: b

              msg = Snapshot.encode(tick, tick - 1, blocks, []) |> IO.iodata_to_binary()
              {:ok, view} = Snapshot.apply(view, msg, @templates)
              {ok? and view.cells == new and view.tick == tick, view, world, seed}
            end)

          ok?
        end
      ),
      150
    )
  end

  test "blocks built with the compiled encoders of the templates module are the same bytes" do
    {es1, seed} =
      Enum.map_reduce(1..40, 77, fn id, s ->
        ti = rem(s, 2)
        {q, s} = random_q(ti, s)
        {{id * 3, ti, q}, s}
      end)

    {es2, _} =
      Enum.map_reduce(es1, seed, fn {id, ti, q}, s ->
        s = Overworld.Random.next(s)

        if rem(s, 3) == 0,
          do: random_q(ti, s) |> then(fn {q2, s} -> {{id, ti, q2}, s} end),
          else: {{id, ti, q}, s}
      end)

    es2 = Enum.drop(es2, 3) ++ [{1_000, 0, elem(random_q(0, 5), 0)}]
    assert Snapshot.keyframe_block(12, es1, Wire) == Snapshot.keyframe_block(12, es1, @templates)

    assert Snapshot.delta_block(12, es1, es2, Wire) ==
             Snapshot.delta_block(12, es1, es2, @templates)

    assert Snapshot.delta_block(12, es1, es2, Wire) != nil
  end

  test "cells leaving the view are dropped; a keyframe block replaces a cell" do
    es = [{3, 0, {1, 2, 3, 4, 5, 0, 1}}, {9, 1, {1, 2, 3}}]

    msg =
      Snapshot.encode(5, 0, [Snapshot.keyframe_block(40, es, @templates)], [])
      |> IO.iodata_to_binary()

    {:ok, view} = Snapshot.apply(%View{}, msg, @templates)
    assert view.cells == %{40 => es}
    assert View.entities(view) == %{3 => {0, {1, 2, 3, 4, 5, 0, 1}}, 9 => {1, {1, 2, 3}}}

    msg =
      Snapshot.encode(6, 5, [Snapshot.keyframe_block(40, tl(es), @templates)], [])
      |> IO.iodata_to_binary()

    assert {:ok, %View{cells: %{40 => [{9, 1, {1, 2, 3}}]}}} =
             Snapshot.apply(view, msg, @templates)

    msg = Snapshot.encode(6, 5, [], [40]) |> IO.iodata_to_binary()
    assert {:ok, %View{cells: cells}} = Snapshot.apply(view, msg, @templates)
    assert cells == %{}
  end

  test "the send interval (extension 1): kept until changed, unknown extensions skipped, a bad one refused" do
    es = [{3, 0, {1, 2, 3, 4, 5, 0, 1}}]
    block = Snapshot.keyframe_block(40, es, @templates)

    msg = fn tick, base, ext ->
      IO.iodata_to_binary(Snapshot.encode(tick, base, [block], [], 0, [], ext))
    end

    {:ok, v1} = Snapshot.apply(%View{}, msg.(5, 0, []), @templates)
    assert v1.send_interval == 1
    {:ok, v2} = Snapshot.apply(v1, msg.(7, 5, [{7, "x"}, {1, <<3>>}]), @templates)
    assert v2.send_interval == 3
    # Absent: unchanged.
    {:ok, v3} = Snapshot.apply(v2, msg.(10, 7, []), @templates)
    assert v3.send_interval == 3

    for bytes <- [<<0>>, <<>>, <<2, 0>>, <<0x80>>] do
      assert {:error, _} = Snapshot.apply(v3, msg.(13, 10, [{1, bytes}]), @templates)
    end

    assert {:error, :bad_send_interval} =
             Snapshot.apply(v3, msg.(13, 10, [{1, <<0>>}]), @templates)
  end

  test "invalid blocks are refused and leave the view as it was: an id gap of 0, an arrival of an id the cell holds" do
    es = [{3, 0, {1, 2, 3, 4, 5, 0, 1}}, {9, 1, {1, 2, 3}}]

    msg = fn tick, base, blocks ->
      IO.iodata_to_binary(Snapshot.encode(tick, base, blocks, []))
    end

    {:ok, view} =
      Snapshot.apply(
        %View{},
        msg.(5, 0, [Snapshot.keyframe_block(40, es, @templates)]),
        @templates
      )

    enc = Snapshot.encoder(@templates)

    # Ids 3, 3: the second's gap is 0.
    twice = Snapshot.keyframe_block(41, [hd(es), hd(es)], @templates)
    assert Snapshot.apply(view, msg.(6, 5, [twice]), @templates) == {:error, :bad_id}
    # Id 0: the first gap is 0.
    zero = Snapshot.keyframe_block(41, [{0, 1, {1, 2, 3}}], @templates)
    assert Snapshot.apply(view, msg.(6, 5, [zero]), @templates) == {:error, :bad_id}
    # Cell 40 keeps 3 and 9 (ops 00 00), and 9 arrives again.
    again = Snapshot.delta_block_bits(40, <<0::2, 0::2>>, [{9, 1, {1, 2, 3}}], enc)
    assert Snapshot.apply(view, msg.(6, 5, [again]), @templates) == {:error, :bad_id}
    # 9 leaves (10) and arrives again with another template: a template change, valid.
    changed = Snapshot.delta_block_bits(40, <<0::2, 2::2>>, [{9, 0, {1, 2, 3, 4, 5, 0, 1}}], enc)
    assert {:ok, v2} = Snapshot.apply(view, msg.(6, 5, [changed]), @templates)
    assert v2.cells[40] == [hd(es), {9, 0, {1, 2, 3, 4, 5, 0, 1}}]
    # Ids stay below 2^53: a gap that takes one past it, a bit varint past it.
    top = Snapshot.keyframe_block(41, [{Bitwise.bsl(1, 53) - 1, 1, {1, 2, 3}}], @templates)
    assert {:ok, _} = Snapshot.apply(view, msg.(6, 5, [top]), @templates)

    past =
      Snapshot.keyframe_block(
        41,
        [{1, 1, {1, 2, 3}}, {Bitwise.bsl(1, 53), 1, {1, 2, 3}}],
        @templates
      )

    assert Snapshot.apply(view, msg.(6, 5, [past]), @templates) == {:error, :bad_id}
    huge = Snapshot.keyframe_block(41, [{Bitwise.bsl(1, 53), 1, {1, 2, 3}}], @templates)
    assert Snapshot.apply(view, msg.(6, 5, [huge]), @templates) == {:error, :varint_too_long}
    # A run that ends past 2^53.
    far = IO.iodata_to_binary(Snapshot.encode(6, 5, [], [], 0, [{Bitwise.bsl(1, 53) - 2, 2}]))
    assert Snapshot.apply(view, far, @templates) == {:error, :bad_run}
  end

  test "op 11 (handed to another zone): shown as it was until its id arrives in a cell, at most 8 ticks" do
    es = [{3, 0, {1, 2, 3, 4, 5, 0, 1}}, {9, 1, {1, 2, 3}}]
    enc = Snapshot.encoder(@templates)
    space = 1000

    msg = fn tick, base, blocks ->
      IO.iodata_to_binary(Snapshot.encode(tick, base, blocks, []))
    end

    kf = Snapshot.keyframe_block(space + 40, es, @templates)
    {:ok, v} = Snapshot.apply(%View{space: space}, msg.(5, 0, [kf]), @templates)

    # 9 is handed away by the zone of band cell 1040: still shown, as it was.
    handed = Snapshot.delta_block_bits(space + 40, <<0::2, 3::2>>, [], enc)
    {:ok, v6} = Snapshot.apply(v, msg.(6, 5, [handed]), @templates)
    assert v6.cells == %{(space + 40) => [hd(es)]}
    assert View.entities(v6) == View.entities(v)
    # Its new zone publishes it in region cell 40: that copy now, the handed one forgotten.
    moved = {9, 1, {2, 2, 3}}
    arrive = Snapshot.delta_block_bits(40, <<>>, [moved], enc)
    {:ok, v7} = Snapshot.apply(v6, msg.(7, 6, [arrive]), @templates)
    assert v7.handed == %{}
    assert View.entities(v7)[9] == {1, {2, 2, 3}}
    # It walks out of the view later: gone, not shown again from the handed copy.
    {:ok, v8} =
      Snapshot.apply(v7, IO.iodata_to_binary(Snapshot.encode(8, 7, [], [40])), @templates)

    refute Map.has_key?(View.entities(v8), 9)

    # The new copy may come first: the band copy and the region copy at the same tick, the
    # region's shown; then the band's handed op.
    {:ok, w6} = Snapshot.apply(v, msg.(6, 5, [arrive]), @templates)
    assert View.entities(w6)[9] == {1, {2, 2, 3}}
    {:ok, w7} = Snapshot.apply(w6, msg.(7, 6, [handed]), @templates)
    assert w7.handed == %{}
    assert View.entities(w7)[9] == {1, {2, 2, 3}}

    # Never taken up (dropped by its new zone): shown 8 ticks, then gone.
    v14 =
      Enum.reduce(7..14, v6, fn t, acc ->
        elem(Snapshot.apply(acc, msg.(t, t - 1, []), @templates), 1)
      end)

    assert Map.has_key?(View.entities(v14), 9)
    {:ok, v15} = Snapshot.apply(v14, msg.(15, 14, []), @templates)
    refute Map.has_key?(View.entities(v15), 9)
  end

  test "bad snapshots are errors, never exceptions (property)" do
    es = [{3, 0, {1, 2, 3, 4, 5, 0, 1}}, {9, 1, {1, 2, 3}}]

    good =
      Snapshot.encode(5, 0, [Snapshot.keyframe_block(40, es, @templates)], [])
      |> IO.iodata_to_binary()

    {:ok, view} = Snapshot.apply(%View{}, good, @templates)

    Prop.check(
      :proper.forall(
        :proper_types.tuple([
          :proper_types.non_neg_integer(),
          :proper_types.integer(0, 255),
          :proper_types.binary()
        ]),
        fn {at, byte, junk} ->
          at = rem(at, byte_size(good))

          mutated =
            binary_part(good, 0, at) <>
              <<byte>> <> binary_part(good, at + 1, byte_size(good) - at - 1)

          Enum.all?([mutated, binary_part(good, 0, at), <<0x02, junk::binary>>, junk], fn bin ->
            match?({:ok, %View{}}, Snapshot.apply(view, bin, @templates)) or
              match?({:error, _}, Snapshot.apply(view, bin, @templates))
          end)
        end
      ),
      3_000
    )
  end
end

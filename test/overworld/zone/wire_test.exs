defmodule Overworld.Zone.WireTest do
  # A zone with a :wire module: every worker publishes, once per tick, the delta blocks of its
  # cells as one binary with an index by cell key. Applied tick after tick by an observer of
  # the whole world, they reproduce the zone's quantized state exactly.
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.{Template, Zone}
  alias Overworld.Protocol.{Codec, Snapshot}
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.Walkers

  defp expected(zone, templates) do
    [walker | _] = templates

    for e <- Zone.entities(zone), entity(e, :kind) == :walker, into: %{} do
      {entity(e, :id), {0, Template.quantize(walker, e)}}
    end
  end

  # Per key of the worker's stripe, the slice of its blocks.
  defp per_key(data, index, first) do
    entries = for <<off::32, count::32 <- index>>, do: {off, count}

    entries
    |> Enum.zip(tl(entries))
    |> Enum.with_index(first)
    |> Enum.flat_map(fn {{{o0, c0}, {o1, c1}}, key} ->
      if o1 > o0, do: [{key, c1 - c0, binary_part(data, o0, o1 - o0)}], else: []
    end)
  end

  test "the published blocks of every worker, applied tick after tick, reproduce the zone (1 and 3 workers)" do
    for workers <- [1, 3] do
      id = {__MODULE__, make_ref()}

      {:ok, _} =
        Overworld.start_zone(Walkers,
          id: id,
          clock: :manual,
          workers: workers,
          size: {200, 200},
          wire: Wire
        )

      %{table: table, templates: templates, module: Wire} = Zone.wire(id)

      view =
        Enum.reduce(1..60, %Snapshot.View{}, fn n, view ->
          {:ok, ^n} = Zone.tick_now(id)

          blocks =
            if n == 1 do
              keys = for row <- 0..17, col <- 0..17, do: (row + 1) * 19 + col + 1
              {^n, keyframes} = Zone.keyframes(id, keys)
              Enum.map(keyframes, &{1, elem(&1, 1)})
            else
              for w <- 0..(workers - 1),
                  [{_, ^n, data, index, first}] = :ets.lookup(table, {:tick, w, rem(n, 16)}),
                  {key, count, slice} <- per_key(data, index, first) do
                # Each key's slice is that cell's one block.
                assert count == 1
                assert {:ok, head, _} = Codec.read_varint(slice)
                assert head in [key * 4 + 1, key * 4 + 3]
                {count, slice}
              end
            end

          count = blocks |> Enum.map(&elem(&1, 0)) |> Enum.sum()
          msg = [2, Codec.varint(n), Codec.varint(n - 1), 0, Codec.varint(count)]
          msg = IO.iodata_to_binary([msg, Enum.map(blocks, &elem(&1, 1)), 0])
          {:ok, view} = Snapshot.apply(view, msg, templates)
          assert Snapshot.View.entities(view) == expected(id, templates)
          view
        end)

      assert map_size(Snapshot.View.entities(view)) == 300
      Overworld.stop_zone(id)
    end
  end

  test "a zone without :wire has none" do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(Walkers, id: id, clock: :manual)
    assert Zone.wire(id) == nil
    Overworld.stop_zone(id)
  end
end

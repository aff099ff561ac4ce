defmodule Overworld.Spatial.SweepTest do
  use ExUnit.Case, async: true
  doctest Overworld.Spatial.Sweep

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.Test.{Prop, Scenes}

  defp world, do: Scenes.world(3_000, 500, 2)
  defp entities(points, first_id), do: Scenes.entities(points, first_id)

  defp sorted_ids(lists), do: lists |> List.flatten() |> Enum.map(&entity(&1, :id)) |> Enum.sort()

  test "the sweep's block of every cell holds what the map lookups find (property)" do
    Prop.check(
      :proper.forall(world(), fn {{w, h, cell}, points, _} ->
        grid = Grid.new(w, h, cell)
        es = entities(points, 1)
        pairs = Sweep.from_entities(grid, es)
        map = Grid.from_entities(grid, es)

        {ok, _} =
          Enum.reduce(pairs, {true, Sweep.cursors(pairs)}, fn {k, _}, {ok, cursors} ->
            {block, cursors} = Sweep.block(cursors, k, grid.stride)
            {ok and sorted_ids(block) == sorted_ids(Grid.block(map, grid, k)), cursors}
          end)

        ok
      end),
      200
    )
  end

  test "insert keeps keys sorted and cells sorted by id, and loses nothing (property)" do
    Prop.check(
      :proper.forall(world(), fn {{w, h, cell}, points, more} ->
        grid = Grid.new(w, h, cell)
        es = entities(points, 1)
        extra = entities(more, length(points) + 1)
        pairs = grid |> Sweep.from_entities(es) |> Sweep.insert(grid, Enum.shuffle(extra))
        keys = Enum.map(pairs, &elem(&1, 0))

        keys == Enum.sort(Enum.uniq(keys)) and
          Enum.all?(pairs, fn {k, l} ->
            ids = Enum.map(l, &entity(&1, :id))

            l != [] and ids == Enum.sort(ids) and
              Enum.all?(l, &(Grid.key(grid, entity(&1, :x), entity(&1, :y)) == k))
          end) and
          sorted_ids(Sweep.entities(pairs)) == Enum.to_list(1..(length(points) + length(more))//1)
      end),
      200
    )
  end

  test "union merges parts of the same cell from several workers" do
    grid = Grid.new(100, 100, 10)
    [a, b, c] = for id <- [3, 1, 2], do: entity(id: id, x: 5, y: 5)
    k = Grid.key(grid, 5, 5)
    assert [{^k, merged}] = Sweep.union([[{k, [b, a]}], [{k, [c]}]])
    assert Enum.map(merged, &entity(&1, :id)) == [1, 2, 3]
  end
end

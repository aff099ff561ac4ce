defmodule Overworld.Spatial.GridTest do
  use ExUnit.Case, async: true
  doctest Overworld.Spatial.Grid

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Spatial.Grid
  alias Overworld.Test.{Prop, Scenes}

  defp ids(list), do: list |> Enum.map(&entity(&1, :id)) |> Enum.sort()

  defp brute(entities, x, y, r) do
    for e <- entities,
        dx = entity(e, :x) - x,
        dy = entity(e, :y) - y,
        dx * dx + dy * dy <= r * r,
        do: e
  end

  # A world, a cell size, entities in it, and a query point and radius (possibly reaching out).
  defp scene do
    Scenes.world(5_000, 800, 1, fn w, h ->
      [
        :proper_types.integer(-200, w + 200),
        :proper_types.integer(-200, h + 200),
        :proper_types.integer(0, 3_000)
      ]
    end)
  end

  test "radius queries equal a brute-force scan (property)" do
    Prop.check(
      :proper.forall(scene(), fn {{w, h, cell}, points, qx, qy, r} ->
        entities = Scenes.entities(points)

        grid = Grid.new(w, h, cell)
        cells = Grid.from_entities(grid, entities)
        ids(Grid.query(cells, grid, qx, qy, r)) == ids(brute(entities, qx, qy, r))
      end),
      300
    )
  end

  test "the 3x3 block holds every entity within one cell size of the cell (property)" do
    Prop.check(
      :proper.forall(scene(), fn {{w, h, cell}, points, _qx, _qy, _r} ->
        entities = Scenes.entities(points)

        grid = Grid.new(w, h, cell)
        cells = Grid.from_entities(grid, entities)

        Enum.all?(entities, fn e ->
          {x, y} = {entity(e, :x), entity(e, :y)}
          block = Grid.block(cells, grid, Grid.key(grid, x, y))
          found = Grid.within(block, x, y, cell * cell, entity(e, :id))
          ids(found) == ids(brute(entities, x, y, cell) -- [e])
        end)
      end),
      150
    )
  end

  test "keys never wrap across an edge: neighbours of a corner cell are padding or real cells" do
    grid = Grid.new(1000, 1000, 100)
    # Without padding, the cell left of (col 0, row 1) would be (last col, row 0), and so on.
    k = Grid.key(grid, 0, 150)

    far =
      for {x, y} <- [{999, 0}, {999, 150}, {999, 250}, {0, 999}, {999, 999}],
          do: entity(id: x * 1000 + y, x: x, y: y)

    near = [entity(id: 1, x: 150, y: 50), entity(id: 2, x: 50, y: 250)]
    cells = Grid.from_entities(grid, far ++ near)
    assert ids(List.flatten(Grid.block(cells, grid, k))) == [1, 2]
  end
end

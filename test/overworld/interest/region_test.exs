defmodule Overworld.Interest.RegionTest do
  use ExUnit.Case, async: true

  alias Overworld.Interest.Region
  alias Overworld.Spatial.Grid
  alias Overworld.Test.Prop
  import :proper_types, only: [integer: 2, tuple: 1, list: 1]

  doctest Region

  # Distances from a point to the nearest and farthest points of a cell.
  defp near_far(%Grid{cell: s}, x, y, row, col) do
    {x0, x1, y0, y1} = {col * s, (col + 1) * s, row * s, (row + 1) * s}
    dx = max(0, max(x0 - x, x - x1))
    dy = max(0, max(y0 - y, y - y1))
    fx = max(abs(x - x0), abs(x - x1))
    fy = max(abs(y - y0), abs(y - y1))
    {:math.sqrt(dx * dx + dy * dy), :math.sqrt(fx * fx + fy * fy)}
  end

  defp cells(region),
    do: for({row, {a, b}} <- region, col <- a..b, into: MapSet.new(), do: {row, col})

  test "enter holds exactly the cells whose nearest point is within r; keep those whose farthest is within l (property)" do
    g = Grid.new(300 * 1024, 200 * 1024, 12 * 1024)

    Prop.check(
      :proper.forall(
        tuple([integer(0, 300 * 1024), integer(0, 200 * 1024), integer(1024, 80 * 1024)]),
        fn {x, y, r} ->
          l = r + 20 * 1024
          enter = cells(Region.enter(g, x, y, r))
          keep = cells(Region.keep(g, x, y, l))

          all = for row <- 0..(g.rows - 1), col <- 0..(g.cols - 1), do: {row, col}

          Enum.all?(all, fn cell ->
            {row, col} = cell
            {near, far} = near_far(g, x, y, row, col)
            # A unit of slack for float rounding at the exact boundary.
            not ((near < r - 1 and cell not in enter) or (near > r + 1 and cell in enter) or
                   (far < l - 1 and cell not in keep) or (far > l + 1 and cell in keep))
          end) and MapSet.subset?(enter, keep)
        end
      )
    )
  end

  test "after any walk the region holds every cell within r and none beyond l; next/6 agrees (property)" do
    g = Grid.new(300 * 1024, 300 * 1024, 12 * 1024)
    {r, l} = {40 * 1024, 60 * 1024}

    Prop.check(
      :proper.forall(list(tuple([integer(-6000, 6000), integer(-6000, 6000)])), fn steps ->
        {_, _, ok?} =
          Enum.reduce(steps, {{150 * 1024, 150 * 1024}, %{}, true}, fn {dx, dy},
                                                                       {{x, y}, region, ok?} ->
            {x, y} = {min(max(x + dx, 0), 300 * 1024), min(max(y + dy, 0), 300 * 1024)}
            # The fused one-pass computation gives the same region.
            fused = Region.next(region, g, x, y, r, l)
            region = Region.update(region, Region.enter(g, x, y, r), Region.keep(g, x, y, l))
            held = cells(region)

            ok? =
              ok? and fused == region and MapSet.subset?(cells(Region.enter(g, x, y, r)), held) and
                MapSet.subset?(held, cells(Region.keep(g, x, y, l)))

            {{x, y}, region, ok?}
          end)

        ok?
      end),
      100
    )
  end

  test "a row whose edge lies exactly r away is entered by enter/4 as by next/6 (found by the walk property)" do
    g = Grid.new(300 * 1024, 300 * 1024, 12 * 1024)
    {r, l} = {40 * 1024, 60 * 1024}
    # Row 8 ends at y = 110,592, exactly r below y.
    {x, y} = {150 * 1024, 150 * 1024 - 2048}
    assert Region.enter(g, x, y, r)[8] == {12, 12}

    assert Region.next(%{}, g, x, y, r, l) ==
             Region.update(%{}, Region.enter(g, x, y, r), Region.keep(g, x, y, l))
  end
end

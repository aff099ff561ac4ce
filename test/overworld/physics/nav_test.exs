defmodule Overworld.Physics.NavTest do
  use ExUnit.Case, async: true
  alias Overworld.Physics
  alias Overworld.Physics.Nav
  doctest Nav

  @m 1024

  defp nav(boxes, opts \\ []),
    do: Nav.new(Physics.world(20 * @m, 10 * @m, boxes: boxes), [cell: @m, agent: 0] ++ opts)

  defp cells(path), do: Enum.map(path, fn {x, y} -> {div(x, @m), div(y, @m)} end)

  test "an open field: a straight line of cells, 10 per step" do
    {:ok, path} = Nav.path(nav([]), {512, 5 * @m + 512}, {9 * @m + 512, 5 * @m + 512})
    assert cells(path) == for(c <- 1..9, do: {c, 5})
    assert List.last(path) == {9 * @m + 512, 5 * @m + 512}
  end

  test "a diagonal where nothing is in the way" do
    {:ok, path} = Nav.path(nav([]), {512, 512}, {4 * @m + 512, 4 * @m + 512})
    assert cells(path) == [{1, 1}, {2, 2}, {3, 3}, {4, 4}]
  end

  test "a wall with a gap: the path goes through the gap, never through the wall" do
    # A wall at x in [10 m, 11 m), from y = 0 to 10 m, but for a gap at y in [7 m, 9 m): cells
    # are closed squares, so only row 7 (7 m to 8 m) is free of both parts.
    wall = [{10 * @m, 0, 11 * @m - 1, 7 * @m - 1}, {10 * @m, 9 * @m, 11 * @m - 1, 10 * @m}]
    n = nav(wall)
    {:ok, path} = Nav.path(n, {2 * @m, 2 * @m}, {18 * @m, 2 * @m})
    cs = cells(path)
    assert {10, 7} in cs
    refute Enum.any?(cs, fn {c, r} -> Nav.blocked?(n, c, r) end)
    # Each step moves to a neighbour cell.
    for {{c1, r1}, {c2, r2}} <- Enum.zip([{2, 2} | cs], cs),
        do: assert(max(abs(c1 - c2), abs(r1 - r2)) == 1)
  end

  test "no corner cutting: a diagonal past a blocked corner is not taken" do
    n = nav([{1 * @m, 0, 2 * @m - 1, 1 * @m - 1}])
    {:ok, path} = Nav.path(n, {512, 1 * @m + 512}, {1 * @m + 512, 2 * @m + 512})
    assert cells(path) == [{1, 2}]
    {:ok, path} = Nav.path(n, {512, 1 * @m + 512}, {2 * @m + 512, 512})
    refute {2, 0} == hd(cells(path))
  end

  test "blocked, unreachable and too far" do
    walled = nav([{10 * @m, 0, 11 * @m - 1, 10 * @m}])
    assert {:error, :blocked} = Nav.path(walled, {10 * @m + 5, 5 * @m}, {1, 1})
    assert {:error, :blocked} = Nav.path(walled, {1, 1}, {25 * @m, 1})
    assert {:error, :unreachable} = Nav.path(walled, {1 * @m, 5 * @m}, {15 * @m, 5 * @m})
    assert {:error, :too_far} = Nav.path(nav([], max_nodes: 5), {512, 512}, {19 * @m, 9 * @m})
  end

  test "the agent's radius grows the obstacles; circles block the cells within their reach" do
    assert Nav.blocked?(nav([{5 * @m, 5 * @m, 6 * @m, 6 * @m}], agent: @m), 3, 5) == false
    assert Nav.blocked?(nav([{5 * @m, 5 * @m, 6 * @m, 6 * @m}], agent: @m), 4, 5) == true

    circled =
      Nav.new(Physics.world(20 * @m, 10 * @m, circles: [{10 * @m, 5 * @m, 2 * @m}]),
        cell: @m,
        agent: 0
      )

    assert Nav.blocked?(circled, 9, 4) and Nav.blocked?(circled, 11, 6)
    refute Nav.blocked?(circled, 7, 2)
  end
end

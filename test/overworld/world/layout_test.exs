defmodule Overworld.World.LayoutTest do
  use ExUnit.Case, async: true

  alias Overworld.Test.Prop
  alias Overworld.World.Layout

  doctest Overworld.World.Layout

  # Every cell of the world, with the zones whose regions hold it.
  defp owners(l) do
    for col <- 0..(l.cols - 1), row <- 0..(l.rows - 1), into: %{} do
      {{col, row},
       for(
         %{id: id, cells: {c0, r0, c1, r1}} <- l.regions,
         col >= c0 and col <= c1 and row >= r0 and row <= r1,
         do: id
       )}
    end
  end

  defp check_layout(l) do
    # Every cell belongs to exactly one region, the one zone_of_cell/3 names.
    for {{col, row}, ids} <- owners(l) do
      assert [id] = ids
      assert Layout.zone_of_cell(l, col, row) == id
      # A point inside the cell is in the same zone.
      assert Layout.zone_at(l, (col + 0.5) * l.cell_size, (row + 0.5) * l.cell_size) == id
    end

    # Neighbours are symmetric; a zone's neighbours own cells next to its own.
    for %{id: a} <- l.regions, b <- Layout.neighbours(l, a) do
      assert a in Layout.neighbours(l, b)
    end

    # Id spaces are disjoint and cover the integers; tick offsets are distinct in [0, 1).
    spaces = Enum.map(l.regions, &Layout.id_space(l, &1.id))

    assert spaces |> Enum.map(&elem(&1, 0)) |> Enum.sort() ==
             Enum.to_list(0..(length(spaces) - 1))

    offsets = Enum.map(l.regions, &Layout.tick_offset(l, &1.id))
    assert Enum.uniq(offsets) == offsets and Enum.all?(offsets, &(&1 >= 0 and &1 < 1))
    true
  end

  test "a grid of zones: regions of whole cells, as even as can be, every cell owned once" do
    l = Layout.new!(size: {707.1, 707.1}, cell_size: 16, zones: {2, 2})
    assert {l.cols, l.rows} == {45, 45}
    assert [{0, 0}, {1, 0}, {0, 1}, {1, 1}] == Enum.map(l.regions, & &1.id)
    assert Layout.region(l, {1, 1}).cells == {23, 23, 44, 44}
    check_layout(l)
    # A border lies on a cell border: the last metre of column 22 and the first of 23.
    assert Layout.zone_at(l, 22 * 16 + 15.9, 5) == {0, 0}
    assert Layout.zone_at(l, 23 * 16, 5) == {1, 0}
    # Beyond the world: the zone at its edge.
    assert Layout.zone_at(l, 1_000, -5) == {1, 0}
  end

  test "irregular regions as rectangles in metres" do
    l =
      Layout.new!(
        size: {100, 60},
        cell_size: 10,
        regions: [
          {:west, {0, 0, 40, 60}},
          {:north_east, {40, 0, 100, 30}},
          {:south_east, {40, 30, 100, 60}}
        ]
      )

    check_layout(l)
    assert Layout.zone_at(l, 39.9, 59) == :west
    assert Layout.zone_at(l, 40, 29.9) == :north_east
    assert Layout.zone_at(l, 100, 60) == :south_east
    assert Layout.neighbours(l, :west) == [:north_east, :south_east]
  end

  test "invalid layouts say what is wrong" do
    bad = [
      {[size: {0, 10}, cell_size: 1, zones: {1, 1}], "size must be"},
      {[size: {10, 10}, cell_size: 0, zones: {1, 1}], "cell_size must be"},
      {[size: {10, 10}, cell_size: 5], "give zones:"},
      {[size: {10, 10}, cell_size: 5, zones: {0, 1}], "zones must be"},
      {[size: {10, 10}, cell_size: 5, zones: {4, 1}], "do not fit 3 x 3 cells"},
      {[size: {10, 10}, cell_size: 5, zones: {1, 1}, regions: [{:a, {0, 0, 10, 10}}]],
       "not both"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, {0, 0, 10, 5}}]],
       "cover 3 of the world's 9"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, {0, 0, 10, 10}}, {:b, {5, 5, 10, 10}}]],
       "overlap"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, {0, 0, 10, 5}}, {:a, {0, 5, 10, 10}}]],
       "two regions have the id :a"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, {0, 0, 12, 10}}]], "outside the world"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, {5, 0, 5, 10}}]], "empty or inside out"},
      {[size: {10, 10}, cell_size: 5, regions: [{:a, :everything}]], "a region is {id"}
    ]

    for {opts, message} <- bad do
      assert {:error, why} = Layout.new(opts)
      assert why =~ message, "#{inspect(opts)}: #{why}"
      assert_raise ArgumentError, ~r/invalid world layout: /, fn -> Layout.new!(opts) end
    end
  end

  test "property: any grid of zones over any world owns every cell once" do
    Prop.check(
      :proper.forall(
        {:proper_types.integer(1, 400), :proper_types.integer(1, 400),
         :proper_types.integer(1, 40), :proper_types.integer(1, 6), :proper_types.integer(1, 6)},
        fn {w, h, cell, zc, zr} ->
          case Layout.new(size: {w, h}, cell_size: cell, zones: {zc, zr}) do
            {:ok, l} ->
              check_layout(l)

            {:error, why} ->
              why =~ "do not fit" and (zc > div(w, cell) + 1 or zr > div(h, cell) + 1)
          end
        end
      ),
      100
    )
  end
end

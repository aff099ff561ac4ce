defmodule Overworld.World.PlaceTest do
  use ExUnit.Case, async: true

  alias Overworld.World.{Layout, Place}

  doctest Overworld.World.Place

  @layout Layout.new!(size: {240, 240}, cell_size: 12, zones: {2, 2})

  test "each neighbour gets the cells within two cells of its region, and no others" do
    p = Place.new!(:w, @layout, {0, 0})
    rows = Place.shadow_rows(p)
    assert tuple_size(rows) == @layout.rows
    # Zone {1, 0} (cells 11..20 x 0..10): columns 9..20 of rows 0..12.
    assert {{1, 0}, 9, 20} in elem(rows, 0)
    assert {{1, 0}, 9, 20} in elem(rows, 12)
    refute Enum.any?(elem(rows, 13), &match?({{1, 0}, _, _}, &1))
    # Zone {0, 1} (rows 11..20) needs rows 9.. only.
    refute Enum.any?(elem(rows, 8), &match?({{0, 1}, _, _}, &1))
    assert {{0, 1}, 0, 12} in elem(rows, 9)
  end

  test "ownership with hysteresis, at a side and at the corner" do
    p = Place.new!(:w, @layout, {0, 0}, hysteresis: 2)
    m = 1024
    # The region ends at 132 m (exclusive) on both axes.
    assert Place.owner(p, 133 * m, 50 * m) == {0, 0}
    assert Place.owner(p, 134 * m + 100, 50 * m) == {1, 0}
    assert Place.owner(p, 50 * m, 134 * m + 100) == {0, 1}
    # Diagonally past the corner: within 2 m by distance, else the corner's zone.
    assert Place.owner(p, 133 * m, 133 * m) == {0, 0}
    assert Place.owner(p, 134 * m, 134 * m) == {1, 1}
  end

  test "invalid places are refused with the reason" do
    assert_raise ArgumentError, ~r/hysteresis margin must be/, fn ->
      Place.new!(:w, @layout, {0, 0}, hysteresis: 12)
    end

    assert_raise ArgumentError, ~r/lateness bound/, fn ->
      Place.new!(:w, @layout, {0, 0}, late: -1)
    end

    assert_raise ArgumentError, ~r/no region/, fn -> Place.new!(:w, @layout, {5, 5}) end
  end
end

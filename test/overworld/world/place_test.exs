defmodule Overworld.World.PlaceTest do
  use ExUnit.Case, async: true

  alias Overworld.Test.Prop
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

  test "property: an entity wandering near a border changes owner once per crossing of the margin" do
    l = Layout.new!(size: {200, 100}, cell_size: 10, zones: {2, 1})
    places = Map.new(l.regions, &{&1.id, Place.new!(:w, l, &1.id, hysteresis: 2)})
    border = Layout.region(l, {1, 0}).cells |> elem(0) |> Kernel.*(10)
    h = 2 * 1024
    y = 50 * 1024

    Prop.check(
      :proper.forall(
        :proper_types.list(:proper_types.integer(-40, 40)),
        fn steps ->
          # A walk in tenths of a metre from the border, along it (positions in units).
          xs = Enum.scan(steps, border * 10, fn s, x -> min(max(x + s, 0), 2000) end)
          xs = Enum.map(xs, &div(&1 * 1024, 10))

          {owners, _} =
            Enum.map_reduce(xs, Layout.zone_at(l, border, 50), fn x, owner ->
              next = Place.owner(places[owner], x, y)
              {next, next}
            end)

          transfers =
            owners |> Enum.chunk_every(2, 1, :discard) |> Enum.count(fn [a, b] -> a != b end)

          # Each transfer needs the walk to have gone past the border by more than the margin
          # since the previous one: at most one per excursion beyond the margin.
          excursions = count_excursions(xs, places, h)
          # An owner is always a zone whose region is within the margin of the position.
          ok? = Enum.zip(xs, owners) |> Enum.all?(fn {x, o} -> distance(places[o], x, y) <= h end)
          ok? and transfers <= excursions
        end
      ),
      200
    )
  end

  # How many times a walk goes from beyond the margin of one region to beyond the other's.
  defp count_excursions(xs, places, h) do
    {n, _} =
      Enum.reduce(xs, {0, nil}, fn x, {n, side} ->
        cond do
          distance(places[{0, 0}], x, 50 * 1024) > h and side != :east -> {n + 1, :east}
          distance(places[{1, 0}], x, 50 * 1024) > h and side != :west -> {n + 1, :west}
          true -> {n, side}
        end
      end)

    n
  end

  # The distance in units from a point to a place's region.
  defp distance(%Place{box: {x0, y0, x1, y1}}, x, y) do
    dx = max(max(x0 - x, x - x1), 0)
    dy = max(max(y0 - y, y - y1), 0)
    :math.sqrt(dx * dx + dy * dy)
  end

  test "invalid places are refused with the reason" do
    assert_raise ArgumentError, ~r/hysteresis margin must be/, fn ->
      Place.new!(:w, @layout, {0, 0}, hysteresis: 12)
    end

    assert_raise ArgumentError, ~r/lateness bound/, fn ->
      Place.new!(:w, @layout, {0, 0}, late: -1)
    end

    assert_raise ArgumentError, ~r/no region/, fn -> Place.new!(:w, @layout, {5, 5}) end

    # A lower shadow rate: the fastest an entity moves is needed, the lateness bound must
    # cover the period, and the margin must fit in every region.
    assert_raise ArgumentError, ~r/need :max_speed/, fn ->
      Place.new!(:w, @layout, {0, 0}, every: 3)
    end

    assert_raise ArgumentError, ~r/lateness bound must be a number of ticks, at least 4/, fn ->
      Place.new!(:w, @layout, {0, 0}, every: 5, late: 3, max_speed: 10)
    end

    assert_raise ArgumentError, ~r/shadow period must be a positive/, fn ->
      Place.new!(:w, @layout, {0, 0}, every: 0)
    end

    assert_raise ArgumentError, ~r/more than the thinnest region/, fn ->
      Place.new!(:w, @layout, {0, 0}, every: 30, late: 30, max_speed: 200)
    end
  end
end

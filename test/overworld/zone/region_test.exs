defmodule Overworld.Zone.RegionTest do
  # A zone owning a region of a larger world grid (zone option :region): world coordinates and
  # cell keys, its entities kept inside the region, the same results whatever its workers, and
  # observers at its edge served.
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{Interest, Zone}
  alias Overworld.Protocol.Snapshot
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.Observe

  # Cells 5..11 x 4..12 of a 200 m world of 12 m cells (17 x 17 cells).
  @region {5, 4, 11, 12}

  defp start(opts) do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(
        Overworld.Test.Walkers,
        Keyword.merge(
          [id: id, clock: :manual, size: {200, 200}, cell_size: 12, region: @region],
          opts
        )
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  defp inside?(e) do
    {c0, r0, c1, r1} = @region
    cell = 12 * 1024
    {x, y} = {entity(e, :x), entity(e, :y)}
    x >= c0 * cell and x < (c1 + 1) * cell and y >= r0 * cell and y < (r1 + 1) * cell
  end

  defp state(zone),
    do: zone |> Zone.entities() |> Enum.sort()

  test "every entity stays inside the region, and the state does not depend on the workers" do
    [one, three] = for w <- [1, 3], do: start(workers: w)

    for zone <- [one, three] do
      # Spawned far outside: brought inside, in world coordinates.
      {:ok, _} = Zone.spawn(zone, [[kind: :walker, x: 0, y: 199 * 1024, state: :idle]])
      {:ok, _} = Zone.tick_now(zone, 60)
      entities = Zone.entities(zone)
      assert length(entities) > 300
      assert Enum.all?(entities, &inside?/1), inspect(Enum.reject(entities, &inside?/1))
    end

    assert state(one) == state(three)
  end

  test "an observer at the region's corner gets frames of the region's entities only" do
    zone = start(workers: 2, wire: Wire)
    {:ok, obs} = Interest.new(zone, radius: 40, budget: 10_000_000)
    # The region's north-west corner, in world units.
    {c0, r0, _, _} = @region
    at = {c0 * 12 * 1024, r0 * 12 * 1024}
    {_obs, view} = Observe.follow(zone, obs, 1..20, fn _ -> at end)

    seen = Snapshot.View.entities(view)
    assert map_size(seen) > 0
    # Every entity the client holds is one of the zone's, inside the region.
    ids = zone |> Zone.entities() |> Map.new(&{entity(&1, :id), &1})
    for {id, _} <- seen, do: assert(inside?(Map.fetch!(ids, id)))
  end

  test "a region past the grid, or not a region, is refused" do
    for bad <- [{5, 4, 17, 12}, {5, 4, 4, 12}, {-1, 0, 3, 3}, :west] do
      assert_raise ArgumentError, ~r/region/, fn -> start(region: bad) end
    end
  end
end

defmodule Overworld.Interest.WorldTest do
  # One world for the client: an observer at the corner of four zones gets one stream of
  # snapshots with the cells of every zone in its view, and through every crossing each entity
  # within its radius is shown exactly once, never missing.
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{World, Zone}
  alias Overworld.Interest.World, as: WorldView
  alias Overworld.Protocol.Snapshot
  alias Overworld.Test.Crowd

  @templates Overworld.Template.Test.Wire.__templates__()

  defp start_world(opts) do
    name = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_world(
        Crowd,
        [
          name: name,
          zones: {2, 2},
          workers: 2,
          clock: :manual,
          size: {240, 240},
          cell_size: 12,
          wire: Overworld.Template.Test.Wire,
          args: [n: 800, side: 240]
        ] ++ opts
      )

    on_exit(fn -> Overworld.stop_world(name) end)
    name
  end

  defp view(name) do
    g = Zone.config(hd(World.zones(name))).grid
    Snapshot.View.new(g.cols, g.rows)
  end

  defp quantized(entities) do
    {index, quantize, _, _} = Overworld.Zone.Wire.funs(Overworld.Template.Test.Wire)

    Map.new(entities, fn e ->
      ti = index.(entity(e, :kind))
      {entity(e, :id), {ti, quantize.(ti, e)}}
    end)
  end

  # Around the corner of the four zones (120, 120), 30 m away, a turn every 120 ticks.
  defp path(n) do
    a = 2 * :math.pi() * n / 120
    {round((120 + 30 * :math.cos(a)) * 1024), round((120 + 30 * :math.sin(a)) * 1024)}
  end

  # Applies a frame; checks its size, that no id is in two region cells at the frame's tick,
  # and that every entity of the world within 50 m is shown. Answers the view.
  defp apply_frame(view, frame, info, {x, y}, entities, label) do
    bin = IO.iodata_to_binary(frame)
    assert byte_size(bin) == info.bytes
    assert {:ok, view} = Snapshot.apply(view, bin, @templates), label

    region_ids =
      for {k, es} <- view.cells,
          k < view.space,
          view.ticks[k] == view.tick,
          {id, _, _} <- es,
          do: id

    assert length(region_ids) == length(Enum.uniq(region_ids)), "#{label}: an id twice"

    shown = Snapshot.View.entities(view)

    near =
      for e <- entities,
          (entity(e, :x) - x) ** 2 + (entity(e, :y) - y) ** 2 < (50 * 1024) ** 2,
          do: entity(e, :id)

    # (The first frame asks for the cells' keyframes: they come with the next tick.)
    if view.tick > 2 do
      missing = Enum.reject(near, &Map.has_key?(shown, &1))
      assert missing == [], "#{label}: #{inspect(missing)} of #{length(near)} near not shown"
      assert length(near) > 20
    end

    ids = MapSet.new(entities, &entity(&1, :id))
    # (An entity handed away whose new zone has not ticked yet is in no zone: in transit.)
    ghosts =
      for id <- Map.keys(shown),
          not MapSet.member?(ids, id),
          not is_map_key(view.handed, id),
          do: id

    assert ghosts == [], "#{label}: ghosts"
    view
  end

  test "lockstep: a corner observer's view equals the world within its radius, every tick" do
    world = start_world([])
    {:ok, obs} = WorldView.new(world, radius: 60, budget: 10_000_000)
    home = {world, {0, 0}}

    {_obs, view, seen} =
      Enum.reduce(1..240, {obs, view(world), %{}}, fn n, {obs, view, seen} ->
        {:ok, ^n} = World.tick_now(world)
        {x, y} = path(n)
        {frame, info, obs} = WorldView.frame(obs, home, n, x, y)
        assert info.ticks |> Map.values() |> Enum.uniq() == [n]
        entities = World.entities(world)
        view = apply_frame(view, frame, info, {x, y}, entities, "tick #{n}")
        assert view.tick == n
        # Every zone at the same tick: an entity handed away arrives in the same frame, and
        # every entity shown is exactly the world's state now.
        assert view.handed == %{}
        now = quantized(entities)
        shown = Snapshot.View.entities(view)
        wrong = for {id, v} <- shown, now[id] != v, do: {id, v, now[id]}
        assert wrong == [], "tick #{n}"

        # Which ids were seen in a band cell (handed across a border in view).
        seen =
          for {k, es} <- view.cells, k >= view.space, {id, _, _} <- es, into: seen, do: {id, true}

        {obs, view, seen}
      end)

    assert map_size(seen) > 20
    assert Enum.any?(view.cells, fn {k, _} -> k >= view.space end)
    crossings = for z <- World.zones(world), do: Zone.metrics(z).world.crossings_in
    assert Enum.sum(crossings) > 100
  end

  test "zones at different ticks: a handed entity is shown until its new zone's cells hold it, once" do
    world = start_world([])
    {:ok, obs} = WorldView.new(world, radius: 60, budget: 10_000_000)
    zones = World.zones(world)
    home = {world, {0, 0}}
    # The zones tick one after the other; the frames are built with the home zone at tick n
    # and zone {1, 0} still at n - 1 (ticked after the frame).
    last = {world, {1, 0}}
    order = Enum.reject(zones, &(&1 == last))

    {_obs, _view, stats} =
      Enum.reduce(1..240, {obs, view(world), %{handed: 0, both: 0}}, fn n, {obs, view, stats} ->
        for z <- order, do: {:ok, ^n} = Zone.tick_now(z)
        {x, y} = path(n)
        {frame, info, obs} = WorldView.frame(obs, home, n, x, y)
        assert info.ticks[last] == n - 1 or n == 1
        # The world's entities as the frame shows them: zone {1, 0}'s of tick n - 1.
        entities = Enum.flat_map(order, &Zone.entities/1) ++ Zone.entities(last)
        view = apply_frame(view, frame, info, {x, y}, entities, "tick #{n}")
        {:ok, ^n} = Zone.tick_now(last)
        # Those in transit were taken by their new zone.
        ids = MapSet.new(World.entities(world), &entity(&1, :id))
        assert Enum.all?(Map.keys(view.handed), &MapSet.member?(ids, &1))
        # Ids in a band cell and a region cell both (the new zone published first).
        at = fn band? ->
          for {k, es} <- view.cells,
              k >= view.space == band?,
              {id, _, _} <- es,
              into: MapSet.new(),
              do: id
        end

        both = MapSet.size(MapSet.intersection(at.(true), at.(false)))

        {obs, view,
         %{stats | handed: stats.handed + map_size(view.handed), both: stats.both + both}}
      end)

    # Some handed entities had to be shown from their old copy for a frame, and some new
    # copies came before the old zone's op 11 (the region copy shown).
    assert stats.handed > 0
    assert stats.both > 0
  end

  test "a world observer shares one byte budget across the zones, nearest zone first" do
    world = start_world([])
    {:ok, obs} = WorldView.new(world, radius: 60, budget: 30 * 3000)
    {:ok, 1} = World.tick_now(world)
    {_frame, info, obs} = WorldView.frame(obs, {world, {0, 0}}, 1, 118 * 1024, 118 * 1024)
    # 3000 bytes for the first frame: most cells wait for the next ones.
    assert info.bytes <= 3000 + 200
    assert info.pending > 0

    {_obs, info} =
      Enum.reduce(2..40, {obs, info}, fn n, {obs, _} ->
        {:ok, ^n} = World.tick_now(world)
        {_frame, info, obs} = WorldView.frame(obs, {world, {0, 0}}, n, 118 * 1024, 118 * 1024)
        assert info.bytes <= 3000 + 200
        {obs, info}
      end)

    # Caught up within the budget.
    assert info.pending == 0
  end
end

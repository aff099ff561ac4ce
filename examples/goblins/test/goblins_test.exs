defmodule GoblinsTest do
  # The goblin world against the native reference (reference/): the same rules give
  # bit-identical states, checked by the checksum of docs/goblins-scenario.md.
  use ExUnit.Case, async: true
  doctest Goblins

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Goblins.Bench.Reference
  alias Overworld.Zone

  @moduletag timeout: 300_000

  defp run_zone(n, ticks, opts) do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Goblins, Goblins.zone_options(n, [id: id, clock: :manual] ++ opts))

    {:ok, ^ticks} = Zone.tick_now(id, ticks)
    entities = Zone.entities(id)
    Overworld.stop_zone(id)
    entities
  end

  for {n, ticks, seed, rate, workers} <- [
        {500, 100, 0, 30, 1},
        {2_000, 150, 7, 20, 2},
        {3_000, 60, 123, 60, 3}
      ] do
    test "#{n} goblins, #{ticks} ticks, seed #{seed}, #{rate} Hz on #{workers} workers match the native reference" do
      n = unquote(n)
      ticks = unquote(ticks)
      seed = unquote(seed)
      rate = unquote(rate)
      entities = run_zone(n, ticks, seed: seed, tick_rate: rate, workers: unquote(workers))

      native =
        Reference.run_raw(
          entities: n,
          ticks: ticks,
          warmup: 0,
          threads: 2,
          rate: rate,
          seed: seed
        )

      assert Goblins.checksum(entities) == native["checksum"]
    end
  end

  test "a world of 2 x 2 zones (shadows, handoffs) matches the native reference of one world" do
    {n, ticks, seed, rate} = {3_000, 150, 7, 20}
    name = {__MODULE__, make_ref()}
    opts = [name: name, zones: {2, 2}, clock: :manual, seed: seed, tick_rate: rate, workers: 2]
    {:ok, _} = Overworld.start_world(Goblins, Goblins.zone_options(n, opts))
    {:ok, ^ticks} = Overworld.World.tick_now(name, ticks)
    entities = Overworld.World.entities(name)

    crossings =
      Enum.sum(for z <- Overworld.World.zones(name), do: Zone.metrics(z).world.crossings_in)

    Overworld.stop_world(name)

    native =
      Reference.run_raw(entities: n, ticks: ticks, warmup: 0, threads: 2, rate: rate, seed: seed)

    assert length(entities) == n
    assert Goblins.checksum(entities) == native["checksum"]
    assert crossings > 0
  end

  test "the checksum sees every field: one changed timer changes it" do
    entities = run_zone(200, 10, [])
    [e | rest] = Enum.sort_by(entities, &entity(&1, :id))
    {timer, qx, qy, loot} = entity(e, :data)
    changed = [entity(e, data: {timer + 1, qx, qy, loot}) | rest]
    assert Goblins.checksum(changed) != Goblins.checksum(entities)
  end

  test "goblins stay in the world, and some of each state appear" do
    entities = run_zone(2_000, 200, workers: 2)
    side = Goblins.side(2_000)
    assert length(entities) == 2_000
    assert Enum.all?(entities, &(entity(&1, :x) in 0..side and entity(&1, :y) in 0..side))
    states = entities |> Enum.map(&entity(&1, :state)) |> Enum.uniq() |> Enum.sort()
    assert states == [:chase, :flee, :idle, :wander]
  end

  test "players walk with their inputs and are clamped to the world" do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(Goblins, Goblins.zone_options(100, id: id, clock: :manual))
    side = Goblins.side(100)
    {:ok, pid} = Zone.join(id, :ann)
    # The first tick spawns the avatar at the player's spot.
    {:ok, _} = Zone.tick_now(id)
    x0 = entity(Zone.entity(id, pid), :x)
    assert x0 == :erlang.phash2({:ann, :x}, side)
    dir = if x0 > div(side, 2), do: -1, else: 1
    Zone.input(id, :ann, %{mx: 127 * dir, my: 0})
    {:ok, _} = Zone.tick_now(id, 30)
    e = Zone.entity(id, pid)
    # 30 ticks at 5 m/s; goblins in the way may push the player back a little, never forward.
    assert entity(e, :vx) == dir * 5 * 1024
    assert abs(entity(e, :x) - x0) in 3_000..(30 * div(5 * 1024, 30))
    # Beyond full speed (only the Elixir API can say so: the input layout clamps a client's to
    # -127..127): still 5 m/s.
    Zone.input(id, :ann, %{mx: 500 * dir, my: 0})
    {:ok, _} = Zone.tick_now(id)
    assert entity(Zone.entity(id, pid), :input) == %{mx: 500 * dir, my: 0}
    assert entity(Zone.entity(id, pid), :vx) == dir * 5 * 1024
    # Back towards the nearer edge, for longer than it takes: clamped there.
    Zone.input(id, :ann, %{mx: -127 * dir, my: 0})
    {:ok, _} = Zone.tick_now(id, 260)
    e = Zone.entity(id, pid)
    assert entity(e, :vx) == -dir * 5 * 1024
    if dir == 1, do: assert(entity(e, :x) < 1024), else: assert(entity(e, :x) > side - 1024)
    Overworld.stop_zone(id)
  end
end

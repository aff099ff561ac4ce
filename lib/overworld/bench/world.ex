defmodule Overworld.Bench.World do
  @moduledoc false
  # The world benchmark (`mix overworld.bench.world`): a world of zones against a lone zone
  # with the same entities per zone and the same options, in alternating rounds of the same
  # run (the machine's speed drifts: the ratio of the two is the figure). Per round and zone:
  # tick p50/p99 (telemetry, every tick), overruns; for the world: crossings per second,
  # handoff latency (ticks until the new zone confirmed), shadow messages and entities per
  # tick, and whether any entity was lost or duplicated (ids at the end against the start).

  alias Overworld.Bench.Stats
  alias Overworld.{World, Zone}
  alias Overworld.Metrics.Histogram

  @doc """
  Runs the rounds. `opts`: `:module` (a zone module exporting `zone_options(entities,
  extra)`, the options of a world or zone of that many entities), `:zones` `{cols, rows}`,
  `:entities` per zone, `:seconds` per round, `:warmup` seconds, `:rounds`, `:workers`,
  `:wire`, `:args` (merged into the zone options' `:args`), `:world` (options of the world
  only, such as `:shadow_every`), `:print` (a fun of a line).
  """
  @spec run(keyword) :: map
  def run(opts) do
    print = Keyword.get(opts, :print, fn _ -> :ok end)

    rounds =
      for r <- 1..opts[:rounds] do
        lone = measure_lone(opts)
        print.(line("round #{r}: lone zone", lone))
        world = measure_world(opts)
        for {id, z} <- Enum.sort(world.zones), do: print.(line("round #{r}: zone #{id}", z))
        print.(world_line(world))
        for {group, o} <- Enum.sort(world.observers), do: print.(observer_line(r, group, o))
        %{lone: lone, world: world}
      end

    # (A p99 needs 100 ticks in a round: none in a short run.)
    worst =
      Enum.max(for(r <- rounds, {_, z} <- r.world.zones, z.p99_us != nil, do: z.p99_us), fn ->
        nil
      end)

    lone_p99 = Stats.median(for r <- rounds, r.lone.p99_us != nil, do: r.lone.p99_us)

    # Bytes per second of a corner observer over an inside one, per entity shown.
    corner_ratio =
      Stats.median(
        for r <- rounds,
            %{corner: c, inside: i} <- [r.world.observers],
            c.visible_mean && i.visible_mean && i.bytes_per_s > 0,
            do: c.bytes_per_s / c.visible_mean / (i.bytes_per_s / i.visible_mean)
      )

    %{
      zones: Tuple.to_list(opts[:zones]),
      entities_per_zone: opts[:entities],
      seconds: opts[:seconds],
      rounds: rounds,
      worst_zone_p99_us: worst,
      lone_p99_us_median: lone_p99,
      p99_ratio: lone_p99 && worst && Float.round(worst / lone_p99, 2),
      corner_bytes_per_entity_ratio: corner_ratio && Float.round(corner_ratio, 3),
      lost: Enum.sum(for r <- rounds, do: r.world.lost),
      duplicated: Enum.sum(for r <- rounds, do: r.world.duplicated),
      overruns: Enum.sum(for r <- rounds, {_, z} <- r.world.zones, do: z.overruns)
    }
  end

  defp measure_lone(opts) do
    id = {__MODULE__, make_ref()}
    zone_opts = options(opts, opts[:entities], id: id)
    {:ok, _} = Overworld.start_zone(opts[:module], zone_opts)
    Process.sleep(opts[:warmup] * 1000)
    result = window(opts, [id])
    Overworld.stop_zone(id)
    result[id]
  end

  defp measure_world(opts) do
    name = {__MODULE__, make_ref()}
    {zc, zr} = opts[:zones]

    zone_opts =
      options(
        opts,
        opts[:entities] * zc * zr,
        [name: name, zones: {zc, zr}] ++ Keyword.get(opts, :world, [])
      )

    {:ok, _} = Overworld.start_world(opts[:module], zone_opts)
    # (Observers start with the warm-up: their first frames carry every cell's keyframe.)
    observers = Overworld.Bench.WorldObservers.start(name, opts[:observers] || 0)
    Process.sleep(opts[:warmup] * 1000)
    zones = World.zones(name)
    # (Two reads: an entity in flight between two zones during one is in the other.)
    ids0 = Enum.uniq(world_ids(name) ++ world_ids(name))
    m0 = Map.new(zones, &{&1, Zone.metrics(&1).world})
    h0 = Map.new(zones, &{&1, Histogram.snapshot(Zone.metrics_ref(&1).handoff_ticks)})
    Overworld.Bench.WorldObservers.measure(observers)
    per_zone = window(opts, zones)
    observed = Overworld.Bench.WorldObservers.stop(observers, opts[:seconds])
    m1 = Map.new(zones, &{&1, Zone.metrics(&1).world})

    handoff =
      zones
      |> Enum.map(&Histogram.diff(Histogram.snapshot(Zone.metrics_ref(&1).handoff_ticks), h0[&1]))
      |> Enum.reduce(&Histogram.merge/2)

    # Ownership: the zones are read one after the other while they tick, so an entity handed
    # over between two reads may be seen in both zones or in neither. An entity is counted
    # lost (or duplicated) only when a second read, a third of a second later (a handoff takes
    # a tick or two), still misses it (or still has it twice).
    ids1 = world_ids(name)
    Process.sleep(300)
    ids2 = world_ids(name)
    Overworld.stop_world(name)
    missing = fn ids -> MapSet.difference(MapSet.new(ids0), MapSet.new(ids)) end
    twice = fn ids -> MapSet.new(ids -- Enum.uniq(ids)) end
    lost = MapSet.intersection(missing.(ids1), missing.(ids2))
    duplicated = MapSet.intersection(twice.(ids1), twice.(ids2))
    delta = fn key -> Enum.sum(for z <- zones, do: m1[z][key] - m0[z][key]) end
    ticks = Enum.sum(for {_, z} <- per_zone, do: z.ticks)
    seconds = opts[:seconds]

    %{
      zones: Map.new(per_zone, fn {{_, rid}, z} -> {inspect(rid), z} end),
      crossings_per_s: Float.round(delta.(:crossings_in) / seconds, 1),
      handoff_ticks: Histogram.summary(handoff),
      shadow_messages_per_tick: ticks > 0 && Float.round(delta.(:shadow_messages) / ticks, 2),
      shadow_entities_per_tick: ticks > 0 && Float.round(delta.(:shadow_entities) / ticks, 1),
      entities_start: length(ids0),
      entities_end: length(ids1),
      lost: MapSet.size(lost),
      duplicated: MapSet.size(duplicated),
      observers: observed
    }
  end

  # Every zone's entity ids at its last completed tick, the zones read one after the other.
  defp world_ids(name), do: name |> World.entities() |> Enum.map(&elem(&1, 1)) |> Enum.sort()

  defp options(opts, n, extra) do
    base = opts[:module].zone_options(n, extra ++ [workers: opts[:workers], wire: opts[:wire]])
    Keyword.update(base, :args, opts[:args], &Keyword.merge(&1, opts[:args]))
  end

  # Tick durations of the zones over `seconds` (telemetry: every tick).
  defp window(opts, zones) do
    {:ok, per_zone} =
      Overworld.Bench.Ticks.during(zones, fn -> Process.sleep(opts[:seconds] * 1000) end)

    per_zone
  end

  defp line(what, z),
    do:
      "#{what}: #{z.entities} entities, tick p50 #{z.p50_us} µs, p99 #{z.p99_us || "n/a"} µs, " <>
        "max #{z.max_us} µs over #{z.ticks} ticks, #{z.overruns} overruns"

  defp observer_line(r, group, o) do
    "round #{r}: #{o.observers} observers #{if group == :corner, do: "at corners", else: "inside zones"}: " <>
      "#{o.bytes_per_s} bytes/s each (#{o.frames} frames), #{o.cells_mean} cells in view; " <>
      "one decoding every frame: #{o.visible_mean || "n/a"} entities shown, #{o.decode_errors} decode errors"
  end

  defp world_line(w) do
    h = w.handoff_ticks

    "world: #{w.crossings_per_s} crossings/s, handoff #{h.count} samples: p50 #{h.p50} " <>
      "ticks, p99 #{h.p99} ticks, max #{h.max}; #{w.shadow_messages_per_tick} shadow messages " <>
      "and #{w.shadow_entities_per_tick} shadow entities per zone tick; entities " <>
      "#{w.entities_start} -> #{w.entities_end}, lost #{w.lost}, duplicated #{w.duplicated}"
  end
end

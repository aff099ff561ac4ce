defmodule Mix.Tasks.Goblins.Bench.Encode do
  @shortdoc "Benchmarks the wire: bytes per entity, per observer, and the cost of the frames"
  @moduledoc """
  Measures the wire of the goblin world (`Goblins.Wire`, docs/protocol.md).

      mix goblins.bench.encode [--entities 10000] [--observers 500] [--seconds 30]
                                 [--radius 90] [--budget 65536] [--workers W] [--warmup 3]
                                 [--decoders 4] [--json PATH]

  Two parts:

  1. **Encoding**, on a zone ticked by hand (same scenario): the keyframe bytes of the whole
     world per entity (block headers, id gaps and template indexes included), and the delta
     bytes the workers publish per tick divided by the entities whose quantized state changed
     in that tick (over 60 ticks; headers and the 2-bit ops of unchanged entities included).
  2. **Live**, at the real tick rate: `--observers` observer processes spread uniformly over
     the world, each walking a straight line at 1.5 m/s (bouncing off the edges), each
     subscribed to the zone and building its frame after every tick (`Overworld.Interest`,
     view radius `--radius` m, byte budget `--budget` bytes/s), plus one observer of the whole
     world with no budget. `--decoders` of the observers also decode every frame into a client
     view (counting the goblins they see). Frames are built (iolists) but not written to a
     socket: sockets come with the transport.

  Prints, and writes with `--json` as one flat object: `keyframe_bytes_per_entity`,
  `delta_bytes_per_changed_entity`, `observer_bytes_per_second` (mean) and
  `observer_bytes_per_second_p99` (over observers), `full_world_bytes_per_second`,
  `zone_tick_p99_us` (simulation and encoding, as the zone measures its ticks),
  `tick_p99_us` (from a tick's start to the last observer's frame of it: simulation, interest,
  encoding and frame assembly), `encode_us_per_observer` (mean time of one observer's frame),
  `visible_entities` (mean over the decoding observers), the sample counts, and scheduler
  utilization.
  """
  use Mix.Task
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Goblins.Bench.Observer
  alias Overworld.Bench.Stats
  alias Overworld.{Template, Zone}

  @switches [
    entities: :integer,
    observers: :integer,
    seconds: :integer,
    radius: :integer,
    budget: :integer,
    workers: :integer,
    warmup: :integer,
    decoders: :integer,
    json: :string
  ]

  # Observers walk at 1.5 m/s.
  @speed 1.5

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "goblins.bench.encode")

    o = %{
      entities: Keyword.get(opts, :entities, 10_000),
      observers: Keyword.get(opts, :observers, 500),
      seconds: Keyword.get(opts, :seconds, 30),
      radius: Keyword.get(opts, :radius, 90),
      budget: Keyword.get(opts, :budget, 65_536),
      workers: Keyword.get(opts, :workers, System.schedulers_online()),
      warmup: Keyword.get(opts, :warmup, 3),
      decoders: Keyword.get(opts, :decoders, 4)
    }

    Overworld.Bench.Args.at_least!(o, Map.keys(o) -- [:observers, :decoders, :warmup])
    Overworld.Bench.Args.at_least!(o, [:observers, :decoders, :warmup], 0)

    Stats.start_node()
    machine = Stats.machine()

    info(
      "Encode benchmark: #{o.entities} goblins, #{o.observers} observers (radius #{o.radius} m, budget #{o.budget} B/s), #{o.workers} workers, #{o.warmup} s warm-up + #{o.seconds} s measured"
    )

    info(Stats.machine_line(machine))

    encoding = encoding(o)
    info("encoding measured; starting the live run")
    live = live(o)
    result = Map.merge(encoding, live)
    print(result)

    Stats.write_result(opts[:json], result, machine)

    result
  end

  ## Part 1: bytes per entity, on a zone ticked by hand

  defp encoding(o) do
    id = {:bench_encode, make_ref()}

    {:ok, _} =
      Overworld.start_zone(
        Goblins,
        Goblins.zone_options(o.entities,
          id: id,
          workers: o.workers,
          clock: :manual,
          wire: Goblins.Wire
        )
      )

    {:ok, _} = Zone.tick_now(id, 10)
    %{table: table, templates: templates} = Zone.wire(id)
    grid = Zone.config(id).grid

    keys =
      for row <- 0..(grid.rows - 1),
          col <- 0..(grid.cols - 1),
          do: Overworld.Spatial.Grid.key_at(grid, col, row)

    {_tick, keyframes} = Zone.keyframes(id, keys)
    keyframe_bytes = keyframes |> Enum.map(&byte_size(elem(&1, 1))) |> Enum.sum()
    replicated = map_size(quantized(id, templates))

    {delta_bytes, changed} =
      Enum.reduce(1..60, {0, 0}, fn _, {bytes, changed} ->
        before = quantized(id, templates)
        {:ok, n} = Zone.tick_now(id)
        now = quantized(id, templates)
        moved = Enum.count(now, fn {eid, q} -> Map.get(before, eid) != q end)

        published =
          for w <- 0..(o.workers - 1),
              {data, _index, _first} <- [Overworld.Zone.Wire.tick(table, w, n)],
              do: byte_size(data)

        {bytes + Enum.sum(published), changed + moved}
      end)

    Overworld.stop_zone(id)

    %{
      entities: o.entities,
      keyframe_bytes_per_entity: Float.round(keyframe_bytes / max(replicated, 1), 2),
      delta_bytes_per_changed_entity: Float.round(delta_bytes / max(changed, 1), 2),
      changed_entities_per_tick: round(changed / 60),
      delta_bytes_per_tick: round(delta_bytes / 60)
    }
  end

  defp quantized(id, templates) do
    ts = List.to_tuple(templates)
    kinds = for {t, i} <- Enum.with_index(templates), k <- t.kinds, into: %{}, do: {k, i}

    for e <- Zone.entities(id), ti = Map.get(kinds, entity(e, :kind)), ti != nil, into: %{} do
      {entity(e, :id), {ti, Template.quantize(elem(ts, ti), e)}}
    end
  end

  ## Part 2: the live run

  defp live(o) do
    id = {:bench_encode, make_ref()}
    me = self()
    handler = {__MODULE__, id}

    :ok =
      Overworld.Telemetry.attach(handler, [:overworld, :zone, :tick, :stop], fn _, m, meta, _ ->
        if meta.zone == id, do: send(me, {:tick, m.duration})
      end)

    {:ok, _} =
      Overworld.start_zone(
        Goblins,
        Goblins.zone_options(o.entities, id: id, workers: o.workers, wire: Goblins.Wire)
      )

    side = Goblins.side(o.entities)
    :rand.seed(:exsss, {1, 2, 3})
    step = Overworld.Entity.meters(@speed) / 30

    observers =
      for i <- 1..o.observers//1 do
        a = :rand.uniform() * 2 * :math.pi()
        pos = {:rand.uniform(side) - 1, :rand.uniform(side) - 1}
        vel = {round(step * :math.cos(a)), round(step * :math.sin(a))}

        Observer.start(id, pos, vel,
          radius: o.radius,
          budget: o.budget,
          decode: i <= o.decoders
        )
      end

    world =
      Observer.start(id, {div(side, 2), div(side, 2)}, {0, 0},
        radius: ceil(side / 1024 * 0.75),
        budget: 1_000_000_000
      )

    for _ <- [world | observers], do: receive(do: ({:observer_ready, _} -> :ok))
    Process.sleep(o.warmup * 1000)
    flush_ticks()
    for pid <- [world | observers], do: send(pid, :measure)
    m0 = Zone.metrics(id)
    cpu0 = Overworld.Metrics.CPU.sample()
    Process.sleep(o.seconds * 1000)
    cpu1 = Overworld.Metrics.CPU.sample()
    m1 = Zone.metrics(id)
    reports = for pid <- [world | observers], do: report(pid)
    Overworld.Telemetry.detach(handler)
    ticks = collect_ticks()
    Overworld.stop_zone(id)

    [world_report | reports] = reports
    seconds = o.seconds
    us = fn native -> System.convert_time_unit(native, :native, :nanosecond) / 1000 end
    zone_ticks = Stats.summary(Enum.map(ticks, us))
    per_observer = Enum.map(reports, &(&1.bytes / seconds))
    bps = Stats.summary(per_observer)
    frames = Enum.sum(Enum.map(reports, & &1.frames))
    frame_us = Enum.sum(Enum.map(reports, & &1.frame_us))

    # Per tick: from its start to the last observer's frame of it.
    done =
      (reports ++ [world_report])
      |> Enum.flat_map(& &1.done)
      |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
      |> Enum.map(fn {_n, lats} -> us.(Enum.max(lats)) end)
      |> Stats.summary()

    decoders = Enum.take(reports, o.decoders)
    decoded_frames = Enum.sum(Enum.map(decoders, & &1.frames))
    cpu = Overworld.Metrics.CPU.compare(cpu0, cpu1)

    %{
      observers: o.observers,
      radius_m: o.radius,
      budget_bytes_per_second: o.budget,
      workers: o.workers,
      seconds: seconds,
      observer_bytes_per_second: round1(bps.avg),
      observer_bytes_per_second_p99: round1(bps.p99),
      observer_bytes_per_second_max: round1(bps.max),
      full_world_bytes_per_second: round1(world_report.bytes / seconds),
      zone_ticks: zone_ticks.count,
      zone_tick_avg_us: round1(zone_ticks.avg),
      zone_tick_p99_us: round1(zone_ticks.p99),
      tick_ticks: done.count,
      tick_avg_us: round1(done.avg),
      tick_p50_us: round1(done.p50),
      tick_p99_us: round1(done.p99),
      tick_max_us: round1(done.max),
      frames: frames,
      encode_us_per_observer: if(frames > 0, do: Float.round(frame_us / frames, 1)),
      coalesced_frames: Enum.sum(Enum.map(reports, & &1.coalesced)),
      deferred_items: Enum.sum(Enum.map(reports, & &1.deferred)),
      fast_frames: Enum.sum(Enum.map(reports, & &1.fast)),
      visible_entities:
        if(decoded_frames > 0,
          do: round(Enum.sum(Enum.map(decoders, & &1.visible)) / decoded_frames)
        ),
      decode_errors: Enum.sum(Enum.map(reports, & &1.errors)),
      overruns: m1.overruns - m0.overruns,
      scheduler_utilization: Float.round(cpu.scheduler, 4),
      os_cpu: cpu.os_cpu && Float.round(cpu.os_cpu, 4)
    }
  end

  defp report(pid) do
    send(pid, {:report, self()})
    receive(do: ({:observer_report, ^pid, r} -> r))
  end

  defp flush_ticks do
    receive do
      {:tick, _} -> flush_ticks()
    after
      0 -> :ok
    end
  end

  defp collect_ticks do
    receive do
      {:tick, d} -> [d | collect_ticks()]
    after
      0 -> []
    end
  end

  defp round1(nil), do: nil
  defp round1(v), do: Float.round(v / 1, 1)

  defp print(r) do
    info("""

    encoding (zone ticked by hand, #{r.entities} goblins)
      keyframe bytes per entity        #{r.keyframe_bytes_per_entity}  (target <= 11)
      delta bytes per changed entity   #{r.delta_bytes_per_changed_entity}  (target <= 4; #{r.changed_entities_per_tick} changed entities and #{r.delta_bytes_per_tick} bytes per tick)
    live (#{r.seconds} s at 30 Hz, #{r.observers} observers, radius #{r.radius_m} m, budget #{r.budget_bytes_per_second} B/s)
      visible goblins per observer     #{r.visible_entities}  (mean over the decoding observers' frames)
      observer bytes per second        mean #{r.observer_bytes_per_second}, p99 #{r.observer_bytes_per_second_p99}, max #{r.observer_bytes_per_second_max}  (#{r.observers} observers; target <= 65536)
      full-world observer bytes/s      #{r.full_world_bytes_per_second}  (target <= 1200000)
      zone tick (simulation + encoding) avg #{r.zone_tick_avg_us} µs, p99 #{r.zone_tick_p99_us} µs  (#{Stats.confidence(99, r.zone_ticks)})
      tick start to last frame          avg #{r.tick_avg_us} µs, p50 #{r.tick_p50_us} µs, p99 #{r.tick_p99_us} µs, max #{r.tick_max_us} µs  (#{Stats.confidence(99, r.tick_ticks)}; target p99 <= 8000)
      frame per observer               #{r.encode_us_per_observer} µs  (#{r.frames} frames, #{r.fast_frames} on the fast path; target <= 50)
      coalesced frames                 #{r.coalesced_frames}, items deferred by the budget #{r.deferred_items}, decode errors #{r.decode_errors}, overruns #{r.overruns}
      scheduler utilization            #{pct(r.scheduler_utilization)} (OS CPU #{pct(r.os_cpu)})
    """)
  end

  defp pct(nil), do: "n/a"
  defp pct(f), do: "#{Float.round(f * 100, 1)}%"

  defp info(msg), do: Mix.shell().info(msg)
end

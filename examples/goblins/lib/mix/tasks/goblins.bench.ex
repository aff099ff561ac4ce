defmodule Mix.Tasks.Goblins.Bench do
  @shortdoc "Benchmarks the goblin world at its real tick rate"
  @moduledoc """
  Runs the goblin world (`docs/goblins-scenario.md`) at its real tick rate and measures every
  tick.

      mix goblins.bench --entities N --seconds S [--tick-rate 30] [--workers W]
                                  [--warmup 3] [--json PATH] [--reference]

  Prints the entity count, the ticks measured, tick avg/p50/p99/p99.9/max in microseconds
  (exact nearest-rank percentiles over every measured tick, with how many samples each rests
  on), overruns, the average of each tick phase, and scheduler utilization beside OS CPU.
  `--json PATH` writes the same as one flat JSON object with the keys `entities, tick_rate,
  workers, ticks, avg_us, p50_us, p99_us, p999_us, max_us, overruns, scheduler_utilization`
  (and a few more).

  `--reference` also runs the native reference (`reference/`, plain Rust, built with
  cargo on first use) on the same scenario, single-threaded and with W threads, as fast as it
  can, and prints the BEAM/native ratio of the mean tick time.
  """
  use Mix.Task
  alias Overworld.Bench.Stats

  @switches [
    entities: :integer,
    seconds: :integer,
    tick_rate: :integer,
    workers: :integer,
    warmup: :integer,
    json: :string,
    reference: :boolean
  ]

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "goblins.bench")

    n = Keyword.get(opts, :entities, 10_000)
    seconds = Keyword.get(opts, :seconds, 30)
    rate = Keyword.get(opts, :tick_rate, 30)
    warmup = Keyword.get(opts, :warmup, 3)
    workers = Keyword.get(opts, :workers, System.schedulers_online())

    Overworld.Bench.Args.at_least!(
      [entities: n, seconds: seconds, tick_rate: rate, workers: workers],
      [:entities, :seconds, :tick_rate, :workers]
    )

    Overworld.Bench.Stats.start_node()

    machine = Stats.machine()

    info(
      "Goblin benchmark: #{n} goblins, #{rate} Hz, #{workers} bucket workers, #{warmup} s warm-up + #{seconds} s measured"
    )

    info(Stats.machine_line(machine))

    result = measure(n, seconds, rate, warmup, workers)
    print(result)

    result =
      if opts[:reference] do
        ref = Goblins.Bench.Reference.run(n, rate, workers, max(result.ticks, 1_000))
        print_reference(result, ref)
        ratio = if ref.reference_avg_us, do: Float.round(result.avg_us / ref.reference_avg_us, 2)
        result |> Map.merge(ref) |> Map.put(:beam_native_ratio, ratio)
      else
        result
      end

    Stats.write_result(opts[:json], result, machine)

    result
  end

  defp measure(n, seconds, rate, warmup, workers) do
    id = {:bench_goblins, make_ref()}
    me = self()
    handler = {__MODULE__, id}

    :ok =
      Overworld.Telemetry.attach(handler, [:overworld, :zone, :tick, :stop], fn _, m, meta, _ ->
        if meta.zone == id, do: send(me, {:tick, m})
      end)

    {:ok, _} =
      Overworld.start_zone(
        Goblins,
        Goblins.zone_options(n, id: id, tick_rate: rate, workers: workers)
      )

    Process.sleep(warmup * 1000)
    flush()
    m0 = Overworld.Zone.metrics(id)
    cpu0 = Overworld.Metrics.CPU.sample()
    Process.sleep(seconds * 1000)
    cpu1 = Overworld.Metrics.CPU.sample()
    m1 = Overworld.Zone.metrics(id)
    Overworld.Telemetry.detach(handler)
    samples = collect()
    Overworld.stop_zone(id)

    us = fn native -> System.convert_time_unit(native, :native, :nanosecond) / 1000 end
    ticks = Stats.summary(Enum.map(samples, &us.(&1.duration)))

    phase = fn key ->
      if samples == [],
        do: nil,
        else:
          Float.round(Enum.sum(Enum.map(samples, &us.(Map.fetch!(&1, key)))) / length(samples), 1)
    end

    cpu = Overworld.Metrics.CPU.compare(cpu0, cpu1)

    %{
      entities: m1.entities,
      tick_rate: rate,
      workers: workers,
      ticks: ticks.count,
      seconds: seconds,
      avg_us: round1(ticks.avg),
      p50_us: round1(ticks.p50),
      p90_us: round1(ticks.p90),
      p99_us: round1(ticks.p99),
      p999_us: round1(ticks.p999),
      max_us: round1(ticks.max),
      overruns: m1.overruns - m0.overruns,
      skipped_deadlines: m1.skipped_deadlines - m0.skipped_deadlines,
      input_avg_us: phase.(:input),
      systems_avg_us: phase.(:systems),
      grid_avg_us: phase.(:grid),
      other_avg_us: phase.(:other),
      scheduler_utilization: Float.round(cpu.scheduler, 4),
      os_cpu: cpu.os_cpu && Float.round(cpu.os_cpu, 4)
    }
  end

  defp round1(nil), do: nil
  defp round1(v), do: Float.round(v / 1, 1)

  defp flush do
    receive do
      {:tick, _} -> flush()
    after
      0 -> :ok
    end
  end

  defp collect do
    receive do
      {:tick, m} -> [m | collect()]
    after
      0 -> []
    end
  end

  defp print(r) do
    info("""

    entities               #{r.entities}
    ticks measured         #{r.ticks} (#{r.seconds} s at #{r.tick_rate} Hz)
    tick avg               #{r.avg_us} µs
    tick p50               #{r.p50_us} µs
    tick p99               #{r.p99_us} µs  (#{Stats.confidence(99, r.ticks)})
    tick p99.9             #{r.p999_us} µs  (#{Stats.confidence(99.9, r.ticks)})
    tick max               #{r.max_us} µs
    overruns               #{r.overruns} (deadlines skipped: #{r.skipped_deadlines})
    phases avg             input #{r.input_avg_us} µs, systems #{r.systems_avg_us} µs, grid #{r.grid_avg_us} µs, other #{r.other_avg_us} µs
    scheduler utilization  #{pct(r.scheduler_utilization)} (OS CPU #{pct(r.os_cpu)}; the BEAM busy-waits, so OS CPU over-states work)
    """)
  end

  defp print_reference(r, ref) do
    info("""
    native reference (Rust, #{ref.reference_ticks} ticks as fast as possible, same rules)
      1 thread             avg #{ref.reference_single_avg_us} µs, p99 #{ref.reference_single_p99_us} µs
      #{ref.reference_threads} threads            avg #{ref.reference_avg_us} µs, p99 #{ref.reference_p99_us} µs
    BEAM/native ratio      #{ratio(r.avg_us, ref.reference_avg_us)}x on the mean (#{r.workers} workers vs #{ref.reference_threads} threads), #{ratio(r.p99_us, ref.reference_p99_us)}x on p99
    """)
  end

  defp ratio(_a, b) when b in [nil, 0, 0.0], do: "n/a"
  defp ratio(a, b), do: Float.round(a / b, 1)

  defp pct(nil), do: "n/a"
  defp pct(f), do: "#{Float.round(f * 100, 1)}%"

  defp info(msg), do: Mix.shell().info(msg)
end

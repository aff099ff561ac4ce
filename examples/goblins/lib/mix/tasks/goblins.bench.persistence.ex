defmodule Mix.Tasks.Goblins.Bench.Persistence do
  @shortdoc "Benchmarks durability: snapshot writes, the journal's group commit, raw fsync"
  @moduledoc """
  Measures what durability costs (`Goblins.Bench.Persistence` describes each measurement).

      mix goblins.bench.persistence [--entities 10000] [--samples 20] [--seconds 3]
                                      [--appenders 64] [--zone-seconds 10] [--rounds 8]
                                      [--kills 200] [--json PATH]

  1. Snapshots of `--entities` goblins and of ten times as many: size in bytes, and the time
     of the encoding alone and of a whole `SnapshotFile.write/2` (p50/p99 over `--samples`
     writes each).
  2. The journal with group commit (2 ms): `--appenders` processes each append an event and
     wait for its fsync before the next, for `--seconds`: durable events per second, ack
     latency p50/p99, fsyncs and events per fsync.
  3. Raw fsync: `:file.datasync/1` after writing 4 KB, p50/p99 over 200 samples.
  4. The zone (`Goblins.Bench.Persistence.zone_figures/1`), a goblin world of `--entities`
     goblins at 30 Hz with 50 players walking: the tick duration with persistence off and on
     (`--rounds` alternating runs of `--zone-seconds` each), recovery from memory (the zone
     server killed `--kills` times), after a worker is killed, and from disk, and the memory
     the history of 300 ticks takes.

  Each figure is printed with what it was measured on and how many samples its percentiles
  rest on. `--json PATH` writes every figure as one flat JSON object (times in ms, keys such
  as `snapshot_small_write_p99_ms`, `journal_events_per_second`, `fsync_p99_ms`). The files
  go to a temporary directory under the system's, removed afterwards. A default run takes
  about five minutes.
  """
  use Mix.Task
  alias Overworld.Bench.Stats

  @switches [
    entities: :integer,
    samples: :integer,
    seconds: :integer,
    appenders: :integer,
    zone_seconds: :integer,
    rounds: :integer,
    kills: :integer,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "goblins.bench.persistence")

    o =
      Overworld.Bench.Args.positive!(opts,
        entities: 10_000,
        samples: 20,
        seconds: 3,
        appenders: 64,
        zone_seconds: 10,
        rounds: 8,
        kills: 200
      )

    Stats.start_node()
    machine = Stats.machine()

    info(
      "Persistence benchmark: snapshots of #{o.entities} and #{10 * o.entities} goblins (#{o.samples} writes each), " <>
        "journal with #{o.appenders} appenders for #{o.seconds} s"
    )

    info(Stats.machine_line(machine))

    result = Goblins.Bench.Persistence.run(o, &info/1)
    print(result)

    Stats.write_result(opts[:json], result, machine)

    result
  end

  defp print(r) do
    info("""

    files in #{r.dir} (#{r.filesystem}), removed afterwards
    #{snapshot(r, :small)}
    #{snapshot(r, :large)}
    journal (group commit #{r.journal_commit_ms} ms, #{r.journal_appenders} appenders in a closed loop, #{r.journal_seconds} s, #{r.journal_event_bytes}-byte records)
      durable events/s            #{r.journal_events_per_second}  (#{r.journal_events} events)
      fsyncs                      #{r.journal_fsyncs}, #{r.journal_events_per_fsync} events per fsync
      ack latency                 p50 #{r.journal_ack_p50_ms} ms, p99 #{r.journal_ack_p99_ms} ms, max #{r.journal_ack_max_ms} ms  (#{r.journal_ack_samples} acks; p99 #{Stats.confidence(99, r.journal_ack_samples)})
    raw fsync (datasync after writing 4 KB)
      latency                     p50 #{r.fsync_p50_ms} ms, p99 #{r.fsync_p99_ms} ms, max #{r.fsync_max_ms} ms  (#{r.fsync_samples} samples; p99 #{Stats.confidence(99, r.fsync_samples)})
    zone
    #{zone(r)}
    """)
  end

  defp snapshot(r, size) do
    f = fn key -> Map.fetch!(r, :"snapshot_#{size}_#{key}") end
    n = f.(:samples)

    """
    snapshot of #{f.(:entities)} goblins (SnapshotFile.write: encode, write, fsync, read back and verify, rename)
      size                        #{f.(:bytes)} bytes (#{f.(:bytes_per_entity)} per entity)
      encode                      p50 #{f.(:encode_p50_ms)} ms, p99 #{f.(:encode_p99_ms)} ms  (#{n} samples; p99 #{Stats.confidence(99, n)})
      write                       p50 #{f.(:write_p50_ms)} ms, p99 #{f.(:write_p99_ms)} ms, max #{f.(:write_max_ms)} ms  (#{n} samples)\
    """
  end

  defp zone(%{zone_tick_on_p99_ms: _} = r) do
    n = r.zone_tick_samples
    m = r.zone_recovery_memory_samples

    """
      tick, persistence off       p50 #{r.zone_tick_off_p50_ms} ms, p99 #{r.zone_tick_off_p99_ms} ms
      tick, persistence on        p50 #{r.zone_tick_on_p50_ms} ms, p99 #{r.zone_tick_on_p99_ms} ms  (#{n} ticks each over #{r.zone_tick_rounds} alternating rounds; p99 #{Stats.confidence(99, n)})
      on versus off               p50 #{signed(r.zone_tick_p50_on_vs_off_percent)} %, p99 #{signed(r.zone_tick_p99_on_vs_off_percent)} % (target: p99 at most 5 % worse)
      p99 on versus off by round  median #{signed(r.zone_tick_p99_on_vs_off_round_median_percent)} % of #{r.zone_tick_rounds} rounds (each round's own p99 ratio: #{r.zone_tick_p99_on_vs_off_per_round} %)
      durable events journaled    #{r.zone_durable_events} (loot picked up by the 50 players in the runs with persistence)
      recovery from memory        p50 #{r.zone_recovery_memory_p50_ms} ms, p99 #{r.zone_recovery_memory_p99_ms} ms, max #{r.zone_recovery_memory_max_ms} ms  (zone server killed #{m} times; p99 #{Stats.confidence(99, m)}; target p99 <= 5 ms)
        killed between ticks      p50 #{r.zone_recovery_memory_between_ticks_p50_ms} ms, p99 #{r.zone_recovery_memory_between_ticks_p99_ms} ms  (#{r.zone_recovery_memory_between_ticks_samples} samples)
        killed during a tick      p50 #{r.zone_recovery_memory_during_tick_p50_ms} ms, p99 #{r.zone_recovery_memory_during_tick_p99_ms} ms  (#{r.zone_recovery_memory_during_tick_samples} samples: the tick in flight finishes first)
      recovery, worker killed     p50 #{r.zone_recovery_worker_p50_ms} ms, max #{r.zone_recovery_worker_max_ms} ms  (#{r.zone_recovery_worker_samples} samples: newest snapshot in memory + journal from disk)
      recovery from disk          p50 #{r.zone_recovery_disk_p50_ms} ms, max #{r.zone_recovery_disk_max_ms} ms  (#{r.zone_recovery_disk_samples} samples: zone stopped and started on its files)
      history memory              #{r.zone_memory_table_history_300_bytes} bytes with 300 ticks (keyframes every 30), #{r.zone_memory_table_history_0_bytes} without\
    """
  end

  defp zone(_r), do: "  (not measured)"

  defp signed(x) when x >= 0, do: "+#{x}"
  defp signed(x), do: "#{x}"

  defp info(msg), do: Mix.shell().info(msg)
end

defmodule Mix.Tasks.Overworld.Bench.Persistence do
  @shortdoc "Benchmarks durability: snapshot writes, the journal's group commit, raw fsync"
  @moduledoc """
  Measures what durability costs (`Overworld.Bench.Persistence` describes each measurement).

      mix overworld.bench.persistence [--entities 10000] [--samples 20] [--seconds 3]
                                      [--appenders 64] [--json PATH]

  1. Snapshots of `--entities` goblins and of ten times as many: size in bytes, and the time
     of the encoding alone and of a whole `SnapshotFile.write/2` (p50/p99 over `--samples`
     writes each).
  2. The journal with group commit (2 ms): `--appenders` processes each append an event and
     wait for its fsync before the next, for `--seconds`: durable events per second, ack
     latency p50/p99, fsyncs and events per fsync.
  3. Raw fsync: `:file.datasync/1` after writing 4 KB, p50/p99 over 200 samples.
  4. The zone's figures (`Overworld.Bench.Persistence.zone_figures/1`).

  Each figure is printed with what it was measured on and how many samples its percentiles
  rest on. `--json PATH` writes every figure as one flat JSON object (times in ms, keys such
  as `snapshot_small_write_p99_ms`, `journal_events_per_second`, `fsync_p99_ms`). The files
  go to a temporary directory under the system's, removed afterwards. A default run takes
  well under a minute.
  """
  use Mix.Task
  alias Overworld.Bench.Stats

  @switches [
    entities: :integer,
    samples: :integer,
    seconds: :integer,
    appenders: :integer,
    zone_seconds: :integer,
    kills: :integer,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "overworld.bench.persistence")

    o = %{
      entities: Keyword.get(opts, :entities, 10_000),
      samples: Keyword.get(opts, :samples, 20),
      seconds: Keyword.get(opts, :seconds, 3),
      appenders: Keyword.get(opts, :appenders, 64),
      zone_seconds: Keyword.get(opts, :zone_seconds, 20),
      kills: Keyword.get(opts, :kills, 200)
    }

    Overworld.Bench.Args.at_least!(o, Map.keys(o))
    Stats.start_node()
    machine = Stats.machine()

    info(
      "Persistence benchmark: snapshots of #{o.entities} and #{10 * o.entities} goblins (#{o.samples} writes each), " <>
        "journal with #{o.appenders} appenders for #{o.seconds} s"
    )

    info(Stats.machine_line(machine))

    result = Overworld.Bench.Persistence.run(o, &info/1)
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

  # Whatever `zone_figures/1` answered: every key not printed above.
  defp zone(r) do
    printed = ~w(snapshot_ journal_ fsync_ dir filesystem)

    case r |> Map.keys() |> Enum.reject(&String.starts_with?(to_string(&1), printed)) do
      [] ->
        "  (no zone figures yet)"

      keys ->
        keys
        |> Enum.sort()
        |> Enum.map_join("\n", &"  #{String.pad_trailing(to_string(&1), 28)}#{r[&1]}")
    end
  end

  defp info(msg), do: Mix.shell().info(msg)
end

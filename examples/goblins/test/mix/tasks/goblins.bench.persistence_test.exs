defmodule Mix.Tasks.Goblins.Bench.PersistenceTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @tag timeout: 120_000
  test "measures snapshots, the journal and fsync on a tiny run and writes the JSON" do
    path =
      Path.join(System.tmp_dir!(), "overworld-persist-#{System.unique_integer([:positive])}.json")

    on_exit(fn -> File.rm(path) end)

    out =
      capture_io(fn ->
        Mix.Tasks.Goblins.Bench.Persistence.run(
          ~w(--entities 200 --samples 3 --seconds 1 --appenders 4 --zone-seconds 1 --rounds 2 --kills 3
             --json #{path})
        )
      end)

    assert out =~ "snapshot of 200 goblins"
    assert out =~ "snapshot of 2000 goblins"
    assert out =~ "durable events/s"
    assert out =~ "raw fsync"
    json = path |> File.read!() |> :jiffy.decode([:return_maps])

    positive =
      for size <- ~w(small large),
          key <- ~w(bytes encode_p50_ms encode_p99_ms write_p50_ms write_p99_ms),
          do: "snapshot_#{size}_#{key}"

    positive =
      positive ++
        ~w(journal_events_per_second journal_ack_p50_ms journal_ack_p99_ms journal_fsyncs
           journal_events_per_fsync fsync_p50_ms fsync_p99_ms)

    for key <- positive,
        do: assert(is_number(json[key]) and json[key] > 0, "#{key}: #{inspect(json[key])}")

    assert json["snapshot_small_entities"] == 200
    assert json["snapshot_large_entities"] == 2000
    assert json["snapshot_large_bytes"] > 5 * json["snapshot_small_bytes"]
    assert json["snapshot_small_samples"] == 3
    assert json["snapshot_small_write_p50_ms"] <= json["snapshot_small_write_p99_ms"]
    assert json["journal_ack_p50_ms"] <= json["journal_ack_p99_ms"]
    # Every acknowledged event was written, and group commit shares fsyncs among appenders.
    assert json["journal_events"] >= json["journal_ack_samples"]
    assert json["journal_events_per_fsync"] >= 1
    assert json["fsync_samples"] == 200
    # The zone: ticks measured with persistence on and off, recoveries timed.
    for key <- ~w(zone_tick_off_p99_ms zone_tick_on_p99_ms zone_recovery_memory_p50_ms
                  zone_recovery_worker_p50_ms zone_recovery_disk_p50_ms
                  zone_memory_table_history_300_bytes),
        do: assert(is_number(json[key]) and json[key] > 0, "#{key}: #{inspect(json[key])}")

    assert json["zone_recovery_memory_samples"] == 3
    assert json["zone_tick_samples"] > 20
    # Each round's p99 ratio, and their median: of two rounds, their mean.
    rounds =
      json["zone_tick_p99_on_vs_off_per_round"] |> String.split() |> Enum.map(&String.to_float/1)

    assert [a, b] = rounds
    assert_in_delta json["zone_tick_p99_on_vs_off_round_median_percent"], (a + b) / 2, 0.0006
    assert out =~ "p99 on versus off by round  median"
    # The temporary files are gone.
    refute File.exists?(json["dir"])
  end

  test "bad arguments are refused with a message" do
    assert_raise Mix.Error, ~r/positive integer/, fn ->
      Mix.Tasks.Goblins.Bench.Persistence.run(~w(--appenders 0))
    end

    assert_raise Mix.Error, ~r/invalid arguments/, fn ->
      Mix.Tasks.Goblins.Bench.Persistence.run(~w(--sample 3))
    end
  end
end

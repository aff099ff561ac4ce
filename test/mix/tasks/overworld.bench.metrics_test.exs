defmodule Mix.Tasks.Overworld.Bench.MetricsTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  import Overworld.Test.TaskCase

  @moduletag timeout: 60_000

  test "times scrapes of a few zones, prints and writes the figures" do
    path = Path.join(System.tmp_dir!(), "metrics-#{System.unique_integer([:positive])}.json")

    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Bench.Metrics.run(
          ~w(--zones 2 --entities 50 --samples 50 --interval 1 --warmup 1 --baseline 1 --http 5) ++
            ["--json", path, "--data-dir", Overworld.Test.DataDir.path()]
        )
      end)

    assert out =~ "scrape (server side, wall time): median"
    assert out =~ "scrape over HTTP (client side): median"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    File.rm(path)
    assert {r["zones"], r["entities_per_zone"]} == {2, 50}
    assert r["scrape_us"]["count"] == 50
    assert r["http_scrape_us"]["count"] == 5
    assert r["scrape_us"]["p50"] > 0
    # On a CPU: within the scrape's wall time, and not nothing.
    assert r["scrape_cpu_us"]["count"] == 50
    assert r["scrape_cpu_us"]["p50"] > 0 and r["scrape_cpu_us"]["max"] <= r["scrape_us"]["max"]
    assert r["body_bytes"] > 0 and r["series"] > 0
    # The zones ticked in both windows.
    for w <- ["zones_without_scrapes", "zones_during_scrapes"] do
      assert r[w]["tick_us"]["count"] > 0 and r[w]["seconds"] > 0 and is_integer(r[w]["overruns"])
    end

    assert is_binary(r["machine_cpu"])
    # Its zones are gone.
    refute Enum.any?(Overworld.Names.zones(), &match?({:metrics_bench, _}, &1))
  end

  test "invalid arguments end with one line" do
    assert_one_line_errors(&Mix.Tasks.Overworld.Bench.Metrics.run/1, [
      {~w(--zones 0), "--zones must be a positive integer"},
      {~w(--samples x), "invalid arguments"},
      {~w(--http -1), "--http must be a non-negative integer"},
      {~w(--nope), "invalid arguments"}
    ])
  end
end

defmodule Mix.Tasks.Goblins.BenchTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @tag timeout: 120_000
  test "measures a small goblin world at its tick rate and writes the JSON, with the native reference" do
    path =
      Path.join(System.tmp_dir!(), "overworld-bench-#{System.unique_integer([:positive])}.json")

    on_exit(fn -> File.rm(path) end)

    out =
      capture_io(fn ->
        Mix.Tasks.Goblins.Bench.run(
          ~w(--entities 400 --seconds 2 --warmup 0 --tick-rate 20 --workers 2 --reference --json #{path})
        )
      end)

    assert out =~ "ticks measured"
    assert out =~ "BEAM/native ratio"
    json = path |> File.read!() |> :jiffy.decode([:return_maps])

    for key <-
          ~w(entities tick_rate workers ticks avg_us p50_us p99_us p999_us max_us overruns scheduler_utilization),
        do: assert(Map.has_key?(json, key), "missing #{key}")

    assert json["entities"] == 400
    assert json["tick_rate"] == 20
    assert json["workers"] == 2
    # Two seconds at 20 Hz.
    assert json["ticks"] in 36..41
    assert json["p50_us"] <= json["p99_us"] and json["p99_us"] <= json["max_us"]
    assert json["scheduler_utilization"] > 0 and json["scheduler_utilization"] < 1
    assert json["reference_avg_us"] > 0
    assert json["beam_native_ratio"] > 0
  end

  test "bad arguments are refused with a message" do
    assert_raise Mix.Error, ~r/positive integer/, fn ->
      Mix.Tasks.Goblins.Bench.run(~w(--entities 0))
    end

    assert_raise Mix.Error, ~r/invalid arguments/, fn ->
      Mix.Tasks.Goblins.Bench.run(~w(--entitys 10))
    end
  end
end

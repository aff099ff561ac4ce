defmodule Mix.Tasks.Goblins.Bench.VisualizerTest do
  # The observers' mode of the visualizer bench (its frames-per-second mode drives Chromium:
  # `make bench` runs it; the page itself is tested in clients/console/test/browser.test.ts).
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @tag timeout: 120_000
  test "observers' cost: ticks measured with 0 and 2 observers, their bytes counted, JSON written" do
    path =
      Path.join(System.tmp_dir!(), "overworld-vis-#{System.unique_integer([:positive])}.json")

    on_exit(fn -> File.rm(path) end)

    out =
      capture_io(fn ->
        Mix.Tasks.Goblins.Bench.Visualizer.run(
          ~w(--observers 0,2 --entities 500 --rounds 1 --seconds 2 --json #{path})
        )
      end)

    assert out =~ "2 observer(s): tick p50"
    json = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert json["entities"] == 500
    assert [%{"observers" => 0} = none, %{"observers" => 2} = two] = json["rounds"]

    # About 60 ticks in 2 s at 30 Hz, measured in each round.
    for run <- [none, two], do: assert(run["tick"]["ticks"] >= 40)
    assert none["mib_per_second_each"] == :null
    # Each observer was sent the whole zone's frames: some KB a second at least.
    assert two["mib_per_second_each"] > 0.001
    assert two["frames_out"] >= 2 * 40
    assert two["closed_slow"] == 0

    # The server and the zone went: the task runs again in this node.
    assert Process.whereis(Overworld.Server) == nil
    assert Overworld.Zone.whereis(:goblins) == nil
  end

  test "bad arguments are refused with a message" do
    assert_raise Mix.Error, ~r/counts such as 0,1,3/, fn ->
      Mix.Tasks.Goblins.Bench.Visualizer.run(~w(--observers one))
    end

    assert_raise Mix.Error, ~r/at most 16/, fn ->
      Mix.Tasks.Goblins.Bench.Visualizer.run(~w(--observers 0,40))
    end

    assert_raise Mix.Error, ~r/positive integer/, fn ->
      Mix.Tasks.Goblins.Bench.Visualizer.run(~w(--entities 0))
    end
  end
end

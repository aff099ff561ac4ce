defmodule Mix.Tasks.Overworld.Bench.WorldTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @moduletag timeout: 120_000

  test "a world against a lone zone, with shadows every 3 ticks: ticks, crossings, shadows, nothing lost" do
    path = Path.join(System.tmp_dir!(), "world-#{System.unique_integer([:positive])}.json")

    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Bench.World.run(
          ~w(--zone Overworld.Test.Game --zones 2x1 --entities-per-zone 300 --seconds 2) ++
            ~w(--warmup 1 --rounds 1 --shadow-every 3 --max-speed 5 --json) ++ [path]
        )
      end)

    assert out =~ "shadows every 3 ticks"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert {r["shadow_every"], r["max_speed"]} == {3, 5.0}
    assert {r["lost"], r["duplicated"]} == {0, 0}
    [round] = r["rounds"]
    assert map_size(round["world"]["zones"]) == 2
    # A message to the neighbour every tick; shadow entities on one tick in three.
    assert round["world"]["shadow_messages_per_tick"] >= 0.9
    File.rm(path)
  end

  test "a lower shadow rate needs the fastest speed" do
    assert_raise Mix.Error, ~r/--shadow-every above 1 needs --max-speed/, fn ->
      Mix.Tasks.Overworld.Bench.World.run(~w(--zone Overworld.Test.Game --shadow-every 3))
    end
  end
end

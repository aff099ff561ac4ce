defmodule Mix.Tasks.Overworld.BotsTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  alias Overworld.Test.Game

  setup do
    zone = {__MODULE__, make_ref()}

    {:ok, _} = Overworld.start_zone(Game, Game.zone_options(500, id: zone, wire: Game.Wire))

    start_supervised!(
      {Overworld.Server,
       name: :bots_test_server,
       port: 0,
       data_dir: Overworld.Test.DataDir.path(),
       zones: %{"critters" => zone},
       default_zone: "critters"}
    )

    on_exit(fn -> Overworld.stop_zone(zone) end)
    %{port: Overworld.Server.port(:bots_test_server), zone: zone}
  end

  test "bots connect over real sockets, walk, and report what they measured",
       %{port: port} = ctx do
    path = Path.join(System.tmp_dir!(), "bots-#{System.unique_integer([:positive])}.json")

    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Bots.run(
          ~w(--url ws://127.0.0.1:#{port}/ws --count 6 --seconds 2 --warmup 1 --input-hz 10 --json) ++
            [path]
        )
      end)

    assert out =~ "Bots: 6 connected, 0 failed of 6"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert r["connected"] == 6 and r["failed"] == 0
    # 30 Hz for 2 s: each bot gets most of the 60 snapshots.
    assert r["snapshots_per_second_per_bot"] > 20
    assert r["bytes_per_bot_per_second"] > 1_000
    # ~10 inputs per second per bot, acknowledged within a few ticks.
    assert r["ack_samples"] > 60
    assert r["ack_p50_ms"] > 0 and r["ack_p50_ms"] < 200
    assert r["zone"] == "critters" and r["zone_ticks"] >= 50
    # Every bot is a player of the zone while it plays; they leave with the grace period.
    assert map_size(Overworld.Zone.info(ctx.zone).players) <= 6
    File.rm(path)
  end

  test "decoding bots walking across the borders of a 2x2 world: every snapshot decodes, nothing vanishes, no reconnect" do
    name = {__MODULE__, make_ref()}
    opts = Game.zone_options(200, name: name, zones: {2, 2}, wire: Game.Wire, coins: false)
    start_supervised!(Overworld.World.child_spec({Game, opts}), id: :bots_world)

    start_supervised!(
      {Overworld.Server,
       name: :bots_world_server,
       port: 0,
       data_dir: Overworld.Test.DataDir.path(),
       zones: %{"world" => {:world, name}},
       default_zone: "world"},
      id: :bots_world_server
    )

    port = Overworld.Server.port(:bots_world_server)
    path = Path.join(System.tmp_dir!(), "bots-#{System.unique_integer([:positive])}.json")

    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Bots.run(
          ~w(--url ws://127.0.0.1:#{port}/ws?zone=world --count 8 --seconds 8 --warmup 5) ++
            ~w(--decode --input Overworld.Bots.BorderWalk --json #{path})
        )
      end)

    assert out =~ "Bots: 8 connected, 0 failed of 8"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert r["decoded"] > 8 * 8 * 20
    assert r["decode_errors"] == 0 and r["self_missing"] == 0
    assert r["vanished"] == 0 and r["vanished_held_back"] == 0
    assert r["closed_total"] == 0
    # They walked across the borders, and their avatars were handed between the zones.
    assert r["crossings"] >= 4

    handed =
      for z <- Overworld.World.zones(name), do: Overworld.Zone.metrics(z).world.crossings_in

    assert Enum.sum(handed) >= 4
    assert r["ack_p50_ms"] > 0 and r["ack_p99_ms"] < 200
    File.rm(path)
  end

  test "bad options are refused" do
    assert_raise Mix.Error, ~r/--url must look like/, fn ->
      Mix.Tasks.Overworld.Bots.run(~w(--url http://x))
    end

    assert_raise Mix.Error, ~r/--count must be a positive integer/, fn ->
      Mix.Tasks.Overworld.Bots.run(~w(--count 0))
    end

    assert_raise Mix.Error, ~r/--input Nope.Input: no such module/, fn ->
      Mix.Tasks.Overworld.Bots.run(~w(--input Nope.Input))
    end
  end
end

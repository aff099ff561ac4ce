defmodule Mix.Tasks.Overworld.ServerTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  alias Mix.Tasks.Overworld.Server, as: Task
  alias Overworld.Test.DataDir

  @zone ~w(--zone Overworld.Test.Walkers --wire Overworld.Template.Test.Wire --size 200,200)

  test "runs a zone of the project named by its module and prints tick statistics" do
    out =
      capture_io(fn ->
        Task.run(
          @zone ++
            ~w(--name walkers --seconds 3 --interval 1 --port 0 --data-dir #{DataDir.path()})
        )
      end)

    assert out =~ ~s|zone "walkers" (Overworld.Test.Walkers) in 200.0 m x 200.0 m, 30 Hz|
    assert [_, port] = Regex.run(~r/listening on http:\/\/127.0.0.1:(\d+)/, out)
    assert String.to_integer(port) > 0

    # 300 walkers and 20 rocks; a line a second for 3 s (the last may race the stop: two at
    # least).
    assert [_, _ | _] =
             Regex.scan(
               ~r/tick \d+ \| 320 entities \| (\d+) ticks in .* tick µs p50 \d+, max \d+ \(\1 ticks; a p99 needs 10000\)/,
               out
             )

    assert out =~ "schedulers"
    assert Overworld.Zone.config("walkers").wire == Overworld.Template.Test.Wire
    # The zone persists under the data directory, named by its name.
    assert File.dir?(Path.join([DataDir.path(), "zones", "walkers"]))
    Overworld.stop_zone("walkers")
    Supervisor.stop(Overworld.Server)
  end

  test "--zones CxR --entities-per-zone N: a world of zones, a line per zone and one for the world" do
    out =
      capture_io(fn ->
        Task.run(
          ~w(--zone Overworld.Test.Game --wire Overworld.Test.Game.Wire --zones 2x1) ++
            ~w(--entities-per-zone 300 --name duo --seconds 2 --interval 1 --port 0 --no-persist) ++
            ~w(--data-dir #{DataDir.path()})
        )
      end)

    assert out =~ ~s|world "duo" of 2 zones (Overworld.Test.Game)|
    assert out =~ ~r/zone 0,0 \| tick \d+ \| \d+ entities/
    assert out =~ ~r/zone 1,0 \| tick \d+ \| \d+ entities/
    assert out =~ ~r/world \| 2 zones \| 600 entities \| [\d.]+ crossings\/s/
    # The status page's API lists the world's zones one by one.
    [_, port] = Regex.run(~r/listening on http:\/\/127.0.0.1:(\d+)/, out)

    {:ok, 200, _, body} =
      Overworld.Client.request("127.0.0.1", String.to_integer(port), "GET", "/api/v1/status")

    zones = :jiffy.decode(body, [:return_maps])["zones"]
    assert Enum.map(zones, & &1["name"]) == ["duo/0,0", "duo/1,0"]
    assert Enum.all?(zones, &(&1["world"] == "duo" and is_integer(&1["crossings_in"])))
    assert Enum.sum(Enum.map(zones, & &1["entities"])) == 600
    Overworld.stop_world("duo")
    Supervisor.stop(Overworld.Server)
  end

  test "--no-pace and --max-players reach the server" do
    capture_io(fn ->
      Task.run(
        @zone ++
          ~w(--name paced --seconds 1 --interval 1 --port 0 --no-persist --no-pace --max-players 3 --data-dir #{DataDir.path()})
      )
    end)

    cfg = Overworld.Server.config()
    assert cfg.max_players == 3
    # No controller: the interval stays 1 whatever the load.
    refute Enum.any?(Supervisor.which_children(Overworld.Server), fn {id, _, _, _} ->
             id == Overworld.Server.Pace
           end)

    assert Overworld.Server.Pace.interval(cfg) == 1
    Overworld.stop_zone("paced")
    Supervisor.stop(Overworld.Server)
  end

  test "init/1's args from --arg, typed" do
    assert Task.parse_args(~w(goblins=10 speed=1.5 debug=true name=ann)) ==
             [goblins: 10, speed: 1.5, debug: true, name: "ann"]

    assert_raise Mix.Error, "--arg must be KEY=VALUE, got: \"goblins\"", fn ->
      Task.parse_args(["goblins"])
    end
  end

  test "every invalid option ends the task with one line that says what to do" do
    Overworld.Test.TaskCase.assert_one_line_errors(&Task.run/1, [
      {[], "--zone is required: the zone module of your game"},
      {~w(--zone Nope.Zone), "--zone Nope.Zone: no such module in this project"},
      {@zone ++ ~w(--port -1), "--port must be a port number in 0..65535"},
      {@zone ++ ~w(--interval 0), "--interval must be a positive integer"},
      {@zone ++ ~w(--max-players 0), "--max-players must be a positive integer"},
      {~w(--zone Overworld.Test.Walkers --size 10), "--size must be W,H in metres"},
      {@zone ++ ~w(--tick-rate 5000), "expected :tick_rate to be an integer in 1..1000"},
      {@zone ++ ~w(--zone-typo x), "invalid arguments"},
      {@zone ++ ~w(--zones 2 --entities-per-zone 10), "--zones must be CxR"},
      {@zone ++ ~w(--zones 2x2), "--zones goes with --entities-per-zone N"},
      {@zone ++ ~w(--entities-per-zone 10), "--entities-per-zone goes with --zones CxR"},
      {@zone ++ ~w(--zones 2x2 --entities-per-zone 10),
       "--zones needs Overworld.Test.Walkers.zone_options(entities, extra)"}
    ])
  end

  test "a cluster in the environment: joined before the zones start; a bad setting is one line" do
    # (This test node runs distributed: it joins a cluster of itself and a peer.)
    [{_, peer}] = Overworld.Test.Cluster.start_peers(1)
    # (It leaves that cluster afterwards: the peer stops, and a node of a two-node cluster
    # that sees only itself has no majority.)
    on_exit(&Overworld.Cluster.leave/0)

    with_env(%{"OVERWORLD_NODES" => "#{node()},#{peer}"}, fn ->
      out =
        capture_io(fn ->
          Task.run(
            @zone ++
              ~w(--name clustered --seconds 1 --port 0 --no-persist --data-dir #{DataDir.path()})
          )
        end)

      assert out =~ "cluster: #{node()} joined; connected to 1 of the configured nodes (#{peer})"
      assert out =~ "listening on http://127.0.0.1:"
    end)

    with_env(%{"OVERWORLD_NODES" => "#{node()},nohost"}, fn ->
      Overworld.Test.TaskCase.assert_one_line_errors(&Task.run/1, [
        {@zone ++ ~w(--port 0 --seconds 1),
         "OVERWORLD_NODES: expected node names name@host separated by commas, got: \"nohost\""}
      ])
    end)
  end

  defp with_env(env, fun) do
    for {k, v} <- env, do: System.put_env(k, v)

    try do
      fun.()
    after
      for {k, _} <- env, do: System.delete_env(k)
    end
  end

  test "a port in use is said so, with what to do" do
    {:ok, lsock} = :gen_tcp.listen(0, [])
    {:ok, port} = :inet.port(lsock)

    error =
      assert_raise Mix.Error, fn ->
        capture_io(fn ->
          Task.run(
            @zone ++ ~w(--name busy --no-persist --port #{port} --data-dir #{DataDir.path()})
          )
        end)
      end

    assert error.message == "port #{port} is in use: pick another with --port"
    :gen_tcp.close(lsock)
    Overworld.stop_zone("busy")
  end
end

defmodule Overworld.Session.GatewayLossTest do
  # A gateway node killed (kill -9 of its OS process) while its players' zone runs on another
  # node: the zone keeps those players for its `rejoin_ms`; a client that reconnects through
  # another node's gateway within it resumes its avatar; one that does not come back leaves.
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  @moduletag :tmp_dir
  @moduletag timeout: 120_000

  alias Overworld.{Accounts, Cluster, Zone}
  alias Overworld.Bench.OsServer
  alias Overworld.Cluster.{Config, Placement}
  alias Overworld.Test.{Game, ServerCase}

  test "players of a killed gateway node resume their avatars through another node within rejoin_ms; the others leave",
       %{tmp_dir: tmp} do
    [{pa, a}, {_, b}, {_, c}] = Overworld.Test.Cluster.start_peers(3)
    config = %Config{nodes: [a, b, c]}
    for n <- [a, b, c], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    # (This node is a member too, running no world: the zone's home below is one of the peers.)
    eventually(fn -> Enum.all?([a, b, c], &(&1 in :erpc.call(c, Cluster, :nodes, []))) end)
    all = :erpc.call(c, Cluster, :nodes, [])
    dir = fn n -> Path.join(tmp, "#{n}") end
    for n <- [a, b, c], do: :ok = :erpc.call(n, Accounts, :start, [dir.(n)])

    # A one-zone world homed on c (its replica on b): the gateway a runs none of it.
    name =
      Stream.repeatedly(fn -> {__MODULE__, make_ref()} end)
      |> Enum.find(&match?([^c, ^b | _], Placement.order({&1, {0, 0}}, all)))

    zone = {name, {0, 0}}

    opts =
      Game.zone_options(100, name: name, zones: {1, 1}, wire: Game.Wire, coins: false) ++
        [cluster: true, rejoin_ms: 3_000]

    for n <- [a, b, c] do
      world = opts ++ [data_dir: Path.join(dir.(n), "world")]
      {:ok, _} = :erpc.call(n, Overworld, :start_world, [Game, world])
    end

    eventually(fn -> (z = :erpc.call(c, Zone, :whereis, [zone])) != nil and node(z) == c end)

    ports =
      for n <- [a, b], into: %{} do
        server = [
          name: :gateway_loss,
          port: 0,
          acceptors: 1,
          data_dir: dir.(n),
          zones: %{"world" => {:world, name}},
          default_zone: "world"
        ]

        {n, :erpc.call(n, Overworld.Test.Cluster, :start_server, [server])}
      end

    avatar = fn user -> :erpc.call(c, Zone, :player_entity, [zone, user]) end

    # Two players through a's gateway.
    stays = ServerCase.join(%{port: ports[a]})
    goes = ServerCase.join(%{port: ports[a]})
    assert avatar.(stays.user) == stays.entity
    assert avatar.(goes.user) == goes.entity

    os_pid = :erpc.call(a, :os, :getpid, [])
    Process.unlink(pa)
    :ok = OsServer.signal(os_pid, "KILL")
    eventually(fn -> a not in :erpc.call(c, Node, :list, []) end)
    killed_at = System.monotonic_time(:millisecond)

    # Their avatars wait for them.
    assert avatar.(stays.user) == stays.entity
    assert avatar.(goes.user) == goes.entity

    # One comes back through b's gateway (the same token: accepted by every node), to its
    # avatar; its frames come.
    again = ServerCase.join(%{port: ports[b]}, auth: stays.auth)
    assert again.entity == stays.entity
    again = ServerCase.snapshots(again, 3)
    assert again.view.tick > 0

    # The other leaves once rejoin_ms has passed since the kill, not before.
    eventually(fn -> avatar.(goes.user) == nil end)
    assert System.monotonic_time(:millisecond) - killed_at >= 2_500
    assert avatar.(stays.user) == stays.entity
    Process.sleep(500)
    assert avatar.(stays.user) == stays.entity
  end
end

defmodule Overworld.Session.GatewayLossTest do
  # A node killed (kill -9 of its OS process) in a cluster of three peers with accounts, a
  # one-zone world (homed on c, its replica on b) and gateways (servers) on a and b:
  #
  #   * the gateway a, while its players' zone runs on c: the zone keeps those players for its
  #     `rejoin_ms`; a client that reconnects through b within it resumes its avatar; one that
  #     does not come back leaves;
  #   * the zone's node c: the zone starts again on b from the replicated copy, and a player
  #     connected through a stays connected, re-attaches, and its frames and acknowledgements
  #     go on (its client restarts from a keyframe).
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  @moduletag :tmp_dir
  @moduletag timeout: 120_000

  alias Overworld.{Accounts, Cluster, Zone}
  alias Overworld.Bench.OsServer
  alias Overworld.Cluster.{Config, Placement}
  alias Overworld.Test.{Game, ServerCase}

  defp cluster(tmp) do
    [{pa, a}, {_, b}, {pc, c}] = Overworld.Test.Cluster.start_peers(3)
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

        {n, :erpc.call(n, Overworld.Bench.Peer, :serve, [server])}
      end

    %{a: a, peer_a: pa, b: b, c: c, peer_c: pc, zone: zone, ports: ports}
  end

  test "players of a killed gateway node resume their avatars through another node within rejoin_ms; the others leave",
       %{tmp_dir: tmp} do
    %{a: a, peer_a: pa, b: b, c: c, zone: zone, ports: ports} = cluster(tmp)
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

  test "a player of a surviving gateway whose zone's node is killed stays connected: its frames and acknowledgements go on",
       %{tmp_dir: tmp} do
    %{a: a, b: b, c: c, peer_c: pc, zone: zone, ports: ports} = cluster(tmp)
    player = ServerCase.join(%{port: ports[a]}) |> ServerCase.snapshots(5)

    os_pid = :erpc.call(c, :os, :getpid, [])
    Process.unlink(pc)
    :ok = OsServer.signal(os_pid, "KILL")
    eventually(fn -> (z = :erpc.call(a, Zone, :whereis, [zone])) != nil and node(z) == b end)

    # Frames on the same connection: each decodes (the client starts over from a keyframe
    # when its session re-attached); inputs sent after the zone is back are acknowledged.
    st = resume(player, %{frames: 0, seq: 0, first_seq: nil})
    assert st.frames >= 60
    assert st.acked >= st.first_seq, "no input sent after the restart was acknowledged"
    assert :erpc.call(b, Zone, :player_entity, [zone, player.user]) == player.entity
  end

  # Frames until 60 have come after the restart, an input with each (at most 20 s).
  defp resume(player, st, until \\ System.monotonic_time(:millisecond) + 20_000) do
    if System.monotonic_time(:millisecond) > until, do: flunk("#{st.frames} frames in 20 s")

    case ServerCase.recv(player.conn) do
      {{:snapshot, snap}, conn} ->
        # (A keyframe after the re-attach applies to an empty view.)
        view =
          case Overworld.Protocol.Snapshot.apply(player.view, snap, player.templates) do
            {:ok, view} ->
              view

            {:error, _} ->
              {:ok, view} =
                Overworld.Protocol.Snapshot.apply(
                  Overworld.Protocol.Snapshot.View.new(
                    player.handshake.cols,
                    player.handshake.rows
                  ),
                  snap,
                  player.templates
                )

              view
          end

        seq = st.seq + 1
        msg = %{type: :input, seq: seq, ack: view.tick, payload: <<0, 0>>}
        :ok = Overworld.Client.send_msg(conn, msg)
        st = %{st | frames: st.frames + 1, seq: seq, first_seq: st.first_seq || seq}
        player = %{player | conn: conn, view: view}

        if st.frames >= 60,
          do: Map.put(st, :acked, view.input_ack),
          else: resume(player, st, until)

      {{:close, code, reason}, _} ->
        flunk("closed: #{code} #{reason}")

      {{:error, reason}, _} ->
        flunk("the connection ended: #{inspect(reason)}")

      {_other, conn} ->
        resume(%{player | conn: conn}, st, until)
    end
  end
end

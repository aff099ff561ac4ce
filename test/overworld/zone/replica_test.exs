defmodule Overworld.Zone.ReplicaTest do
  # Replicated durability (zone option `durability: :replicated`, the default of a world over
  # a cluster of more than one configured node): a durable event is acknowledged once fsynced
  # on the zone's node and on its replica node; a zone whose node is killed (kill -9 of its
  # OS process) starts again on its replica's node from the copy, with every acknowledged
  # event.
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  @moduletag :tmp_dir

  alias Overworld.{Cluster, Zone}
  alias Overworld.Bench.OsServer
  alias Overworld.Cluster.{Config, Members, Placement}
  alias Overworld.World.Copies
  alias Overworld.Test.Counter
  alias Overworld.Zone.Replica

  @opts [
    cluster: true,
    clock: :manual,
    size: {64, 64},
    cell_size: 16,
    workers: 1,
    snapshot_ticks: 20,
    replica_timeout: 1_500
  ]

  # Three nodes (this one and two peers), and a one-zone world whose zone is homed on the
  # first peer with its replica here.
  setup %{tmp_dir: tmp} do
    [{pa, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
    config = %Config{nodes: [node(), a, b]}
    for n <- [node(), a, b], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    on_exit(&Cluster.leave/0)
    all = Enum.sort([node(), a, b])
    eventually(fn -> Enum.all?([node(), a, b], &(:erpc.call(&1, Cluster, :nodes, []) == all)) end)

    name =
      Stream.repeatedly(fn -> {__MODULE__, make_ref()} end)
      |> Enum.find(&(Placement.order({&1, {0, 0}}, all) == [a, node(), b]))

    id = {name, {0, 0}}

    opts = @opts ++ [name: name, args: [to: self()]]

    for n <- [node(), a, b] do
      dir = Path.join(tmp, "#{n}")
      {:ok, _} = :erpc.call(n, Overworld, :start_world, [Counter, opts ++ [data_dir: dir]])
    end

    on_exit(fn -> Overworld.stop_world(name) end)
    eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == a end)
    # The zone's writer has seeded its replica here.
    eventually(fn -> Replica.whereis(id) != nil end)
    %{a: a, peer_a: pa, b: b, id: id, name: name, tmp_dir: tmp}
  end

  defp tick(id, count) do
    {:ok, _} = Zone.tick_now(Zone.whereis(id), count)
  end

  # The acknowledgements received so far (in the order they came).
  defp acks(id, acc \\ []) do
    receive do
      {:acked, ^id, n, _node} -> acks(id, [n | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  defp await_ack(id, n) do
    assert_receive {:acked, ^id, ^n, _}, 5_000
  end

  test "an event is acknowledged only once the replica has it; without a replica within the timeout, never",
       %{id: id} do
    tick(id, 5)
    await_ack(id, 5)
    assert acks(id) == [1, 2, 3, 4]

    # The replica stops answering (its process suspended): the event is fsynced on the
    # zone's node, but not acknowledged.
    rep = Replica.whereis(id)
    :ok = :sys.suspend(rep)
    tick(id, 1)
    refute_receive {:acked, ^id, 6, _}, 800

    # Back within the timeout: acknowledged.
    :ok = :sys.resume(rep)
    await_ack(id, 6)

    # Away for longer than the timeout (1.5 s): never acknowledged, even once it is back.
    :ok = :sys.suspend(rep)
    tick(id, 1)
    refute_receive {:acked, ^id, 7, _}, 2_500
    :ok = :sys.resume(rep)
    refute_receive {:acked, ^id, 7, _}, 500

    # Later events are acknowledged again.
    tick(id, 1)
    await_ack(id, 8)
  end

  test "a node killed (kill -9): its zone ticks again on its replica's node within 5 s, with every acknowledged event",
       %{a: a, peer_a: pa, b: b, id: id} do
    # 50 ticks, each a durable event, all acknowledged (snapshots every 20 ticks on the way,
    # so the replica holds snapshots and journal segments).
    tick(id, 50)
    await_ack(id, 50)
    acked = Enum.max([50 | acks(id)])

    os_pid = :erpc.call(a, :os, :getpid, [])
    Process.unlink(pa)
    killed_at = System.monotonic_time(:millisecond)
    :ok = OsServer.signal(os_pid, "KILL")

    eventually(fn ->
      z = Zone.whereis(id)
      z != nil and node(z) == node()
    end)

    {:ok, _} = Zone.tick_now(Zone.whereis(id))
    ticking_after = System.monotonic_time(:millisecond) - killed_at
    assert ticking_after < 5_000, "the zone ticked again #{ticking_after} ms after the kill"

    # Every acknowledged event is in the recovered state (the counter counted on from it,
    # by the one tick above), and there is one counter.
    entities = Zone.entities(id)
    assert length(entities) == 1
    assert Counter.count(entities) == acked + 1

    # The zone now replicates to the last node: its events are acknowledged again.
    tick(id, 5)
    await_ack(id, acked + 6)
    assert :erpc.call(b, Replica, :whereis, [id]) != nil
  end

  test "a hung node (SIGSTOP): its zone restarts on its replica's node within the heartbeat bound; resumed, it acknowledges nothing",
       %{a: a, id: id} do
    tick(id, 30)
    await_ack(id, 30)
    acked = Enum.max([30 | acks(id)])
    stale = Zone.whereis(id)
    os_pid = to_string(:erpc.call(a, :os, :getpid, []))

    stopped_at = System.monotonic_time(:millisecond)
    :ok = OsServer.signal(os_pid, "STOP")

    try do
      # Seen as lost once it missed its heartbeats (4 s), then its zone starts here.
      eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == node() end)
      after_ms = System.monotonic_time(:millisecond) - stopped_at
      assert after_ms < 6_000, "the zone restarted #{after_ms} ms after the node hung"
      assert Counter.count(Zone.entities(id)) == acked
    after
      :ok = OsServer.signal(os_pid, "CONT")
    end

    # Resumed, the stale zone (if it still runs) computes nothing: its node's lease lapsed
    # during the pause, so it is fenced (and its placer stops it). Nor does it acknowledge
    # anything: its replica is gone and no node gives it another.
    answer =
      try do
        Zone.tick_now(stale, 3)
      catch
        :exit, _ -> :stopped
      end

    # (Gone already, stopped by its placer: `:not_found`.)
    assert answer in [{:error, :fenced}, {:error, :not_found}, :stopped]
    refute_receive {:acked, ^id, _, _}, 2_000

    # One zone afterwards (back on its home node or still here), which goes on from every
    # acknowledged event.
    eventually(fn -> length(:pg.get_members(Cluster.scope(), {:zone, id})) == 1 end)
    z = Cluster.zone(id)
    assert z != stale
    {:ok, _} = Zone.tick_now(z, 2)
    await_ack(id, acked + 2)
    assert Counter.count(Zone.entities(id)) == acked + 2
  end

  test "a node that stops hearing from the others fences its zone before any other may start it",
       %{a: a, peer_a: pa, id: id} do
    tick(id, 5)
    await_ack(id, 5)
    zone = Zone.whereis(id)
    assert node(zone) == a

    # The member process of the zone's node stops (its heartbeats and echoes with it): that
    # node's lease runs out at most 3.5 s after its last echo, the others drop it after 4 s
    # of silence. Ticks are asked of its zone meanwhile through the peer's control
    # connection (standard I/O), which outlives the distribution's.
    :ok = :peer.call(pa, :sys, :suspend, [Members])
    suspended = System.monotonic_time(:millisecond)

    {answer, fenced_after} = tick_until_refused(pa, zone, suspended)

    try do
      assert answer == {:error, :fenced}

      assert fenced_after >= 2_900 and fenced_after < 3_800,
             "fenced #{fenced_after} ms after its node stopped hearing from the others"

      # The zone starts on its replica's node once the others drop its node, from every
      # acknowledged event, and the fenced one did not tick past them.
      eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == node() end)
      acked = Enum.max([5 | acks(id)])
      assert Counter.count(Zone.entities(id)) == acked
    after
      :ok = :peer.call(pa, :sys, :resume, [Members])
    end

    # Its node back, the zone goes home with its newer epoch; one zone runs.
    eventually(fn -> (z = Cluster.zone(id)) != nil and node(z) == a end)
    eventually(fn -> length(:pg.get_members(Cluster.scope(), {:zone, id})) == 1 end)
  end

  # Asks zone `zone` (through the peer `peer`) for a tick every 50 ms until it refuses one:
  # that answer and the ms since `since`.
  defp tick_until_refused(peer, zone, since) do
    answer =
      try do
        :peer.call(peer, Zone, :tick_now, [zone, 1], 5_000)
      catch
        :exit, reason -> {:exit, reason}
      end

    elapsed = System.monotonic_time(:millisecond) - since

    case answer do
      {:ok, _} when elapsed < 10_000 ->
        Process.sleep(50)
        tick_until_refused(peer, zone, since)

      other ->
        {other, elapsed}
    end
  end

  test "a zone starts from the newest copy in the cluster, not from its home node's older one",
       %{a: a, b: b, id: id, name: name, tmp_dir: tmp} do
    dir_a = :erpc.call(a, :persistent_term, :get, [{Overworld.World.Placer, name}])[id]
    stale = dir_a <> ".stale"
    tick(id, 10)
    await_ack(id, 10)
    assert :erpc.call(a, Copies, :epoch, [dir_a]) == 1

    # The world stops everywhere; the home node's copy of now (epoch 1, count 10) is kept.
    stop_everywhere(name, [a, node(), b])
    {:ok, _} = :erpc.call(a, File, :cp_r, [dir_a, stale])

    # It starts again (epoch 2) and counts to 20, replicated here.
    start_everywhere(name, tmp, [node(), b, a])
    eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == a end)
    eventually(fn -> Replica.whereis(id) != nil end)
    tick(id, 10)
    await_ack(id, 20)
    assert :erpc.call(a, Copies, :epoch, [dir_a]) == 2
    stop_everywhere(name, [a, node(), b])

    # The home node comes back with its old copy: it finds the newer one here and starts
    # from it (epoch 3), with every acknowledged event.
    {:ok, _} = :erpc.call(a, File, :rm_rf, [dir_a])
    :ok = :erpc.call(a, File, :rename, [stale, dir_a])
    assert :erpc.call(a, Copies, :epoch, [dir_a]) == 1
    start_everywhere(name, tmp, [node(), b, a])
    eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == a end)
    assert Counter.count(Zone.entities(id)) == 20
    assert :erpc.call(a, Copies, :epoch, [dir_a]) == 3
  end

  defp stop_everywhere(name, nodes) do
    for n <- nodes, do: :ok = :erpc.call(n, Overworld, :stop_world, [name])
  end

  # (In this order: the home node last, once the others can say what copy they hold.)
  defp start_everywhere(name, tmp, nodes) do
    for n <- nodes do
      opts = @opts ++ [name: name, args: [to: self()], data_dir: Path.join(tmp, "#{n}")]
      {:ok, _} = :erpc.call(n, Overworld, :start_world, [Counter, opts])
    end
  end

  test "a partition: the majority's side runs the zone, the minority's is fenced; healed, one zone with every acknowledged event",
       %{a: a, peer_a: pa, b: b, id: id} do
    tick(id, 10)
    await_ack(id, 10)
    stale = Zone.whereis(id)
    assert node(stale) == a

    # The zone's node is cut off from the two others: its cookie changes (no connection in
    # either direction is accepted) and its connections close.
    cookie = Node.get_cookie()
    true = :peer.call(pa, :erlang, :set_cookie, [:partitioned])
    for n <- [node(), b], do: true = :peer.call(pa, :erlang, :disconnect_node, [n])

    try do
      # The majority (this node and b) runs the zone here, from every acknowledged event.
      eventually(fn -> (z = Zone.whereis(id)) != nil and node(z) == node() end)
      assert Counter.count(Zone.entities(id)) == Enum.max([10 | acks(id)])
      tick(id, 5)
      await_ack(id, 15)

      # The minority's zone is fenced (its lease lapsed with the majority's echoes): it
      # ticks no more, and is stopped.
      answer =
        try do
          :peer.call(pa, Zone, :tick_now, [stale, 1], 5_000)
        catch
          :exit, _ -> :stopped
        end

      assert answer in [{:error, :fenced}, {:error, :not_found}, :stopped]

      eventually(fn ->
        :peer.call(pa, Zone, :whereis, [id]) == nil and
          :peer.call(pa, :pg, :get_members, [Cluster.scope(), {:zone, id}]) == []
      end)
    after
      true = :peer.call(pa, :erlang, :set_cookie, [cookie])
    end

    # Healed: the zone goes back to its home node with its newer epoch, once, and goes on
    # from every acknowledged event.
    eventually(fn -> (z = Cluster.zone(id)) != nil and node(z) == a end)

    eventually(fn ->
      Enum.all?([node(), a, b], fn n ->
        length(:erpc.call(n, :pg, :get_members, [Cluster.scope(), {:zone, id}])) == 1
      end)
    end)

    {:ok, _} = Zone.tick_now(Cluster.zone(id), 2)
    await_ack(id, 17)
    assert Counter.count(Zone.entities(id)) == 17
  end
end

defmodule Overworld.ClusterTest do
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  doctest Overworld.Cluster

  alias Overworld.Cluster
  alias Overworld.Cluster.Config

  test "nodes that join from their configuration see the same members and the same homes, and one that stops leaves" do
    # (No transitive connections: the peers know each other only once they join.)
    [{_, a}, {p, b}] = Overworld.Test.Cluster.start_peers(2, [~c"-connect_all", ~c"false"])
    refute b in :erpc.call(a, Node, :list, [])
    assert :erpc.call(a, Cluster, :nodes, []) == Enum.sort([node(), a])

    config = %Config{nodes: [node(), a, b]}
    assert {:ok, connected} = :erpc.call(a, Cluster, :join, [config])
    assert Enum.sort(connected) == Enum.sort([node(), b])
    assert b in :erpc.call(a, Node, :list, [])
    for n <- [b, node()], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    on_exit(&Cluster.leave/0)

    all = Enum.sort([node(), a, b])
    eventually(fn -> Enum.all?([node(), a, b], &(:erpc.call(&1, Cluster, :nodes, []) == all)) end)

    zones = for c <- 0..3, r <- 0..3, do: {"world", {c, r}}
    homes = for z <- zones, do: Cluster.home(z)
    assert :erpc.call(a, Enum, :map, [zones, &Cluster.home/1]) == homes
    assert :erpc.call(b, Enum, :map, [zones, &Cluster.home/1]) == homes

    :ok = :peer.stop(p)
    two = Enum.sort([node(), a])
    eventually(fn -> Cluster.nodes() == two and :erpc.call(a, Cluster, :nodes, []) == two end)
  end

  test "a configured node that starts later is connected within the retry period" do
    no_transitive = [~c"-connect_all", ~c"false"]
    [{_, a}] = Overworld.Test.Cluster.start_peers(1, no_transitive)
    late = :"late#{System.unique_integer([:positive])}"
    late_node = :"#{late}@127.0.0.1"
    config = %Config{nodes: [a, late_node]}
    assert {:ok, []} = :erpc.call(a, Cluster, :join, [config, [retry: 100]])

    {_, ^late_node} = Overworld.Test.Cluster.start_peer(late, no_transitive)
    eventually(fn -> late_node in :erpc.call(a, Cluster, :nodes, []) end)
    assert late_node in :erpc.call(a, Node, :list, [])

    # Leaving: the configured nodes are forgotten, a node of its own is quorate.
    assert :erpc.call(a, Cluster, :configured, []) == [a, late_node]
    assert :ok = :erpc.call(a, Cluster, :leave, [])
    assert :erpc.call(a, Cluster, :configured, []) == nil
    assert :erpc.call(a, Cluster, :quorate?, [[a]]) == true

    assert_raise ArgumentError, ~r/expected :retry to be a positive integer/, fn ->
      Cluster.join(config, retry: 0)
    end

    assert_raise ArgumentError, ~r/expected :heartbeat to be an integer of at least 1000/, fn ->
      Cluster.join(config, heartbeat: 10)
    end
  end

  test "a zone running on one node is found from every other, and not once it stopped" do
    [{_, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
    id = {__MODULE__, :remote_zone}
    opts = Overworld.Test.Game.zone_options(50, id: id, clock: :manual)
    {:ok, _} = :erpc.call(a, Overworld, :start_zone, [Overworld.Test.Game, opts])
    pid = :erpc.call(a, Overworld.Zone, :whereis, [id])
    assert node(pid) == a
    eventually(fn -> Cluster.zone(id) == pid and :erpc.call(b, Cluster, :zone, [id]) == pid end)
    # What a node finds is the zone itself: it answers from there.
    assert {:ok, 1} = Overworld.Zone.tick_now(pid)

    :ok = :erpc.call(a, Overworld, :stop_zone, [id])
    eventually(fn -> Cluster.zone(id) == nil and :erpc.call(b, Cluster, :zone, [id]) == nil end)
  end

  test "a node that is not alive cannot join" do
    # A peer without distribution (driven over its standard input and output).
    {:ok, peer, :nonode@nohost} =
      :peer.start_link(%{
        connection: :standard_io,
        args: Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
      })

    {:ok, _} = :peer.call(peer, Application, :ensure_all_started, [:overworld])
    assert :peer.call(peer, Cluster, :join, [%Config{nodes: [node()]}]) == {:error, :not_alive}
    assert :peer.call(peer, Cluster, :nodes, []) == [:nonode@nohost]
    :peer.stop(peer)
  end
end

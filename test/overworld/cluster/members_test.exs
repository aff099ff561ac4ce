defmodule Overworld.Cluster.MembersTest do
  # The lease and the ownership generation (`Overworld.Cluster.owner?/1`): a node of its own
  # holds its lease for ever; a node of a cluster holds it only while a majority of the
  # configured nodes echoes its heartbeats; a generation ends when the lease lapses.
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  doctest Overworld.Cluster.Members

  alias Overworld.Cluster
  alias Overworld.Cluster.{Config, Members}

  test "a node of its own owns what it started, whatever the time" do
    gen = Cluster.generation()
    assert Cluster.leased?()
    assert Cluster.owner?(gen)
    refute Cluster.owner?(gen - 1)
  end

  test "in a cluster the lease comes with a majority's echoes, lapses without them, and a lapse ends the generation" do
    [{_, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
    config = %Config{nodes: [node(), a, b]}
    before = Cluster.generation()
    for n <- [a, b], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    {:ok, _} = Cluster.join(config)
    on_exit(&Cluster.leave/0)

    # Joining starts a generation: what ran before is not owned under the cluster's rules.
    assert Cluster.generation() > before
    refute Cluster.owner?(before)
    eventually(fn -> Cluster.leased?() end)
    gen = Cluster.generation()
    assert Cluster.owner?(gen)

    # Both peers stop answering (their member processes suspended): the lease runs out
    # 3.5 s after the last echo at the latest (heartbeat 4 s - 500 ms), and the generation
    # moves on, so `gen` stays fenced even once the echoes come back.
    for n <- [a, b], do: :ok = :erpc.call(n, :sys, :suspend, [Members])
    suspended = System.monotonic_time(:millisecond)
    eventually(fn -> not Cluster.owner?(gen) end)
    lapsed_after = System.monotonic_time(:millisecond) - suspended
    assert lapsed_after >= 2_900 and lapsed_after <= 3_700, "lapsed #{lapsed_after} ms after"

    for n <- [a, b], do: :ok = :erpc.call(n, :sys, :resume, [Members])
    eventually(fn -> Cluster.leased?() end)
    assert Cluster.generation() > gen
    refute Cluster.owner?(gen)
    assert Cluster.owner?(Cluster.generation())
  end

  test "one peer of three away leaves the majority: the lease holds" do
    [{_, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
    config = %Config{nodes: [node(), a, b]}
    for n <- [a, b], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    {:ok, _} = Cluster.join(config)
    on_exit(&Cluster.leave/0)
    eventually(fn -> Cluster.leased?() end)
    gen = Cluster.generation()

    :ok = :erpc.call(a, :sys, :suspend, [Members])
    Process.sleep(5_000)
    assert Cluster.owner?(gen)
    :ok = :erpc.call(a, :sys, :resume, [Members])
  end
end

defmodule Mix.Tasks.Overworld.Bench.ClusterTest do
  # The options alone: a run starts server nodes and clients (`make bench` runs a short one).
  use ExUnit.Case, async: true

  alias Mix.Tasks.Overworld.Bench.Cluster

  test "kills need three nodes: a majority survives one" do
    assert_raise Mix.Error, ~r/--nodes must be at least 3 with kills/, fn ->
      Cluster.run(~w(--zone Overworld.Test.Game --nodes 2))
    end
  end

  test "one node (the reference for a cluster's players) needs no kills and no probe" do
    assert_raise Mix.Error, ~r/--probe-seconds needs --nodes 2 or more/, fn ->
      Cluster.run(~w(--zone Overworld.Test.Game --nodes 1 --kills 0))
    end
  end

  test "negative kills are refused" do
    assert_raise Mix.Error, ~r/--kills must be at least 0/, fn ->
      Cluster.run(~w(--zone Overworld.Test.Game --kills -1))
    end
  end
end

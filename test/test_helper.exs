# Multi-node tests (tagged :cluster) start peer nodes with :peer, which needs this node alive:
# epmd, then a name of its own for the whole run (fixed before any test starts Mnesia).
{_, 0} = System.cmd("epmd", ["-daemon"])
# (`global` leaves partitions to Overworld, as on every node of a cluster.)
:ok = Overworld.Cluster.prepare_distribution()

{:ok, _} =
  Node.start(:"overworld_test_#{System.unique_integer([:positive])}@127.0.0.1", :longnames)

ExUnit.start(capture_log: true)

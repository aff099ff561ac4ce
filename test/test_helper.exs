# Multi-node tests (tagged :cluster) start peer nodes with :peer, which needs this node alive:
# epmd, then a name of its own for the whole run (fixed before any test starts Mnesia).
{_, 0} = System.cmd("epmd", ["-daemon"])

{:ok, _} =
  Node.start(:"overworld_test_#{System.unique_integer([:positive])}@127.0.0.1", :longnames)

ExUnit.start(capture_log: true)

defmodule Mix.Tasks.Overworld.DrainTest do
  # `mix overworld.drain --node N`: the node's zones move to the other nodes, and the task
  # says when none runs there any more.
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  @moduletag :tmp_dir

  alias Mix.Tasks.Overworld.Drain, as: Task
  alias Overworld.{Cluster, World, Zone}
  alias Overworld.Cluster.{Config, Placement}

  test "the drained node's zones move to the others; it then runs none", %{tmp_dir: tmp} do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    config = %Config{nodes: [node(), a]}
    for n <- [node(), a], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config])
    on_exit(&Cluster.leave/0)
    two = Enum.sort([node(), a])
    eventually(fn -> Cluster.nodes() == two and :erpc.call(a, Cluster, :nodes, []) == two end)

    # A world with a zone on each node.
    name =
      Stream.repeatedly(fn -> {__MODULE__, make_ref()} end)
      |> Enum.find(fn name ->
        Enum.sort(for z <- [{0, 0}, {1, 0}], do: Placement.home({name, z}, two)) == two
      end)

    opts = [
      name: name,
      cluster: true,
      zones: {2, 1},
      clock: :manual,
      size: {240, 120},
      cell_size: 12,
      args: [n: 100, side: 120]
    ]

    for n <- [node(), a] do
      dir = Path.join(tmp, "#{n}")

      {:ok, _} =
        :erpc.call(n, Overworld, :start_world, [Overworld.Test.Crowd, opts ++ [data_dir: dir]])
    end

    on_exit(fn -> Overworld.stop_world(name) end)
    eventually(fn -> length(World.zones(name)) == 2 end)
    assert :erpc.call(a, Overworld.Names, :zones, []) != []

    out = capture_io(fn -> Task.run(["--node", to_string(a), "--wait", "20"]) end)
    assert out =~ "#{a} drains: no zone is placed on it any more"
    assert out =~ "#{a} drained: no zone runs there; it can be stopped"
    assert :erpc.call(a, Overworld.Names, :zones, []) == []
    assert Enum.all?(World.zones(name), &(node(Zone.whereis(&1)) == node()))
  end

  test "bad options and an unreachable node are one-line errors" do
    Overworld.Test.TaskCase.assert_one_line_errors(&Task.run/1, [
      {[], "--node is required"},
      {~w(--node nohost), "--node must be a node name NAME@HOST"},
      {~w(--node a@127.0.0.1 --wait 0), "--wait must be a positive integer"},
      {~w(--node nosuch@127.0.0.1), "nosuch@127.0.0.1 cannot be reached"}
    ])
  end
end

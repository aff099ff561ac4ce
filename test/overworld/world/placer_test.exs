defmodule Overworld.World.PlacerTest do
  # A world of zones spread over a cluster of :peer nodes (Overworld.World, cluster: true):
  # each zone on its home node, neighbours talking across nodes, zones moving with their state
  # when a node joins or drains.
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{Cluster, World, Zone}
  alias Overworld.Cluster.{Config, Placement}
  alias Overworld.Test.Crowd

  @crowd [clock: :manual, size: {240, 240}, cell_size: 12, args: [n: 600, side: 240]]

  @moduletag :tmp_dir

  defp state(entities),
    do: entities |> Enum.map(&entity(&1, data: elem(entity(&1, :data), 0))) |> Enum.sort()

  defp homes_kept?(zones) do
    Enum.all?(zones, fn z ->
      pid = Zone.whereis(z)
      pid != nil and node(pid) == Cluster.home(z)
    end)
  end

  test "a world over three nodes computes what one zone does; zones move with their state when a node joins and when it drains",
       %{tmp_dir: tmp} do
    late = :"late#{System.unique_integer([:positive])}"
    b = :"#{late}@127.0.0.1"
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    config = %Config{nodes: [node(), a, b]}
    for n <- [node(), a], do: {:ok, _} = :erpc.call(n, Cluster, :join, [config, [retry: 200]])
    on_exit(&Cluster.leave/0)

    one = {__MODULE__, :one}
    {:ok, _} = Overworld.start_zone(Crowd, [id: one, workers: 2] ++ @crowd)
    on_exit(fn -> Overworld.stop_zone(one) end)

    # A world whose zones go to both nodes, and some of them to the third when it comes (a
    # zone's home follows from its id and the nodes' names).
    zones = fn name -> for c <- 0..1, r <- 0..1, do: {name, {c, r}} end

    spread? = fn name, nodes ->
      MapSet.new(zones.(name), &Placement.home(&1, nodes)) == MapSet.new(nodes)
    end

    name =
      Stream.repeatedly(fn -> {__MODULE__, make_ref()} end)
      |> Enum.find(&(spread?.(&1, [node(), a]) and spread?.(&1, [node(), a, b])))

    opts = [name: name, zones: {2, 2}, workers: 1, cluster: true] ++ @crowd

    start = fn n ->
      {:ok, _} =
        :erpc.call(n, Overworld, :start_world, [Crowd, opts ++ [data_dir: Path.join(tmp, "#{n}")]])
    end

    start.(node())
    start.(a)
    on_exit(fn -> Overworld.stop_world(name) end)

    zones = zones.(name)
    eventually(fn -> length(World.zones(name)) == 4 and homes_kept?(zones) end)

    assert Enum.sort(Enum.uniq(for z <- zones, do: node(Zone.whereis(z)))) ==
             Enum.sort([node(), a])

    check = fn range ->
      for n <- range do
        {:ok, ^n} = Zone.tick_now(one)
        {:ok, ^n} = World.tick_now(name)
        assert state(World.entities(name)) == state(Zone.entities(one)), "tick #{n}"
      end
    end

    check.(1..60)

    # A third node joins: the zones whose home it is now move to it, with their state.
    {_, ^b} = Overworld.Test.Cluster.start_peer(late)
    {:ok, _} = :erpc.call(b, Cluster, :join, [config, [retry: 200]])
    start.(b)
    eventually(fn -> Cluster.nodes() == Enum.sort([node(), a, b]) and homes_kept?(zones) end)
    moved = for z <- zones, node(Zone.whereis(z)) == b, do: z

    assert moved != [],
           "no zone is homed on the new node (placement: #{inspect(Enum.map(zones, &Cluster.home/1))})"

    assert length(World.zones(name)) == 4
    check.(61..120)

    # It drains: its zones go back, with their state.
    :ok = :erpc.call(b, Cluster, :drain, [])
    eventually(fn -> Cluster.nodes() == Enum.sort([node(), a]) and homes_kept?(zones) end)
    assert Enum.all?(zones, &(node(Zone.whereis(&1)) != b))
    check.(121..180)
  end

  test "a zone's files come from one node at a time, and only from the process that announced them",
       %{tmp_dir: tmp} do
    name = {__MODULE__, make_ref()}
    opts = [name: name, zones: {1, 1}, workers: 1, cluster: true, data_dir: tmp] ++ @crowd
    {:ok, _} = Overworld.start_world(Crowd, opts)
    on_exit(fn -> Overworld.stop_world(name) end)
    [id] = [{name, {0, 0}}]
    eventually(fn -> Zone.whereis(id) != nil end)
    {:ok, _} = Zone.tick_now(id)
    placer = Overworld.Names.whereis(Overworld.Names.placer(name))

    # Two senders (processes of this node standing for other nodes' hand-overs), each with a
    # copy of the zone's files as they are now.
    dir = Map.fetch!(:persistent_term.get({Overworld.World.Placer, name}), id)
    {:ok, chunks} = Overworld.World.Handover.chunks(dir)
    assert chunks != []
    me = self()

    sender = fn ->
      spawn(fn ->
        Stream.repeatedly(fn ->
          receive do
            {:call, msg} -> send(me, {self(), GenServer.call(placer, msg)})
          end
        end)
        |> Stream.run()
      end)
    end

    call = fn pid, msg ->
      send(pid, {:call, msg})
      assert_receive {^pid, answer}, 5_000
      answer
    end

    first = sender.()
    second = sender.()
    assert call.(first, {:incoming, id, first, 5}) == :ok
    assert call.(second, {:incoming, id, second, 5}) == {:error, :incoming_already}
    assert call.(second, {:chunk, id, hd(chunks)}) == {:error, :unknown}
    assert call.(second, {:adopt, id, {:copy, node()}}) == {:error, :unknown}

    # The announced sender's files are taken, and the zone starts from them.
    for c <- chunks, do: assert(call.(first, {:chunk, id, c}) == :ok)
    assert call.(first, {:adopt, id, {:copy, node()}}) == :ok
    eventually(fn -> Zone.whereis(id) != nil end)
    # (A new epoch: one more than the files' own, 1.)
    assert Overworld.World.Copies.epoch(dir) == 2
    Enum.each([first, second], &Process.exit(&1, :kill))
  end
end

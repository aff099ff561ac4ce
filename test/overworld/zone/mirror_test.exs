defmodule Overworld.Zone.MirrorTest do
  # A zone on another node of the cluster, seen from this one through its mirror
  # (Overworld.Zone.Mirror): the same frames as on the zone's node, inputs and
  # acknowledgements through this node.
  use ExUnit.Case
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster

  alias Overworld.{Client, Cluster, Interest, Zone}
  alias Overworld.Test.{Game, ServerCase}
  alias Overworld.Zone.Wire

  test "an observer on another node gets the same frames, byte for byte, as one on the zone's node; a player's inputs and acknowledgements go through its gateway" do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    id = {__MODULE__, :zone}

    opts =
      Game.zone_options(300, id: id, clock: :manual, wire: Game.Wire, workers: 2, coins: false)

    {:ok, _} = :erpc.call(a, Overworld, :start_zone, [Game, opts])
    eventually(fn -> Cluster.zone(id) != nil end)

    view = [radius: 50, budget: 10_000_000]
    theirs = :erpc.call(a, Overworld.Test.Cluster, :observer, [id, view, self()])
    assert node(theirs) == a
    {:ok, obs} = Interest.new(id, view)
    assert is_pid(obs.mirror) and node(obs.mirror) == node()
    assert :ok = Zone.subscribe(id)

    side = Game.side(300)
    {:ok, avatar} = Zone.join(id, "remote player", %{session: self(), x: 20_000, y: div(side, 2)})
    {:ok, slot} = Zone.input_slot(id, "remote player")

    {_obs, acks, xs} =
      Enum.reduce(1..90, {obs, [], []}, fn n, {obs, acks, xs} ->
        # The player walks east (inputs 2..60, then none).
        if n in 2..60, do: Zone.put_input(slot, {127, 0}, n)
        {:ok, ^n} = Zone.tick_now(id)
        assert_receive {:overworld_tick, ^id, ^n, _}, 5_000

        # Both observers walk the same path across the world.
        pos = {rem(n * 3_000, side), div(side, 3)}
        {frame, _info, obs} = Interest.frame(obs, n, pos)
        send(theirs, {:frame, n, pos, self()})
        assert_receive {:frame, ^n, bytes}, 5_000
        assert IO.iodata_to_binary(frame) == bytes, "tick #{n}: the frames differ"

        ack = Wire.input_ack(obs.table, avatar)

        x =
          case Wire.position(obs.table, avatar),
            do:
              (
                nil -> nil
                {x, _, _} -> x
              )

        {obs, acks ++ [ack], xs ++ [x]}
      end)

    # Every input acknowledged, in order, each within two ticks (the mirror sends the inputs
    # written since a tick when that tick's blocks are in); the avatar walked east as told.
    assert acks == Enum.sort(acks)
    for n <- 4..60, do: assert(Enum.at(acks, n) >= n - 1, "tick #{n + 1}: #{inspect(acks)}")
    assert List.last(acks) == 60
    assert Enum.at(xs, 70) > Enum.at(xs, 5) + 8_000
  end

  test "a player connected to this node whose zone runs on another: HELLO, snapshots, inputs acknowledged, it walks" do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    id = {__MODULE__, :served}
    opts = Game.zone_options(300, id: id, wire: Game.Wire, workers: 2, coins: false)
    {:ok, _} = :erpc.call(a, Overworld, :start_zone, [Game, opts])
    eventually(fn -> Cluster.zone(id) != nil end)

    name = :"#{__MODULE__}.server"
    data = Overworld.Test.DataDir.path()
    {:ok, _} = Overworld.Auth.Token.load_or_create_secret(data)

    start_supervised!(
      {Overworld.Server,
       name: name,
       port: 0,
       acceptors: 2,
       data_dir: data,
       zones: %{"critters" => id},
       default_zone: "critters"}
    )

    w = %{name: name, port: Overworld.Server.port(name), zone: id}
    p = w |> ServerCase.join() |> ServerCase.snapshots(3)
    assert Zone.player_entity(id, p.user) == p.entity
    assert node(Zone.whereis(id)) == a
    x0 = my_x(p)
    assert x0 != nil

    p =
      Enum.reduce(1..15, p, fn seq, p ->
        :ok =
          Client.send_msg(p.conn, %{type: :input, seq: seq, ack: p.view.tick, payload: <<127, 0>>})

        ServerCase.snapshots(p, 1)
      end)

    p =
      Enum.reduce_while(1..30, p, fn _, p ->
        if p.view.input_ack >= 15, do: {:halt, p}, else: {:cont, ServerCase.snapshots(p, 1)}
      end)

    assert p.view.input_ack == 15
    assert my_x(p) > x0

    # Its connection lost, the session waits for a reconnect (the player stays) and takes no
    # more ticks: it left this node's mirror, which had its subscription.
    mirror = Zone.config(id).shared.mirror
    assert map_size(:sys.get_state(mirror).subscribers) == 1
    :ok = Client.close(p.conn)
    eventually(fn -> map_size(:sys.get_state(mirror).subscribers) == 0 end)
    assert Zone.player_entity(id, p.user) == p.entity
  end

  defp my_x(p) do
    case Overworld.Protocol.Snapshot.View.entities(p.view)[p.entity] do
      nil -> nil
      {_template, values} -> elem(values, 0)
    end
  end

  test "many sessions looking a remote zone up at once share one mirror (none fails)" do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    id = {__MODULE__, :many}
    opts = Game.zone_options(10, id: id, clock: :manual, wire: Game.Wire, coins: false)
    {:ok, _} = :erpc.call(a, Overworld, :start_zone, [Game, opts])
    eventually(fn -> Cluster.zone(id) != nil end)

    configs =
      1..50
      |> Enum.map(fn _ -> Task.async(fn -> Zone.config(id) end) end)
      |> Task.await_many(10_000)

    mirrors = Enum.uniq(for c <- configs, do: c && c.shared.mirror)
    assert [mirror] = mirrors
    assert is_pid(mirror) and node(mirror) == node()
  end
end

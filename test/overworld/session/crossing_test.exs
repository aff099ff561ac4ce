defmodule Overworld.Session.CrossingTest do
  # A player walking across the border of two zones of a world (Overworld.World) over a real
  # socket: its session follows its avatar into the other zone without a reconnect, its
  # inputs keep reaching the avatar, acknowledgements never go back, every frame decodes, its
  # reliable messages reach the zone that has the avatar in order, once.
  use ExUnit.Case, async: false
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{Client, World, Zone}
  alias Overworld.Protocol.Snapshot
  alias Overworld.Test.{DataDir, Game, ServerCase}

  @moduletag timeout: 120_000

  setup ctx do
    {name, peer} = if ctx[:cluster], do: cluster_name(), else: {{__MODULE__, make_ref()}, nil}
    clock = Map.get(ctx, :clock, :realtime)

    opts =
      Game.zone_options(400,
        name: name,
        zones: {2, 1},
        wire: Game.Wire,
        coins: false,
        clock: clock
      )

    if peer, do: spread(peer, name, opts), else: start_supervised!(World.child_spec({Game, opts}))

    {:ok, _} =
      :global.trans({ServerCase, :secret}, fn ->
        Overworld.Auth.Token.load_or_create_secret(DataDir.path())
      end)

    server = :"crossing_#{System.unique_integer([:positive])}"

    start_supervised!({
      Overworld.Server,
      # (The manual-clock tests send an input per tick, as fast as the world ticks: no input
      # or reliable message must be refused for the rate.)
      name: server,
      port: 0,
      acceptors: 2,
      input_rate: 10_000,
      data_dir: DataDir.path(),
      zones: %{"world" => {:world, name}},
      default_zone: "world"
    })

    %{world: name, server: %{port: Overworld.Server.port(server), name: server}, peer: peer}
  end

  for cluster <- [false, true] do
    @tag cluster: cluster
    test "a player crosses into the other zone on the same connection#{if cluster, do: ", the zones on two nodes"}",
         %{world: world} = ctx do
      {player, user, from} = join(ctx)
      assert Zone.info(from).players[user]
      # Walk toward the other zone (the border lies in the middle of the world).
      mx = if elem(from, 1) == {0, 0}, do: 127, else: -127

      result =
        walk(player, %{
          mx: mx,
          seq: 0,
          acks: [],
          frames: 0,
          crossed: nil,
          world: world,
          from: from,
          ticks: [],
          resets: 0,
          missing: []
        })

      assert result.crossed, "the avatar never crossed (#{result.frames} frames)"
      to = World.zone_for(world, user)
      assert to != from
      if ctx[:cluster], do: assert(node(Zone.whereis(from)) != node(Zone.whereis(to)))
      # The player is the other zone's now, once in the world; its entity kept its id.
      assert Zone.info(to).players[user] == player.entity
      refute Zone.info(from).players[user]
      ids = World.entities(world) |> Enum.map(&entity(&1, :id))
      assert Enum.count(ids, &(&1 == player.entity)) == 1
      # Acknowledgements only went up, and kept coming after the crossing.
      assert result.acks == Enum.sort(result.acks)
      {_frame, seq_at_crossing} = result.crossed
      assert Enum.max(result.acks) > seq_at_crossing
      # The client still sees itself, in the new zone's frames; it saw itself in every frame
      # since the third, across the crossing; the frames' ticks only went up, and none started
      # the view over (baseline 0) after the first.
      assert Map.has_key?(Snapshot.View.entities(result.view), player.entity)
      assert result.missing == []
      assert result.ticks == Enum.sort(Enum.uniq(result.ticks))
      assert result.resets == 1
      # Every reliable message reached the zone that had the avatar, in order, once.
      sent = for seq <- 1..result.seq, do: "e#{seq}"
      ServerCase.eventually(fn -> events(from, user) ++ events(to, user) == sent end)
    end
  end

  # (Manual clock: between two ticks of the world, an avatar handed away at the end of the
  # last one is in flight, adopted by the other zone at its next tick.)
  @tag clock: :manual
  test "a client reconnecting while its avatar crosses gets the same avatar in the new zone",
       %{world: world} = ctx do
    {player, user, from} = join(ctx)
    fly(player, world, from)
    assert World.zones(world) |> Enum.all?(&(Zone.player_entity(&1, user) == nil))

    # The client connects again (the same user): its session waits for the crossing to end.
    again = Task.async(fn -> ServerCase.join(ctx.server, auth: player.auth) end)
    Process.sleep(100)
    {:ok, _} = World.tick_now(world)
    second = Task.await(again)
    assert second.entity == player.entity
    to = World.zone_for(world, user)
    assert to != from
    assert Zone.player_entity(to, user) == player.entity
    {:ok, _} = World.tick_now(world, 3)
    owned = for e <- World.entities(world), entity(e, :owner) == user, do: entity(e, :id)
    assert owned == [player.entity]
  end

  # (Manual clock: the avatar in flight between two ticks, its client's reliable messages go
  # to the zone it left; then, told of the crossing, its session sends to the new zone.)
  @tag clock: :manual
  test "reliable messages sent while the avatar crosses reach the new zone, in order, once",
       %{world: world} = ctx do
    {player, user, from} = join(ctx)

    send_event = fn seq ->
      :ok = Client.send_msg(player.conn, %{type: :client_event, seq: seq, payload: "e#{seq}"})
    end

    # One before the walk: the old zone's.
    send_event.(1)
    ServerCase.eventually(fn -> events(from, user) == ["e1"] end)

    fly(player, world, from)
    [to] = World.zones(world) -- [from]

    # In flight: sent to the zone it left, which sends them on; the new zone keeps them.
    for seq <- 2..4, do: send_event.(seq)
    ServerCase.eventually(fn -> early(to, user) == 3 end)

    # The new zone adopts the avatar; the client goes on sending while its session follows.
    {:ok, _} = World.tick_now(world)
    for seq <- 5..9, do: send_event.(seq)
    {:ok, _} = World.tick_now(world, 2)
    expected = for seq <- 2..9, do: "e#{seq}"
    ServerCase.eventually(fn -> events(to, user) == expected end)
    assert events(from, user) == ["e1"]
    assert Zone.player_entity(to, user) == player.entity
  end

  # (Tagged :cluster) this node and a peer in a cluster, and a world name that puts one of its
  # two zones on each (a zone's home follows from its id).
  defp cluster_name do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    config = %Overworld.Cluster.Config{nodes: [node(), a]}
    for n <- [node(), a], do: {:ok, _} = :erpc.call(n, Overworld.Cluster, :join, [config])
    on_exit(&Overworld.Cluster.leave/0)
    two = Enum.sort([node(), a])
    Overworld.Test.Cluster.eventually(fn -> Overworld.Cluster.nodes() == two end)

    name =
      Stream.repeatedly(fn -> {__MODULE__, make_ref()} end)
      |> Enum.find(fn name ->
        homes = for z <- [{0, 0}, {1, 0}], do: Overworld.Cluster.home({name, z})
        Enum.sort(homes) == two
      end)

    {name, a}
  end

  defp spread(a, name, opts) do
    dir = fn n -> Path.join(DataDir.path(), "crossing-#{:erlang.phash2(name)}-#{n}") end
    opts = opts ++ [cluster: true]
    start_supervised!(World.child_spec({Game, opts ++ [data_dir: dir.(node())]}))
    {:ok, _} = :erpc.call(a, Overworld, :start_world, [Game, opts ++ [data_dir: dir.(a)]])
    Overworld.Test.Cluster.eventually(fn -> length(World.zones(name)) == 2 end)
  end

  test "a notice that the avatar moved into the zone the session is in already leaves it subscribed there",
       ctx do
    {player, user, _zone} = join(ctx)
    player = ServerCase.snapshots(player, 3)
    [{session, _}] = Registry.lookup(Overworld.Registry, {:session, ctx.server.name, user})
    # (The zone the session is in: a new avatar may have crossed once since the join.)
    %{zone: zone, entity: entity} = :sys.get_state(session)
    # (As when a HELLO found the avatar gone from its first zone and followed it itself, the
    # notice of the crossing read after.)
    send(session, {:overworld_moved, zone, entity})
    # Frames go on: more than the few a stopped subscription leaves in the socket.
    player = ServerCase.snapshots(player, 40)
    assert Zone.info(zone).players[user] == entity
    assert entity == player.entity
  end

  @tag cluster: true, clock: :manual
  test "a player's zone is looked up on the node it runs on, without a mirror of it here",
       %{world: world, peer: a} do
    [remote] = for z <- World.zones(world), node(Zone.whereis(z)) == a, do: z
    [local] = World.zones(world) -- [remote]
    {:ok, _} = :erpc.call(a, Zone, :join, [remote, "far", nil])
    {:ok, _} = Zone.join(local, "near", nil)

    assert World.zone_for(world, "far") == remote
    assert World.zone_for(world, "near") == local
    # Nobody's: the zone the id hashes to.
    assert World.zone_for(world, "nobody") in [local, remote]
    assert Overworld.Names.lookup(Overworld.Names.mirror(remote)) == nil
  end

  @tag cluster: true
  test "a player whose zone moves to another node stays connected: its frames and acknowledgements go on",
       %{world: world, peer: a} = ctx do
    # A player in the zone on the peer (players appear where their name puts them).
    {player, _user, zone} =
      Enum.find_value(1..40, fn _ ->
        {player, user, zone} = join(ctx)
        if node(Zone.whereis(zone)) == a, do: {player, user, zone}
      end)

    player = ServerCase.snapshots(player, 5)
    # The peer drains: the zone moves here with its state and its players.
    :ok = :erpc.call(a, Overworld.Cluster, :drain, [])
    st = stay(player, %{zone: zone, world: world, frames: 0, seq: 0, moved: nil, acks: []})

    assert st.moved, "the zone did not move within #{st.frames} frames"
    {moved_at, seq_then} = st.moved
    assert st.frames >= moved_at + 60
    assert st.acks == Enum.sort(st.acks), "acknowledgements went back"
    # Inputs sent after the move reach the avatar and come back acknowledged.
    assert List.last(st.acks) > seq_then
  end

  # Reads frames (each must decode), an input every third, until 60 frames after the
  # player's zone runs on this node (at most 600 frames).
  defp stay(player, st) do
    frames(
      player,
      st,
      :moved,
      fn player, _st, seq ->
        [%{type: :input, seq: seq, ack: player.view.tick, payload: <<0, 0>>}]
      end,
      fn st, view, _snap, _player ->
        here = Zone.whereis(st.zone)
        moved = st.moved || if here && node(here) == node(), do: {st.frames, st.seq}
        %{st | acks: st.acks ++ [view.input_ack], moved: moved}
      end
    )
  end

  # A player joined over a real socket: it, its user, its zone.
  defp join(ctx) do
    player = ServerCase.join(ctx.server)
    {player, player.user, World.zone_for(ctx.world, player.user)}
  end

  # (Manual clock) walks the player toward the other zone, a tick per input, until its zone
  # has handed the avatar away: in flight until the world's next tick.
  defp fly(player, world, from) do
    mx = if elem(from, 1) == {0, 0}, do: 127, else: -127

    flight =
      Enum.find(1..600, fn n ->
        :ok = Client.send_msg(player.conn, %{type: :input, seq: n, ack: 0, payload: <<mx, 0>>})
        # (The input reaches the zone before the tick: the session writes it on receipt.)
        ServerCase.eventually(fn -> Zone.info(from).tick >= 0 end)
        Process.sleep(2)
        {:ok, _} = World.tick_now(world)
        Zone.player_entity(from, player.user) == nil
      end)

    assert flight, "the avatar never left its zone"
  end

  # A zone's game state keeps its players' reliable messages (test game), oldest first here.
  defp events(zone, user) do
    for {^user, payload} <-
          Enum.reverse(Map.get(:sys.get_state(Zone.whereis(zone)).game, :events, [])),
        do: payload
  end

  defp early(zone, user) do
    case :sys.get_state(Zone.whereis(zone)).world.early do
      %{^user => {_at, items}} -> length(items)
      _ -> 0
    end
  end

  # Sends an input every third frame, applies every frame (each must decode), until 60
  # frames after the crossing (at most 600 frames: 20 s).
  defp walk(player, st) do
    inputs = fn player, st, seq ->
      [
        %{
          type: :input,
          seq: seq,
          ack: player.view.tick,
          payload: <<st.mx::signed-8, 0::signed-8>>
        },
        # And a reliable message (the zone's game state keeps them).
        %{type: :client_event, seq: seq, payload: "e#{seq}"}
      ]
    end

    frames(player, st, :crossed, inputs, fn st, view, snap, player ->
      crossed =
        st.crossed ||
          if World.zone_for(st.world, player.user) != st.from, do: {st.frames, st.seq}

      {:ok, _tick, rest} =
        Overworld.Protocol.Codec.read_varint(binary_part(snap, 1, byte_size(snap) - 1))

      {:ok, baseline, _} = Overworld.Protocol.Codec.read_varint(rest)
      seen? = Map.has_key?(Snapshot.View.entities(view), player.entity)

      %{
        st
        | acks: st.acks ++ [view.input_ack],
          crossed: crossed,
          ticks: st.ticks ++ [view.tick],
          resets: st.resets + if(baseline == 0, do: 1, else: 0),
          missing: st.missing ++ if(seen? or st.frames < 3, do: [], else: [st.frames])
      }
    end)
  end

  # Every frame of a player's connection, each of which must decode, with `inputs.(player,
  # st, seq)` sent every third frame and `frame.(st, view, snapshot, player)` folding each
  # into `st`, until 60 frames after `st[mark]` is set ({frame, seq}), at most 600 frames.
  # Answers the state with the last view.
  defp frames(player, st, mark, inputs, frame) do
    st =
      if rem(st.frames, 3) == 0 do
        seq = st.seq + 1
        for msg <- inputs.(player, st, seq), do: :ok = Client.send_msg(player.conn, msg)
        %{st | seq: seq}
      else
        st
      end

    case ServerCase.recv(player.conn) do
      {{:snapshot, snap}, conn} ->
        assert {:ok, view} = Snapshot.apply(player.view, snap, player.templates),
               "frame #{st.frames} does not decode"

        st = frame.(st, view, snap, player)
        st = %{st | frames: st.frames + 1}
        player = %{player | conn: conn, view: view}
        done? = match?({_, _}, st[mark]) and st.frames > elem(st[mark], 0) + 60

        if done? or st.frames >= 600,
          do: Map.put(st, :view, view),
          else: frames(player, st, mark, inputs, frame)

      {{:close, code, reason}, _conn} ->
        flunk("the connection closed (#{code} #{inspect(reason)}) after #{st.frames} frames")

      {{:error, reason}, _conn} ->
        flunk("the socket ended (#{inspect(reason)}) after #{st.frames} frames")

      {_other, conn} ->
        frames(%{player | conn: conn}, st, mark, inputs, frame)
    end
  end
end

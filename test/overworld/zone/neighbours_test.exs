defmodule Overworld.Zone.NeighboursTest do
  # What happens to an entity while it crosses between two zones of a world (handed away by
  # one, not yet adopted by the other): a despawn, its player's leave and its player's
  # reconnect reach it in the zone that adopts it. (Manual clock: between two ticks of the
  # world, an entity handed away at the end of the last one is in flight.)
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{World, Zone}
  alias Overworld.Test.Game

  setup do
    name = {__MODULE__, make_ref()}

    opts = two_zones(100, name, wire: Game.Wire)

    {:ok, _} = Overworld.start_world(Game, opts)
    on_exit(fn -> Overworld.stop_world(name) end)
    [west, east] = Enum.sort_by(World.zones(name), &Zone.config(&1).world.region)
    {_, _, c1, _} = Zone.config(west).world.region
    border = (c1 + 1) * Zone.config(west).grid.cell
    %{world: name, west: west, east: east, border: border}
  end

  # A player joined in the west zone half a metre from the border, walking east; the world
  # ticked until its avatar is in flight (no zone has its player).
  defp in_flight(ctx, player, meta \\ %{}) do
    meta = Map.merge(%{x: ctx.border - 512, y: 20 * 1024}, meta)
    {:ok, id} = Zone.join(ctx.west, player, meta)
    :ok = Zone.input(ctx.west, player, {127, 0})
    {:ok, _} = World.tick_now(ctx.world)
    assert Zone.player_entity(ctx.west, player) == id

    Enum.reduce_while(1..60, nil, fn _, _ ->
      {:ok, _} = World.tick_now(ctx.world)

      if Zone.player_entity(ctx.west, player) == nil,
        do: {:halt, :ok},
        else: {:cont, nil}
    end)

    assert Zone.player_entity(ctx.east, player) == nil, "adopted already"
    id
  end

  defp ids(ctx), do: ctx.world |> World.entities() |> Enum.map(&entity(&1, :id))

  test "a player leaving while its avatar crosses leaves from the zone that adopts it", ctx do
    id = in_flight(ctx, "leaver")
    count = length(ids(ctx))
    assert Zone.leave(ctx.west, "leaver", :left) == :ok
    {:ok, _} = World.tick_now(ctx.world, 3)
    assert Zone.player_entity(ctx.east, "leaver") == nil
    assert Zone.player_entity(ctx.west, "leaver") == nil
    refute id in ids(ctx)
    assert length(ids(ctx)) == count - 1
    # Not a player any more: a leave now is refused.
    assert Zone.leave(ctx.west, "leaver", :left) == {:error, :not_joined}
    assert Zone.leave(ctx.east, "leaver", :left) == {:error, :not_joined}
  end

  test "an entity despawned while it crosses is despawned by the zone that adopts it", ctx do
    id = in_flight(ctx, "walker")
    assert :ok = Zone.despawn(ctx.west, [id])
    {:ok, _} = World.tick_now(ctx.world, 3)
    refute id in ids(ctx)
    # Its player goes with it.
    assert Zone.player_entity(ctx.east, "walker") == nil
  end

  test "a player reconnecting while its avatar crosses finds it in the zone that adopts it",
       ctx do
    id = in_flight(ctx, "back")
    # (A session looks the player's zone up; the world ticks meanwhile.)
    lookup = Task.async(fn -> World.zone_for(ctx.world, "back") end)
    Process.sleep(50)
    assert Task.yield(lookup, 0) == nil, "it did not wait for the crossing"
    {:ok, _} = World.tick_now(ctx.world)
    assert Task.await(lookup) == ctx.east
    assert Zone.player_entity(ctx.east, "back") == id

    # A player that is nowhere is not waited for past the bound.
    {t, _zone} = :timer.tc(fn -> World.zone_for(ctx.world, "nobody") end)
    assert t < 100_000
  end

  test "what the zone a player left sends it still reaches its session, in flight and after",
       ctx do
    # (The test process is the player's session.)
    id = in_flight(ctx, "mover", %{session: self()})
    west = Zone.whereis(ctx.west)
    send(west, {:send_to, "mover", "in flight"})
    assert_receive {:overworld_send, "in flight"}
    {:ok, _} = World.tick_now(ctx.world)
    assert_receive {:overworld_moved, east, ^id}
    assert east == ctx.east
    send(west, {:send_to, "mover", "after"})
    assert_receive {:overworld_send, "after"}
    # A player the zone never had gets nothing.
    send(west, {:send_to, "stranger", "nothing"})
    refute_receive {:overworld_send, "nothing"}, 100

    # The west zone's server restarts (from memory): it still knows where the player went.
    west = Overworld.Test.Restart.kill_server(ctx.west)
    send(west, {:send_to, "mover", "after a restart"})
    assert_receive {:overworld_send, "after a restart"}
    send(west, {:overworld_event, "mover", "sent on"})

    Overworld.Test.ServerCase.eventually(fn ->
      events(ctx.east, "mover") == ["sent on"]
    end)
  end

  test "an input sent while the avatar crosses applies on the tick that adopts it", ctx do
    # (The test process is the player's session.)
    id = in_flight(ctx, "turner", %{session: self()})
    # The adopting zone has the transfer: it says where the inputs go now, before it adopts.
    assert_receive {:overworld_arriving, east, ^id, slot}
    assert east == ctx.east
    refute_received {:overworld_moved, _, _}
    :ok = Zone.put_input(slot, {-127, 0}, 7)
    {:ok, _} = World.tick_now(ctx.world)
    assert_receive {:overworld_moved, ^east, ^id}
    assert Zone.player_entity(ctx.east, "turner") == id
    # Applied by the adopting tick, not the next one.
    [e] = for e <- World.entities(ctx.world), entity(e, :id) == id, do: e
    assert entity(e, :input) == {-127, 0}
  end

  test "the zone an avatar left acknowledges the input its last tick applied, then forgets it",
       ctx do
    {:ok, id} = Zone.join(ctx.west, "acked", %{x: ctx.border - 512, y: 20 * 1024})
    table = Zone.config(ctx.west).shared.wire

    # A new input every tick, until the west zone hands the avatar over.
    seq =
      Enum.reduce_while(1..60, 0, fn seq, _ ->
        :ok = Zone.input(ctx.west, "acked", {127, 0}, seq)
        {:ok, _} = World.tick_now(ctx.world)

        if Zone.player_entity(ctx.west, "acked") == nil,
          do: {:halt, seq},
          else: {:cont, seq}
      end)

    # The frame of the tick that handed it over (its session reads the west zone's table until
    # it follows the avatar) acknowledges the input that tick applied.
    assert Overworld.Zone.Wire.input_ack(table, id) == seq
    assert Overworld.Zone.Wire.position(table, id) != nil
    # Once the east zone has it, the west zone's rows of it are gone.
    {:ok, _} = World.tick_now(ctx.world)
    assert Zone.player_entity(ctx.east, "acked") == id
    assert Overworld.Zone.Wire.input_ack(table, id) == 0
    assert Overworld.Zone.Wire.position(table, id) == nil
  end

  test "a reliable message for a player whose avatar crosses back reaches the zone it goes back to",
       ctx do
    id = in_flight(ctx, "back_and_forth")
    {:ok, _} = World.tick_now(ctx.world)
    assert Zone.player_entity(ctx.east, "back_and_forth") == id
    # Back west: the east zone hands the avatar to the west zone, which handed it east before.
    :ok = Zone.input(ctx.east, "back_and_forth", {-127, 0})

    assert Enum.find(1..60, fn _ ->
             {:ok, _} = World.tick_now(ctx.world)
             Zone.player_entity(ctx.east, "back_and_forth") == nil
           end)

    # In flight west: the client's message goes to the east zone (its session's), which sends
    # it on to the west zone; the west zone must keep it, not send it back east.
    send(Zone.whereis(ctx.east), {:overworld_event, "back_and_forth", "hello"})
    {:ok, _} = World.tick_now(ctx.world)
    assert Zone.player_entity(ctx.west, "back_and_forth") == id
    assert events(ctx.west, "back_and_forth") == ["hello"]
    assert events(ctx.east, "back_and_forth") == []
  end

  test "a zone restarted from its files behind its neighbours catches up, then the world ticks in lockstep again" do
    dir =
      Path.join(Overworld.Test.DataDir.path(), "lockstep-#{System.unique_integer([:positive])}")

    name = {__MODULE__, make_ref()}

    opts = two_zones(200, name, data_dir: dir, snapshot_ticks: 10)

    {:ok, _} = Overworld.start_world(Game, opts)
    on_exit(fn -> Overworld.stop_world(name) end)
    [west, east] = Enum.sort_by(World.zones(name), &Zone.config(&1).world.region)
    ids = Enum.sort(Enum.map(World.entities(name), &entity(&1, :id)))
    {:ok, 25} = World.tick_now(name, 25)

    # Its supervisor killed: the west zone starts again from its snapshot and journal, at
    # its last durable tick (until one is behind the east zone's: the journal is written
    # asynchronously, so it may have it all).
    behind =
      Enum.find_value(1..5, fn _ ->
        old = Zone.whereis(west)

        ExUnit.CaptureLog.capture_log(fn ->
          Process.exit(Overworld.Names.whereis(Overworld.Names.zone_sup(west)), :kill)
          Overworld.Test.Restart.await_new_server(west, old)
        end)

        {w, e} = {Zone.info(west).tick, Zone.info(east).tick}
        if w < e, do: e - w, else: elem(World.tick_now(name, 3), 0) == :ok && nil
      end)

    assert behind, "the restarted zone was never behind"
    ahead = Zone.info(east).tick
    # One call: the west zone catches up (its neighbour's shadows of the ticks it replays
    # may be gone), then both tick 5 times more in lockstep.
    ticking = Task.async(fn -> World.tick_now(name, 5) end)
    assert {:ok, {:ok, tick}} = Task.yield(ticking, 5_000), "the world did not tick"
    assert tick == ahead + 5
    assert {Zone.info(west).tick, Zone.info(east).tick} == {tick, tick}
    assert {:ok, _} = World.tick_now(name, 2)
    assert Enum.sort(Enum.map(World.entities(name), &entity(&1, :id))) == ids
  end

  # A world of two zones side by side, of n critters, on the manual clock.
  defp two_zones(n, name, extra),
    do: Game.zone_options(n, [name: name, zones: {2, 1}, clock: :manual, coins: false] ++ extra)

  defp events(zone, player) do
    for {^player, payload} <-
          Enum.reverse(Map.get(:sys.get_state(Zone.whereis(zone)).game, :events, [])),
        do: payload
  end
end

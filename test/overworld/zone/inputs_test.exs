defmodule Overworld.Zone.InputsTest do
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone
  alias Overworld.Zone.{Inputs, Memory, Wire}
  alias Overworld.Test.ProbeZone
  import ExUnit.CaptureLog

  describe "slots (the tables alone)" do
    test "latest wins; a take empties the worker's table; a slot written after it waits" do
      t = Inputs.new(2)
      Inputs.route(t, 7, 0)
      Inputs.route(t, 8, 1)
      :ok = Inputs.put(t, 7, :a, 1)
      :ok = Inputs.put(t, 7, :b, 2)
      :ok = Inputs.put(t, 8, :c, nil)
      assert {:error, :no_route} = Inputs.put(t, 9, :d, 1)

      assert {%{7 => :b}, [{7, 2}]} = Inputs.take(t, 0, %{7 => true})
      assert {%{}, []} = Inputs.take(t, 0, %{7 => true})
      # No sequence number: applied, not acknowledged.
      assert {%{8 => :c}, []} = Inputs.take(t, 1, %{8 => true})
      :ok = Inputs.put(t, 7, :e, 3)
      assert {%{7 => :e}, [{7, 3}]} = Inputs.take(t, 0, %{7 => true})
    end

    test "a slot in the wrong worker's table moves to its route's, never over a newer one" do
      t = Inputs.new(2)
      Inputs.route(t, 7, 0)
      :ok = Inputs.put(t, 7, :old, 1)
      # The avatar crossed into worker 1's stripe after the session looked its route up.
      Inputs.route(t, 7, 1)
      assert {%{}, []} = Inputs.take(t, 0, %{})
      assert {%{7 => :old}, [{7, 1}]} = Inputs.take(t, 1, %{7 => true})

      # Again, but the session wrote a newer input to worker 1 meanwhile: it is kept.
      Inputs.route(t, 7, 0)
      :ok = Inputs.put(t, 7, :older, 2)
      Inputs.route(t, 7, 1)
      :ok = Inputs.put(t, 7, :newer, 3)
      assert {%{}, []} = Inputs.take(t, 0, %{})
      assert {%{7 => :newer}, [{7, 3}]} = Inputs.take(t, 1, %{7 => true})
    end

    test "an input older than one a worker already applied is dropped when it moves, never applied after it" do
      t = Inputs.new(2)
      Inputs.route(t, 7, 0)
      # Written during the tick in which the avatar crosses, before the worker re-routes it.
      :ok = Inputs.put(t, 7, :older, 1)
      Inputs.reroute(t, [{7, 1}])
      :ok = Inputs.put(t, 7, :newer, 2)
      # The next tick, the workers in parallel: worker 1 takes first, then worker 0 moves.
      assert {%{7 => :newer}, [{7, 2}]} = Inputs.take(t, 1, %{7 => true})
      assert {%{}, []} = Inputs.take(t, 0, %{})
      assert {%{}, []} = Inputs.take(t, 1, %{7 => true})

      # Worker 0 moves first: the newer slot waiting in worker 1's table is kept.
      :ok = Inputs.put(t, 7, :a, 3)
      Inputs.route(t, 7, 0)
      :ok = Inputs.put(t, 7, :b, 4)
      Inputs.reroute(t, [{7, 1}])
      :ok = Inputs.put(t, 7, :c, 5)
      assert {%{}, []} = Inputs.take(t, 0, %{})
      assert {%{7 => :c}, [{7, 5}]} = Inputs.take(t, 1, %{7 => true})
    end

    test "a player that left is not routed again, and a put to a zone that is gone answers" do
      t = Inputs.new(2)
      Inputs.route(t, 7, 0)
      Inputs.forget(t, 7)
      # Its avatar crossed a stripe in the tick it left: not routed again.
      Inputs.reroute(t, [{7, 1}])
      assert {:error, :no_route} = Inputs.put(t, 7, :late, 1)
      :ets.delete(t.routes)
      assert {:error, :not_found} = Inputs.put(t, 7, :gone, 2)
    end

    test "a slot waits for its avatar to arrive, and goes with its player" do
      t = Inputs.new(1)
      Inputs.route(t, 7, 0)
      :ok = Inputs.put(t, 7, :early, 1)
      # Not spawned yet: kept.
      assert {%{}, []} = Inputs.take(t, 0, %{})
      assert {%{7 => :early}, _} = Inputs.take(t, 0, %{7 => true})

      :ok = Inputs.put(t, 7, :late, 2)
      Inputs.forget(t, 7)
      assert {:error, :no_route} = Inputs.put(t, 7, :after, 3)
      assert {%{}, []} = Inputs.take(t, 0, %{7 => true})
    end
  end

  defp start(opts) do
    id = {__MODULE__, make_ref()}

    opts =
      Keyword.merge([id: id, clock: :manual, size: {100, 100}, cell_size: 10, args: []], opts)

    {:ok, _} = Overworld.start_zone(ProbeZone, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  describe "in a zone" do
    test "an input sent before the avatar exists reaches it as it spawns" do
      zone = start([])
      {:ok, id} = Zone.join(zone, "ann", %{x: 5_000, y: 5_000})
      Zone.input(zone, "ann", {3000, 0})
      {:ok, 1} = Zone.tick_now(zone)
      assert entity(Zone.entity(zone, id), :input) == {3000, 0}
    end

    test "every input reaches the avatar as it crosses from one worker's stripe to the other's" do
      # Two workers; the stripes meet at y = 50 m. The avatar walks north at 30 m/s, a new
      # input every tick.
      zone = start(workers: 2)
      {:ok, id} = Zone.join(zone, "ann", %{x: 20_000, y: 40_000})
      {:ok, _} = Zone.tick_now(zone)
      {:ok, slot} = Zone.input_slot(zone, "ann")

      for k <- 1..30 do
        :ok = Zone.put_input(slot, {k, 30_720}, k)
        {:ok, _} = Zone.tick_now(zone)
        assert entity(Zone.entity(zone, id), :input) == {k, 30_720}, "input #{k} lost"
      end

      assert entity(Zone.entity(zone, id), :y) > 60_000
    end

    test "acknowledgements: the newest sequence number a tick applied (zones with a wire)" do
      zone = start(wire: Overworld.Template.Test.Wire)
      {:ok, id} = Zone.join(zone, "ann", %{x: 5_000, y: 5_000})
      {:ok, _} = Zone.tick_now(zone)
      table = Zone.wire(zone).table
      assert Wire.input_ack(table, id) == 0
      Zone.input(zone, "ann", {1, 0}, 41)
      Zone.input(zone, "ann", {2, 0}, 42)
      assert Wire.input_ack(table, id) == 0
      {:ok, _} = Zone.tick_now(zone)
      assert Wire.input_ack(table, id) == 42
      # The player leaves: the slot and its acknowledgement go, later inputs are dropped.
      :ok = Zone.leave(zone, "ann")
      assert Wire.input_ack(table, id) == 0
      assert {:error, :not_joined} = Zone.input_slot(zone, "ann")
      Zone.input(zone, "ann", {3, 0}, 43)
      {:ok, _} = Zone.tick_now(zone)
      assert Zone.entity(zone, id) == nil
    end

    test "across a stripe border, an input older than one applied never comes after it" do
      # As an input that a session wrote to the old worker while the avatar crossed: it must
      # not be applied after the newer one the new worker took meanwhile, nor the ack go back.
      for _ <- 1..20 do
        zone = start(workers: 2, wire: Overworld.Template.Test.Wire)
        {:ok, id} = Zone.join(zone, "ann", %{x: 20_000, y: 50_500})
        {:ok, 1} = Zone.tick_now(zone)
        inputs = Zone.config(zone).shared.inputs
        table = Zone.wire(zone).table
        Zone.input(zone, "ann", {0, 30_720}, 1)
        # Tick 2: the avatar crosses into worker 1's stripe.
        {:ok, 2} = Zone.tick_now(zone)
        # A session that looked the route up before the crossing: worker 0's table.
        Inputs.route(inputs, id, 0)
        :ok = Inputs.put(inputs, id, {1, 30_720}, 2)
        Inputs.route(inputs, id, 1)
        :ok = Inputs.put(inputs, id, {2, 30_720}, 3)
        {:ok, 3} = Zone.tick_now(zone)
        {:ok, 4} = Zone.tick_now(zone)

        assert {entity(Zone.entity(zone, id), :input), Wire.input_ack(table, id)} ==
                 {{2, 30_720}, 3}

        Overworld.stop_zone(zone)
      end
    end

    test "a player that joins and leaves before the next tick never appears, nor keeps a route" do
      zone = start(workers: 2)
      {:ok, id} = Zone.join(zone, "ann", %{x: 20_000, y: 20_000})
      :ok = Zone.leave(zone, "ann")
      {:ok, _} = Zone.tick_now(zone, 2)
      assert Zone.entity(zone, id) == nil
      assert :ets.lookup(Zone.config(zone).shared.inputs.routes, id) == []
    end

    test "a player that leaves as its avatar crosses a stripe keeps no route, slot or position" do
      zone = start(workers: 2, wire: Overworld.Template.Test.Wire)
      {:ok, id} = Zone.join(zone, "ann", %{x: 20_000, y: 50_500})
      {:ok, 1} = Zone.tick_now(zone)
      Zone.input(zone, "ann", {0, 30_720}, 1)
      # The leave reaches the zone while the tick that moves the avatar across runs.
      server = Zone.whereis(zone)
      :sys.suspend(server)
      task = Task.async(fn -> Zone.tick_now(zone) end)
      Process.sleep(20)
      send(server, {:"$gen_call", {self(), make_ref()}, {:leave, "ann", :quit}})
      :sys.resume(server)
      {:ok, _} = Task.await(task)
      {:ok, _} = Zone.tick_now(zone, 2)
      shared = Zone.config(zone).shared
      assert Zone.entity(zone, id) == nil
      assert :ets.lookup(shared.inputs.routes, id) == []
      assert Enum.all?(Tuple.to_list(shared.inputs.slots), &(:ets.lookup(&1, id) == []))
      assert Wire.position(shared.wire, id) == nil
    end

    test "a zone that starts over (no data directory) gives no old input to a new avatar" do
      zone = start(workers: 1, wire: Overworld.Template.Test.Wire)
      {:ok, ann} = Zone.join(zone, "ann", %{x: 5_000, y: 5_000})
      {:ok, _} = Zone.tick_now(zone)
      :ok = Zone.input(zone, "ann", {3_000, 0}, 500)
      server = Zone.whereis(zone)
      worker = Overworld.Names.whereis(Overworld.Names.bucket(zone, 0))

      capture_log(fn ->
        Process.exit(worker, :kill)
        Overworld.Test.Restart.await_new_server(zone, server)
        Zone.info(zone)
      end)

      # init/1 again: entity ids start over, so the next avatar has ann's old id.
      assert {:ok, ^ann} = Zone.join(zone, "bob", %{x: 5_000, y: 5_000})
      {:ok, _} = Zone.tick_now(zone)
      assert entity(Zone.entity(zone, ann), :input) == nil
      assert Wire.input_ack(Zone.wire(zone).table, ann) == 0
    end

    test "a rewind applies no input sent before it; the players it brings back have their slots" do
      zone = start(workers: 2, debug: true, keyframe_ticks: 2, history: 20)
      {:ok, id} = Zone.join(zone, "ann", %{x: 20_000, y: 20_000})
      {:ok, 4} = Zone.tick_now(zone, 4)
      Zone.input(zone, "ann", {3_000, 0})
      capture_log(fn -> {:ok, 2} = Zone.rewind(zone, 2) end)
      assert entity(Zone.entity(zone, id), :input) == nil

      :ok = Zone.leave(zone, "ann")
      {:ok, 4} = Zone.tick_now(zone, 2)
      capture_log(fn -> {:ok, 2} = Zone.rewind(zone, 2) end)
      assert Zone.player_entity(zone, "ann") == id
      Zone.input(zone, "ann", {1_000, 0})
      {:ok, _} = Zone.tick_now(zone)
      assert entity(Zone.entity(zone, id), :input) == {1_000, 0}
    end

    test "the history records the inputs each tick applied" do
      zone = start(workers: 2)
      {:ok, a} = Zone.join(zone, "ann", %{x: 5_000, y: 5_000})
      {:ok, b} = Zone.join(zone, "bob", %{x: 5_000, y: 90_000})
      {:ok, 1} = Zone.tick_now(zone)
      Zone.input(zone, "ann", {1, 1})
      Zone.input(zone, "bob", {2, 2})
      {:ok, 2} = Zone.tick_now(zone)
      memory = Zone.metrics_ref(zone).memory

      assert Memory.inputs(memory, 300, 2, 2) |> Map.values() |> Enum.reduce(&Map.merge/2) ==
               %{a => {1, 1}, b => {2, 2}}

      assert Memory.inputs(memory, 300, 2, 1) == %{}
    end

    test "the zone server receives no message for inputs: 20,000 inputs cost it nothing" do
      zone = start(workers: 2)
      players = for i <- 1..2_000, do: "p#{i}"

      for {p, i} <- Enum.with_index(players),
          do: {:ok, _} = Zone.join(zone, p, %{x: i * 40, y: 500})

      {:ok, _} = Zone.tick_now(zone, 2)
      server = Zone.whereis(zone)
      slots = for p <- players, do: elem(Zone.input_slot(zone, p), 1)
      reductions = fn -> elem(Process.info(server, :reductions), 1) end

      # Reductions of the server over 5 ticks, without and then with 10 inputs per player
      # before each tick.
      r0 = reductions.()
      {:ok, _} = Zone.tick_now(zone, 5)
      quiet = reductions.() - r0

      r1 = reductions.()

      for k <- 1..5 do
        for _ <- 1..10, s <- slots, do: Zone.put_input(s, {k, 0}, k)
        assert {:message_queue_len, 0} = Process.info(server, :message_queue_len)
        {:ok, _} = Zone.tick_now(zone)
      end

      busy = reductions.() - r1
      assert busy < quiet * 1.5 + 2_000, "server reductions: #{quiet} quiet, #{busy} with inputs"
      # And every avatar got its input.
      assert Enum.all?(Zone.entities(zone), &(entity(&1, :input) == {5, 0}))
    end
  end
end

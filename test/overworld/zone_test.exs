defmodule Overworld.ZoneTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone
  alias Overworld.Test.ProbeZone

  defp start(opts) do
    id = {__MODULE__, make_ref()}
    args = Keyword.merge([report: self(), id: id], Keyword.get(opts, :args, []))

    opts =
      [id: id, clock: :manual, size: {100, 100}, cell_size: 10]
      |> Keyword.merge(Keyword.delete(opts, :args))
      |> Keyword.put(:args, args)

    {:ok, _} = Overworld.start_zone(ProbeZone, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  defp probes do
    receive do
      {:probe, msg} -> [msg | probes()]
    after
      0 -> []
    end
  end

  describe "lifecycle" do
    test "init spawns tick 0, join/input/leave drive the player's entity" do
      zone = start(args: [spawn: [kind: :rock, x: 10_000, y: 10_000]])
      assert_received {:probe, {:init, ^zone}}
      assert Zone.count(zone) == 1

      assert {:ok, id} = Zone.join(zone, "ann", %{x: 5_000, y: 5_000})
      assert {:error, :already_joined} = Zone.join(zone, "ann", nil)
      assert {:error, {:rejected, :no_room}} = Zone.join(zone, "bob", :reject)
      # The avatar appears with the next tick.
      assert Zone.entity(zone, id) == nil
      assert {:ok, 1} = Zone.tick_now(zone)
      assert entity(Zone.entity(zone, id), :owner) == "ann"

      # Only the newest input per tick counts.
      Zone.input(zone, "ann", {1024, 0})
      Zone.input(zone, "ann", {3000, 0})
      Zone.input(zone, "nobody", {9, 9})
      {:ok, 2} = Zone.tick_now(zone)
      e = Zone.entity(zone, id)
      assert entity(e, :input) == {3000, 0}
      assert entity(e, :x) == 5_000 + div(3000, 30)

      # The input is sticky: the entity keeps moving.
      {:ok, 3} = Zone.tick_now(zone)
      assert entity(Zone.entity(zone, id), :x) == 5_000 + 2 * div(3000, 30)
      {:ok, 4} = Zone.tick_now(zone)

      assert :ok = Zone.leave(zone, "ann", :quit)
      assert_received {:probe, {:leave, "ann", :quit}}
      assert {:error, :not_joined} = Zone.leave(zone, "ann")
      {:ok, 5} = Zone.tick_now(zone)
      assert Zone.entity(zone, id) == nil
      assert Zone.count(zone) == 1
    end

    test "an input meeting a zone whose tables went (it is stopping) is dropped" do
      zone = start([])
      {:ok, _} = Zone.join(zone, "ann", nil)
      {:ok, 1} = Zone.tick_now(zone)
      shared = Zone.config(zone).shared

      # (As between the input's lookup and its write when the zone stops: its tables go
      # before its registration does.)
      :ets.delete(shared.inputs.routes)
      assert :ok = Zone.input(zone, "ann", {1, 0})
      :ets.delete(shared.memory)
      assert :ok = Zone.input(zone, "ann", {1, 0})
    end

    test "phases run in order: tick, systems; spawns show from the next tick" do
      zone =
        start(
          args: [actions_at: %{2 => [{:spawn, [kind: :reporter, x: 500, y: 500, data: self()]}]}]
        )

      {:ok, _} = Zone.join(zone, "p", nil)
      {:ok, 1} = Zone.tick_now(zone)
      _ = probes()

      Zone.input(zone, "p", {0, 0})
      {:ok, 2} = Zone.tick_now(zone)
      assert [{:tick, 2}] = probes()

      Zone.input(zone, "p", {0, 0})
      {:ok, 3} = Zone.tick_now(zone)
      assert [{:tick, 3}, {:entity, 3, worker}] = probes()
      assert worker != Zone.whereis(zone)
    end

    test "spawn, despawn, queries and counts" do
      zone = start(workers: 2)

      {:ok, ids} = Zone.spawn(zone, for(i <- 1..50, do: [kind: :thing, x: i * 1000, y: i * 1000]))

      assert length(ids) == 50
      {:ok, _} = Zone.tick_now(zone)
      assert Zone.count(zone) == 50
      assert length(Zone.entities(zone)) == 50
      found = Zone.query_radius(zone, 10_000, 10_000, 1500)
      assert found |> Enum.map(&entity(&1, :x)) |> Enum.sort() == [9_000, 10_000, 11_000]

      :ok = Zone.despawn(zone, Enum.take(ids, 10))
      {:ok, _} = Zone.tick_now(zone)
      assert Zone.count(zone) == 40

      assert {:error, {:unknown_fields, [:colour]}} =
               Zone.spawn(zone, [[x: 1, y: 1, colour: :red]])

      assert {:error, {:missing, :y}} = Zone.spawn(zone, [[x: 1]])
      assert {:error, {:not_an_integer, :x, 1.5}} = Zone.spawn(zone, [[x: 1.5, y: 1]])
      # Positions are clamped into the world.
      {:ok, [far]} = Zone.spawn(zone, [[x: -50, y: 10_000_000]])
      {:ok, _} = Zone.tick_now(zone)
      e = Zone.entity(zone, far)
      assert {entity(e, :x), entity(e, :y)} == {0, 100 * 1024}
    end

    test "max_entities bounds spawns" do
      zone = start(max_entities: 5)
      assert {:ok, _} = Zone.spawn(zone, for(_ <- 1..5, do: [x: 1, y: 1]))
      assert {:error, :max_entities} = Zone.spawn(zone, [[x: 1, y: 1]])
    end

    test "messages to the zone reach handle_info" do
      zone = start([])
      send(Zone.whereis(zone), :hello)
      Zone.info(zone)
      assert_received {:probe, {:info, :hello}}
    end

    test "a real-time zone refuses tick_now, a stopped zone is gone" do
      zone = start(clock: :realtime)
      assert {:error, :realtime_clock} = Zone.tick_now(zone)
      assert zone in Overworld.zones()
      assert :ok = Overworld.stop_zone(zone)
      assert Zone.whereis(zone) == nil
      assert {:error, :not_found} = Overworld.stop_zone(zone)
    end

    test "a zone id is any term and is unique" do
      zone = start([])
      assert {:error, :already_started} = Overworld.start_zone(ProbeZone, id: zone, args: [])
    end
  end

  describe "failures in game code" do
    test "a raising handle_tick is reported with zone and tick; the zone and its neighbours go on" do
      zone = start(args: [raise_at: 3])
      other = start([])

      log =
        capture_log(fn ->
          {:ok, 5} = Zone.tick_now(zone, 5)
          {:ok, 5} = Zone.tick_now(other, 5)
        end)

      assert log =~ "zone #{inspect(zone)} tick 3"
      assert log =~ "tick 3 blew up"
      assert Zone.metrics(zone).callback_errors == 1
      assert Zone.metrics(other).callback_errors == 0
      assert Zone.info(zone).tick == 5
    end

    test "a raising handle_entity keeps the entity's previous state and counts every failure" do
      zone = start(workers: 2)

      {:ok, [bomb, ok]} =
        Zone.spawn(zone, [
          [kind: :bomb, x: 100, y: 100, vx: 3000],
          [kind: :rock, x: 200, y: 200, vx: 3000]
        ])

      {:ok, 1} = Zone.tick_now(zone)
      {:ok, 2} = Zone.tick_now(zone)
      bomb_before = Zone.entity(zone, bomb)

      log = capture_log(fn -> {:ok, 4} = Zone.tick_now(zone, 2) end)
      assert log =~ "zone #{inspect(zone)} tick 3"
      assert log =~ "entity #{bomb} blew up"
      assert Zone.entity(zone, bomb) == bomb_before
      # Spawned before tick 1, simulated from tick 2 on: three steps.
      assert entity(Zone.entity(zone, ok), :x) == 200 + 3 * div(3000, 30)
      assert Zone.metrics(zone).callback_errors == 2
    end

    test "invalid returns and a raising handle_event are caught" do
      zone = start([])
      {:ok, [liar]} = Zone.spawn(zone, [[kind: :liar, x: 1, y: 1]])
      {:ok, _} = Zone.join(zone, "p", nil)

      log =
        capture_log(fn ->
          {:ok, 1} = Zone.tick_now(zone)
          send(Zone.whereis(zone), {:overworld_event, "p", "raise"})
          {:ok, 2} = Zone.tick_now(zone)
        end)

      assert log =~ "invalid return value: {:ok, :not_an_entity}"
      assert log =~ "handle_event failed"
      assert log =~ "event blew up"
      assert Zone.entity(zone, liar) != nil
      assert Zone.metrics(zone).callback_errors >= 2
    end

    test "a client's reliable messages reach handle_event/3, of joined players only" do
      zone = start([])
      {:ok, _} = Zone.join(zone, "p", nil)
      {:ok, 1} = Zone.tick_now(zone)
      _ = probes()
      send(Zone.whereis(zone), {:overworld_event, "p", "spawn"})
      send(Zone.whereis(zone), {:overworld_event, "stranger", "hello"})
      {:ok, 2} = Zone.tick_now(zone)
      assert [{:event, "p", "spawn"}, {:tick, 2}] = probes()
      # Its actions apply: the rock is there after the next tick.
      {:ok, 3} = Zone.tick_now(zone)
      assert Enum.count(Zone.entities(zone), &(entity(&1, :kind) == :rock)) == 1
    end

    test "handle_entity may despawn an entity" do
      zone = start([])
      {:ok, _} = Zone.spawn(zone, [[kind: :mortal, x: 1, y: 1], [kind: :rock, x: 1, y: 1]])
      {:ok, 1} = Zone.tick_now(zone)
      assert Zone.count(zone) == 2
      {:ok, 2} = Zone.tick_now(zone)
      assert Zone.count(zone) == 1
    end
  end

  describe "subscriptions" do
    test "subscribers hear of every finished tick, from several workers; a dead one is dropped" do
      zone = start(workers: 3)
      others = for _ <- 1..5, do: spawn_link(fn -> Process.sleep(:infinity) end)
      assert :ok = Zone.subscribe(zone)
      # Subscribing twice is one subscription.
      assert :ok = Zone.subscribe(zone)
      for pid <- others, do: assert(:ok = Zone.subscribe(zone, pid))

      {:ok, 3} = Zone.tick_now(zone, 3)

      for n <- 1..3 do
        assert_receive {:overworld_tick, ^zone, ^n, started} when is_integer(started), 1_000
      end

      refute_receive {:overworld_tick, _, _, _}, 50
      for pid <- others, do: {:messages, [_, _, _]} = Process.info(pid, :messages)

      # A subscriber that exits is removed; the zone carries on.
      [dead | _] = others
      Process.unlink(dead)
      Process.exit(dead, :kill)
      {:ok, 4} = Zone.tick_now(zone)
      assert_receive {:overworld_tick, ^zone, 4, _}, 1_000
      # The zone hears of the exit by a monitor, which may come after the tick.
      assert Enum.any?(1..100, fn _ ->
               map_size(:sys.get_state(Zone.whereis(zone)).subscribers) == 5 or
                 (Process.sleep(10) && false)
             end)

      assert :ok = Zone.unsubscribe(zone)
      {:ok, 5} = Zone.tick_now(zone)
      refute_receive {:overworld_tick, _, _, _}, 100
    end

    test "subscribing to a zone that is not running" do
      assert Zone.subscribe({__MODULE__, :nope}) == {:error, :not_found}
    end
  end

  describe "the clock" do
    test "60 ticks at 30 Hz take about 2 seconds" do
      zone = {__MODULE__, make_ref()}
      me = self()
      handler = {__MODULE__, zone}

      Overworld.Telemetry.attach(handler, [:overworld, :zone, :tick, :stop], fn _, _, meta, _ ->
        if meta.zone == zone,
          do: send(me, {:ticked, meta.tick, System.monotonic_time(:millisecond)})
      end)

      # A loaded machine may make a tick overrun: the deadlines it skips are part of the
      # schedule (the next tick keeps to the 30 Hz grid), so they are counted in.
      Overworld.Telemetry.attach({handler, :overrun}, [:overworld, :zone, :overrun], fn
        _, m, %{zone: ^zone} = meta, _ -> send(me, {:skipped, meta.tick, m.skipped})
        _, _, _, _ -> :ok
      end)

      on_exit(fn ->
        Overworld.Telemetry.detach(handler)
        Overworld.Telemetry.detach({handler, :overrun})
      end)

      start(id: zone, clock: :realtime, tick_rate: 30)
      assert_receive {:ticked, 1, t1}, 1_000
      assert_receive {:ticked, 61, t61}, 6_000
      Process.sleep(100)
      skipped = Enum.sum(for {:skipped, tick, n} <- flush_messages(), tick in 1..60, do: n)
      assert skipped <= 20, "the machine is too loaded to time the clock: #{skipped} skipped"
      # 60 periods plus the skipped ones, give or take the wake-up latency of the two ticks.
      expected = round((60 + skipped) * 1000 / 30)
      assert (t61 - t1 - expected) in -100..400, "#{t61 - t1} ms, expected #{expected} ms"
    end

    test "an overrun is counted and the missed deadlines are skipped, not run in a burst" do
      zone = {__MODULE__, make_ref()}
      me = self()
      handler = {__MODULE__, zone}

      Overworld.Telemetry.attach(handler, [:overworld, :zone, :tick, :stop], fn _, m, meta, _ ->
        if meta.zone == zone,
          do: send(me, {:ticked, meta.tick, System.monotonic_time(:millisecond), m.duration})
      end)

      on_exit(fn -> Overworld.Telemetry.detach(handler) end)
      # 30 Hz is a 33 ms budget; every tick takes 50 ms.
      start(id: zone, clock: :realtime, tick_rate: 30, args: [sleep: 50])
      Process.sleep(1_000)
      m = Zone.metrics(zone)
      # (A loaded machine makes ticks longer still: fewer, never more.)
      assert m.overruns >= 5 and m.overruns >= m.ticks - 2
      assert m.skipped_deadlines >= m.overruns
      # At most one tick per two deadlines, and no two ticks closer than a period: no burst.
      assert m.ticks in 5..21

      starts =
        for {:ticked, _, t, d} <- Enum.take(flush_ticks(), 12),
            do: t - System.convert_time_unit(d, :native, :millisecond)

      gaps = starts |> Enum.zip(tl(starts)) |> Enum.map(fn {a, b} -> b - a end)
      assert Enum.all?(gaps, &(&1 >= 33))
    end
  end

  defp flush_messages do
    receive do
      m -> [m | flush_messages()]
    after
      0 -> []
    end
  end

  defp flush_ticks do
    receive do
      {:ticked, _, _, _} = m -> [m | flush_ticks()]
    after
      0 -> []
    end
  end
end

defmodule Overworld.ZoneSupervisionTest do
  # A zone whose server dies restarts from its in-memory copy (same tick, same entities); a zone
  # without a data directory whose worker dies restarts from `init/1`. Other zones never notice.
  # (Recovery with players, sessions and the store: test/overworld/zone/recovery_test.exs.)
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.Restart
  alias Overworld.Zone

  defp start do
    id = {__MODULE__, make_ref()}
    spawn = for i <- 1..100, do: [kind: :rock, x: i * 100, y: i * 100]

    {:ok, _} =
      Overworld.start_zone(Overworld.Test.ProbeZone,
        id: id,
        clock: :manual,
        workers: 2,
        args: [spawn: spawn]
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  test "a killed server comes back from memory: same tick, same entities" do
    zone = start()
    other = start()
    {:ok, 3} = Zone.tick_now(zone, 3)
    hash = Zone.state_hash(zone)
    old = Zone.whereis(zone)

    log =
      capture_log(fn ->
        Process.exit(old, :kill)
        new = await_new_server(zone, old)
        assert new != old
        assert Zone.info(zone).tick == 3
      end)

    assert log =~ "restarted from memory at tick 3"
    assert Zone.count(zone) == 100
    assert Zone.state_hash(zone) == hash
    assert {:ok, 4} = Zone.tick_now(zone)
    assert {:ok, 1} = Zone.tick_now(other)
  end

  test "a killed bucket worker restarts the whole zone (from init/1 without a data directory)" do
    zone = start()
    {:ok, 2} = Zone.tick_now(zone, 2)
    old = Zone.whereis(zone)
    [{worker, _}] = Registry.lookup(Overworld.Registry, {:bucket, zone, 1})

    capture_log(fn ->
      Process.exit(worker, :kill)
      await_new_server(zone, old)
    end)

    assert Zone.count(zone) == 100
    assert {:ok, 1} = Zone.tick_now(zone)
    assert Enum.sort(Enum.map(Zone.entities(zone), &elem(&1, 1))) == Enum.to_list(1..100)
  end
end

defmodule Overworld.ZoneNotFoundTest do
  use ExUnit.Case, async: true
  alias Overworld.Zone

  test "calls to a zone that is not running answer {:error, :not_found}" do
    zone = {__MODULE__, :nowhere}
    assert {:error, :not_found} = Zone.join(zone, "ann")
    assert {:error, :not_found} = Zone.leave(zone, "ann")
    assert {:error, :not_found} = Zone.spawn(zone, [[x: 1, y: 1]])
    assert {:error, :not_found} = Zone.despawn(zone, [1])
    assert {:error, :not_found} = Zone.tick_now(zone)
    assert :ok = Zone.input(zone, "ann", :up)
    assert Zone.whereis(zone) == nil
    assert Zone.metrics(zone) == nil
  end
end

defmodule Overworld.ZoneStallTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  alias Overworld.Zone

  test "a tick stuck in game code is reported with the worker that has not answered; other zones go on" do
    zone = {__MODULE__, make_ref()}
    other = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Overworld.Test.ProbeZone,
        id: zone,
        clock: :realtime,
        workers: 2,
        stall_timeout: 100,
        size: {100, 100},
        args: []
      )

    {:ok, _} = Overworld.start_zone(Overworld.Test.ProbeZone, id: other, clock: :manual, args: [])
    # At (1 m, 1 m): row 0, so bucket worker 0.
    {:ok, _} = Zone.spawn(zone, [[kind: :sleeper, x: 1024, y: 1024]])

    log =
      capture_log(fn ->
        Process.sleep(500)
        assert {:ok, 3} = Zone.tick_now(other, 3)
      end)

    # The sleeper arrives with the first tick after the spawn: tick 2 on an idle machine, later
    # on a busy one. That tick never finishes.
    assert [_, stuck] =
             Regex.run(
               ~r/zone #{Regex.escape(inspect(zone))} tick (\d+) has not finished after 100 ms/,
               log
             )

    stuck = String.to_integer(stuck)
    assert log =~ "bucket workers [0, 1] have not reported"
    # Where they are: worker 0 in the game code, worker 1 waiting for it at the exchange.
    assert log =~ ~r/worker 0 in [^;]*Overworld.Zone.Pass.call/
    assert log =~ ~r/worker 1 in [^;]*receive_exchange/
    m = Zone.metrics(zone)
    assert m.stalls >= 2
    assert m.tick == stuck - 1
    capture_log(fn -> :ok = Overworld.stop_zone(zone) end)
    Overworld.stop_zone(other)
  end
end

defmodule Overworld.ZoneInFlightTest do
  # The zone server writes a tick's record to its memory table before it sends the tick to the
  # workers; killed in between, its successor sends the tick again. The window is a few
  # instructions wide, so the test makes it: it writes the record of the next tick (what the
  # server would have written) and kills the server.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.Restart
  alias Overworld.Zone
  alias Overworld.Zone.Memory

  defp start(id) do
    spawn = for i <- 1..50, do: [kind: :rock, x: i * 300, y: i * 200]

    {:ok, _} =
      Overworld.start_zone(Overworld.Test.ProbeZone,
        id: id,
        clock: :manual,
        workers: 2,
        args: [spawn: spawn]
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
  end

  test "a tick lost in flight is sent again by the restarted server" do
    zone = {__MODULE__, make_ref()}
    twin = {__MODULE__, make_ref()}
    start(zone)
    start(twin)
    {:ok, 3} = Zone.tick_now(zone, 3)
    {:ok, 4} = Zone.tick_now(twin, 4)
    table = Zone.metrics_ref(zone).memory
    last = Memory.last(table)
    assert last.n == 3
    # Tick 4 as the server sends it: no inputs, spawns nor despawns.
    Memory.put_tick(table, 300, %{last | n: 4, simulate: true, spawns: [], despawns: []})

    capture_log(fn -> kill_server(zone) end)
    assert Zone.info(zone).tick == 4
    assert Zone.state_hash(zone) == Zone.state_hash(twin)
    assert {:ok, 5} = Zone.tick_now(zone)
  end

  test "the restarted server repairs changes a kill cut short" do
    zone = {__MODULE__, make_ref()}
    start(zone)
    {:ok, ann} = Zone.join(zone, "ann", %{x: 100, y: 100})
    {:ok, bob} = Zone.join(zone, "bob", %{x: 200, y: 200})
    {:ok, 1} = Zone.tick_now(zone)
    table = Zone.metrics_ref(zone).memory
    # A player row whose avatar never came (a leave cut short after the despawn), and an avatar
    # whose player row is gone (a join cut short before the row).
    Memory.put_player(table, "ghost", 9_999, nil)
    Memory.delete_player(table, "bob")
    capture_log(fn -> kill_server(zone) end)

    assert Zone.info(zone).players == %{"ann" => ann}
    refute Enum.any?(Memory.players(table), &match?({"ghost", _, _}, &1))
    # The avatar without a player goes with the next tick.
    {:ok, 2} = Zone.tick_now(zone)
    ids = Enum.map(Zone.entities(zone), &elem(&1, 1))
    assert ann in ids
    refute bob in ids
    assert length(ids) == 51
  end

  test "a player who joined just before the kill keeps the avatar on its way" do
    zone = {__MODULE__, make_ref()}
    start(zone)
    {:ok, 1} = Zone.tick_now(zone)
    # Joined, not ticked yet: the avatar is a pending spawn.
    {:ok, ann} = Zone.join(zone, "ann", %{x: 100, y: 100})
    capture_log(fn -> kill_server(zone) end)
    assert Zone.info(zone).players == %{"ann" => ann}
    {:ok, 2} = Zone.tick_now(zone)
    assert Enum.any?(Zone.entities(zone), &(elem(&1, 1) == ann))
  end
end

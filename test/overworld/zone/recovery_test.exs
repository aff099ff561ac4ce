defmodule Overworld.Zone.RecoveryTest do
  # A loaded zone of the test game (10,000 critters, players walking over real sockets, loot
  # picked up) whose server is killed 100 times at random ticks (it recovers from memory), and
  # whose bucket workers are killed 29 times at random ticks, while a tick runs, between ticks
  # and while the zone recovers (it recovers from its store: the newest snapshot and the
  # journal after it), with players joining and leaving between the kills:
  # the entities, the players, their sessions and every coin of loot survive. Not async: the
  # recovery times are printed, and other tests' load would only blur them.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Bench.Stats
  alias Overworld.Client
  alias Overworld.Test.{Game, Restart, Walker}
  alias Overworld.Zone

  @moduletag timeout: 300_000

  setup do
    dir =
      Path.join(Overworld.Test.DataDir.path(), "recovery-#{System.unique_integer([:positive])}")

    on_exit(fn -> File.rm_rf(dir) end)
    %{dir: dir}
  end

  # Every coin of the world: the critters' coins and the players' totals (conserved).
  defp coins(entities), do: entities |> Enum.map(&entity(&1, :data)) |> Enum.sum()

  defp ids(zone), do: zone |> Zone.entities() |> Enum.map(&entity(&1, :id)) |> Enum.sort()

  # The first tick that started after `since` (the restarted server's).
  defp first_tick_after(zone, since) do
    receive do
      {:overworld_tick, ^zone, n, t0} when t0 > since -> {n, t0}
      {:overworld_tick, ^zone, _, _} -> first_tick_after(zone, since)
    after
      5_000 -> flunk("no tick within 5 s of the kill")
    end
  end

  defp await_ticks(zone, k) when k > 0 do
    receive do
      {:overworld_tick, ^zone, _, _} -> await_ticks(zone, k - 1)
    after
      5_000 -> flunk("the zone stopped ticking")
    end
  end

  defp await_ticks(_zone, _k), do: :ok

  # A test game world (critters with coins) served by `name` with `n` players hunting critters
  # over real sockets, this process subscribed to its ticks, `warm` ticks in: the players, their
  # walkers, and what must survive every restart (entity ids, coins, players).
  defp loaded(name, zone, critters, zone_opts, n, warm) do
    world = start_world(name, zone, critters: critters, zone_opts: [coins: true] ++ zone_opts)
    players = for _ <- 1..n, do: join(world)
    walkers = Enum.map(players, &Walker.start(&1, hunt: true))
    :ok = Zone.subscribe(zone, self())
    await_ticks(zone, warm)
    {players, walkers, {ids(zone), coins(Zone.entities(zone)), Zone.info(zone).players}}
  end

  test "100 kills of the zone server at random ticks: entities, players, sessions and loot intact",
       %{dir: dir} do
    zone = {__MODULE__, :kills}

    {players, walkers, {before_ids, coins0, players0}} =
      loaded(
        __MODULE__.Kills,
        zone,
        10_000,
        [data_dir: dir, snapshot_ticks: 60, max_restarts: 1_000],
        4,
        10
      )

    assert length(before_ids) == 10_004

    {times, _log} =
      with_log(fn ->
        for k <- 1..100 do
          await_ticks(zone, :rand.uniform(6))
          old = Zone.whereis(zone)
          killed_at = System.monotonic_time()
          Process.exit(old, :kill)
          {_n, t0} = first_tick_after(zone, killed_at)
          us = System.convert_time_unit(t0 - killed_at, :native, :microsecond)
          assert Zone.whereis(zone) != old
          assert Zone.count(zone) == 10_004

          if rem(k, 10) == 0 do
            entities = Zone.entities(zone)
            assert Enum.sort(Enum.map(entities, &entity(&1, :id))) == before_ids
            assert coins(entities) == coins0
            assert Zone.info(zone).players == players0
          end

          us
        end
      end)

    times = Stats.summary(times)

    IO.puts(
      "\nzone server killed 100 times (10,000 critters, 4 players): recovery (kill to the first " <>
        "tick of the new server) #{Stats.describe(times, [50, 99], unit: " µs")}"
    )

    # From memory, in milliseconds (a fall back to the disk or a clock wait would be far more).
    assert times.median < 50_000

    # Every player is still connected, and its snapshots (a keyframe after each restart) apply.
    for {w, p} <- Enum.zip(walkers, players) do
      {view, acc} = Walker.report(w)
      assert acc.closed == nil
      assert acc.snapshots > 100
      assert Enum.any?(view.cells, fn {_k, l} -> List.keymember?(l, p.entity, 0) end)
      # Acknowledged pickups: the totals only grow.
      totals = acc.events |> Enum.reverse() |> Enum.map(&elem(&1, 2))
      assert totals == Enum.sort(totals)
    end

    entities = Zone.entities(zone)
    assert coins(entities) == coins0
    picked = for e <- entities, entity(e, :kind) == :player, do: entity(e, :data)

    IO.puts(
      "loot picked up by the players meanwhile: #{inspect(picked, charlists: :as_lists)} coins"
    )

    # The hunters did pick some up: the coins above moved while the server kept dying.
    assert Enum.sum(picked) > 0
  end

  # The critters' ids, never changing, and the joined players' avatars.
  defp world_ids(critters, players),
    do: Enum.sort(Enum.to_list(1..critters) ++ Map.values(players))

  # The `k`th tick that starts from now on (notices of earlier ticks skipped): `{n, t0}`.
  defp fresh_ticks(zone, k) do
    Enum.reduce(1..k, {nil, System.monotonic_time()}, fn _, {_n, since} ->
      first_tick_after(zone, since)
    end)
  end

  # A new player over a real socket, hunting: the world's players and walkers with it.
  defp join_hunter(world, w) do
    p = join(world)
    walker = Walker.start(p, hunt: true)
    %{w | players: Map.put(w.players, p.user, p.entity), walkers: [{walker, p} | w.walkers]}
  end

  # The newest player that joined during the test leaves (a close 1000 from its client: it
  # leaves at once) and takes its coins with it: the world's total drops by exactly that
  # (the only change of the total while no worker dies; checked below, with every kill).
  defp leave_newest(world, w) do
    [{walker, p} | rest] = w.walkers
    before = Zone.entities(world.zone)
    carrying = Enum.find_value(before, &(entity(&1, :id) == p.entity && entity(&1, :data)))
    :ok = Client.send_raw(p.conn, Client.frame(8, <<1000::16>>))
    assert_receive {:walker_closed, ^walker, {:close, 1000}}, 5_000
    {_view, acc} = Walker.report(walker, true)
    eventually(fn -> not Map.has_key?(Zone.info(world.zone).players, p.user) end)
    # Its despawn takes effect at the end of the next tick that starts.
    fresh_ticks(world.zone, 1)
    left = coins(Zone.entities(world.zone))
    carried = coins(before) - left
    # What it carried: what it had (and what was acknowledged to it), and what it picked up
    # since, in the ticks before its despawn.
    assert carried >= carrying
    assert carried >= Enum.max(Enum.map(acc.events, &elem(&1, 2)), fn -> 0 end)

    %{
      w
      | players: Map.delete(w.players, p.user),
        walkers: rest,
        coins: left,
        joined: w.joined - 1,
        leaves: w.leaves + 1,
        carried: w.carried + carried
    }
  end

  @critters 10_000
  @snapshot_ticks 15

  test "29 kills of bucket workers at random ticks, during and between ticks and during a " <>
         "recovery: every entity of the snapshot and the journal, players and loot intact, " <>
         "sessions connected",
       %{dir: dir} do
    zone = {__MODULE__, :workers}
    test = self()
    handler = {__MODULE__, make_ref()}

    :ok =
      Overworld.Telemetry.attach(handler, [:overworld, :zone, :recovered], fn _, m, meta, _ ->
        if meta.zone == zone, do: send(test, {:recovered, meta.from, meta.tick, m.duration})
      end)

    on_exit(fn -> Overworld.Telemetry.detach(handler) end)

    world =
      start_world(__MODULE__.Workers, zone,
        critters: @critters,
        zone_opts: [
          coins: true,
          data_dir: dir,
          snapshot_ticks: @snapshot_ticks,
          max_restarts: 1_000
        ]
      )

    coins0 = Enum.sum(Enum.map(1..@critters, &Game.loot/1))
    workers = Zone.config(zone).workers
    :ok = Zone.subscribe(zone, self())
    # Four players hunting from the start; more join and leave between the kills (their
    # joins and leaves are journaled: those after the newest snapshot are replayed from it).
    w = %{players: %{}, walkers: [], coins: coins0, joined: 0, joins: 0, leaves: 0, carried: 0}
    w = Enum.reduce(1..4, w, fn _, w -> join_hunter(world, w) end)
    fresh_ticks(zone, 10)
    assert Zone.info(zone).players == w.players

    # Half of the kills while a tick runs, half between two ticks, in a random order; four
    # of them followed by a second kill while the zone recovers from the first.
    plan =
      Enum.shuffle(
        List.duplicate(:during, 11) ++
          List.duplicate(:between, 10) ++
          [:during_again, :during_again, :between_again, :between_again]
      )

    {{w, kills}, _log} =
      with_log(fn ->
        plan
        |> Enum.with_index()
        |> Enum.reduce({w, []}, fn {at, k}, {w, kills} ->
          fresh_ticks(zone, 1 + :rand.uniform(12))
          # Before every other kill a player joins or leaves (at the zone's tick `churned`),
          # most often after the newest snapshot.
          churned = Zone.info(zone).tick

          {w, churned} =
            case rem(k, 4) do
              0 when w.joined < 3 ->
                {%{join_hunter(world, w) | joined: w.joined + 1, joins: w.joins + 1}, churned}

              2 when w.joined > 0 ->
                {leave_newest(world, w), churned}

              _ ->
                {w, nil}
            end

          # The total is conserved while nothing dies: the live zone before the kill.
          assert coins(Zone.entities(zone)) == w.coins

          {moment, again?} =
            case at do
              :during_again -> {:during, true}
              :between_again -> {:between, true}
              moment -> {moment, false}
            end

          delay = if moment == :during, do: :rand.uniform(3) - 1, else: :rand.uniform(11) - 1
          worker = :rand.uniform(workers) - 1
          {killed_at, landed, killed} = Restart.kill_worker(zone, worker, moment, delay)

          # A second kill cuts the recovery short: the zone recovers once, after it.
          killed_at =
            if again?, do: Restart.kill_new_worker(zone, worker, killed), else: killed_at

          {n, t0} = first_tick_after(zone, killed_at)
          us = System.convert_time_unit(t0 - killed_at, :native, :microsecond)

          # The workers and the server restarted; the server recovered from the store: the
          # newest snapshot and the journal after it. The zone went back to the snapshot's
          # tick: the first notice is of the world loaded at it.
          assert_receive {:recovered, from, snapshot_tick, _duration}, 1_000
          assert from == :store

          # (A second kill that came only once the zone had recovered from the first: the
          # recovery after it is the one to check.)
          {snapshot_tick, landed} =
            receive do
              {:recovered, :store, tick, _} -> {tick, {:after_recovery, elem(landed, 1)}}
            after
              0 -> {snapshot_tick, if(again?, do: {:recovering, elem(landed, 1)}, else: landed)}
            end

          assert n == snapshot_tick
          assert snapshot_tick <= elem(landed, 1)
          # The join or leave came after the snapshot was taken: only the journal has it.
          journaled? = churned != nil and churned >= snapshot_tick

          # Every entity: the critters (their ids never change) and the avatars of the players
          # joined, no other; each player with its avatar.
          entities = Zone.entities(zone)
          ids = entities |> Enum.map(&entity(&1, :id)) |> Enum.sort()
          want = world_ids(@critters, w.players)
          assert {ids -- want, want -- ids} == {[], []}
          assert ids == want
          assert Zone.info(zone).players == w.players
          # Every coin: a pickup reaches the recovered state with the journal record of its
          # tick, the critter's side and the player's together (the journal's records are
          # replayed in order, onto the snapshot).
          assert coins(entities) == w.coins

          # The players stay connected: a snapshot of the new server's ticks reached each, it
          # shows their avatar, and nothing acknowledged to them was lost.
          fresh_ticks(zone, 4)
          reports = Walker.report_all(Enum.map(w.walkers, &elem(&1, 0)))
          data = Map.new(Zone.entities(zone), &{entity(&1, :id), entity(&1, :data)})

          for {{view, acc}, {_walker, p}} <- Enum.zip(reports, w.walkers) do
            assert acc.closed == nil
            assert acc.snapshot_at > t0
            assert Enum.any?(view.cells, fn {_k, l} -> List.keymember?(l, p.entity, 0) end)
            totals = acc.events |> Enum.reverse() |> Enum.map(&elem(&1, 2))
            assert totals == Enum.sort(totals)
            assert Enum.max(totals, fn -> 0 end) <= data[p.entity]
          end

          kill = %{
            us: us,
            landed: landed,
            back: elem(landed, 1) - snapshot_tick,
            journaled?: journaled?
          }

          {w, [kill | kills]}
        end)
      end)

    during = Enum.count(kills, &match?(%{landed: {:during, _}}, &1))
    between = Enum.count(kills, &match?(%{landed: {:between, _}}, &1))
    recovering = Enum.count(kills, &match?(%{landed: {:recovering, _}}, &1))
    seconds = length(kills) - during - between
    times = Stats.summary(Enum.map(kills, & &1.us))
    back = Stats.summary(Enum.map(kills, & &1.back))
    picked = for e <- Zone.entities(zone), entity(e, :kind) == :player, do: entity(e, :data)

    IO.puts(
      "\nbucket worker killed #{length(kills) + seconds} times (#{@critters} critters, " <>
        "snapshots every #{@snapshot_ticks} ticks; #{during} kills landed while a tick ran, " <>
        "#{between} between ticks, #{seconds} were followed by a second, #{recovering} of " <>
        "those while the zone recovered from the first; #{w.joins} players joined and #{w.leaves} left meanwhile, " <>
        "#{Enum.count(kills, & &1.journaled?)} times after the newest snapshot, " <>
        "so that only the journal had it): recovery from " <>
        "the store (kill to the first tick of the new server) " <>
        "#{Stats.describe(times, [50, 99], unit: " µs")}; ticks lost to the snapshot " <>
        "#{Stats.describe(back, [50])}; loot held by the players now: " <>
        "#{inspect(picked, charlists: :as_lists)} coins (#{w.carried} carried away by those who left)"
    )

    # The moments aimed at were hit: a kill aimed at a tick lands before the worker has
    # reported it done when the tick takes long enough; most do.
    assert during >= 5
    assert between >= 5
    assert recovering >= 2
    # Joins and leaves were replayed from the journal (not only found in a snapshot).
    assert Enum.count(kills, & &1.journaled?) >= 3
    # The players did pick loot up while the workers kept dying.
    assert Enum.sum(picked) + w.carried > 0
    assert times.median < 1_000_000
  end
end

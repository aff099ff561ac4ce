defmodule Overworld.Zone.RecoveryTest do
  # A loaded zone of the test game (10,000 critters, players walking over real sockets, loot
  # picked up) whose server is killed 100 times at random ticks, and whose bucket worker is
  # killed: the entities, the players, their sessions and every coin of loot survive. Not
  # async: the recovery times are printed, and other tests' load would only blur them.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Test.Walker
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

  defp percentile(sorted, p),
    do: Enum.at(sorted, min(length(sorted) - 1, trunc(length(sorted) * p)))

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

    sorted = Enum.sort(times)

    IO.puts(
      "\nzone server killed 100 times (10,000 critters, 4 players): recovery (kill to the first " <>
        "tick of the new server) p50 #{percentile(sorted, 0.5)} µs, p99 #{percentile(sorted, 0.99)} µs, " <>
        "max #{List.last(sorted)} µs (100 samples)"
    )

    # From memory, in milliseconds (a fall back to the disk or a clock wait would be far more).
    assert percentile(sorted, 0.5) < 50_000

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

  test "a killed bucket worker: the zone restarts from its store (snapshot + journal); players stay",
       %{dir: dir} do
    zone = {__MODULE__, :worker}

    {players, walkers, {before_ids, coins0, players0}} =
      loaded(__MODULE__.Worker, zone, 4_000, [data_dir: dir, snapshot_ticks: 30], 3, 45)

    log =
      capture_log(fn ->
        for _ <- 1..3 do
          await_ticks(zone, 10 + :rand.uniform(30))
          [{worker, _}] = Registry.lookup(Overworld.Registry, {:bucket, zone, 1})
          killed_at = System.monotonic_time()
          Process.exit(worker, :kill)
          first_tick_after(zone, killed_at)
          now_ids = ids(zone)
          assert {before_ids -- now_ids, now_ids -- before_ids} == {[], []}
          assert coins(Zone.entities(zone)) == coins0
          assert Zone.info(zone).players == players0
        end
      end)

    assert log =~ "restarted from store"

    for w <- walkers do
      {_view, acc} = Walker.report(w)
      assert acc.closed == nil
    end

    for p <- players, do: assert(Map.has_key?(Zone.info(zone).players, p.user))
  end
end

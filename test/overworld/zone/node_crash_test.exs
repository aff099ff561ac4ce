defmodule Overworld.Zone.NodeCrashTest do
  # A real `kill -9` of a separate OS process running the server (`mix overworld.server` with
  # the test game, started here) while players pick up loot over real sockets; then the zone recovers from
  # the files the dead node left: every acknowledged pickup is there, and the state is exactly
  # the journal's records applied in order (a prefix of what the node meant to write). Then
  # the server itself starts again on the same directory and the players resume their avatars.
  use ExUnit.Case, async: false
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase, only: [join: 1, join: 2]
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Bench.OsServer
  alias Overworld.Persistence.Journal
  alias Overworld.Test.{Game, Walker}
  alias Overworld.Zone

  @moduletag timeout: 240_000
  @critters 3_000

  setup do
    dir =
      Path.join(System.tmp_dir!(), "overworld-node-crash-#{System.unique_integer([:positive])}")

    on_exit(fn -> File.rm_rf(dir) end)
    %{dir: dir}
  end

  # `mix overworld.server` with the test game (compiled in the test environment) in its own OS
  # process.
  defp start_server(dir) do
    args = ~w(overworld.server --zone Overworld.Test.Game --wire Overworld.Test.Game.Wire
             --name critters --arg critters=#{@critters} --size #{side_m()},#{side_m()}
             --cell-size 12 --port 0 --data-dir #{dir} --interval 3600 --snapshot-ticks 45)

    case OsServer.start(System.find_executable("mix"), args,
           cd: File.cwd!(),
           env: [{~c"MIX_ENV", ~c"test"}],
           timeout: 60_000
         ) do
      {:ok, server} -> server
      {:error, {:exited, s, _}} -> flunk("the server exited with #{s} before listening")
      {:error, {:timeout, _}} -> flunk("the server did not start")
    end
  end

  # The test game's world for @critters, in metres (`Game.zone_options/2`).
  defp side_m, do: :math.sqrt(@critters * 50)

  defp kill9(server) do
    assert server.os_pid, "the server did not print its os pid"
    assert OsServer.stop(server, "KILL") == :exited, "the killed server did not exit"
  end

  defp await_acks(walkers, want, deadline) do
    acks = Enum.flat_map(walkers, fn w -> elem(Walker.report(w), 1).events end)

    cond do
      length(acks) >= want -> :ok
      System.monotonic_time(:millisecond) > deadline -> :ok
      true -> Process.sleep(250) && await_acks(walkers, want, deadline)
    end
  end

  test "kill -9 under load, then recovery: no acknowledged pickup lost, the state is a journal prefix",
       %{dir: dir} do
    server = start_server(dir)
    world = %{port: server.http_port}
    players = for _ <- 1..8, do: join(world)
    walkers = Enum.map(players, &Walker.start(&1, hunt: true))
    # Pickups happen as players reach critters; at least a few acknowledged ones, at most 40 s.
    await_acks(walkers, 10, System.monotonic_time(:millisecond) + 40_000)
    kill9(server)

    # What each player was told (acknowledged after the fsync), by user id.
    acked =
      for {w, p} <- Enum.zip(walkers, players), into: %{} do
        {_view, acc} = Walker.report(w, true)
        {p.user, Enum.reverse(acc.events)}
      end

    n_acked = acked |> Map.values() |> Enum.map(&length/1) |> Enum.sum()
    assert n_acked > 0, "no pickup was acknowledged: the test proves nothing"

    # The zone recovers from the dead node's files (a copy, under another zone id).
    zdir = Path.join(dir, "zones")
    File.cp_r!(Path.join(zdir, "critters"), Path.join(zdir, "crashed"))

    # Every record the journal still holds, in order (segments older than the previous snapshot
    # are deleted: their records are in the snapshots). The recovery applies these last.
    records =
      Path.wildcard(Path.join([zdir, "crashed", "journal.*"]))
      |> Enum.sort()
      |> Enum.flat_map(fn path -> elem(Journal.read(path), 1) end)

    pickups = for {:events, _tick, evs} <- records, {:loot, _, _, _, _, _} = ev <- evs, do: ev

    log =
      capture_log(fn ->
        {:ok, _} =
          Overworld.start_zone(
            Game,
            Game.zone_options(@critters, id: "crashed", data_dir: zdir, clock: :manual)
          )

        Zone.info("crashed")
      end)

    on_exit(fn -> Overworld.stop_zone("crashed") end)
    assert log =~ "restarted from store"
    entities = Map.new(Zone.entities("crashed"), &{entity(&1, :id), &1})
    recovered_players = Zone.info("crashed").players

    # Every acknowledged pickup is in the recovered state: the player has at least that total,
    # the critter is empty.
    for {user, events} <- acked, {cid, _amount, total} <- events do
      pid = Map.fetch!(recovered_players, user)

      assert entity(entities[pid], :data) >= total,
             "acknowledged pickup of critter #{cid} by #{user} (total #{total}) lost"

      assert entity(entities[cid], :data) == 0
    end

    # The state ends with the journal applied in order: a player with records there has its
    # last record's total, every critter looted there is empty, no critter was looted twice,
    # and no coin was made or lost.
    last_totals =
      Enum.reduce(pickups, %{}, fn {:loot, u, _, _, _, t}, acc -> Map.put(acc, u, t) end)

    for {user, total} <- last_totals,
        do: assert(entity(entities[Map.fetch!(recovered_players, user)], :data) == total)

    for {:loot, _, _, cid, _, _} <- pickups, do: assert(entity(entities[cid], :data) == 0)

    looted = Enum.map(pickups, &elem(&1, 3))
    assert looted == Enum.uniq(looted)

    # Critters carry their coins, players their totals: every entity's data is coins.
    coins = Enum.sum(for {_, e} <- entities, do: entity(e, :data))
    assert coins == Enum.sum(Enum.map(1..@critters, &Game.loot/1))

    IO.puts(
      "\nkill -9 of the server: #{n_acked} acknowledged pickups, #{length(pickups)} " <>
        "in the journal since the previous snapshot, all in the recovered state " <>
        "(#{length(records)} journal records replayed)"
    )

    # The server itself starts again on the same files; the players resume their avatars.
    server = start_server(dir)

    try do
      for p <- Enum.take(players, 3) do
        back = join(%{port: server.http_port}, auth: p.auth)
        assert back.entity == p.entity
        Overworld.Client.close(back.conn)
      end
    after
      kill9(server)
    end
  end
end

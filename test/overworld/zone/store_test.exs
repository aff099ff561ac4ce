defmodule Overworld.Zone.StoreTest do
  # A zone's files after a crash, damaged: a torn or corrupt journal tail ends the replay at
  # the last valid record (with a warning), a corrupt snapshot falls back to the previous one;
  # the zone always starts.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  alias Overworld.Test.Game
  alias Overworld.Zone
  alias Overworld.Zone.Store

  setup do
    dir = Path.join(Overworld.Test.DataDir.path(), "store-#{System.unique_integer([:positive])}")
    # A failed test's zone stopped too, so the next test can start its own.
    on_exit(fn ->
      Overworld.stop_zone(:store_test)
      File.rm_rf(dir)
    end)

    %{dir: dir}
  end

  defp start(dir, id, snapshot_ticks \\ 1_000) do
    opts =
      Game.zone_options(300, id: id, data_dir: dir, clock: :manual, snapshot_ticks: snapshot_ticks)

    {:ok, _} = Overworld.start_zone(Game, opts)
    # (A call: the zone has finished starting, and its recovery's log lines are out.)
    Zone.info(id)
  end

  # A zone that took its first snapshot (tick 0), then `players` joined, one per tick (journal
  # records after the snapshot); stopped with its files left behind.
  defp zone_with_journal(dir, id, players) do
    start(dir, id)
    store = Store.whereis(id)

    for p <- players do
      {:ok, _} = Zone.join(id, p, %{})
      {:ok, _} = Zone.tick_now(id)
    end

    journal = Store.journal(store)
    :ok = Overworld.Persistence.Journal.sync(journal)
    :ok = Overworld.stop_zone(id)
    Path.join(dir, "store_test")
  end

  # The newest journal segment rewritten by `fun` (its bytes in, the damaged bytes out).
  defp damage_last_segment(zdir, fun) do
    seg = zdir |> Path.join("journal.*") |> Path.wildcard() |> Enum.max()
    File.write!(seg, seg |> File.read!() |> fun.())
  end

  # The players whose join records are in the valid part of the journal (the snapshot is of
  # tick 0, before any join; loot records may come between the joins).
  defp joined(zdir) do
    zdir
    |> Path.join("journal.*")
    |> Path.wildcard()
    |> Enum.sort()
    |> Enum.flat_map(fn seg -> elem(Overworld.Persistence.Journal.read(seg), 1) end)
    |> Enum.flat_map(fn
      {:join, _, p, _} -> [p]
      _ -> []
    end)
    |> Enum.sort()
  end

  test "a clean restart recovers every player", %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a b c))
    assert File.exists?(Path.join(zdir, "snapshot"))
    capture_log(fn -> start(dir, :store_test) end)
    assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == ~w(a b c)
    Overworld.stop_zone(:store_test)
  end

  test "a zone started again on its files at every snapshot keeps only the segments its two newest snapshots need",
       %{dir: dir} do
    opts = Game.zone_options(300, id: :store_test, data_dir: dir, clock: :manual)
    zdir = Path.join(dir, "store_test")

    counts =
      for _ <- 1..8 do
        capture_log(fn ->
          {:ok, _} = Overworld.start_zone(Game, Keyword.put(opts, :snapshot_ticks, 3))
          # (One snapshot after each start: a zone that moves on as soon as it has one.)
          {:ok, _} = Zone.tick_now(:store_test, 4)
          :ok = Overworld.stop_zone(:store_test)
        end)

        length(Store.segments(zdir))
      end

    # Each start opens a segment, each snapshot another; those before the previous
    # snapshot's go when a snapshot is written, the first of a store's too.
    assert Enum.max(counts) <= 4, "segments after each start: #{inspect(counts)}"
    capture_log(fn -> start(dir, :store_test) end)
    assert Zone.count(:store_test) == 300
  end

  test "a torn journal tail: replay ends at the last whole record", %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a b c))
    damage_last_segment(zdir, &binary_part(&1, 0, byte_size(&1) - 3))

    expected = joined(zdir)
    assert length(expected) >= 2
    log = capture_log(fn -> start(dir, :store_test) end)
    assert log =~ "replay ends at byte"
    assert log =~ "torn_payload"
    assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == expected
    Overworld.stop_zone(:store_test)
  end

  test "a flipped bit in a record: nothing from it on is applied", %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a b c))

    damage_last_segment(zdir, fn bytes ->
      # The last byte of the second record's payload (header 8 bytes; each record 8 + payload).
      <<_::binary-size(8), len1::32, _::binary>> = bytes
      <<_::binary-size(8 + 8 + len1), len2::32, _::binary>> = bytes
      at = 8 + 8 + len1 + 8 + len2 - 1
      <<before::binary-size(at), b, rest::binary>> = bytes
      <<before::binary, Bitwise.bxor(b, 0x10), rest::binary>>
    end)

    # Only the first record is valid: player a's join.
    assert joined(zdir) == ~w(a)
    log = capture_log(fn -> start(dir, :store_test) end)
    assert log =~ "bad_checksum"
    assert Map.keys(Zone.info(:store_test).players) == ~w(a)
    Overworld.stop_zone(:store_test)
  end

  test "the newest segment torn in its header (a crash as a roll made it): the records " <>
         "before it are replayed, and the zone goes on",
       %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a b c))
    expected = joined(zdir)
    assert expected == ~w(a b c)

    # A next segment whose header was torn by the crash.
    "." <> n = zdir |> Path.join("journal.*") |> Path.wildcard() |> Enum.max() |> Path.extname()
    n = String.to_integer(n)
    File.write!(Store.segment_path(zdir, n + 1), <<"OWJ", 1, 0>>)

    log = capture_log(fn -> start(dir, :store_test) end)
    assert log =~ "replay ends at byte 0 (torn_file_header)"
    refute log =~ "unreadable"
    assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == expected

    # It writes on (to a new segment), and recovers again.
    {:ok, _} = Zone.join(:store_test, "d", %{})
    {:ok, _} = Zone.tick_now(:store_test)
    :ok = Overworld.stop_zone(:store_test)
    capture_log(fn -> start(dir, :store_test) end)
    assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == ~w(a b c d)
    Overworld.stop_zone(:store_test)
  end

  test "the newest segment cut inside its header: none of its records, the zone starts from " <>
         "the snapshot before it",
       %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a b c))
    damage_last_segment(zdir, &binary_part(&1, 0, 5))
    assert joined(zdir) == []

    log = capture_log(fn -> start(dir, :store_test) end)
    assert log =~ "torn_file_header"
    assert Zone.info(:store_test).players == %{}
    assert Zone.count(:store_test) == 300
    Overworld.stop_zone(:store_test)
  end

  test "a corrupt snapshot: the previous one, and the journal after it", %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a))
    # A second life: another snapshot (its first tick's: the first becomes snapshot.prev),
    # then more players.
    capture_log(fn -> start(dir, :store_test, 1) end)
    {:ok, _} = Zone.tick_now(:store_test)
    {:ok, _} = Zone.join(:store_test, "b", %{})
    {:ok, _} = Zone.tick_now(:store_test)
    :ok = Overworld.stop_zone(:store_test)
    snap = Path.join(zdir, "snapshot")
    assert File.exists?(snap <> ".prev")
    File.write!(snap, "OWS" <> <<1>> <> :crypto.strong_rand_bytes(200))

    log = capture_log(fn -> start(dir, :store_test) end)
    assert log =~ "previous snapshot"
    assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == ~w(a b)
    Overworld.stop_zone(:store_test)
  end

  test "garbage instead of every file: the zone starts from init/1", %{dir: dir} do
    zdir = zone_with_journal(dir, :store_test, ~w(a))
    for f <- File.ls!(zdir), do: File.write!(Path.join(zdir, f), "garbage")

    capture_log(fn -> start(dir, :store_test) end)
    assert Zone.count(:store_test) == 300
    assert Zone.info(:store_test).players == %{}
    Overworld.stop_zone(:store_test)
  end

  test "players recovered without a session leave after rejoin_ms, even across a server restart",
       %{dir: dir} do
    zone_with_journal(dir, :store_test, ~w(a b))

    opts =
      Game.zone_options(300,
        id: :store_test,
        data_dir: dir,
        clock: :manual,
        snapshot_ticks: 1_000,
        rejoin_ms: 300
      )

    capture_log(fn ->
      {:ok, _} = Overworld.start_zone(Game, opts)
      assert Zone.info(:store_test).players |> Map.keys() |> Enum.sort() == ~w(a b)
      # "b" comes back (a session joins again); "a" does not.
      assert {:error, :already_joined} = Zone.join(:store_test, "b", %{session: self()})
      # A server restart in between keeps the deadline.
      Overworld.Test.Restart.kill_server(:store_test)

      Process.sleep(400)
      assert Map.keys(Zone.info(:store_test).players) == ["b"]
    end)

    Overworld.stop_zone(:store_test)
  end
end

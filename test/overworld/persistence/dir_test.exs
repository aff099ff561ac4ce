defmodule Overworld.Persistence.DirTest do
  # Not async: the second test traces calls in every process.
  use ExUnit.Case, async: false

  alias Overworld.Persistence.{Dir, Journal, SnapshotFile}

  doctest Dir

  @moduletag :tmp_dir

  test "make/1 creates the missing parents, again is fine, a file in the way is an error",
       %{tmp_dir: tmp} do
    dir = Path.join([tmp, "a", "b", "c"])
    assert :ok = Dir.make(dir)
    assert File.dir?(dir)
    assert :ok = Dir.make(dir)
    assert :ok = Dir.sync(dir)

    File.write!(Path.join(tmp, "file"), "x")
    assert {:error, _} = Dir.make(Path.join([tmp, "file", "d"]))
  end

  test "a new journal segment and a snapshot's renames are followed by an fsync of their directory",
       %{tmp_dir: tmp} do
    :erlang.trace_pattern({Dir, :sync, 1}, true, [:local])
    :erlang.trace(:all, true, [:call, {:tracer, self()}])

    on_exit(fn ->
      :erlang.trace(:all, false, [:call])
      :erlang.trace_pattern({Dir, :sync, 1}, false, [:local])
    end)

    journal_dir = Path.join(tmp, "zone")
    {:ok, j} = Journal.open(Path.join(journal_dir, "journal.00000001"))
    {:ok, 1} = Journal.sync_append(j, :an_event)
    # The directory made (its parent synced), then the new segment's name.
    assert syncs() == [tmp, journal_dir]

    # Rolled onto a new segment: its name is synced too before anything in it is acknowledged.
    :ok = Journal.roll(j, Path.join(journal_dir, "journal.00000002"))
    {:ok, _} = Journal.sync_append(j, :another)
    assert syncs() == [journal_dir]
    :ok = Journal.close(j)

    # Reopening an existing segment creates no name: no directory sync.
    {:ok, j} = Journal.open(Path.join(journal_dir, "journal.00000002"))
    :ok = Journal.close(j)
    assert syncs() == []

    snap_dir = Path.join(tmp, "snapshots")
    # In another process: the tracer's own calls are not traced.
    Task.await(
      Task.async(fn ->
        :ok = SnapshotFile.write(Path.join(snap_dir, "snapshot"), %{tick: 1})
        :ok = SnapshotFile.write(Path.join(snap_dir, "snapshot"), %{tick: 2})
      end)
    )

    # The directory made, then one sync after each write's renames.
    assert syncs() == [tmp, snap_dir, snap_dir]
  end

  # The directories synced since the last call, in order (trace messages arrive in order).
  defp syncs do
    receive do
      {:trace, _, :call, {Dir, :sync, [d]}} -> [d | syncs()]
    after
      100 -> []
    end
  end
end

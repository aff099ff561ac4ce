defmodule Overworld.Persistence.SnapshotFileTest do
  use ExUnit.Case, async: true
  import Bitwise

  alias Overworld.Persistence.SnapshotFile

  doctest SnapshotFile

  @moduletag :tmp_dir

  defp state(tick, n), do: %{tick: tick, entities: Enum.map(1..n, &{:entity, &1, tick * &1})}

  test "a new snapshot replaces the current one, which is kept as the previous", %{tmp_dir: dir} do
    path = Path.join(dir, "zone.snap")
    :ok = SnapshotFile.write(path, state(1, 10))
    :ok = SnapshotFile.write(path, state(2, 10))
    assert SnapshotFile.read(path) == {:ok, state(2, 10), :current}
    assert {:ok, bin} = File.read(path <> ".prev")
    assert SnapshotFile.decode(bin) == {:ok, state(1, 10)}
    refute File.exists?(path <> ".tmp")
  end

  test "a corrupt current snapshot falls back to the previous; with both corrupt, an error",
       %{tmp_dir: dir} do
    path = Path.join(dir, "zone.snap")
    :ok = SnapshotFile.write(path, state(1, 50))
    :ok = SnapshotFile.write(path, state(2, 50))

    flip = fn file, at ->
      <<pre::binary-size(at), byte, post::binary>> = File.read!(file)
      File.write!(file, <<pre::binary, bxor(byte, 4), post::binary>>)
    end

    flip.(path, 100)
    assert SnapshotFile.read(path) == {:ok, state(1, 50), :previous}
    flip.(path <> ".prev", 200)

    assert {:error, :no_snapshot, %{current: :bad_checksum, previous: :bad_checksum}} =
             SnapshotFile.read(path)

    assert {:error, :no_snapshot, %{current: :enoent, previous: :enoent}} =
             SnapshotFile.read(Path.join(dir, "none.snap"))
  end

  test "bad bytes are refused, never raised on", %{tmp_dir: _dir} do
    bin = IO.iodata_to_binary(SnapshotFile.encode(state(3, 5)))

    for cut <- 0..(byte_size(bin) - 1) do
      assert {:error, _} = SnapshotFile.decode(binary_part(bin, 0, cut))
    end

    assert SnapshotFile.decode(bin <> "x") == {:error, :trailing_bytes}
    <<"OWS", 1, rest::binary>> = bin
    assert SnapshotFile.decode(<<"OWS", 2, rest::binary>>) == {:error, :unknown_version}
  end

  test "a writer killed at any moment of a write leaves a valid snapshot, old or new",
       %{tmp_dir: dir} do
    path = Path.join(dir, "killed.snap")
    old = state(1, 20_000)
    :ok = SnapshotFile.write(path, old)
    new = state(2, 20_000)

    # How long a whole write takes here, to spread the kills over it.
    {us, :ok} = :timer.tc(fn -> SnapshotFile.write(Path.join(dir, "timing.snap"), new) end)

    outcomes =
      for i <- 1..30 do
        pid = spawn(fn -> SnapshotFile.write(path, new) end)
        Process.sleep(div(us * rem(i, 10), 10_000))
        Process.exit(pid, :kill)
        ref = Process.monitor(pid)
        assert_receive {:DOWN, ^ref, :process, ^pid, _}

        assert {:ok, got, which} = SnapshotFile.read(path)
        assert got in [old, new], "kill #{i}: a state that was never written"
        # Start over from the old state for the next kill.
        :ok = SnapshotFile.write(path, old)
        {got == new, which}
      end

    # Kills landed both before and after the new snapshot was in place.
    assert Enum.any?(outcomes, fn {new?, _} -> not new? end)
  end
end

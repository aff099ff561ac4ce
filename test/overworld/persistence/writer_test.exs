defmodule Overworld.Persistence.WriterTest do
  use ExUnit.Case, async: true

  alias Overworld.Persistence.{SnapshotFile, Writer}

  doctest Writer

  @moduletag :tmp_dir

  test "submitting never waits on disk; the newest state wins; the file holds it", %{
    tmp_dir: dir
  } do
    path = Path.join(dir, "zone.snap")
    {:ok, w} = Writer.start_link(path: path)
    big = fn t -> %{tick: t, entities: Enum.map(1..50_000, &{:entity, &1, t})} end
    states = for t <- 1..20, do: big.(t)

    # Handing 20 large states over takes far less than writing one of them.
    {submit_us, _} =
      :timer.tc(fn -> for {s, t} <- Enum.with_index(states, 1), do: Writer.submit(w, t, s) end)

    :ok = Writer.flush(w)
    info = Writer.info(w)

    assert info.last_tick == 20
    assert info.writes + info.replaced == 20
    assert info.replaced > 0, "#{inspect(info)}: every state was written, none replaced"
    assert submit_us < info.last_write_us * 5
    assert SnapshotFile.read(path) == {:ok, big.(20), :current}
  end

  test "a failing write is counted and logged; the writer carries on", %{tmp_dir: dir} do
    # A file where the snapshot's directory should be: nothing can be written there.
    File.write!(Path.join(dir, "a-file"), "")
    path = Path.join([dir, "a-file", "blocked.snap"])
    {:ok, w} = Writer.start_link(path: path)

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        Writer.submit(w, 1, :state)
        :ok = Writer.flush(w)
      end)

    assert log =~ "snapshot of tick 1"
    assert %{failures: 1, writes: 0} = Writer.info(w)
    ok = Path.join(dir, "fine.snap")
    {:ok, w2} = Writer.start_link(path: ok)
    Writer.submit(w2, 2, :state)
    :ok = Writer.flush(w2)
    assert SnapshotFile.read(ok) == {:ok, :state, :current}
  end

  test "bad options" do
    assert_raise ArgumentError, ~r/expected :path/, fn -> Writer.start_link(path: nil) end
  end
end

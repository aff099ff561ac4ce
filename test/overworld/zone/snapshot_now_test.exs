defmodule Overworld.Zone.SnapshotNowTest do
  # `Overworld.Zone.snapshot/1`: a snapshot of the last completed tick written now, answered
  # once on disk; refused for a zone without files.
  use ExUnit.Case, async: true

  alias Overworld.Persistence.SnapshotFile
  alias Overworld.Test.Game
  alias Overworld.Zone
  alias Overworld.Zone.Store

  setup do
    dir =
      Path.join(Overworld.Test.DataDir.path(), "snapnow-#{System.unique_integer([:positive])}")

    on_exit(fn -> File.rm_rf(dir) end)
    %{dir: dir}
  end

  defp on_disk(id) do
    {:ok, state, :current} = SnapshotFile.read(Path.join(Store.dir(Zone.config(id)), "snapshot"))

    state
  end

  test "a manual zone: the snapshot holds the last tick, answered once written", %{dir: dir} do
    id = {__MODULE__, make_ref()}
    opts = Game.zone_options(50, id: id, data_dir: dir, clock: :manual, snapshot_ticks: 1_000)
    {:ok, _} = Overworld.start_zone(Game, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)

    {:ok, 7} = Zone.tick_now(id, 7)
    assert Zone.snapshot(id) == {:ok, 7}
    assert %{tick: 7, entities: entities} = on_disk(id)
    assert length(entities) == 50

    # Asked again at once: another, of the same tick.
    assert Zone.snapshot(id) == {:ok, 7}
    {:ok, 9} = Zone.tick_now(id, 2)
    assert Zone.snapshot(id) == {:ok, 9}
    assert %{tick: 9} = on_disk(id)
  end

  test "a realtime zone: callers at once all get a written snapshot", %{dir: dir} do
    id = {__MODULE__, make_ref()}
    opts = Game.zone_options(50, id: id, data_dir: dir, tick_rate: 50, snapshot_ticks: 5)
    {:ok, _} = Overworld.start_zone(Game, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)

    answers =
      1..5
      |> Enum.map(fn _ -> Task.async(fn -> Zone.snapshot(id) end) end)
      |> Enum.map(&Task.await(&1, 10_000))

    assert Enum.all?(answers, &match?({:ok, t} when is_integer(t), &1))
    {:ok, last} = Enum.max(answers)
    assert on_disk(id).tick >= last
    # The zone goes on ticking.
    Process.sleep(100)
    assert Zone.info(id).tick > last
  end

  test "refused without files, and for a zone not running" do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(Game, Game.zone_options(10, id: id, clock: :manual))
    on_exit(fn -> Overworld.stop_zone(id) end)
    assert Zone.snapshot(id) == {:error, :no_data_dir}
    assert Zone.snapshot({__MODULE__, :nobody}) == {:error, :not_found}
  end
end

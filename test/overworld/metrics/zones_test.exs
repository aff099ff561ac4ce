defmodule Overworld.Metrics.ZonesTest do
  # The zone families of GET /metrics: persistence (journal fsyncs, snapshots, recoveries
  # from memory and from the store) counted where it happens, and the zones of a world with
  # their world label and crossings.
  use ExUnit.Case, async: true

  alias Overworld.{Names, Zone}
  alias Overworld.Metrics.{Histogram, Zones}
  alias Overworld.Test.{Counter, Crowd, DataDir, PromText}

  defp families, do: Zones.families() |> IO.iodata_to_binary() |> PromText.parse()

  defp eventually(fun, timeout \\ 5_000), do: Overworld.Test.ServerCase.eventually(fun, timeout)

  test "the bounds are bucket floors of the internal histogram, at most 19 and +Inf" do
    bounds = Zones.short_bounds_us()
    assert length(bounds) <= 19
    assert Enum.all?(bounds, &Histogram.exact_bound?/1)
  end

  test "journal fsyncs, snapshots and recoveries are counted" do
    id = {__MODULE__, :counter}
    dir = Path.join(DataDir.path(), "zones-metrics-#{System.unique_integer([:positive])}")
    opts = [id: id, data_dir: dir, clock: :manual, snapshot_ticks: 5, size: {100, 100}]
    {:ok, _} = Overworld.start_zone(Counter, opts)

    on_exit(fn ->
      Overworld.stop_zone(id)
      File.rm_rf(dir)
    end)

    z = %{"zone" => inspect(id)}
    # (Fast ticks: the journal may commit them all at once, and a snapshot under way when
    # the next is due makes the zone skip that one.)
    for _ <- 1..12, do: {:ok, _} = Zone.tick_now(id)
    :ok = Overworld.Persistence.Journal.sync(Zone.Store.journal(Zone.Store.whereis(id)))

    eventually(fn ->
      f = families()

      PromText.value(f, "overworld_zone_journal_fsync_duration_seconds_count", z) > 0 and
        PromText.value(f, "overworld_zone_snapshots_written_total", z) >= 1
    end)

    f = families()
    assert PromText.value(f, "overworld_zone_ticks_total", z) == 12
    assert PromText.value(f, "overworld_zone_journal_fsync_duration_seconds_sum", z) > 0
    assert PromText.value(f, "overworld_zone_snapshot_failures_total", z) == 0
    assert PromText.value(f, "overworld_zone_recoveries_total", Map.put(z, "from", "memory")) == 0
    assert PromText.value(f, "overworld_zone_recovery_duration_seconds_count", z) == 0

    # The server dies: it comes back from the in-memory copy.
    Process.exit(Names.whereis(Names.zone(id)), :kill)

    eventually(fn ->
      PromText.value(families(), "overworld_zone_recoveries_total", Map.put(z, "from", "memory")) ==
        1
    end)

    # A worker dies: the workers restart empty, the server recovers from the store.
    Process.exit(Names.whereis(Names.bucket(id, 0)), :kill)

    eventually(fn ->
      PromText.value(families(), "overworld_zone_recoveries_total", Map.put(z, "from", "store")) ==
        1
    end)

    f = families()
    assert PromText.value(f, "overworld_zone_recovery_duration_seconds_count", z) == 2
    assert PromText.value(f, "overworld_zone_recovery_duration_seconds_sum", z) > 0

    assert PromText.value(
             f,
             "overworld_zone_recovery_duration_seconds_bucket",
             Map.put(z, "le", "+Inf")
           ) == 2
  end

  test "a world's zones carry its name, and their crossings and shadows" do
    name = {__MODULE__, :world}

    {:ok, _} =
      Overworld.start_world(Crowd,
        name: name,
        zones: {2, 1},
        workers: 1,
        clock: :manual,
        size: {240, 240},
        cell_size: 12,
        args: [n: 300, side: 240]
      )

    on_exit(fn -> Overworld.stop_world(name) end)
    {:ok, _} = Overworld.World.tick_now(name, 3)

    f = families()

    zones =
      for {l, _} <-
            PromText.samples(f, "overworld_zone_ticks_total", %{"world" => inspect(name)}),
          do: l["zone"]

    assert Enum.sort(zones) == Enum.sort(for rid <- [{0, 0}, {1, 0}], do: inspect({name, rid}))

    for zone <- zones, dir <- ["in", "out"] do
      labels = %{"zone" => zone, "world" => inspect(name), "direction" => dir}
      assert is_float(PromText.value(f, "overworld_zone_crossings_total", labels))
    end

    assert PromText.value(f, "overworld_zone_shadow_messages_total", %{"zone" => hd(zones)}) > 0
    # A zone of a world has no data directory here: no journal families for it.
    assert PromText.samples(f, "overworld_zone_journal_fsync_duration_seconds_count", %{
             "zone" => hd(zones)
           }) == []
  end
end

defmodule Overworld.Bench.Soak do
  @moduledoc false
  # The world soak (`mix overworld.soak.world`): a world of zones runs on the realtime clock
  # for a long while, its entities crossing borders, and a zone is killed at `kills` random
  # moments spread over the run. After every kill, once the zone runs again, the world's
  # entity ids are read (settled: a read may catch an entity in flight between two zones, so
  # reads 50 ms apart: see check/2) and compared with those at the start: an id missing, or
  # twice, in every read is lost or duplicated. Printed per kill, and
  # summed: kills by kind, recovery time, crossings, handoff latency, overruns.
  #
  # What is killed, in turn: the zone's server (it restarts from its in-memory copy); with a
  # data directory also one of its bucket workers (the zone restarts from its snapshot and
  # journal) and its whole supervisor with every process of the zone (the world's supervisor
  # starts it again from its files). Without a data directory a lost worker would take the
  # zone's entities with it (a world zone then starts again empty): not a kill to survive.

  alias Overworld.{Names, World, Zone}
  alias Overworld.Bench.Stats
  alias Overworld.Metrics.Histogram

  @settle_reads 20
  @settle_ms 50
  @recover_ms 30_000

  @doc """
  Runs the soak. `opts`: `:module` (exporting `zone_options(entities, extra)`), `:zones`
  `{cols, rows}`, `:entities` per zone, `:seconds`, `:kills`, `:warmup` seconds, `:workers`,
  `:wire`, `:args`, `:data_dir` (nil: in memory), `:seed`, `:print`.
  """
  @spec run(keyword) :: map
  def run(opts) do
    print = Keyword.get(opts, :print, fn _ -> :ok end)
    :rand.seed(:exsss, {opts[:seed], 7, 11})
    name = {__MODULE__, make_ref()}
    {zc, zr} = opts[:zones]
    {:ok, _} = Overworld.start_world(opts[:module], options(opts, name, zc * zr))
    Process.sleep(opts[:warmup] * 1000)
    zones = World.zones(name)
    start = settled(name)
    m0 = Map.new(zones, &{&1, Zone.metrics(&1)})
    h0 = Map.new(zones, &{&1, Histogram.snapshot(Zone.metrics_ref(&1).handoff_ticks)})
    kinds = if opts[:data_dir], do: [:server, :worker, :zone], else: [:server]
    t0 = System.monotonic_time(:millisecond)
    period = opts[:seconds] * 1000 / opts[:kills]

    kills =
      for k <- 0..(opts[:kills] - 1)//1 do
        # A random moment within the k-th slice of the run.
        at = t0 + round(period * (k + :rand.uniform()))
        Process.sleep(max(at - System.monotonic_time(:millisecond), 0))
        victim = Enum.random(zones)
        kind = Enum.at(kinds, rem(k, length(kinds)))
        {recover_ms, crossings} = kill(name, victim, kind, opts)
        check = check(name, start)

        print.(
          "kill #{k + 1}/#{opts[:kills]} at #{div(System.monotonic_time(:millisecond) - t0, 1000)} s: " <>
            "#{kind} of #{inspect(elem(victim, 1))}, running again in #{recover_ms} ms; " <>
            "entities #{check.entities}, lost #{check.lost}, duplicated #{check.duplicated} " <>
            "(#{check.reads} reads); #{crossings} crossings so far"
        )

        Map.merge(check, %{kind: kind, zone: inspect(elem(victim, 1)), recover_ms: recover_ms})
      end

    # The rest of the run, and a last check.
    Process.sleep(max(t0 + opts[:seconds] * 1000 - System.monotonic_time(:millisecond), 0))
    final = check(name, start)
    seconds = (System.monotonic_time(:millisecond) - t0) / 1000
    m1 = Map.new(zones, &{&1, Zone.metrics(&1)})

    handoff =
      zones
      |> Enum.map(&Histogram.diff(Histogram.snapshot(Zone.metrics_ref(&1).handoff_ticks), h0[&1]))
      |> Enum.reduce(&Histogram.merge/2)

    Overworld.stop_world(name)
    # (A zone killed restarts its counters: the crossings of the zones that were never
    # killed count from the start, the others from their last restart; a floor.)
    crossings =
      Enum.sum(for z <- zones, do: max(m1[z].world.crossings_in - m0[z].world.crossings_in, 0))

    recover = Stats.summary(for k <- kills, do: k.recover_ms)

    %{
      zones: [zc, zr],
      entities_per_zone: opts[:entities],
      entities: length(start),
      seconds: Float.round(seconds, 1),
      data_dir: opts[:data_dir] != nil,
      kills: length(kills),
      kills_by_kind: kills |> Enum.frequencies_by(& &1.kind) |> Map.new(fn {k, v} -> {k, v} end),
      recover_ms: recover,
      lost: Enum.sum(for k <- kills, do: k.lost) + final.lost,
      duplicated: Enum.sum(for k <- kills, do: k.duplicated) + final.duplicated,
      checks: length(kills) + 1,
      final: final,
      crossings_at_least: crossings,
      crossings_per_s_at_least: Float.round(crossings / seconds, 1),
      handoff_ticks: Histogram.summary(handoff),
      overruns: Enum.sum(for z <- zones, do: max(m1[z].overruns - m0[z].overruns, 0)),
      per_kill: kills
    }
  end

  defp options(opts, name, zones) do
    extra =
      [name: name, zones: opts[:zones], workers: opts[:workers], wire: opts[:wire]] ++
        if(opts[:data_dir], do: [data_dir: opts[:data_dir]], else: [])

    base = opts[:module].zone_options(opts[:entities] * zones, extra)
    Keyword.update(base, :args, opts[:args], &Keyword.merge(&1, opts[:args]))
  end

  # Kills the victim's process of that kind and waits until the zone answers again; the ms
  # it took, and the world's crossings so far (its zones' counters).
  defp kill(name, zone, kind, _opts) do
    old = Zone.whereis(zone)
    t = System.monotonic_time(:millisecond)

    case kind do
      :server -> Process.exit(old, :kill)
      :worker -> Process.exit(Names.whereis(Names.bucket(zone, :rand.uniform(2) - 1)), :kill)
      :zone -> Process.exit(Names.whereis(Names.zone_sup(zone)), :kill)
    end

    :ok = running_again(zone, old, t + @recover_ms)
    ms = System.monotonic_time(:millisecond) - t
    crossings = Enum.sum(for z <- World.zones(name), do: crossings(z))
    {ms, crossings}
  end

  defp crossings(zone) do
    Zone.metrics(zone).world.crossings_in
  catch
    :exit, _ -> 0
  end

  defp running_again(zone, old, deadline) do
    with pid when is_pid(pid) and pid != old <- Zone.whereis(zone),
         %{tick: _} <- Zone.info(zone) do
      :ok
    else
      _ -> retry(zone, old, deadline)
    end
  catch
    :exit, _ -> retry(zone, old, deadline)
  end

  defp retry(zone, old, deadline) do
    if System.monotonic_time(:millisecond) > deadline,
      do: raise("zone #{inspect(zone)} did not run again within #{@recover_ms} ms"),
      else: Process.sleep(5) && running_again(zone, old, deadline)
  end

  # The world's ids against those at the start. The zones are read one after the other while
  # entities cross between them, so a read may miss one in flight or see it twice: an id is
  # lost (or duplicated) only if every read, up to @settle_reads of them @settle_ms apart,
  # misses it (has it twice). A read equal to the start's ends the check at once.
  defp check(name, start) do
    want = MapSet.new(start)
    {lost, twice, last, reads} = reads(name, start, want, nil, nil, 1)

    %{
      entities: length(last),
      lost: MapSet.size(lost),
      duplicated: MapSet.size(twice),
      reads: reads
    }
  end

  defp reads(name, start, want, lost, twice, n) do
    got = ids(name)
    set = MapSet.new(got)
    missing = MapSet.difference(want, set)
    doubled = MapSet.new(got -- MapSet.to_list(set))
    lost = if lost, do: MapSet.intersection(lost, missing), else: missing
    twice = if twice, do: MapSet.intersection(twice, doubled), else: doubled

    done? =
      got == start or n == @settle_reads or
        (MapSet.size(lost) == 0 and MapSet.size(twice) == 0 and n > 1)

    if done?,
      do: {lost, twice, got, n},
      else: Process.sleep(@settle_ms) && reads(name, start, want, lost, twice, n + 1)
  end

  # The start's ids: two reads merged (an entity in flight during one is in the other).
  defp settled(name), do: Enum.uniq(ids(name) ++ ids(name)) |> Enum.sort()

  defp ids(name) do
    name |> World.entities() |> Enum.map(&elem(&1, 1)) |> Enum.sort()
  catch
    # (A zone restarting again meanwhile: read again.)
    :exit, _ -> Process.sleep(@settle_ms) && ids(name)
  end
end

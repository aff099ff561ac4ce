defmodule Overworld.Bench.Soak do
  @moduledoc false
  # The world soak (`mix overworld.soak.world`): a world of zones runs on the realtime clock
  # for a long while, its entities crossing borders, and a zone is killed at `kills` random
  # moments spread over the run. After every kill, once the zone runs again, the world's
  # entity ids are read, six times 50 ms apart (a read may catch an entity in flight between
  # two zones: see check/2), and compared with those at the start. Printed per kill, and
  # summed (distinct ids lost, duplicated or extra over the run): kills by kind, recovery
  # time, crossings, handoff latency, overruns (see tally/2).
  #
  # What is killed, in turn: the zone's server (it restarts from its in-memory copy); with a
  # data directory also one of its bucket workers (the zone restarts from its snapshot and
  # journal) and its whole supervisor with every process of the zone (the world's supervisor
  # starts it again from its files). Without a data directory a lost worker would take the
  # zone's entities with it (a world zone then starts again empty): not a kill to survive.

  alias Overworld.{Names, World, Zone}
  alias Overworld.Bench.Stats
  alias Overworld.Metrics.Histogram

  @min_reads 6
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
    start = settled(world_ids(name))
    tally = tally(zones, nil)
    kinds = if opts[:data_dir], do: [:server, :worker, :zone], else: [:server]
    t0 = System.monotonic_time(:millisecond)
    period = opts[:seconds] * 1000 / opts[:kills]

    {kills, tally} =
      Enum.map_reduce(0..(opts[:kills] - 1)//1, tally, fn k, tally ->
        # A random moment within the k-th slice of the run.
        at = t0 + round(period * (k + :rand.uniform()))
        Process.sleep(max(at - System.monotonic_time(:millisecond), 0))
        victim = Enum.random(zones)
        kind = Enum.at(kinds, rem(k, length(kinds)))
        # (The counters of a zone whose supervisor is killed start again: read just before.)
        tally = tally(zones, tally)
        recover_ms = kill(victim, kind, opts)
        check = check(world_ids(name), start)

        print.(
          "kill #{k + 1}/#{opts[:kills]} at #{div(System.monotonic_time(:millisecond) - t0, 1000)} s: " <>
            "#{kind} of #{inspect(elem(victim, 1))}, running again in #{recover_ms} ms; " <>
            "entities #{check.entities}, lost #{check.lost}, duplicated #{check.duplicated}, " <>
            "extra #{check.extra} " <>
            "(#{check.reads} reads); #{tally.crossings} crossings so far"
        )

        {Map.merge(check, %{kind: kind, zone: inspect(elem(victim, 1)), recover_ms: recover_ms}),
         tally}
      end)

    # The rest of the run, and a last check.
    Process.sleep(max(t0 + opts[:seconds] * 1000 - System.monotonic_time(:millisecond), 0))
    final = check(world_ids(name), start)
    seconds = (System.monotonic_time(:millisecond) - t0) / 1000
    tally = tally(zones, tally)
    Overworld.stop_world(name)
    recover = Stats.summary(for k <- kills, do: k.recover_ms)
    # Distinct ids over every check (one lost early stays lost in every later check).
    distinct = fn key ->
      [final | kills]
      |> Enum.reduce(MapSet.new(), &MapSet.union(&2, &1.ids[key]))
      |> MapSet.size()
    end

    %{
      zones: [zc, zr],
      entities_per_zone: opts[:entities],
      entities: length(start),
      seconds: Float.round(seconds, 1),
      data_dir: opts[:data_dir] != nil,
      kills: length(kills),
      kills_by_kind: kills |> Enum.frequencies_by(& &1.kind) |> Map.new(fn {k, v} -> {k, v} end),
      recover_ms: recover,
      lost: distinct.(:lost),
      duplicated: distinct.(:duplicated),
      extra: distinct.(:extra),
      checks: length(kills) + 1,
      final: Map.delete(final, :ids),
      crossings: tally.crossings,
      crossings_per_s: Float.round(tally.crossings / seconds, 1),
      handoff_ticks: Histogram.summary(tally.handoff),
      overruns: tally.overruns,
      per_kill: Enum.map(kills, &Map.delete(&1, :ids))
    }
  end

  defp options(opts, name, zones) do
    extra =
      [name: name, zones: opts[:zones], workers: opts[:workers], wire: opts[:wire]] ++
        if(opts[:data_dir], do: [data_dir: opts[:data_dir]], else: [])

    base = opts[:module].zone_options(opts[:entities] * zones, extra)
    Keyword.update(base, :args, opts[:args], &Keyword.merge(&1, opts[:args]))
  end

  # The zones' counters since the start: crossings (adoptions), overruns and handoff latency,
  # added up from each zone's since the last reading (a zone whose supervisor was killed
  # starts its counters again: what it counted between the last reading and the kill is
  # missed, so the sums are floors).
  defp tally(zones, nil) do
    %{
      last: Map.new(zones, &{&1, reading(&1)}),
      crossings: 0,
      overruns: 0,
      handoff: Histogram.snapshot(Histogram.new())
    }
  end

  defp tally(zones, t) do
    Enum.reduce(zones, t, fn z, t ->
      case {reading(z), t.last[z]} do
        {nil, _} ->
          t

        {now, before} ->
          again? =
            before == nil or now.crossings < before.crossings or now.overruns < before.overruns

          before = if again?, do: %{crossings: 0, overruns: 0, handoff: nil}, else: before

          handoff =
            if before.handoff, do: Histogram.diff(now.handoff, before.handoff), else: now.handoff

          %{
            t
            | last: Map.put(t.last, z, now),
              crossings: t.crossings + now.crossings - before.crossings,
              overruns: t.overruns + now.overruns - before.overruns,
              handoff: Histogram.merge(t.handoff, handoff)
          }
      end
    end)
  end

  defp reading(zone) do
    case Zone.metrics_ref(zone) do
      nil ->
        nil

      ref ->
        m = Overworld.Zone.Metrics.report(ref)

        %{
          crossings: m.world.crossings_in,
          overruns: m.overruns,
          handoff: Histogram.snapshot(ref.handoff_ticks)
        }
    end
  end

  # Kills the victim's process of that kind and waits until the zone answers again: the ms it
  # took.
  defp kill(zone, kind, opts) do
    old = Zone.whereis(zone)
    t = System.monotonic_time(:millisecond)

    case kind do
      :server ->
        Process.exit(old, :kill)

      :worker ->
        Process.exit(Names.whereis(Names.bucket(zone, :rand.uniform(opts[:workers]) - 1)), :kill)

      :zone ->
        Process.exit(Names.whereis(Names.zone_sup(zone)), :kill)
    end

    :ok = running_again(zone, old, t + @recover_ms)
    System.monotonic_time(:millisecond) - t
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
  # entities cross between them, so a read may miss one in flight or see it twice (or, at 10K
  # entities a zone and hundreds of crossings a second, nearly every read does): an id is lost
  # (duplicated, or extra: not there at the start) when more than half of `@min_reads` reads,
  # `@settle_ms` apart, miss it (have it twice, have it). One in flight is in one or two reads;
  # a real loss or duplicate in all of them (but those where a copy was in flight). Two reads
  # equal to the start's end the check sooner: nothing lost.
  @doc false
  # (`read`: a function answering the world's ids now, sorted, one per copy: `world_ids/1`
  # for a world on this node; `mix overworld.bench.cluster` reads its nodes.)
  @spec check((() -> [term]), [term]) :: map
  def check(read, start) do
    reads = reads(read, start, [], 0)
    n = length(reads)
    want = MapSet.new(start)

    {lost, twice, extra} =
      if Enum.count(reads, &(&1 == start)) >= 2 do
        {MapSet.new(), MapSet.new(), MapSet.new()}
      else
        sets =
          for got <- reads do
            set = MapSet.new(got)

            {MapSet.difference(want, set), MapSet.new(got -- MapSet.to_list(set)),
             MapSet.difference(set, want)}
          end

        {majority(sets, 0, n), majority(sets, 1, n), majority(sets, 2, n)}
      end

    %{
      entities: length(hd(reads)),
      lost: MapSet.size(lost),
      duplicated: MapSet.size(twice),
      extra: MapSet.size(extra),
      ids: %{lost: lost, duplicated: twice, extra: extra},
      reads: n
    }
  end

  # (Newest read first.)
  defp reads(read, start, acc, exact) do
    got = ids(read, System.monotonic_time(:millisecond) + @recover_ms)
    acc = [got | acc]
    exact = if got == start, do: exact + 1, else: exact

    if exact >= 2 or length(acc) >= @min_reads,
      do: acc,
      else: Process.sleep(@settle_ms) && reads(read, start, acc, exact)
  end

  # The ids in element `i` of more than half of the `n` reads' sets.
  defp majority(sets, i, n) do
    sets
    |> Enum.flat_map(&MapSet.to_list(elem(&1, i)))
    |> Enum.frequencies()
    |> Enum.filter(fn {_id, k} -> 2 * k > n end)
    |> MapSet.new(&elem(&1, 0))
  end

  # The start's ids: two reads merged (an entity in flight during one is in the other).
  @doc false
  @spec settled((() -> [term])) :: [term]
  def settled(read) do
    deadline = System.monotonic_time(:millisecond) + @recover_ms
    Enum.uniq(ids(read, deadline) ++ ids(read, deadline)) |> Enum.sort()
  end

  defp world_ids(name),
    do: fn -> name |> World.entities() |> Enum.map(&elem(&1, 1)) |> Enum.sort() end

  defp ids(read, deadline) do
    read.()
  catch
    # (A zone restarting again meanwhile: read again, for a while.)
    :exit, reason ->
      if System.monotonic_time(:millisecond) > deadline,
        do: exit(reason),
        else: Process.sleep(@settle_ms) && ids(read, deadline)
  end
end

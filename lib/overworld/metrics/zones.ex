defmodule Overworld.Metrics.Zones do
  @moduledoc false
  # The zone families of `GET /metrics` (docs/metrics.md): every zone running on this node,
  # read from its shared atomics and histograms (`Overworld.Zone.Metrics`), found through the
  # registry values (`Overworld.Names.zone_shares/0`). Nothing here sends a message: a scrape
  # never reaches a zone's tick path, whatever the number of zones or entities.
  #
  # Labels: `zone` (the zone id, `inspect/1`ed: a stable printable text) and, for a zone of a
  # world, `world` (the world's name, the same way). Nothing per player or per session. A
  # zone's label set is rendered once, when its supervisor makes its metrics (`labelled/2`).
  #
  # Histograms (tick durations, journal fsyncs, recoveries) are the zone's log-linear
  # histograms (`Overworld.Metrics.Histogram`) read at fixed bounds, each a bucket floor of
  # the internal histogram, so each cumulative count is exact (durations are truncated to
  # whole microseconds: a value below a bound was at most the bound).

  alias Overworld.Metrics.Histogram
  alias Overworld.Metrics.Prometheus, as: P
  alias Overworld.Zone.Metrics

  # Tick and fsync durations: 100 µs to 409.6 ms, doubling then alternately x1.6 and x1.25
  # through the range where ticks live (a 30 Hz tick has 33.3 ms), then doubling again.
  @short_us [100, 200, 400, 800, 1_280, 1_600, 2_560, 3_200, 5_120, 6_400, 10_240, 12_800] ++
              [20_480, 25_600, 40_960, 51_200, 102_400, 204_800, 409_600]
  # Recoveries: 1.6 ms to 13.1 s, doubling.
  @long_us for k <- 0..13, do: 1_600 * Bitwise.bsl(1, k)

  for b <- @short_us ++ @long_us, not Histogram.exact_bound?(b) do
    raise CompileError,
      description: "#{b} µs is not a bucket floor of Overworld.Metrics.Histogram"
  end

  # At most 20 buckets, +Inf included.
  if length(@short_us) >= 20 or length(@long_us) >= 20,
    do: raise(CompileError, description: "more than 20 buckets")

  @short {Enum.map(@short_us, &Histogram.bucket/1), Enum.map(@short_us, &P.seconds/1)}
  @long {Enum.map(@long_us, &Histogram.bucket/1), Enum.map(@long_us, &P.seconds/1)}

  @doc false
  # The bounds of the tick and fsync histograms, in microseconds.
  @spec short_bounds_us() :: [pos_integer]
  def short_bounds_us, do: @short_us

  # {counter field of Overworld.Zone.Metrics, family}, as Overworld.Metrics.Exporter's.
  @counters for {field, name, type, help} <- [
                  {:ticks, "overworld_zone_ticks_total", :counter, "Ticks run."},
                  {:overruns, "overworld_zone_overruns_total", :counter,
                   "Ticks that ended after the next tick's deadline."},
                  {:skipped, "overworld_zone_skipped_deadlines_total", :counter,
                   "Tick deadlines skipped after overruns (never run in a burst)."},
                  {:stalls, "overworld_zone_stalls_total", :counter,
                   "Stall reports: a tick unfinished after the zone's stall_timeout."},
                  {:callback_errors, "overworld_zone_callback_exceptions_total", :counter,
                   "Game callbacks that raised, threw, exited or returned something invalid."},
                  {:entities, "overworld_zone_entities", :gauge, "Entities after the last tick."},
                  {:players, "overworld_zone_players", :gauge,
                   "Players joined, counted at the last tick."}
                ],
                do: {field, P.spec(name, type, help)}

  @world for {field, name, type, help} <- [
               {:shadow_messages, "overworld_zone_shadow_messages_total", :counter,
                "Shadow messages sent to neighbouring zones (a world of zones)."},
               {:shadow_entities, "overworld_zone_shadow_entities_total", :counter,
                "Entities carried by those shadow messages."}
             ],
             do: {field, P.spec(name, type, help)}

  @store for {field, name, type, help} <- [
               {:snapshots, "overworld_zone_snapshots_written_total", :counter,
                "Snapshots written to disk (fsynced, verified, renamed into place)."},
               {:snapshot_failures, "overworld_zone_snapshot_failures_total", :counter,
                "Snapshots that could not be written."}
             ],
             do: {field, P.spec(name, type, help)}

  @tick P.spec(
          "overworld_zone_tick_duration_seconds",
          :histogram,
          "Tick durations, from the clock firing to the last worker done."
        )
  @phase P.spec(
           "overworld_zone_tick_phase_seconds_total",
           :counter,
           "Time spent per tick phase, summed: input, systems (slowest worker), grid " <>
             "(slowest worker), other (handle_tick, messaging)."
         )
  @crossings P.spec(
               "overworld_zone_crossings_total",
               :counter,
               "Entities adopted from (in) and handed to (out) neighbouring zones."
             )
  @fsync P.spec(
           "overworld_zone_journal_fsync_duration_seconds",
           :histogram,
           "Durations of the journal's fsyncs (one per group commit)."
         )
  @recoveries P.spec(
                "overworld_zone_recoveries_total",
                :counter,
                "Restarts of the zone server, by where its state came from."
              )
  @recovery P.spec(
              "overworld_zone_recovery_duration_seconds",
              :histogram,
              "Durations of the zone server's recoveries, from its start until it is about to tick."
            )

  # The families split by one more label: {its text after the zone's labels, counter field}.
  @phases for {v, f} <- [input: :input_us, systems: :systems_us, grid: :grid_us, other: :other_us],
              do: {~s(,phase="#{v}"), f}
  @directions for {v, f} <- [in: :crossings_in, out: :crossings_out],
                  do: {~s(,direction="#{v}"), f}
  @froms for {v, f} <- [memory: :recoveries_memory, store: :recoveries_store],
             do: {~s(,from="#{v}"), f}

  @doc false
  # The zone's shared metrics `shared` with what a scrape needs of the zone of `config` (an
  # `Overworld.Zone.Config`): its label set rendered, whether it is a zone of a world, whether
  # it has a data directory.
  @spec labelled(Metrics.t(), Overworld.Zone.Config.t()) :: Metrics.t()
  def labelled(shared, config) do
    labels = P.labels(zone: inspect(config.id), world: config.world && inspect(config.world.name))

    %{
      shared
      | labels: IO.iodata_to_binary(labels),
        in_world: config.world != nil,
        durable: config.data_dir != nil
    }
  end

  @doc false
  # The zone families, as iodata.
  @spec families() :: iodata
  def families do
    zones =
      for shared <- Overworld.Names.zone_shares() do
        %{labels: shared.labels, m: shared, v: Metrics.values(shared)}
      end
      |> Enum.sort_by(& &1.labels)

    worlds = Enum.filter(zones, & &1.m.in_world)
    disk = Enum.filter(zones, & &1.m.durable)

    [
      histogram(@tick, zones, & &1.ticks_us, @short),
      counters(@counters, zones),
      split(@phase, zones, @phases, &P.seconds(max(&1, 0))),
      if(worlds == [],
        do: [],
        else: [split(@crossings, worlds, @directions), counters(@world, worlds)]
      ),
      split(@recoveries, zones, @froms),
      histogram(@recovery, zones, & &1.recovery_us, @long),
      if(disk == [],
        do: [],
        else: [histogram(@fsync, disk, & &1.fsync_us, @short), counters(@store, disk)]
      )
    ]
  end

  defp counters(specs, zones) do
    for {field, {name, header}} <- specs do
      [header, Enum.map(zones, &P.sample(name, &1.labels, Map.fetch!(&1.v, field)))]
    end
  end

  # One sample per zone and part (`parts`: {label text, field}), its value `value.(counter)`.
  defp split({name, header}, zones, parts, value \\ & &1) do
    [
      header,
      for z <- zones, {label, field} <- parts do
        P.sample(name, [z.labels, label], value.(Map.fetch!(z.v, field)))
      end
    ]
  end

  defp histogram({name, header}, zones, which, {indices, les}) do
    [
      header,
      Enum.map(zones, fn z ->
        {below, count, sum} = Histogram.cumulative(which.(z.m), indices)
        P.histogram(name, z.labels, les, below, count, P.seconds(sum))
      end)
    ]
  end
end

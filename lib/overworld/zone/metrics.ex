defmodule Overworld.Zone.Metrics do
  @moduledoc false
  # Per-zone metrics in atomics: written by the zone server once per tick, read by anybody
  # (`Overworld.Zone.metrics/1`) without a message to the zone.

  alias Overworld.Metrics.Histogram

  # The length of each half of the recent window, in ticks (5 s at 30 Hz).
  @recent_ticks 150

  @fields [
    :ticks,
    :overruns,
    :skipped,
    :callback_errors,
    :stalls,
    :entities,
    :players,
    :input_us,
    :systems_us,
    :grid_us,
    :other_us,
    :last_tick,
    :last_tick_us,
    :crossings_in,
    :crossings_out,
    :shadow_messages,
    :shadow_entities,
    :snapshots,
    :snapshot_failures,
    :recoveries_memory,
    :recoveries_store
  ]
  @index @fields |> Enum.with_index(1) |> Map.new()

  # What a zone shares with any process, made by the zone's supervisor (so it outlives server
  # and worker restarts) and carried in the zone's config (`config.shared`, the zone's
  # registry value): the counters and the tick histogram, `wire` the wire table
  # (`Overworld.Zone.Wire`, nil without a wire), `memory` the in-memory copy
  # (`Overworld.Zone.Memory`), `inputs` the players' input slots (`Overworld.Zone.Inputs`).
  # `recent_us`: two histograms of tick durations that take turns, each `@recent_ticks` ticks
  # long; read together they hold the last `@recent_ticks` to `2 * @recent_ticks` ticks (what
  # is happening now, which the lifetime histogram `ticks_us` hides).
  # `handoff_ticks`: per entity handed to a neighbour, the ticks until the neighbour confirmed
  # it owns it (a world of zones).
  # Persistence (written off the tick path): `fsync_us` the journal's fsyncs (by its writer),
  # `recovery_us` the restarts of the zone server (from its start until it is about to tick); the
  # counters `snapshots`, `snapshot_failures` (by the store) and `recoveries_memory`,
  # `recoveries_store` (by the restarted server, before its first tick).
  @enforce_keys [
    :counters,
    :ticks_us,
    :recent_us,
    :cpu,
    :memory,
    :inputs,
    :handoff_ticks,
    :fsync_us,
    :recovery_us
  ]
  # What `GET /metrics` needs of a zone (`Overworld.Metrics.Zones`), made once by its
  # supervisor (`Overworld.Metrics.Zones.labelled/2`): `labels` its label set rendered
  # (nil for a mirror, which is not scraped), `in_world` whether it is a zone of a world,
  # `durable` whether it has a data directory (a journal and snapshots).
  defstruct [:wire, :mirror, :labels, in_world: false, durable: false] ++ @enforce_keys

  @type t :: %__MODULE__{
          counters: :atomics.atomics_ref(),
          ticks_us: Histogram.t(),
          recent_us: {Histogram.t(), Histogram.t()},
          handoff_ticks: Histogram.t(),
          fsync_us: Histogram.t(),
          recovery_us: Histogram.t(),
          cpu: Overworld.Metrics.CPU.t(),
          wire: :ets.tid() | nil,
          mirror: pid | nil,
          labels: String.t() | nil,
          in_world: boolean,
          durable: boolean,
          memory: :ets.tid() | nil,
          inputs: Overworld.Zone.Inputs.t()
        }

  @spec new(pos_integer, boolean) :: t
  def new(workers, wire?) do
    %__MODULE__{
      counters: :atomics.new(length(@fields), signed: true),
      ticks_us: Histogram.new(),
      recent_us: {Histogram.new(), Histogram.new()},
      handoff_ticks: Histogram.new(),
      fsync_us: Histogram.new(),
      recovery_us: Histogram.new(),
      cpu: Overworld.Metrics.CPU.sample(),
      memory: :ets.new(:overworld_memory, [:set, :public]),
      inputs: Overworld.Zone.Inputs.new(workers),
      wire:
        if(wire?,
          do:
            :ets.new(:overworld_wire, [
              :set,
              :public,
              read_concurrency: true,
              write_concurrency: true
            ])
        )
    }
  end

  @spec add(t, atom, integer) :: :ok
  def add(%__MODULE__{counters: c}, field, n), do: :atomics.add(c, Map.fetch!(@index, field), n)

  @spec put(t, atom, integer) :: :ok
  def put(%__MODULE__{counters: c}, field, n), do: :atomics.put(c, Map.fetch!(@index, field), n)

  @spec get(t, atom) :: integer
  def get(%__MODULE__{counters: c}, field), do: :atomics.get(c, Map.fetch!(@index, field))

  @doc false
  # Every counter's value, read one by one (a reader's view; the writers go on meanwhile).
  @spec values(t) :: %{atom => integer}
  def values(%__MODULE__{counters: c}),
    do: :maps.from_list(for {f, i} <- @index, do: {f, :atomics.get(c, i)})

  @doc false
  # A restart of the zone server recovered (`from` :memory or :store) in `us` microseconds.
  @spec record_recovery(t, :memory | :store, non_neg_integer) :: :ok
  def record_recovery(m, from, us) do
    Histogram.record(m.recovery_us, us)
    add(m, if(from == :memory, do: :recoveries_memory, else: :recoveries_store), 1)
  end

  @doc false
  # Records one finished tick (all times in microseconds).
  @spec record_tick(t, non_neg_integer, map) :: :ok
  def record_tick(m, tick, %{
        total: total,
        input: input,
        systems: systems,
        grid: grid,
        other: other,
        entities: n
      }) do
    Histogram.record(m.ticks_us, total)
    ticks = :atomics.add_get(m.counters, Map.fetch!(@index, :ticks), 1)
    recent = elem(m.recent_us, rem(div(ticks, @recent_ticks), 2))
    # This half now starts a new window: what it held is two windows old.
    if rem(ticks, @recent_ticks) == 0, do: Histogram.reset(recent)
    Histogram.record(recent, total)
    add(m, :input_us, input)
    add(m, :systems_us, systems)
    add(m, :grid_us, grid)
    add(m, :other_us, other)
    put(m, :entities, n)
    put(m, :last_tick, tick)
    put(m, :last_tick_us, total)
  end

  @doc false
  # The tick durations of the last `@recent_ticks` to `2 * @recent_ticks` ticks.
  @spec recent(t) :: Histogram.snapshot()
  def recent(%__MODULE__{recent_us: {a, b}}),
    do: Histogram.merge(Histogram.snapshot(a), Histogram.snapshot(b))

  @spec report(t) :: map
  def report(m) do
    # The recent window first: read before the lifetime histogram, it never holds more ticks.
    recent = Histogram.summary(recent(m))
    ticks = get(m, :ticks)
    avg = fn field -> if ticks > 0, do: get(m, field) / ticks, else: nil end

    %{
      tick: get(m, :last_tick),
      ticks: ticks,
      overruns: get(m, :overruns),
      skipped_deadlines: get(m, :skipped),
      callback_errors: get(m, :callback_errors),
      stalls: get(m, :stalls),
      entities: get(m, :entities),
      players: get(m, :players),
      # In a world of zones: entities adopted from / handed to neighbours, and the shadow
      # messages sent with the entities they carried.
      world: %{
        crossings_in: get(m, :crossings_in),
        crossings_out: get(m, :crossings_out),
        shadow_messages: get(m, :shadow_messages),
        shadow_entities: get(m, :shadow_entities),
        handoff_ticks: Histogram.summary(Histogram.snapshot(m.handoff_ticks))
      },
      tick_us: Histogram.summary(Histogram.snapshot(m.ticks_us)),
      recent_tick_us: recent,
      # Node-wide, since the zone started: what the BEAM really used beside what the OS saw.
      cpu:
        Map.take(Overworld.Metrics.CPU.compare(m.cpu, Overworld.Metrics.CPU.sample()), [
          :scheduler,
          :os_cpu,
          :seconds
        ]),
      phases_avg_us: %{
        input: avg.(:input_us),
        systems: avg.(:systems_us),
        grid: avg.(:grid_us),
        other: avg.(:other_us)
      }
    }
  end
end

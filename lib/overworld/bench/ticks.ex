defmodule Overworld.Bench.Ticks do
  @moduledoc false
  # The tick durations of zones while something runs (telemetry's `[:overworld, :zone, :tick,
  # :stop]`, every tick): per zone, the ticks, p50, p99 (once 100 ticks lie in the window, so
  # that it rests on at least one tick above it), max, overruns and entities.

  alias Overworld.Bench.Stats
  alias Overworld.Zone

  @doc false
  # Runs `fun` while the ticks of `zones` (ids of zones running on this node) are collected;
  # answers `{fun's result, %{zone => summary}}`.
  @spec during([term], (() -> result)) :: {result, %{term => map}} when result: var
  def during(zones, fun) do
    me = self()
    handler = {__MODULE__, make_ref()}
    watched = MapSet.new(zones)

    :ok =
      Overworld.Telemetry.attach(handler, [:overworld, :zone, :tick, :stop], fn _, m, meta, _ ->
        if MapSet.member?(watched, meta.zone), do: send(me, {:bench_tick, meta.zone, m.duration})
      end)

    flush()
    m0 = Map.new(zones, &{&1, Zone.metrics(&1)})

    result =
      try do
        fun.()
      after
        Overworld.Telemetry.detach(handler)
      end

    m1 = Map.new(zones, &{&1, Zone.metrics(&1)})
    samples = collect(%{})

    {result,
     Map.new(zones, fn z ->
       us =
         for d <- Map.get(samples, z, []),
             do: System.convert_time_unit(d, :native, :microsecond)

       s = Stats.summary(us)

       {z,
        %{
          ticks: s.count,
          p50_us: s.p50,
          p99_us: if(s.count >= 100, do: s.p99),
          max_us: s.max,
          overruns: m1[z].overruns - m0[z].overruns,
          entities: m1[z].entities
        }}
     end)}
  end

  defp flush do
    receive do
      {:bench_tick, _, _} -> flush()
    after
      0 -> :ok
    end
  end

  defp collect(acc) do
    receive do
      {:bench_tick, z, d} -> collect(Map.update(acc, z, [d], &[d | &1]))
    after
      0 -> acc
    end
  end
end

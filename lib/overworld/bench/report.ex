defmodule Overworld.Bench.Report do
  @moduledoc false
  # Periodic tick statistics of a zone over a window (used by `mix overworld.server`). A
  # window holds a few hundred ticks: its p99 is left out until it rests on enough of them
  # (`Overworld.Bench.Stats.describe/3`).
  #
  # `start_link/3` runs the reports in a process of their own at high priority, on absolute
  # timers: on a saturated node (where the task's own process and the node's I/O server wait
  # behind thousands of sessions) the lines still come every interval, each with the interval
  # it really covers, and the caller's `out` function decides where they go.

  alias Overworld.Bench.Stats
  alias Overworld.Metrics.{CPU, Histogram}
  alias Overworld.Zone

  defstruct [:zone, :snapshot, :cpu, :metrics]

  @doc false
  # `zone`: a zone id, or `{:world, zones}` (a line per zone, prefixed with its region, and a
  # line of the world's crossings per second).
  @spec start_link(term, pos_integer, (String.t() -> any)) :: {:ok, pid}
  def start_link(zone, interval_ms, out) do
    pid =
      spawn_link(fn ->
        Process.flag(:priority, :high)
        report = start(zone)
        next = System.monotonic_time(:millisecond) + interval_ms
        :erlang.start_timer(next, self(), :line, abs: true)
        report_loop(report, next, interval_ms, out)
      end)

    {:ok, pid}
  end

  defp report_loop(report, due, interval_ms, out) do
    receive do
      {:timeout, _, :line} ->
        {lines, report} = lines(report)
        Enum.each(lines, out)
        # The next line is due one interval after this one was due (not after it was printed):
        # lines never drift, and one that came late does not delay the next.
        now = System.monotonic_time(:millisecond)
        next = max(due + interval_ms, now + 1)
        :erlang.start_timer(next, self(), :line, abs: true)
        report_loop(report, next, interval_ms, out)
    end
  end

  @spec start(term) :: %__MODULE__{} | {:world, [%__MODULE__{}]} | tuple
  def start({:world, zones}), do: {:world, Enum.map(zones, &start/1)}

  # A world over a cluster: the zones running on this node, as they come and go.
  def start({:cluster_world, name}),
    do: {:cluster_world, name, Map.new(here(Overworld.World.zones(name)), &{&1, start(&1)})}

  def start(zone) do
    ref = Zone.metrics_ref(zone)

    %__MODULE__{
      zone: zone,
      snapshot: Histogram.snapshot(ref.ticks_us),
      cpu: CPU.sample(),
      metrics: Zone.metrics(zone)
    }
  end

  # The lines of the window since `prev` (one zone's: one line) and the next window's start.
  defp lines({:world, reports}) do
    {lines, next} = reports |> Enum.map(&line/1) |> Enum.unzip()

    crossings =
      Enum.zip(reports, next)
      |> Enum.map(fn {a, b} -> b.metrics.world.crossings_in - a.metrics.world.crossings_in end)
      |> Enum.sum()

    seconds = CPU.compare(hd(reports).cpu, hd(next).cpu).seconds

    prefixed = for {l, r} <- Enum.zip(lines, reports), do: "zone #{region(r.zone)} | " <> l

    world =
      "world | #{length(reports)} zones | " <>
        "#{Enum.sum(for r <- next, do: r.metrics.entities)} entities | " <>
        "#{Float.round(crossings / max(seconds, 0.001), 1)} crossings/s"

    {prefixed ++ [world], {:world, next}}
  end

  defp lines({:cluster_world, name, reports}) do
    all = Overworld.World.zones(name)
    zones = here(all)

    {lines, next} =
      zones
      |> Enum.map(fn z ->
        case reports do
          %{^z => prev} ->
            {l, n} = line(prev)
            {"zone #{region(z)} | " <> l, {z, n}}

          _ ->
            {"zone #{region(z)} | now runs on this node", {z, start(z)}}
        end
      end)
      |> Enum.unzip()

    header =
      "node #{node()} | #{length(zones)} of #{length(all)} zones of the " <>
        "world here | #{length(Overworld.Cluster.nodes())} nodes in the cluster | " <>
        if(Overworld.Cluster.TLS.enabled?(),
          do: "TLS distribution",
          else: "plain TCP distribution"
        )

    {[header | lines], {:cluster_world, name, Map.new(next)}}
  end

  defp lines(report) do
    {line, next} = line(report)
    {[line], next}
  end

  # Those of the world's zones whose server runs on this node (the local registry, not the
  # cluster's).
  defp here(zones) do
    zones
    |> Enum.filter(&Overworld.Names.whereis(Overworld.Names.zone(&1)))
    |> Enum.sort()
  end

  defp region({_name, {c, r}}), do: "#{c},#{r}"
  defp region({_name, rid}), do: inspect(rid)

  @doc "A one-line summary of the window since `prev`; returns it and the next window's start."
  @spec line(%__MODULE__{}) :: {String.t(), %__MODULE__{}}
  def line(%__MODULE__{zone: zone} = prev) do
    next = start(zone)
    window = Histogram.diff(next.snapshot, prev.snapshot)
    s = Histogram.summary(window)
    cpu = CPU.compare(prev.cpu, next.cpu)
    m = next.metrics
    ticks = m.ticks - prev.metrics.ticks
    per = fn field -> phase_avg(next.metrics, prev.metrics, field, ticks) end

    line =
      "tick #{m.tick} | #{m.entities} entities | #{ticks} ticks in #{Float.round(cpu.seconds, 1)} s | " <>
        "tick µs #{Stats.describe(s, [50, 99], of: "ticks")} | " <>
        "overruns #{m.overruns - prev.metrics.overruns} | " <>
        "phases µs input #{per.(:input)} systems #{per.(:systems)} grid #{per.(:grid)} other #{per.(:other)} | " <>
        "schedulers #{pct(cpu.scheduler)} (OS CPU #{pct(cpu.os_cpu)})" <> physics(zone)

    {line, next}
  end

  # A zone with the sidecar: which side computed its workers' physics steps, since it started.
  defp physics(zone) do
    case Zone.config(zone) do
      %{physics: %{mode: :sidecar} = p} ->
        c = Overworld.Sidecar.counters(p)

        " | physics steps: sidecar #{c.sidecar}, fallback #{c.fallback} (restarts #{max(c.starts - 1, 0)})"

      _ ->
        ""
    end
  end

  defp phase_avg(_now, _prev, _field, 0), do: "-"

  defp phase_avg(now, prev, field, ticks) do
    sum_now = (now.phases_avg_us[field] || 0) * now.ticks
    sum_prev = (prev.phases_avg_us[field] || 0) * prev.ticks
    round((sum_now - sum_prev) / ticks)
  end

  defp pct(nil), do: "n/a"
  defp pct(f), do: "#{Float.round(f * 100, 1)}%"
end

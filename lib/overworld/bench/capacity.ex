defmodule Overworld.Bench.Capacity do
  @moduledoc false
  # The analysis behind `mix overworld.bench.capacity`: one step's figures from the native
  # load generator's result and the server's two status reads around its window, the knee of
  # a curve, and the curve as an SVG plot. Pure functions (the task runs the processes).

  alias Overworld.Metrics.Histogram

  # The knee: every client gets at least this many snapshots a second, and the input to
  # acknowledgement p99 is at most this many ticks.
  @knee_rate 28
  @knee_ack_ticks 3

  @doc """
  One step's figures: the generator's (clients, snapshot rates, input to acknowledgement,
  its own CPU and lag) and the server's over the same window (from `server_before` and
  `server_after`, two `/api/v1/status` bodies the generator read around its window): the
  zone's tick p50/p99/max and overruns, frames sent, scheduler utilization, the busy
  scheduler time per second and the OS CPU.
  """
  @spec step(map) :: map
  def step(gen) do
    # (The generator embeds the two status bodies as JSON objects; null when unanswered.)
    before = gen["server_before"]
    later = gen["server_after"]
    server = server(before, later)
    rates = gen["snapshots_per_second"] || %{}
    ack_ms = gen["ack_ms"] || %{}
    ack_ticks = gen["ack_ticks"] || %{}
    lag = get_in(gen, ["generator", "lag_ms"]) || %{}

    Map.merge(server, %{
      clients: gen["clients"],
      connected: gen["connected"],
      failed: gen["failed"],
      refused: gen["refused"] || 0,
      refusals: gen["refusals"] || 0,
      measured_clients: rates["clients"] || 0,
      failures: gen["failures"],
      closed: gen["closed"],
      close_codes: gen["close_codes"],
      connect_p50_ms: get_in(gen, ["connect_ms", "p50"]),
      connect_max_ms: get_in(gen, ["connect_ms", "max"]),
      seconds: gen["seconds"],
      tick_rate: gen["tick_rate"],
      snapshots_min: rates["min"],
      snapshots_p1: rates["p1"],
      snapshots_median: rates["median"],
      snapshots_mean: rates["mean"],
      longest_gap_max_ms: get_in(gen, ["max_gap_ms", "max"]),
      ack_samples: ack_ms["samples"],
      ack_p50_ms: ack_ms["p50"],
      ack_p99_ms: ack_ms["p99"],
      ack_p50_ticks: ack_ticks["p50"],
      ack_p99_ticks: ack_ticks["p99"],
      ack_max_ticks: ack_ticks["max"],
      bytes_per_second_per_client: gen["bytes_per_second_per_client"],
      generator_cpu: get_in(gen, ["generator", "cpu_of_one_core"]),
      generator_lag_p50_ms: lag["p50"],
      generator_lag_p99_ms: lag["p99"],
      generator_lag_max_ms: lag["max"],
      generator_lagged: get_in(gen, ["generator", "lagged"]) || false,
      generator_why: get_in(gen, ["generator", "why"])
    })
  end

  defp server(nil, _), do: %{server: nil}
  defp server(_, nil), do: %{server: nil}

  defp server(a, b) do
    secs = (b["now_ms"] - a["now_ms"]) / 1000
    zone_a = List.first(a["zones"] || [])
    zone_b = List.first(b["zones"] || [])

    ticks =
      if zone_a && zone_b && zone_a["tick_histogram"] && zone_b["tick_histogram"] do
        Histogram.diff(
          Histogram.from_map(zone_b["tick_histogram"]),
          Histogram.from_map(zone_a["tick_histogram"])
        )
      end

    cpu = cpu(a["cpu"], b["cpu"], secs)
    frames = b["frames_out"] - a["frames_out"]

    %{
      server_seconds: Float.round(secs, 2),
      zone: zone_b && zone_b["name"],
      zone_ticks: ticks && ticks.count,
      tick_p50_us: ticks && Histogram.percentile(ticks, 50),
      tick_p99_us: ticks && Histogram.percentile(ticks, 99),
      tick_max_us: ticks && ticks.max,
      overruns: zone_a && zone_b && zone_b["overruns"] - zone_a["overruns"],
      players: zone_b && zone_b["players"],
      frames_out: frames,
      frames_per_second: Float.round(frames / secs, 1),
      frames_skipped: b["frames_skipped"] - a["frames_skipped"],
      bytes_out_per_second: round((b["bytes_out"] - a["bytes_out"]) / secs),
      refused_connections: b["refused"] - a["refused"],
      refused_joins: (b["refused_joins"] || 0) - (a["refused_joins"] || 0),
      send_interval: b["send_interval"],
      send_interval_changes:
        (b["send_interval_changes"] || 0) - (a["send_interval_changes"] || 0),
      frames_late: (b["frames_late"] || 0) - (a["frames_late"] || 0),
      scheduler_utilization: cpu.utilization,
      busy_us_per_second: cpu.busy_us_per_second,
      os_cpu: cpu.os_cpu
    }
  end

  # Scheduler utilization (0..1 of all normal schedulers), their busy time per second of wall
  # time (µs; 2 schedulers fully busy: 2,000,000) and the OS CPU share of all cores.
  defp cpu(%{"scheduler_total" => t0} = a, %{"scheduler_total" => t1} = b, secs)
       when is_integer(t0) and is_integer(t1) and t1 > t0 and secs > 0 do
    util = (b["scheduler_active"] - a["scheduler_active"]) / (t1 - t0)
    n = b["schedulers"]

    os =
      if is_integer(a["os_cpu_us"]) and is_integer(b["os_cpu_us"]),
        do: Float.round((b["os_cpu_us"] - a["os_cpu_us"]) / (secs * 1_000_000) / n, 3)

    %{
      utilization: Float.round(util, 3),
      busy_us_per_second: round(util * n * 1_000_000),
      os_cpu: os
    }
  end

  defp cpu(_, _, _), do: %{utilization: nil, busy_us_per_second: nil, os_cpu: nil}

  @doc """
  Adds to each step the server's CPU per frame sent: its busy scheduler time per second beyond
  the step without clients, over the frames it sent per second (µs). Steps stay in order; with
  no step of 0 clients the figure is nil.

      iex> steps = [%{clients: 0, busy_us_per_second: 200_000, frames_per_second: 0.0},
      ...>          %{clients: 100, busy_us_per_second: 500_000, frames_per_second: 3000.0}]
      iex> Overworld.Bench.Capacity.per_frame(steps) |> Enum.map(& &1.cpu_us_per_frame)
      [nil, 100.0]
  """
  @spec per_frame([map]) :: [map]
  def per_frame(steps) do
    idle = Enum.find(steps, &(&1.clients == 0 and is_integer(&1[:busy_us_per_second])))

    Enum.map(steps, fn s ->
      value =
        if idle && s.clients > 0 && is_integer(s[:busy_us_per_second]) &&
             is_number(s[:frames_per_second]) && s.frames_per_second > 0,
           do:
             Float.round(
               (s.busy_us_per_second - idle.busy_us_per_second) / s.frames_per_second,
               1
             )

      Map.put(s, :cpu_us_per_frame, value)
    end)
  end

  @doc """
  The knee: the most clients of a step where every client got at least 28 snapshots a second
  and the input to acknowledgement p99 (its maximum where too few acknowledgements back a p99)
  was at most 3 ticks, with every client connected (none failed or refused) and none closed by
  the server. Nil when no
  step with clients qualifies.

      iex> ok = %{connected: 1, failed: 0, closed: 0, snapshots_min: 29.5, ack_p99_ticks: 1.8}
      iex> Overworld.Bench.Capacity.knee([
      ...>   Map.put(ok, :clients, 250),
      ...>   Map.put(ok, :clients, 500),
      ...>   %{ok | snapshots_min: 12.0} |> Map.put(:clients, 750)
      ...> ])
      500
      iex> Overworld.Bench.Capacity.knee([%{clients: 0}])
      nil
  """
  @spec knee([map]) :: non_neg_integer | nil
  def knee(steps) do
    steps
    |> Enum.filter(&within?/1)
    |> Enum.map(& &1.clients)
    |> Enum.max(fn -> nil end)
  end

  defp within?(%{clients: n} = s) when n > 0 do
    ack = s[:ack_p99_ticks] || s[:ack_max_ticks]

    s[:failed] == 0 and s[:closed] == 0 and (s[:refused] || 0) == 0 and
      is_number(s[:snapshots_min]) and
      s.snapshots_min >= @knee_rate and is_number(ack) and ack <= @knee_ack_ticks
  end

  defp within?(_), do: false

  @doc "The knee's thresholds: snapshots a second per client and acknowledgement ticks."
  @spec knee_bar() :: {number, number}
  def knee_bar, do: {@knee_rate, @knee_ack_ticks}

  @doc """
  The curve as an SVG document: per client count, the snapshots a second per client (median
  and the lowest client's), the input to acknowledgement p99 in ticks, and the zone's tick p99
  in milliseconds, on one chart with two y axes (left: snapshots/s, right: ticks and ms).
  """
  @spec svg([map], String.t()) :: iodata
  def svg(steps, title) do
    {w, h, l, r, t, b} = {760, 420, 60, 60, 40, 60}
    xs = Enum.map(steps, & &1.clients)
    xmax = max(Enum.max(xs, fn -> 1 end), 1)

    right_vals =
      for s <- steps, v <- [s[:ack_p99_ticks], ms(s[:tick_p99_us])], is_number(v), do: v

    rmax = nice_max(Enum.max(right_vals, fn -> 1 end))
    lmax = 32
    x = fn n -> l + n / xmax * (w - l - r) end
    yl = fn v -> t + (1 - min(v, lmax) / lmax) * (h - t - b) end
    yr = fn v -> t + (1 - min(v, rmax) / rmax) * (h - t - b) end

    series = [
      {"snapshots/s per client, median", "#1f77b4", yl, & &1[:snapshots_median], ""},
      {"snapshots/s, lowest client", "#1f77b4", yl, & &1[:snapshots_min], "6,4"},
      {"input→ack p99 (ticks, right)", "#d62728", yr, & &1[:ack_p99_ticks], ""},
      {"zone tick p99 (ms, right)", "#2ca02c", yr, &ms(&1[:tick_p99_us]), ""}
    ]

    lines =
      for {{name, color, y, get, dash}, i} <- Enum.with_index(series) do
        pts = for s <- steps, v = get.(s), is_number(v), do: {x.(s.clients), y.(v)}

        [
          ~s(<polyline fill="none" stroke="#{color}" stroke-width="2" stroke-dasharray="#{dash}" points="),
          Enum.map_join(pts, " ", fn {px, py} -> "#{fmt(px)},#{fmt(py)}" end),
          ~s("/>\n),
          for(
            {px, py} <- pts,
            do: ~s(<circle cx="#{fmt(px)}" cy="#{fmt(py)}" r="3" fill="#{color}"/>\n)
          ),
          # The legend: one entry per series along the bottom.
          ~s(<line x1="#{lx(i)}" y1="#{h + 8}" x2="#{lx(i) + 24}" y2="#{h + 8}" stroke="#{color}" ),
          ~s(stroke-width="2" stroke-dasharray="#{dash}"/>),
          ~s(<text x="#{lx(i) + 28}" y="#{h + 12}" font-size="11">#{esc(name)}</text>\n)
        ]
      end

    grid =
      for v <- [0, 8, 16, 24, 32] do
        ~s(<line x1="#{l}" y1="#{fmt(yl.(v))}" x2="#{w - r}" y2="#{fmt(yl.(v))}" stroke="#ddd"/>) <>
          ~s(<text x="#{l - 6}" y="#{fmt(yl.(v) + 4)}" font-size="11" text-anchor="end">#{v}</text>) <>
          ~s(<text x="#{w - r + 6}" y="#{fmt(yl.(v) + 4)}" font-size="11">#{fmt(rmax * v / lmax)}</text>\n)
      end

    ticks =
      for n <- xs do
        ~s(<text x="#{fmt(x.(n))}" y="#{h - b + 16}" font-size="11" text-anchor="middle">#{n}</text>\n)
      end

    [
      ~s(<svg xmlns="http://www.w3.org/2000/svg" width="#{w}" height="#{h + 24}" font-family="sans-serif">\n),
      ~s(<rect width="100%" height="100%" fill="white"/>\n),
      ~s(<text x="#{div(w, 2)}" y="22" font-size="14" text-anchor="middle">#{esc(title)}</text>\n),
      grid,
      ~s(<line x1="#{l}" y1="#{fmt(yl.(@knee_rate))}" x2="#{w - r}" y2="#{fmt(yl.(@knee_rate))}" stroke="#1f77b4" stroke-opacity="0.3" stroke-dasharray="2,3"/>\n),
      ~s(<line x1="#{l}" y1="#{t}" x2="#{l}" y2="#{h - b}" stroke="#333"/>),
      ~s(<line x1="#{l}" y1="#{h - b}" x2="#{w - r}" y2="#{h - b}" stroke="#333"/>\n),
      ticks,
      ~s(<text x="#{div(w, 2)}" y="#{h - b + 32}" font-size="12" text-anchor="middle">clients</text>\n),
      lines,
      "</svg>\n"
    ]
  end

  defp lx(i), do: 10 + i * 185

  defp ms(nil), do: nil
  defp ms(us), do: us / 1000

  defp nice_max(v) do
    Enum.find([4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096], v, &(&1 >= v))
  end

  defp fmt(v) when is_integer(v), do: Integer.to_string(v)
  defp fmt(v), do: :erlang.float_to_binary(v * 1.0, decimals: 1)

  defp esc(text),
    do:
      text
      |> String.replace("&", "&amp;")
      |> String.replace("<", "&lt;")
      |> String.replace(">", "&gt;")
end

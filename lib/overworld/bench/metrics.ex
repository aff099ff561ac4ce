defmodule Overworld.Bench.Metrics do
  @moduledoc false
  # The metrics scrape bench (`mix overworld.bench.metrics`): `zones` zones of `entities`
  # walkers each (`Overworld.Bench.MetricsZone`, ticking at 30 Hz with a journal and
  # snapshots) served by one `Overworld.Server`; after `warmup` seconds, `samples` scrapes
  # timed server-side around the route (`Overworld.Web.handle/2`), in a process of normal
  # priority as the connection runs it, `interval` ms apart, then `http` scrapes over real
  # sockets timed by the client (request to last byte).
  #
  # Server-side, two figures per scrape: its wall time, and its time on a CPU. The zones run
  # at high priority: a scrape that meets a tick waits for it, so its wall time holds the
  # zones' work too. Its own time on a CPU comes from tracing the sampling process's
  # scheduling (`running` events with monotonic timestamps): the sum of the intervals it
  # was scheduled in, within the scrape.
  #
  # The zones' files go to a temporary directory; the server's accounts too, unless
  # `data_dir` says where (a node runs one Mnesia: the directory it already runs in).
  #
  # The zones first run alone for `baseline` seconds, then during the timed scrapes: their tick
  # durations and overruns in both windows, measured in the same run, say whether scrapes
  # reach them.
  #
  # Reported: the three summaries, the body's size and series, and the zones' ticks and
  # overruns without and during the scrapes.

  alias Overworld.Bench.{MetricsZone, Running, Stats}
  alias Overworld.Metrics.Histogram
  alias Overworld.Transport.HTTP.Request

  @server Overworld.Bench.Metrics.Server

  @doc "Runs the bench (options above, `print` a fun of a line) and answers its result."
  @spec run(keyword) :: map
  def run(opts) do
    print = Keyword.get(opts, :print, fn _ -> :ok end)

    dir =
      Path.join(
        System.tmp_dir!(),
        "overworld-bench-metrics-#{System.pid()}-#{System.unique_integer([:positive])}"
      )

    ids = for i <- 1..opts[:zones], do: {:metrics_bench, i}

    try do
      for id <- ids do
        zone = MetricsZone.zone_options(opts[:entities], id: id, data_dir: dir)
        {:ok, _} = Overworld.start_zone(MetricsZone, zone)
      end

      zones = Map.new(Enum.with_index(ids, 1), fn {id, i} -> {"zone-#{i}", id} end)

      {:ok, sup} =
        Overworld.Server.start_link(
          name: @server,
          port: 0,
          data_dir: opts[:data_dir] || dir,
          zones: zones
        )

      Process.unlink(sup)

      try do
        measure(opts, ids, print)
      after
        Supervisor.stop(sup)
      end
    after
      for id <- ids, do: Overworld.stop_zone(id)
      File.rm_rf(dir)
    end
  end

  defp measure(opts, ids, print) do
    print.("warming up #{opts[:warmup]} s (#{opts[:zones]} zones of #{opts[:entities]} entities)")
    Process.sleep(opts[:warmup] * 1000)
    cfg = Overworld.Server.config(@server)
    req = %Request{method: "GET", path: "/metrics", headers: %{}}
    {200, _, body} = Overworld.Web.handle(req, cfg)
    body = IO.iodata_to_binary(body)
    shared = Enum.map(ids, &Overworld.Zone.metrics_ref/1)

    print.("the zones alone for #{opts[:baseline]} s")
    {quiet, :ok} = zones_during(shared, fn -> Process.sleep(opts[:baseline] * 1000) end)
    print.("zones without scrapes: " <> zones_line(quiet))

    print.("#{opts[:samples]} scrapes, #{opts[:interval]} ms apart")

    {busy, {windows, running}} =
      zones_during(shared, fn -> sample(opts[:samples], req, cfg, opts[:interval]) end)

    port = Overworld.Server.port(@server)
    http = for _ <- 1..opts[:http]//1, do: http_scrape(port)

    us = &System.convert_time_unit(&1, :native, :microsecond)
    server = Stats.summary(for {t0, t1} <- windows, do: us.(t1 - t0))
    cpu = Stats.summary(Enum.map(Running.on_cpu(windows, running), us))
    client = Stats.summary(http)
    describe = &Stats.describe(&1, [50, 99], unit: " µs", of: "scrapes")
    print.("scrape (server side, wall time): " <> describe.(server))
    print.("scrape (server side, on a CPU): " <> describe.(cpu))
    print.("scrape over HTTP (client side): " <> describe.(client))
    print.("zones during the scrapes: " <> zones_line(busy))

    series =
      body |> String.split("\n", trim: true) |> Enum.count(&(not String.starts_with?(&1, "#")))

    print.("body: #{byte_size(body)} bytes, #{series} series")

    %{
      zones: opts[:zones],
      entities_per_zone: opts[:entities],
      interval_ms: opts[:interval],
      warmup_s: opts[:warmup],
      scrape_us: server,
      scrape_cpu_us: cpu,
      http_scrape_us: client,
      body_bytes: byte_size(body),
      series: series,
      zones_without_scrapes: quiet,
      zones_during_scrapes: busy
    }
  end

  # What the zones did while `fun` ran (and its result): their ticks' durations (every zone's,
  # together) and overruns, over how many seconds.
  defp zones_during(shared, fun) do
    ticks = fn ->
      shared |> Enum.map(&Histogram.snapshot(&1.ticks_us)) |> Enum.reduce(&Histogram.merge/2)
    end

    overruns = fn -> Enum.sum(for m <- shared, do: Overworld.Zone.Metrics.get(m, :overruns)) end
    {h0, o0, t0} = {ticks.(), overruns.(), System.monotonic_time(:millisecond)}
    result = fun.()
    {h1, o1, t1} = {ticks.(), overruns.(), System.monotonic_time(:millisecond)}
    seconds = (t1 - t0) / 1000

    {%{
       seconds: seconds,
       tick_us: Histogram.summary(Histogram.diff(h1, h0)),
       overruns: o1 - o0,
       overruns_per_s: Float.round((o1 - o0) / seconds, 2)
     }, result}
  end

  defp zones_line(z) do
    Stats.describe(z.tick_us, [50, 99], unit: " µs", of: "ticks") <>
      "; #{z.overruns} overruns in #{round(z.seconds)} s (#{z.overruns_per_s}/s)"
  end

  # `n` scrapes in a process of their own, traced: their windows `{t0, t1}` and the process's
  # running intervals `{in, out}` (native monotonic time, in order).
  defp sample(n, req, cfg, interval) do
    me = self()

    sampler =
      spawn_link(fn ->
        receive do
          :go -> :ok
        end

        windows =
          for _ <- 1..n do
            t0 = System.monotonic_time()
            {200, _, _} = Overworld.Web.handle(req, cfg)
            t1 = System.monotonic_time()
            Process.sleep(interval)
            {t0, t1}
          end

        send(me, {:windows, windows})
      end)

    Running.trace(sampler)
    send(sampler, :go)
    collect(sampler, nil, [], nil)
  end

  # Trace events until the sampler's windows came and every event was delivered.
  defp collect(sampler, windows, events, ref) do
    receive do
      {:trace_ts, ^sampler, inout, _, ts} ->
        collect(sampler, windows, Running.event(events, inout, ts), ref)

      {:windows, w} ->
        collect(sampler, w, events, :erlang.trace_delivered(sampler))

      {:trace_delivered, ^sampler, ^ref} ->
        {windows, Running.intervals(events)}
    end
  end

  defp http_scrape(port) do
    t0 = System.monotonic_time(:microsecond)
    {:ok, 200, _, _} = Overworld.Client.request("127.0.0.1", port, "GET", "/metrics")
    System.monotonic_time(:microsecond) - t0
  end
end

defmodule Overworld.Bench.Metrics do
  @moduledoc false
  # The metrics scrape bench (`mix overworld.bench.metrics`): `zones` zones of `entities`
  # walkers each (`Overworld.Bench.MetricsZone`, ticking at 30 Hz with a journal and
  # snapshots) served by one `Overworld.Server`; after `warmup` seconds, `samples` scrapes
  # timed server-side (`:timer.tc` around the route, `Overworld.Web.handle/2`, in a process
  # of normal priority as the connection runs it, `interval` ms apart), then `http` scrapes
  # over real sockets timed by the client (request to last byte). Reported: both summaries,
  # the body's size and series, and the zones' overruns during the timed scrapes.

  alias Overworld.Bench.{MetricsZone, Stats}
  alias Overworld.Transport.HTTP.Request

  @server Overworld.Bench.Metrics.Server

  @doc "Runs the bench (options above, `print` a fun of a line) and answers its result."
  @spec run(keyword) :: map
  def run(opts) do
    print = Keyword.get(opts, :print, fn _ -> :ok end)

    dir =
      Path.join(
        System.tmp_dir!(),
        "overworld-bench-metrics-#{System.unique_integer([:positive])}"
      )

    ids = for i <- 1..opts[:zones], do: {:metrics_bench, i}

    try do
      for id <- ids do
        zone = MetricsZone.zone_options(opts[:entities], id: id, data_dir: dir)
        {:ok, _} = Overworld.start_zone(MetricsZone, zone)
      end

      zones = Map.new(Enum.with_index(ids, 1), fn {id, i} -> {"zone-#{i}", id} end)

      {:ok, sup} =
        Overworld.Server.start_link(name: @server, port: 0, data_dir: dir, zones: zones)

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
    overruns = fn -> Enum.sum(for id <- ids, do: Overworld.Zone.metrics(id).overruns) end
    before = overruns.()

    print.("#{opts[:samples]} scrapes, #{opts[:interval]} ms apart")
    samples = for _ <- 1..opts[:samples], do: timed(req, cfg, opts[:interval])
    during = overruns.() - before
    port = Overworld.Server.port(@server)
    http = for _ <- 1..opts[:http]//1, do: http_scrape(port)

    server = Stats.summary(samples)
    client = Stats.summary(http)

    print.(
      "scrape (server side): " <> Stats.describe(server, [50, 99], unit: " µs", of: "scrapes")
    )

    print.(
      "scrape over HTTP (client side): " <>
        Stats.describe(client, [50, 99], unit: " µs", of: "scrapes")
    )

    series =
      body |> String.split("\n", trim: true) |> Enum.count(&(not String.starts_with?(&1, "#")))

    print.("body: #{byte_size(body)} bytes, #{series} series; zone overruns meanwhile: #{during}")

    %{
      zones: opts[:zones],
      entities_per_zone: opts[:entities],
      interval_ms: opts[:interval],
      warmup_s: opts[:warmup],
      scrape_us: server,
      http_scrape_us: client,
      body_bytes: byte_size(body),
      series: series,
      zone_overruns_during: during
    }
  end

  # One scrape timed in the connection's stead, then the rest of the interval.
  defp timed(req, cfg, interval) do
    {us, {200, _, _}} = :timer.tc(Overworld.Web, :handle, [req, cfg])
    Process.sleep(interval)
    us
  end

  defp http_scrape(port) do
    t0 = System.monotonic_time(:microsecond)
    {:ok, 200, _, _} = Overworld.Client.request("127.0.0.1", port, "GET", "/metrics")
    System.monotonic_time(:microsecond) - t0
  end
end

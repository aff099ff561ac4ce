defmodule Overworld.Deploy.DashboardTest do
  # deploy/prometheus.yml and deploy/grafana/overworld.json against a real Prometheus
  # (Debian's): it scrapes a running server every second with the scrape configuration
  # (pointed at the test server), and every query of every panel of the dashboard, evaluated
  # through Prometheus's HTTP API, returns data (at least one series with a number). Debian
  # has no Grafana: the dashboard's variables are replaced as Grafana would with "All".
  use ExUnit.Case, async: true
  import Overworld.Test.ServerCase

  alias Overworld.{Names, Zone}
  alias Overworld.Test.{Counter, Crowd, DataDir, Prometheus}

  @moduletag :prometheus
  @moduletag timeout: 60_000

  @root Path.expand("../..", __DIR__)
  @config Path.join(@root, "deploy/prometheus.yml")
  @dashboard Path.join(@root, "deploy/grafana/overworld.json")
  @name Overworld.Deploy.DashboardTest.Server
  # Grafana's variables: every instance and zone ("All"), and a rate window of a few scrapes.
  @variables %{"$instance" => ".*", "$zone" => ".*", "$__rate_interval" => "5s"}

  test "the scrape configuration is valid" do
    assert {out, 0} = System.cmd("promtool", ["check", "config", @config], stderr_to_stdout: true)
    assert out =~ "SUCCESS"
  end

  test "the dashboard's panels each have queries and a place" do
    dash = :jiffy.decode(File.read!(@dashboard), [:return_maps])
    assert %{"uid" => "overworld", "title" => "Overworld", "panels" => panels} = dash
    graphs = Enum.filter(panels, &(&1["type"] != "row"))
    assert length(graphs) >= 20
    assert length(Enum.uniq(for p <- panels, do: p["id"])) == length(panels)

    for p <- graphs do
      assert %{"x" => _, "y" => _, "w" => _, "h" => _} = p["gridPos"]
      assert [_ | _] = p["targets"], "#{p["title"]} has no query"
      assert Enum.all?(p["targets"], &is_binary(&1["expr"]))
    end
  end

  test "Prometheus scrapes a server and every panel's query returns data" do
    w = start_world(@name, {__MODULE__, :critters}, critters: 200)
    # A zone with a journal and snapshots, and a world of two zones (crossings).
    dir = Path.join(DataDir.path(), "dashboard-#{System.unique_integer([:positive])}")
    counter = {__MODULE__, :counter}

    start_supervised!(
      {Zone, {Counter, id: counter, data_dir: dir, snapshot_ticks: 30, size: {100, 100}}},
      id: :counter
    )

    world = {__MODULE__, :world}

    crowd = [
      name: world,
      zones: {2, 1},
      workers: 1,
      size: {120, 120},
      cell_size: 12,
      args: [n: 100, side: 120]
    ]

    start_supervised!(Overworld.World.child_spec({Crowd, crowd}), id: :world)
    on_exit(fn -> File.rm_rf(dir) end)
    player = w |> join() |> snapshots(3)

    yaml = scrape_config(File.read!(@config), w.port)
    prom = Prometheus.start!(yaml)

    try do
      # The first scrapes are in: now a recovery (Prometheus sees its counters move).
      eventually(
        fn -> match?({:ok, [_ | _]}, Prometheus.query(prom, ~s(up{job="overworld"} == 1))) end,
        15_000
      )

      Process.exit(Names.whereis(Names.zone(counter)), :kill)
      _ = snapshots(player, 30)

      exprs =
        for p <- :jiffy.decode(File.read!(@dashboard), [:return_maps])["panels"],
            t <- p["targets"] || [],
            do: {p["title"], substitute(t["expr"])}

      deadline = System.monotonic_time(:millisecond) + 25_000
      missing = await_data(prom, exprs, deadline)
      assert missing == [], "queries without data:\n" <> Enum.map_join(missing, "\n", &inspect/1)
    after
      Prometheus.stop(prom)
    end
  end

  # deploy/prometheus.yml pointed at the test server, scraped every second.
  defp scrape_config(yaml, port) do
    assert yaml =~ "localhost:4000"
    assert yaml =~ ~r/scrape_interval: \S+/

    yaml
    |> String.replace("localhost:4000", "127.0.0.1:#{port}")
    |> String.replace(~r/(scrape_interval|evaluation_interval|scrape_timeout): \S+/, "\\1: 1s")
  end

  defp substitute(expr),
    do: Enum.reduce(@variables, expr, fn {var, value}, e -> String.replace(e, var, value) end)

  # The queries still without data at the deadline (each is asked again until it has some).
  defp await_data(prom, exprs, deadline) do
    missing = Enum.reject(exprs, fn {_, expr} -> data?(Prometheus.query(prom, expr)) end)

    cond do
      missing == [] ->
        []

      System.monotonic_time(:millisecond) > deadline ->
        missing

      true ->
        Process.sleep(500)
        await_data(prom, missing, deadline)
    end
  end

  # At least one series whose value is a number (not NaN).
  defp data?({:ok, result}),
    do: Enum.any?(result, fn %{"value" => [_, v]} -> v not in ["NaN", "+Inf", "-Inf"] end)

  defp data?(_), do: false
end

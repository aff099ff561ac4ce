defmodule Mix.Tasks.Overworld.Server do
  @shortdoc "Serves the goblin world over HTTP/WebSocket and prints its tick statistics"
  @moduledoc """
  Starts Overworld with the goblin world (`examples/goblins`) and its server
  (`Overworld.Server`: the status page on `/`, device authentication, WebSocket sessions on
  `/ws`), and prints the zone's tick statistics every few seconds until stopped (Ctrl-C twice).
  This is what `make run` does.

      mix overworld.server [--port 4000] [--data-dir ./data] [--entities 10000] [--workers N]
                           [--tick-rate 30] [--interval 5] [--seconds S] [--no-persist]
                           [--snapshot-ticks 300]

  The zone keeps its snapshots and journal in `<data-dir>/zones/goblins/` and recovers from
  them when it starts again (after a crash, a `kill -9`): the goblins where the last snapshot
  left them, every acknowledged loot pickup, the players (who resume their avatar when they
  reconnect within 15 s). `--no-persist` starts a fresh world without files.

  `--port 0` picks a free port. Once the server listens it prints
  `listening on http://127.0.0.1:<port>` (tools and tests wait for that line).

  Each line covers the last interval: tick duration p50/p99/max in microseconds, overruns, the
  average of each tick phase, and scheduler utilization beside OS CPU (the BEAM busy-waits, so
  OS CPU over-states the work).
  """
  use Mix.Task

  @switches [
    entities: :integer,
    workers: :integer,
    tick_rate: :integer,
    interval: :integer,
    seconds: :integer,
    port: :integer,
    data_dir: :string,
    persist: :boolean,
    snapshot_ticks: :integer
  ]

  @impl true
  def run(argv) do
    {opts, _, invalid} = OptionParser.parse(argv, strict: @switches)

    if invalid != [],
      do: Mix.raise("invalid options: #{inspect(invalid)}; see `mix help overworld.server`")

    Overworld.Bench.Stats.start_node()

    n = Keyword.get(opts, :entities, 10_000)
    rate = Keyword.get(opts, :tick_rate, 30)
    interval = Keyword.get(opts, :interval, 5)

    data_dir = Keyword.get(opts, :data_dir, "./data")

    zone_opts =
      [id: :goblins, tick_rate: rate, wire: Goblins.Wire]
      |> then(&if opts[:workers], do: Keyword.put(&1, :workers, opts[:workers]), else: &1)
      |> then(
        &if opts[:snapshot_ticks],
          do: Keyword.put(&1, :snapshot_ticks, opts[:snapshot_ticks]),
          else: &1
      )
      |> then(
        &if Keyword.get(opts, :persist, true),
          do: Keyword.put(&1, :data_dir, Path.join(data_dir, "zones")),
          else: &1
      )

    {:ok, _} = Overworld.start_zone(Goblins, Goblins.zone_options(n, zone_opts))
    config = Overworld.Zone.info(:goblins).config

    {:ok, _} =
      Overworld.Server.start_link(
        port: Keyword.get(opts, :port, 4000),
        data_dir: data_dir,
        zones: %{"goblins" => :goblins},
        default_zone: "goblins"
      )

    port = Overworld.Server.port()

    Mix.shell().info(
      "Overworld: goblin world with #{n} goblins in #{Float.round(elem(config.size, 0), 1)} m x " <>
        "#{Float.round(elem(config.size, 1), 1)} m, #{rate} Hz, #{config.workers} bucket workers " <>
        "on #{System.schedulers_online()} schedulers. Statistics every #{interval} s (Ctrl-C to stop)."
    )

    IO.puts("os pid #{System.pid()}")
    IO.puts("listening on http://127.0.0.1:#{port}")

    # (In milliseconds: whole seconds would end a run up to a second early.)
    deadline = if opts[:seconds], do: System.monotonic_time(:millisecond) + opts[:seconds] * 1000
    loop(Overworld.Bench.Report.start(:goblins), interval, deadline)
  end

  defp loop(report, interval, deadline) do
    Process.sleep(interval * 1000)
    {line, report} = Overworld.Bench.Report.line(report)
    Mix.shell().info(line)

    # Within half an interval of the deadline: this was the last line.
    if deadline && System.monotonic_time(:millisecond) + interval * 500 >= deadline do
      :ok
    else
      loop(report, interval, deadline)
    end
  end
end

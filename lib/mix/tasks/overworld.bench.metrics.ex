defmodule Mix.Tasks.Overworld.Bench.Metrics do
  @shortdoc "What a GET /metrics scrape costs the server (N zones with entities)"
  @moduledoc """
  Starts `--zones` zones of `--entities` walkers each (30 Hz, each with a journal written once
  a second and snapshots) served by one `Overworld.Server` on this node and, after `--warmup`
  seconds, times `--samples` scrapes of `GET /metrics` server-side around the route
  (`Overworld.Web.handle/2`, the response built as iodata), in a process of normal priority
  as the connection runs it, `--interval` ms apart: each scrape's wall time, and its time on a
  CPU (the zones run at high priority, and a scrape that meets their ticks waits: the time
  the scraping process was scheduled in, from tracing its scheduling). Then `--http` scrapes
  over real sockets, timed by the client. Before the scrapes the zones run alone for
  `--baseline` seconds: their tick durations and overruns without and during the scrapes,
  in the same run, show whether scrapes reach them.

      mix overworld.bench.metrics [--zones 20] [--entities 1000] [--samples 10000]
                                  [--interval 10] [--warmup 3] [--baseline 30]
                                  [--http 200] [--data-dir DIR] [--json PATH]

  Prints the server-side p50/p99s (a p99 with 10,000 samples or more), the client-side figures,
  the body's size and series, and the zones' ticks and overruns in both windows; writes them
  with `--json` (with the machine). The zones' files go to a temporary directory, removed at
  the end; the server's accounts too, unless `--data-dir` names where they are.

  The target (issue 16): with 20 zones, a scrape costs the server at most 5 ms.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Stats}

  @switches [
    zones: :integer,
    entities: :integer,
    samples: :integer,
    interval: :integer,
    warmup: :integer,
    baseline: :integer,
    http: :integer,
    data_dir: :string,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.metrics")

    o =
      Args.positive!(opts,
        zones: 20,
        entities: 1_000,
        samples: 10_000,
        interval: 10,
        warmup: 3,
        baseline: 30
      )

    http = Keyword.get(opts, :http, 200)
    Args.at_least!([http: http], [:http], 0)

    Stats.start_node()
    machine = Stats.machine()
    Mix.shell().info("Metrics scrape benchmark\n" <> Stats.machine_line(machine))

    result =
      Overworld.Bench.Metrics.run(
        [http: http, data_dir: opts[:data_dir], print: &Mix.shell().info/1] ++ Map.to_list(o)
      )

    Stats.write_result(opts[:json], result, machine)
  end
end

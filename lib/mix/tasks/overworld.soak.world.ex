defmodule Mix.Tasks.Overworld.Soak.World do
  @shortdoc "Runs a world of zones for a long while, killing zones during crossings"
  @moduledoc """
  A world of zones on the realtime clock for `--seconds`, its entities crossing borders, with
  a zone killed at `--kills` random moments spread over the run; after each kill, once the
  zone runs again, every entity of the world must be there exactly once. Run it in the
  game's Mix project:

      mix overworld.soak.world --zone MODULE [--wire MODULE] [--zones 2x2]
                               [--entities-per-zone 10000] [--seconds 600] [--kills 100]
                               [--warmup 3] [--workers N] [--migrate FRACTION]
                               [--data-dir DIR] [--seed N] [--arg KEY=VALUE ...]
                               [--json PATH]

  * `--zone`, `--wire`, `--zones`, `--entities-per-zone`, `--migrate`, `--arg` as for
    `mix overworld.bench.world` (the game's module must export `zone_options/2`).
  * What is killed, in turn: a random zone's server (it restarts from its in-memory copy);
    with `--data-dir` (every zone persists under it, with fsync) also one of its bucket
    workers (the zone restarts from its snapshot and journal) and its whole supervisor,
    every process of the zone at once (started again from its files).
  * `--seed` the random moments and victims (default 1).

  Printed per kill (and written with `--json`): what was killed, the milliseconds until the
  zone answered again, the world's entity count, entities lost, duplicated and extra (ids
  against those at the start, in more than half of six reads 50 ms apart: a read may catch
  one in flight between zones); at the end the distinct ids of each over the run, crossings
  per second, handoff latency and overruns. The task fails (exit status 1) if any entity was
  lost, duplicated or extra.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Stats}

  @switches Mix.Tasks.Overworld.Bench.World.world_switches() ++
              [kills: :integer, data_dir: :string, seed: :integer]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.soak.world")
    Mix.Task.run("compile")
    {module, wire, zones, args} = Mix.Tasks.Overworld.Bench.World.game!(opts)

    o =
      Args.positive!(opts,
        entities_per_zone: 10_000,
        seconds: 600,
        kills: 100,
        warmup: 3,
        workers: System.schedulers_online(),
        seed: 1
      )

    data_dir = opts[:data_dir] && Path.expand(opts[:data_dir])

    if data_dir && File.exists?(data_dir) && File.ls!(data_dir) != [],
      do: Mix.raise("--data-dir #{opts[:data_dir]} is not empty: the soak starts a new world")

    Overworld.Bench.Stats.start_node()
    machine = Stats.machine()
    {zc, zr} = zones

    Mix.shell().info(
      "World soak: #{zc}x#{zr} zones of #{o.entities_per_zone} entities (#{inspect(module)}" <>
        "#{if args != [], do: ", args #{inspect(args)}", else: ""}" <>
        "#{if data_dir, do: ", persisted in #{data_dir}", else: ", in memory"}), " <>
        "#{o.seconds} s, #{o.kills} kills\n" <> Stats.machine_line(machine)
    )

    result =
      Overworld.Bench.Soak.run(
        module: module,
        wire: wire,
        zones: zones,
        entities: o.entities_per_zone,
        seconds: o.seconds,
        kills: o.kills,
        warmup: o.warmup,
        workers: o.workers,
        args: args,
        data_dir: data_dir,
        seed: o.seed,
        print: &Mix.shell().info/1
      )

    r = result.recover_ms
    h = result.handoff_ticks

    Mix.shell().info(
      "#{result.kills} kills (#{inspect(result.kills_by_kind)}) in #{result.seconds} s: " <>
        "running again in p50 #{r.p50} ms, max #{r.max} ms (#{r.count} samples); " <>
        "#{result.entities} entities, lost #{result.lost}, duplicated #{result.duplicated}, " <>
        "extra #{result.extra} " <>
        "over #{result.checks} checks; #{result.crossings_per_s} crossings/s; " <>
        "handoff p99 #{h.p99} ticks (#{h.count} samples); #{result.overruns} overruns"
    )

    Stats.write_result(opts[:json], Map.put(result, :args, inspect(args)), machine)

    if result.lost + result.duplicated + result.extra > 0,
      do:
        Mix.raise(
          "entities lost (#{result.lost}), duplicated (#{result.duplicated}) or extra " <>
            "(#{result.extra})"
        )

    result
  end
end

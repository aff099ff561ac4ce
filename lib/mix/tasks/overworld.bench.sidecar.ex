defmodule Mix.Tasks.Overworld.Bench.Sidecar do
  @shortdoc "The zone's physics per tick: Elixir against the sidecar; a zone through SIGKILLs"
  @moduledoc """
  Measures the physics of zones (docs/sidecar.md, docs/benchmarks.md "The sidecar"):

  1. **The crossover**: for each of `--bodies` (a comma-separated list), a scene of wandering
     bodies among walls and pillars, split in two stripes as a zone of two workers splits it,
     stepped `--ticks` times by two long-lived processes in parallel, bound one per scheduler
     (as the zone's bucket workers are), by the Elixir fallback and by the sidecar over
     sockets and over the shared segment. For the sidecar,
     each worker's marshalling is timed apart: `in` (the entities turned into body records and
     sent), `out` (the answer decoded, checked and merged into the entities as the pass takes
     them), and `wait` (the sidecar's compute and the transfer). Per tick: the slower worker's
     time, the marshalling (the slower worker's `in` plus the slower worker's `out`), and the
     CPU time of the node and of the sidecar. A number of bodies given more than once is
     measured that many times, and the runs' shared-memory marshalling summed up (each run's
     p50, their median, how many above 0.5 ms, each as a fraction of the sockets' and of the
     Elixir tick in the same run): this machine's speed swings from one minute to the next.
  2. **Kills** (`--kills K`, 0 to skip), once per transport (sockets, shared memory): a zone
     of `--kill-bodies` bodies with `physics: :sidecar` ticking at 30 Hz while its sidecar
     gets SIGKILL K times, 0.3 to 0.9 s apart: the zone's tick p50/p99/max, overruns, entities
     before and after, the ticks the fallback computed, and each kill's detection time (from
     the kill, or from when a worker started waiting for the answer if later, to the worker's
     failure or the process's exit seen by its owner, whichever came first), from before the
     `kill` command (its start-up included) and from its return.
  3. **Paths** (`--paths Q`, 0 to skip; default 16, the default bound per worker and tick):
     Q path requests per worker and tick between neighbouring rooms of the 10,000 bodies'
     scene, computed in Elixir and by the sidecar over its sockets and over the shared
     segment (the queries and answers in the workers' regions; all answers checked equal): per
     tick, the slower worker's time.

      mix overworld.bench.sidecar [--bodies 500,2000,5000,10000,50000] [--ticks 200]
                                  [--kills 100] [--kill-bodies 10000] [--paths 16]
                                  [--threads N] [--json PATH]

  Targets (issue 17): the sidecar faster than the Elixir fallback from 2,000 bodies up;
  shared-memory marshalling ≤ 0.5 ms per tick at 10,000 bodies; the zone's tick p99 ≤ 33 ms
  through 100 kills with 10,000 bodies, no entity lost.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Stats}

  @switches [
    bodies: :string,
    ticks: :integer,
    kills: :integer,
    kill_bodies: :integer,
    paths: :integer,
    threads: :integer,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.sidecar")
    o = Args.positive!(opts, ticks: 200, kill_bodies: 10_000)
    kills = Keyword.get(opts, :kills, 100)
    q = Keyword.get(opts, :paths, 16)
    Args.at_least!([kills: kills, paths: q], [:kills, :paths], 0)

    sizes =
      opts
      |> Keyword.get(:bodies, "500,2000,5000,10000,50000")
      |> String.split(",", trim: true)
      |> Enum.map(fn s ->
        case Integer.parse(String.trim(s)) do
          {n, ""} when n > 0 -> n
          _ -> Mix.raise("--bodies: expected positive integers separated by commas, got #{s}")
        end
      end)

    Stats.start_node()
    machine = Stats.machine()
    info = &Mix.shell().info/1
    info.("Sidecar benchmark\n" <> Stats.machine_line(machine))

    exe = Overworld.Sidecar.executable()

    unless File.exists?(exe),
      do: Mix.raise("no sidecar at #{exe}: build it with `make deps-rust`")

    threads = if opts[:threads], do: [threads: opts[:threads]], else: []
    info.("1. The crossover (#{o.ticks} ticks each, two workers)")
    crossover = Overworld.Bench.Sidecar.crossover(sizes, [ticks: o.ticks, print: info] ++ threads)
    repeated = Overworld.Bench.Sidecar.repeated(crossover)

    for r <- repeated do
      info.(
        "#{r.bodies} bodies, #{r.runs} runs: shared-memory marshalling p50s " <>
          "#{Enum.join(r.marshal_p50s_ms, ", ")} ms, median #{r.median_ms} ms, " <>
          "#{r.above_bar} above 0.5 ms; of the sockets' in the same run " <>
          "#{Enum.join(r.of_sockets, ", ")}; of the Elixir tick #{Enum.join(r.of_elixir, ", ")}"
      )
    end

    killed =
      for transport <- if(kills > 0, do: [:socket, :shm], else: []) do
        info.(
          "2. #{kills} SIGKILLs of the sidecar of a zone of #{o.kill_bodies} bodies " <>
            "(transport #{transport})"
        )

        k =
          Overworld.Bench.Sidecar.kills(
            [bodies: o.kill_bodies, kills: kills, transport: transport, print: info] ++ threads
          )

        info.(
          "tick p50 #{k.tick_p50_ms} ms, p99 #{k.tick_p99_ms} ms, max #{k.tick_max_ms} ms " <>
            "(#{k.ticks} ticks), #{k.overruns} overruns; entities #{k.entities_before} → " <>
            "#{k.entities_after}; fallback ticks #{k.fallback_ticks}, sidecar ticks " <>
            "#{k.sidecar_ticks}; starts #{k.starts}; detection p50 #{k.detection_ms.p50} ms, " <>
            "p99 #{k.detection_ms.p99} ms, max #{k.detection_ms.max} ms from before the kill " <>
            "command, p50 #{k.detection_after_kill_command_ms.p50} ms, max " <>
            "#{k.detection_after_kill_command_ms.max} ms from its return " <>
            "(#{k.detection_ms.samples} kills seen, #{k.undetected} not seen by a worker)"
        )

        k
      end

    paths =
      if q > 0 do
        info.(
          "3. Paths: #{q} per worker and tick, two workers, #{o.ticks} ticks, the grid of " <>
            "the 10000 bodies' scene"
        )

        r = Overworld.Bench.Sidecar.paths([q: q, ticks: o.ticks] ++ threads)
        ratio = Float.round(r.elixir_ms.p50 / r.sidecar_ms.p50, 2)
        shm_ratio = Float.round(r.elixir_ms.p50 / r.shm_ms.p50, 2)

        info.(
          "Elixir #{r.elixir_ms.p50} ms/tick (p99 #{r.elixir_ms.p99}), sidecar over sockets " <>
            "#{r.sidecar_ms.p50} ms/tick (p99 #{r.sidecar_ms.p99}), over shared memory " <>
            "#{r.shm_ms.p50} ms/tick (p99 #{r.shm_ms.p99}): Elixir/sidecar #{ratio}×, " <>
            "#{shm_ratio}×; answers #{inspect(r.answers)}, the same from all three: #{r.same} " <>
            "(p50s of #{r.sidecar_ms.samples} ticks)"
        )

        r.same || Mix.raise("the sidecar's paths differ from Elixir's")
        r
      end

    Stats.write_result(
      opts[:json],
      %{
        crossover: crossover,
        repeated: repeated,
        kills: killed,
        paths: paths,
        sidecar: exe,
        date: Date.to_iso8601(Date.utc_today())
      },
      machine
    )
  end
end

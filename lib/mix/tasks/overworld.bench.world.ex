defmodule Mix.Tasks.Overworld.Bench.World do
  @shortdoc "Benchmarks a world of zones against a lone zone (ticks, crossings, handoffs, shadows)"
  @moduledoc """
  A world of zones on this node against a lone zone with the same entities per zone and the
  same options, in alternating rounds of one run. Run it in the game's Mix project:

      mix overworld.bench.world --zone MODULE [--wire MODULE] [--zones 2x2]
                                [--entities-per-zone 10000] [--seconds 30] [--warmup 3]
                                [--rounds 2] [--workers N] [--migrate FRACTION]
                                [--shadow-every K --max-speed M]
                                [--observers 0]
                                [--arg KEY=VALUE ...] [--json PATH]

  * `--zone` the game's zone module; it must export `zone_options(entities, extra)`, the zone
    (or world) options for that many entities with `extra` merged in (the goblin example
    has one): the world gets the options of `entities-per-zone × zones` entities (its map
    grows with them), split into `--zones` regions.
  * `--wire` the templates module: every zone encodes its wire, as a served world does.
  * `--shadow-every K --max-speed M` a lower shadow rate for the world (`Overworld.World`'s
    `:shadow_every` and `:max_speed`: cells to the neighbours every K ticks, their margin
    grown by what an entity at M m/s walks in that time).
  * `--migrate FRACTION` passed to `init/1` as `migrate:`, for a game that offers a migration
    load (in the goblin example, that fraction of its entities ride long straight paths across
    the world); `--arg KEY=VALUE` adds any other.

  * `--observers N` (with `--wire`): N observers of the world during its rounds, half at the
    corners where zones meet, half at the centres of zones (`Overworld.Interest.World`, a
    world frame on every tick of their home zone, unlimited budget, nothing sent): bytes per
    second per observer in each group, cells in view, and one of each group decoding every
    frame (entities shown, decode errors); the run's figure is a corner observer's bytes per
    second per entity shown over an inside one's.

  Printed per round (and written with `--json`): the lone zone's and every world zone's tick
  p50/p99/max (every tick, from telemetry; a p99 only with 100 ticks or more) and overruns;
  the world's crossings per second, handoff latency (ticks from the handoff to the new zone's
  confirmation), shadow messages and entities per zone tick, and entities lost or duplicated
  (ids at the end against the start, each confirmed by a second read). Then the worst zone's
  p99 over the lone zone's median p99.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Stats}

  # The options of a task running a game's world (`game!/1`, and this task's and
  # `mix overworld.soak.world`'s common ones).
  @world_switches [
    zone: :string,
    wire: :string,
    zones: :string,
    entities_per_zone: :integer,
    seconds: :integer,
    warmup: :integer,
    workers: :integer,
    migrate: :float,
    arg: :keep,
    json: :string
  ]

  @switches @world_switches ++
              [rounds: :integer, shadow_every: :integer, max_speed: :float, observers: :integer]

  @doc false
  @spec world_switches() :: keyword
  def world_switches, do: @world_switches

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.world")
    Mix.Task.run("compile")
    {module, wire, zones, args} = game!(opts)

    if opts[:observers] do
      Args.at_least!(opts, [:observers], 0)

      if opts[:observers] > 0 and (wire == nil or elem(zones, 0) < 2 or elem(zones, 1) < 2),
        do: Mix.raise("--observers needs --wire and a world of at least 2x2 zones (its corners)")
    end

    o =
      Args.positive!(opts,
        entities_per_zone: 10_000,
        seconds: 30,
        warmup: 3,
        rounds: 2,
        workers: System.schedulers_online(),
        shadow_every: 1
      )

    speed = opts[:max_speed]

    cond do
      o.shadow_every > 1 and not (is_number(speed) and speed > 0) ->
        Mix.raise("--shadow-every above 1 needs --max-speed M (metres per second, > 0)")

      speed != nil and speed <= 0 ->
        Mix.raise("--max-speed must be a positive number of metres per second")

      true ->
        :ok
    end

    shadows =
      if o.shadow_every > 1, do: [shadow_every: o.shadow_every, max_speed: speed], else: []

    Mix.Task.run("app.start")
    Overworld.Bench.Stats.start_node()
    machine = Stats.machine()
    {zc, zr} = zones

    Mix.shell().info(
      "World benchmark: #{zc}x#{zr} zones of #{o[:entities_per_zone]} entities " <>
        "(#{inspect(module)}#{if wire, do: ", wire on", else: ""}, #{o[:workers]} workers each" <>
        "#{if args != [], do: ", args #{inspect(args)}", else: ""}" <>
        "#{if shadows != [], do: ", shadows every #{o.shadow_every} ticks", else: ""}) against a lone zone, " <>
        "#{o[:rounds]} alternating rounds of #{o[:warmup]} s + #{o[:seconds]} s\n" <>
        Stats.machine_line(machine)
    )

    result =
      Overworld.Bench.World.run(
        module: module,
        wire: wire,
        zones: zones,
        entities: o[:entities_per_zone],
        seconds: o[:seconds],
        warmup: o[:warmup],
        rounds: o[:rounds],
        workers: o[:workers],
        args: args,
        world: shadows,
        observers: opts[:observers] || 0,
        print: &Mix.shell().info/1
      )

    ratio =
      if result.p99_ratio,
        do:
          "worst zone p99 #{result.worst_zone_p99_us} µs / lone zone p99 (median of rounds) " <>
            "#{result.lone_p99_us_median} µs = #{result.p99_ratio}x",
        else: "no p99 (a round needs 100 ticks: --seconds 4 or more at 30 Hz)"

    corner =
      if r = result.corner_bytes_per_entity_ratio,
        do: "; corner observer bytes per entity shown / inside observer's = #{r}",
        else: ""

    Mix.shell().info(
      "#{ratio}; world overruns #{result.overruns}; lost #{result.lost}, duplicated " <>
        "#{result.duplicated}#{corner}"
    )

    result =
      Map.merge(result, %{args: inspect(args), shadow_every: o.shadow_every, max_speed: speed})

    Stats.write_result(opts[:json], result, machine)
    result
  end

  @doc false
  # The game a world task runs, from its options (`--zone`, `--wire`, `--zones`, `--arg`,
  # `--migrate`): `{module, wire | nil, {cols, rows}, init args}`; raises `Mix.Error` on a
  # module that is missing or offers no `zone_options/2`.
  @spec game!(keyword) :: {module, module | nil, {pos_integer, pos_integer}, keyword}
  def game!(opts) do
    module = Args.module!(opts[:zone], "--zone", "the zone module of your game")

    unless function_exported?(module, :zone_options, 2) do
      Mix.raise("--zone #{inspect(module)} must export zone_options(entities, extra)")
    end

    wire = opts[:wire] && Args.module!(opts[:wire], "--wire", "a module using Overworld.Template")
    zones = Mix.Tasks.Overworld.Server.zones!(Keyword.get(opts, :zones, "2x2"))

    args =
      Mix.Tasks.Overworld.Server.parse_args(Keyword.get_values(opts, :arg)) ++
        if(opts[:migrate], do: [migrate: opts[:migrate]], else: [])

    {module, wire, zones, args}
  end
end

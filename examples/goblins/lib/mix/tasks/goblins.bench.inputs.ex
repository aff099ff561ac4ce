defmodule Mix.Tasks.Goblins.Bench.Inputs do
  @shortdoc "Benchmarks what players' inputs cost the zone server (no sockets)"
  @moduledoc """
  The goblin world with thousands of players whose inputs are injected without sockets, as
  their sessions would hand them over: what the inputs cost the zone's server process.

      mix goblins.bench.inputs [--entities 10000] [--players 19000] [--hz 10] [--rounds 3]
                               [--seconds 10] [--injectors 16] [--json PATH]

  The zone (`--entities` goblins, with its wire, at 30 Hz) gets `--players` joined players
  whose avatars exist before the measurement. Then `--rounds` pairs of rounds of `--seconds`
  each alternate (off/on, on/off, ...): without inputs, and with every player sending `--hz`
  inputs per second (walking in a new direction each time), spread evenly over time by
  `--injectors` processes of this node (`Overworld.Bench.Inputs`; each input goes to the
  player's input slot with `Overworld.Zone.put_input/3`, as a session does).

  Printed for both modes, per tick: the zone server's CPU time (the time it was scheduled in
  between the tick's start and the next tick's, from `:erlang.trace/3`; inputs received
  between ticks count), the tick's lateness (its start after its deadline) and its duration,
  as mean/p50/p99 with the ticks they rest on, then the differences with inputs minus
  without (the bar: within 1 ms), the inputs sent per second and scheduler utilization.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Stats}

  @switches [
    entities: :integer,
    players: :integer,
    hz: :integer,
    rounds: :integer,
    seconds: :integer,
    injectors: :integer,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "goblins.bench.inputs")

    o =
      Args.positive!(opts,
        entities: 10_000,
        players: 19_000,
        hz: 10,
        rounds: 3,
        seconds: 10,
        injectors: 16
      )

    Stats.start_node()
    machine = Stats.machine()

    info(
      "Input benchmark: #{o.entities} goblins and #{o.players} players, #{o.hz} inputs/s each " <>
        "when on; #{o.rounds} x (off, on) rounds of #{o.seconds} s"
    )

    info(Stats.machine_line(machine))
    id = {:bench_inputs, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Goblins, Goblins.zone_options(o.entities, id: id, wire: Goblins.Wire))

    players = for i <- 1..o.players, do: "bench-player-#{i}"
    for p <- players, do: {:ok, _} = Overworld.Zone.join(id, p)
    wait_spawned(id, o.entities + o.players)
    info("#{o.players} players joined; measuring")

    result =
      Overworld.Bench.Inputs.run(%{
        zone: id,
        players: players,
        hz: o.hz,
        rounds: o.rounds,
        seconds: o.seconds,
        injectors: o.injectors,
        prepare: fn p ->
          {:ok, slot} = Overworld.Zone.input_slot(id, p)
          slot
        end,
        inject: fn slot, seq, k ->
          Overworld.Zone.put_input(
            slot,
            %{mx: rem(k * 7, 255) - 127, my: rem(k * 13, 255) - 127},
            seq
          )
        end
      })

    Overworld.stop_zone(id)
    result = Map.put(result, :entities, o.entities)
    print(result)
    Stats.write_result(opts[:json], result, machine)
    result
  end

  defp wait_spawned(id, n) do
    unless Overworld.Zone.metrics(id).entities >= n do
      Process.sleep(100)
      wait_spawned(id, n)
    end
  end

  defp print(r) do
    row = fn label, key ->
      off = get_in(r, [:off, key])
      on = get_in(r, [:on, key])

      "  #{String.pad_trailing(label, 22)} without inputs mean #{f(off.avg)} p50 #{off.p50} p99 #{off.p99} µs" <>
        " | with inputs mean #{f(on.avg)} p50 #{on.p50} p99 #{on.p99} µs" <>
        " | difference mean #{f(on.avg - off.avg)} p50 #{on.p50 - off.p50} p99 #{on.p99 - off.p99} µs"
    end

    info("""

    per tick (#{r.off.ticks} ticks without inputs, #{r.on.ticks} with; p99 #{Stats.confidence(99, min(r.off.ticks, r.on.ticks))})
    #{row.("zone server CPU", :server_cpu_us)}
    #{row.("tick start lateness", :lateness_us)}
    #{row.("tick duration", :tick_us)}
    inputs sent            #{r.inputs_per_second}/s (#{r.players} players at #{r.hz}/s)
    bar                    server CPU and lateness within 1 ms of the zone without inputs
    scheduler utilization  #{pct(r.scheduler_utilization)} (OS CPU #{pct(r.os_cpu)}; the injectors run on the same node)
    """)
  end

  defp f(v), do: :erlang.float_to_binary(v / 1, decimals: 1)
  defp pct(nil), do: "n/a"
  defp pct(v), do: "#{Float.round(v * 100, 1)}%"
  defp info(msg), do: Mix.shell().info(msg)
end

defmodule Mix.Tasks.Overworld.Bench.Capacity do
  @shortdoc "Players per node: a game server under 0..N native clients, step by step"
  @moduledoc """
  How many moving players one server node carries, and how it behaves past that: for each
  client count of `--bots`, starts the game's server afresh as an OS process (`--server`, run
  in this project's directory with `--port 0 --data-dir <temp>` appended), runs the native
  load generator (`bench/loadgen`, Go; built on first use) against it as another OS process,
  and stops the server.

      mix overworld.bench.capacity --server "mix goblins.server"
                                   [--bots 0,250,500,750,1000,1500,2000] [--seconds 30]
                                   [--warmup 10] [--ramp 100] [--input-hz 10] [--nice 10]
                                   [--taskset CPUS] [--procs 1] [--json PATH] [--plot PATH]

  The generator's clients authenticate a device over HTTP, open a WebSocket, say HELLO, send
  `--input-hz` inputs a second (random values of the zone's input layout) and read every
  frame, parsing only snapshot headers; a client refused as full (4008) tries again after the
  seconds the server asked for, as the SDK does, until it is in or the run ends. It runs at `nice --nice` (0: not niced) and, with
  `--taskset`, on those CPUs only (`taskset -c`), with `--procs` OS threads for Go code.

  Per step, over a window of `--seconds` that starts `--warmup` seconds after the last client
  connected: snapshots a second per client (the lowest client, p1, median), input to
  acknowledgement p50/p99 in ms and ticks, connections failed and closed by the server, the
  zone's tick p50/p99/max and overruns (from the server's `/api/v1/status` around the
  window), frames sent, refused connections, the server's scheduler utilization and OS CPU,
  **its CPU per frame sent** (busy scheduler time per second with N clients minus with none,
  over the frames sent per second: needs a step of 0), and the generator's own CPU and loop
  lag (a step whose generator lagged is flagged: its figures are partly the generator's).
  Then the **knee**: the most clients with every client at 28 snapshots a second or more and
  an acknowledgement p99 of 3 ticks or less. `--json` writes every figure (and the machine),
  `--plot` the curve as SVG (default: the JSON's path with `.svg`).
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Capacity, Loadgen, OsServer, Stats}

  @switches [
    server: :string,
    bots: :string,
    seconds: :integer,
    warmup: :integer,
    ramp: :integer,
    input_hz: :integer,
    nice: :integer,
    taskset: :string,
    procs: :integer,
    json: :string,
    plot: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.capacity")
    o = options!(opts)
    bin = Loadgen.build!()
    machine = Stats.machine()
    info(Stats.machine_line(machine))

    info(
      "Capacity: #{inspect(o.server)}, clients #{Enum.join(o.bots, ", ")}; #{o.seconds} s windows after #{o.warmup} s; " <>
        "#{o.input_hz} inputs/s per client; generator at nice #{o.nice}" <>
        if(o.taskset, do: " on CPUs #{o.taskset}", else: "") <> ", #{o.procs} Go thread(s)"
    )

    steps =
      o.bots
      |> Enum.map(&step(&1, o, bin))
      |> Capacity.per_frame()

    Enum.each(steps, &print/1)
    knee = Capacity.knee(steps)
    {rate, ticks} = Capacity.knee_bar()

    info(
      "knee (every client ≥ #{rate} snapshots/s, ack p99 ≤ #{ticks} ticks): " <>
        if(knee, do: "#{knee} clients", else: "none of the steps")
    )

    result = %{
      machine: machine,
      date: Date.utc_today() |> Date.to_iso8601(),
      server: o.server,
      seconds: o.seconds,
      warmup: o.warmup,
      ramp: o.ramp,
      input_hz: o.input_hz,
      nice: o.nice,
      taskset: o.taskset,
      procs: o.procs,
      knee: knee,
      knee_bar: %{snapshots_per_second: rate, ack_p99_ticks: ticks},
      steps: Enum.map(steps, &Map.delete(&1, :server_lines))
    }

    if path = o.json do
      Stats.write_json(path, result)
      info("wrote #{path}")
    end

    if path = o.plot do
      File.mkdir_p!(Path.dirname(path))

      File.write!(
        path,
        Capacity.svg(steps, "#{o.server}: players per node (#{machine.cpu}, #{result.date})")
      )

      info("wrote #{path}")
    end

    result
  end

  defp options!(opts) do
    server =
      opts[:server] ||
        Mix.raise(
          "--server is required: the command that starts the game's server, e.g. \"mix goblins.server\""
        )

    bots =
      opts
      |> Keyword.get(:bots, "0,250,500,750,1000,1500,2000")
      |> String.split(",", trim: true)
      |> Enum.map(fn n ->
        case Integer.parse(String.trim(n)) do
          {v, ""} when v >= 0 ->
            v

          _ ->
            Mix.raise(
              "--bots must be a comma-separated list of client counts (0 or more), got: #{inspect(opts[:bots])}"
            )
        end
      end)

    if bots == [], do: Mix.raise("--bots must name at least one client count")

    o = %{
      server: server,
      bots: bots,
      seconds: Keyword.get(opts, :seconds, 30),
      warmup: Keyword.get(opts, :warmup, 10),
      ramp: Keyword.get(opts, :ramp, 100),
      input_hz: Keyword.get(opts, :input_hz, 10),
      nice: Keyword.get(opts, :nice, 10),
      taskset: opts[:taskset],
      procs: Keyword.get(opts, :procs, 1),
      json: opts[:json],
      plot: opts[:plot] || (opts[:json] && Path.rootname(opts[:json]) <> ".svg")
    }

    Args.at_least!(o, [:seconds, :ramp, :procs])
    Args.at_least!(o, [:warmup, :input_hz], 0)
    unless o.nice in 0..19, do: Mix.raise("--nice must be an integer in 0..19")

    if o.taskset && not Regex.match?(~r/^\d+([-,]\d+)*$/, o.taskset),
      do: Mix.raise("--taskset must be a CPU list such as 1 or 0-1, got: #{inspect(o.taskset)}")

    o
  end

  # One step: a fresh server, the generator against it, the server stopped.
  defp step(clients, o, bin) do
    data =
      Path.join(System.tmp_dir!(), "overworld-capacity-#{System.unique_integer([:positive])}")

    File.mkdir_p!(data)
    info("#{clients} clients: starting the server")
    server = start_server(o.server, data)

    try do
      {out, gen} =
        Loadgen.run!(bin,
          url: "ws://127.0.0.1:#{server.http_port}/ws",
          clients: clients,
          input_hz: o.input_hz,
          ramp: o.ramp,
          warmup: o.warmup,
          seconds: o.seconds,
          procs: o.procs,
          nice: o.nice,
          taskset: o.taskset
        )

      IO.write(out)
      gen |> Capacity.step() |> Map.put(:server_lines, Enum.take(OsServer.lines(server), -20))
    after
      OsServer.stop(server)
      File.rm_rf(data)
    end
  end

  # The game's server command, in this project's directory, with a free port and its own data.
  defp start_server(cmd, data) do
    args = ["-c", "#{cmd} --port 0 --data-dir #{data} --interval 5"]

    case OsServer.start(System.find_executable("sh"), args) do
      {:ok, server} ->
        server

      {:error, {:exited, status, _out}} ->
        Mix.raise("the server exited (status #{status}) before it listened")

      {:error, {:timeout, _out}} ->
        Mix.raise("the server did not print `listening on ...` within 180 s")
    end
  end

  defp print(s) do
    {rate, ticks} = Capacity.knee_bar()
    ok = s.clients > 0 and Capacity.knee([s]) == s.clients

    info(
      "#{String.pad_leading(Integer.to_string(s.clients), 5)} clients: " <>
        "#{s.connected} in (#{s.measured_clients} at the window's start), #{s.failed} failed, " <>
        "#{s.refused} refused (#{s.refusals} refusals), #{s.closed} closed | " <>
        "snapshots/s min #{s.snapshots_min} p1 #{s.snapshots_p1} median #{s.snapshots_median} | " <>
        "ack p50 #{s.ack_p50_ticks} p99 #{s.ack_p99_ticks || "(max #{s.ack_max_ticks})"} ticks (#{s.ack_samples} acks) | " <>
        "tick p50 #{us(s[:tick_p50_us])} p99 #{us(s[:tick_p99_us])} max #{us(s[:tick_max_us])} (#{s[:zone_ticks]} ticks), #{s[:overruns]} overruns | " <>
        "#{s[:frames_per_second]} frames/s, a snapshot every #{s[:send_interval] || "-"} tick(s), CPU/frame #{s[:cpu_us_per_frame] || "-"} µs | " <>
        "schedulers #{pct(s[:scheduler_utilization])} (OS #{pct(s[:os_cpu])}) | " <>
        "generator #{pct(s.generator_cpu)} of a core, lag p50 #{s.generator_lag_p50_ms} ms max #{s.generator_lag_max_ms} ms" <>
        if(s.generator_lagged, do: " LAGGED: #{s.generator_why}", else: "") <>
        if(ok, do: " | within the knee's bar (#{rate}/s, #{ticks} ticks)", else: "")
    )
  end

  defp us(nil), do: "-"
  defp us(v), do: "#{Float.round(v / 1000, 1)} ms"

  defp pct(nil), do: "-"
  defp pct(f), do: "#{round(f * 100)} %"

  defp info(line), do: Mix.shell().info(line)
end

defmodule Mix.Tasks.Overworld.Bench.Backend do
  @shortdoc "Nakama's benchmark workloads (registration, login, RPC, matches) on one core"
  @moduledoc """
  Reproduces the workloads of Nakama's published benchmark against Overworld, over real HTTP
  and WebSocket clients, with the server **on one core**: a node of its own with one scheduler
  (`+S 1`), every thread pinned to CPU 0 with `taskset`, and the load pinned to CPU 1.

      mix overworld.bench.backend --workload register|login|rpc-lua|rpc-elixir|storage|matches
                                  [--storage embedded|postgres]
                                  [--seconds 20] [--connections 50] [--fsync-delay-ms 0]
                                  [--players 500,1000,2000,3000] [--handler echo|echo_lua]
                                  [--json PATH]
      mix overworld.bench.backend --tsung bench/tsung/register.xml [--json PATH]

  * `register` — closed-loop clients (wrk, `--connections`, one thread) make a new device
    account per request (`POST /api/v1/auth/device`): each is durable (fsynced) before its
    answer. `--fsync-delay-ms 2` adds 2 ms to every fsync of the server's Mnesia log (a
    disk's latency; this machine's fsync takes tens of µs): group commit must carry it.
  * `login` — the same against 2,000 accounts made before (random ones).
  * `rpc-lua`, `rpc-elixir` — `POST /api/v1/rpc/echo_lua` (a sandboxed Lua function in the
    server's pool) or `echo_elixir`, a small JSON payload answered back, with a session token.
  * `storage` — 100 users' sessions (a random one per request): every other request writes
    one object (a random key of 100 of collection "bench", a small JSON value; durable
    before its answer), the others read one (`POST /api/v1/storage/write` and `/read`).
  * `matches` — players in authoritative matches of 10 at 10 ticks a second (`--handler`:
    `echo` in Elixir, `echo_lua` in Lua); each player sends every 500 ms, alternately, an
    echo (the handler answers its sender) and a broadcast (the handler relays it to all);
    the latency is from the echo's send to its answer. `--players` are steps: each step adds
    players, waits 5 s, then measures for `--seconds`. The knee is the largest step whose
    echo p99 is at most 150 ms. Memory per player is the server node's growth from before
    the first step, divided by the players.

  `--storage postgres` gives the server the PostgreSQL storage adapter: a PostgreSQL server
  (Debian's package, PostgreSQL's durable defaults: fsync on, synchronous commit) started in
  a fresh directory, pinned to CPU 0 beside the server (it shares the server's core), as
  Nakama's benchmark ran its database on loopback. Accounts stay in the embedded replicated
  store either way (docs/backend.md): only storage objects go to PostgreSQL. The default,
  `embedded`, is the Mnesia adapter (group commit, fsynced).

  `--tsung FILE` runs one of the Tsung scenarios of `bench/tsung/` (Debian's `tsung`, the
  tool of Nakama's benchmark) against the same one-core server instead of wrk: the scenario's
  port 4000 is replaced by the server's, tsung is pinned to CPU 1, and its log's request
  counts and mean response times are summed up (and, for WebSocket scenarios, messages sent
  and frames received). `matches.xml`'s matches are made first (`--handler`, default
  `echo_lua`), one per ten of its users, their ids in the file it reads.

  Each run prints the figures, the server's CPU (of its one core) and the load generator's
  CPU beside them, and the samples each percentile rests on; `--json PATH` writes them.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Backend, PostgresServer, Stats, Tsung}
  alias Overworld.Metrics.Histogram

  @switches [
    workload: :string,
    seconds: :integer,
    connections: :integer,
    fsync_delay_ms: :integer,
    players: :string,
    handler: :string,
    tsung: :string,
    storage: :string,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.backend")
    o = Args.positive!(opts, seconds: 20, connections: 50)

    workload =
      cond do
        opts[:tsung] ->
          "tsung"

        w = opts[:workload] ->
          w

        true ->
          Mix.raise(
            "--workload (register|login|rpc-lua|rpc-elixir|storage|matches) or --tsung is required"
          )
      end

    unless workload in ~w(register login rpc-lua rpc-elixir storage matches tsung),
      do: Mix.raise("--workload must be register, login, rpc-lua, rpc-elixir, storage or matches")

    storage = opts[:storage] || "embedded"

    unless storage in ~w(embedded postgres),
      do: Mix.raise("--storage must be embedded or postgres")

    if opts[:tsung] && not File.regular?(opts[:tsung]),
      do: Mix.raise("--tsung #{opts[:tsung]}: no such file")

    for tool <- ["taskset", if(opts[:tsung], do: "tsung", else: "wrk")],
        System.find_executable(tool) == nil,
        do: Mix.raise("#{tool} is not installed (make deps installs it: apt-get install #{tool})")

    Mix.Task.run("app.start")
    machine = Stats.machine()
    Mix.shell().info(Stats.machine_line(machine))

    if machine.cores < 2,
      do: Mix.raise("this bench needs 2 CPUs (the server on one, the load on the other)")

    # This node (the load) on CPU 1 for the run; the server's on CPU 0.
    cpus = Backend.pin(System.pid(), 1)

    try do
      run(workload, storage, machine, o, opts)
    after
      Backend.pin(System.pid(), cpus)
    end
  end

  defp run(workload, storage, machine, o, opts) do
    pg = if storage == "postgres", do: PostgresServer.start!(durable: true, cpu: 0)

    try do
      s =
        Backend.start_server(0,
          fsync_delay_ms: opts[:fsync_delay_ms],
          storage: storage_options(pg)
        )

      Mix.shell().info(
        "Server: one scheduler, pinned to CPU 0 (os pid #{s.os_pid}), port #{s.port}; load on CPU 1; " <>
          "storage: #{storage_line(pg)}" <>
          if(opts[:fsync_delay_ms],
            do: "; #{opts[:fsync_delay_ms]} ms added to every fsync",
            else: ""
          )
      )

      try do
        result = workload(workload, s, o, opts)

        Stats.write_result(
          opts[:json],
          Map.merge(result, %{
            workload: workload,
            storage: storage,
            fsync_delay_ms: opts[:fsync_delay_ms] || 0
          }),
          machine
        )
      after
        Backend.stop_server(s)
      end
    after
      if pg, do: PostgresServer.stop(pg)
    end
  end

  defp storage_options(nil), do: []

  defp storage_options(pg) do
    pool = [
      host: pg.host,
      port: pg.port,
      database: pg.database,
      user: pg.user,
      password: pg.password
    ]

    [adapter: Overworld.Storage.Postgres, adapter_options: [pool: pool]]
  end

  defp storage_line(nil), do: "embedded (Mnesia, group commit fsynced)"

  defp storage_line(pg),
    do: "PostgreSQL (port #{pg.port}, fsync and synchronous commit on, pinned to CPU 0)"

  defp workload("register", s, o, _opts) do
    prefix = "bench-register-#{System.unique_integer([:positive])}"

    http(
      Backend.wrk(s, Backend.register_script(prefix), o.connections, o.seconds, 1),
      "durable device registrations",
      o
    )
  end

  defp workload("login", s, o, _opts) do
    prefix = "bench-login-#{System.unique_integer([:positive])}"
    Backend.devices(s, prefix, 2_000)

    http(
      Backend.wrk(s, Backend.login_script(prefix, 2_000), o.connections, o.seconds, 1),
      "device logins",
      o
    )
  end

  defp workload("rpc-" <> lang, s, o, _opts) do
    [token] = Backend.devices(s, "bench-rpc-#{System.unique_integer([:positive])}", 1)

    http(
      Backend.wrk(s, Backend.rpc_script("echo_#{lang}", token), o.connections, o.seconds, 1),
      "#{lang} RPC calls",
      o
    )
  end

  defp workload("storage", s, o, _opts) do
    users = Backend.device_sessions(s, "bench-storage-#{System.unique_integer([:positive])}", 100)

    http(
      Backend.wrk(s, Backend.storage_script(users), o.connections, o.seconds, 1),
      "storage calls (half writes, half reads)",
      o
    )
  end

  defp workload("tsung", s, _o, opts) do
    r = Tsung.run(s, opts[:tsung], 1, opts[:handler] || "echo_lua")

    Mix.shell().info(
      "tsung #{Path.basename(opts[:tsung])}: #{r.requests} requests in #{r.seconds} s = " <>
        "#{round(r.requests_per_s)}/s, mean response #{r.mean_ms} ms (#{r.errors} errors, HTTP " <>
        "statuses #{inspect(r.statuses)}); server CPU #{pct(r.server_cpu)} of its core, tsung #{pct(r.generator_cpu)}"
    )

    case r.websocket do
      %{websockets: n} = ws when n > 0 ->
        Mix.shell().info(
          "  WebSocket: #{n} connections; #{ws.messages_sent} messages sent " <>
            "(#{round(ws.messages_sent / r.seconds)}/s), #{ws.receives} receives of server data " <>
            "(#{round(ws.receives / r.seconds)}/s, #{ws.bytes_received} bytes: " <>
            "#{round(ws.bytes_received / r.seconds / 1024)} KiB/s); at most " <>
            "#{r.most_in_matches} players in the server's matches at once"
        )

      _ ->
        :ok
    end

    Map.put(r, :scenario, opts[:tsung])
  end

  defp workload("matches", s, o, opts) do
    handler = opts[:handler] || "echo"

    steps =
      (opts[:players] || "500,1000,2000,3000")
      |> String.split(",")
      |> Enum.map(&String.to_integer/1)

    hist = Histogram.new()
    frames = :atomics.new(1, signed: false)
    idle = Backend.idle_matches(s, handler, 100)

    Mix.shell().info(
      "Idle #{handler} matches (100 made, no player): #{div(idle, 1024)} KiB each on the server"
    )

    base_memory = Backend.memory(s)

    {_, results} =
      Enum.reduce(steps, {[], []}, fn target, {players, results} ->
        more = target - length(players)

        tokens =
          Backend.devices(s, "bench-player-#{System.unique_integer([:positive])}", max(more, 0))

        players = players ++ Backend.players(s, handler, tokens, hist, frames)
        Process.sleep(5_000)
        Histogram.reset(hist)
        f0 = :atomics.get(frames, 1)
        cpu0 = Backend.cpu_seconds(s.os_pid)
        gen0 = Backend.cpu_seconds(System.pid())
        t0 = System.monotonic_time(:millisecond)
        Process.sleep(o.seconds * 1000)
        wall = (System.monotonic_time(:millisecond) - t0) / 1000
        summary = hist |> Histogram.snapshot() |> Histogram.summary()
        memory = Backend.memory(s)

        r = %{
          players: length(players),
          matches: div(length(players) + 9, 10),
          echo_samples: summary.count,
          echo_p50_ms: ms(summary.p50),
          echo_p99_ms: ms(summary.p99),
          echo_max_ms: ms(summary.max),
          frames_per_s: round((:atomics.get(frames, 1) - f0) / wall),
          server_cpu: (Backend.cpu_seconds(s.os_pid) - cpu0) / wall,
          generator_cpu: (Backend.cpu_seconds(System.pid()) - gen0) / wall,
          server_memory_bytes: memory,
          bytes_per_player: div(memory - base_memory, max(length(players), 1))
        }

        Mix.shell().info(
          "#{r.players} players in #{r.matches} #{handler} matches: echo p50 #{r.echo_p50_ms} ms, " <>
            "p99 #{r.echo_p99_ms} ms, max #{r.echo_max_ms} ms (#{r.echo_samples} echoes); " <>
            "#{r.frames_per_s} frames/s written; server CPU #{pct(r.server_cpu)} of its core, " <>
            "generator #{pct(r.generator_cpu)}; #{div(r.bytes_per_player, 1024)} KiB per player"
        )

        {players, results ++ [r]}
      end)

    knee =
      results
      |> Enum.filter(&(&1.echo_p99_ms != nil and &1.echo_p99_ms <= 150))
      |> Enum.map(& &1.players)
      |> Enum.max(fn -> 0 end)

    Mix.shell().info("Knee (echo p99 <= 150 ms): #{knee} players (#{handler})")

    %{
      handler: handler,
      idle_match_bytes: idle,
      steps: results,
      knee_players: knee,
      seconds_per_step: o.seconds
    }
  end

  defp http(r, what, o) do
    Mix.shell().info(
      "#{round(r.requests_per_s || 0)} #{what}/s over #{o.seconds} s (#{r.requests} requests, " <>
        "#{r.non_2xx} not 2xx#{if r.socket_errors, do: ", socket errors: " <> r.socket_errors, else: ""}); " <>
        "latency p50 #{r.p50_ms} ms, p99 #{r.p99_ms} ms (wrk, #{o.connections} connections); " <>
        "server CPU #{pct(r.server_cpu)} of its core, wrk #{pct(r.generator_cpu)}"
    )

    Map.delete(r, :output) |> Map.put(:connections, o.connections) |> Map.put(:seconds, o.seconds)
  end

  defp ms(nil), do: nil
  defp ms(us), do: Float.round(us / 1000, 1)
  defp pct(x), do: "#{round(x * 100)} %"
end

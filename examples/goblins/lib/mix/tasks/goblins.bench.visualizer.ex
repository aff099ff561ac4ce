defmodule Mix.Tasks.Goblins.Bench.Visualizer do
  @shortdoc "Benchmarks the visualizer: frames per second in headless Chromium, observers' cost on the tick"
  @moduledoc """
  The live visualizer (`/console`) against the goblin world served by this node, in two
  modes.

      mix goblins.bench.visualizer [--zones 1x1] [--entities 10000] [--warmup 10]
                                   [--seconds 20] [--json PATH]
      mix goblins.bench.visualizer --observers 0,1,3 [--zones 1x1] [--entities 10000]
                                   [--rounds 2] [--seconds 30] [--json PATH]

  **Frames per second** (default): the goblin world (`--zones CxR` of `--entities` goblins
  each, 30 Hz) and a server on a free port with an operator, then the console's live map in
  headless Chromium (Debian's `/usr/bin/chromium`, driven by playwright-core from
  `clients/console`: `clients/console/bench/fps.mjs`), logged in as that operator, watching
  the zone (the world) over its observer connection. After `--warmup` seconds, over
  `--seconds`: the **full frames per second** (frames that drew every entity of the newest
  snapshot the page had: `window.__overworldStats.fullFrames`), every whole second's, the
  snapshots the page applied per second, the entities drawn against the zone's; and beside
  them, over the same window, the server's tick durations (p50, p99 with the ticks above it,
  max, overruns: every tick, from telemetry), the CPU of this node and of the browser's
  processes (all on the same cores: the browser is not pinned or niced, its frame rate is
  what is measured).

  **Observers' cost on the tick** (`--observers 0,1,3`): the same world and server without a
  browser; for each count in turn (`--rounds` times, interleaved), that many observer
  connections (an operator's token in HELLO, as the visualizer's: each a process of this
  node that reads its socket and counts the bytes, decoding nothing) for `--seconds`, after
  3 s of keyframes: the tick p50/p99/max, overruns, and the bytes and frames each observer
  was sent, and frames skipped.

  `--json PATH` writes the figures and the machine as one JSON object.
  """
  use Mix.Task

  alias Overworld.Accounts.Password
  alias Overworld.Bench.{Args, External, Stats, Ticks}
  alias Mix.Tasks.Overworld.Server, as: ServerTask

  @switches [
    zones: :string,
    entities: :integer,
    warmup: :integer,
    seconds: :integer,
    observers: :string,
    rounds: :integer,
    json: :string
  ]
  @operator "bench"

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "goblins.bench.visualizer")
    o = Args.positive!(opts, entities: 10_000, warmup: 10, rounds: 2)
    seconds = Keyword.get(opts, :seconds, if(opts[:observers], do: 30, else: 20))
    unless seconds >= 1, do: Mix.raise("--seconds must be at least 1, got: #{seconds}")
    shape = Keyword.get(opts, :zones, "1x1")
    counts = opts[:observers] && counts!(opts[:observers])

    Stats.start_node()
    machine = Stats.machine()
    dir = External.tmp_dir("overworld-bench-visualizer")
    File.mkdir_p!(dir)

    try do
      {zones, base, password} = start!(shape, o.entities, dir, counts)
      measure(zones, base, password, shape, o, seconds, counts, machine, opts[:json])
    after
      stop()
      File.rm_rf(dir)
    end
  end

  defp measure(zones, base, password, shape, o, seconds, counts, machine, json) do
    entities = Enum.sum(for z <- zones, do: Overworld.Zone.count(z))
    what = "#{shape} zone(s) of #{o.entities} goblins (#{entities} in all) at 30 Hz"
    Mix.shell().info(Stats.machine_line(machine))

    result =
      if counts do
        Mix.shell().info(
          "Observers' cost on the tick: #{what}; #{Enum.join(counts, ", ")} observers, " <>
            "#{o.rounds} rounds of #{seconds} s each"
        )

        observers(zones, base, password, counts, o.rounds, seconds)
      else
        Mix.shell().info(
          "Visualizer frames per second: #{what}; headless Chromium, #{o.warmup} s warm-up, #{seconds} s measured"
        )

        fps(zones, base, password, o.warmup, seconds)
      end

    result =
      Map.merge(result, %{
        zones: shape,
        entities_per_zone: o.entities,
        entities: entities,
        seconds: seconds,
        schedulers: System.schedulers_online()
      })

    Stats.write_result(json, result, machine)
    result
  end

  # The server and the zones go (a test runs the task more than once in one node).
  defp stop do
    case Process.whereis(Overworld.Server) do
      nil ->
        :ok

      pid ->
        Process.unlink(pid)
        ref = Process.monitor(pid)
        Process.exit(pid, :shutdown)

        receive do
          {:DOWN, ^ref, _, _, _} -> :ok
        after
          10_000 -> Process.exit(pid, :kill)
        end
    end

    Overworld.stop_world(:goblins)
    Overworld.stop_zone(:goblins)
    :ok
  end

  defp counts!(text) do
    counts =
      for part <- String.split(text, ","),
          do:
            (case Integer.parse(String.trim(part)) do
               {n, ""} when n >= 0 -> n
               _ -> Mix.raise("--observers must be counts such as 0,1,3, got: #{inspect(text)}")
             end)

    max = Enum.max(counts)
    if max > 16, do: Mix.raise("--observers: at most 16 at once, got #{max}")
    counts
  end

  # The goblin world, and a server on a free port with one operator (a fresh password).
  defp start!(shape, entities, dir, counts) do
    served =
      ServerTask.served(
        Goblins,
        [id: :goblins, args: [players: :anywhere], tick_rate: 30, wire: Goblins.Wire],
        zones: shape,
        entities_per_zone: entities
      )

    [{id, _config}] = ServerTask.start_served!([served], data_dir: dir, persist: false)
    password = Base.url_encode64(:crypto.strong_rand_bytes(12))
    hash = Password.encode(Password.hash(password, 1_000))
    # (Room for a round's observers while the last round's are still closing.)
    max = if counts, do: 2 * Enum.max(counts) + 1, else: 3

    ServerTask.start_server!(
      port: 0,
      data_dir: dir,
      zones: %{"goblins" => id},
      default_zone: "goblins",
      operators: [%{name: @operator, password_hash: hash}],
      observers: [max: max],
      operator_api: [audit_file: Path.join(dir, "audit.log")]
    )

    zones =
      case id do
        {:world, name} -> Enum.sort(Overworld.World.zones(name))
        zone -> [zone]
      end

    {zones, "http://127.0.0.1:#{Overworld.Server.port()}", password}
  end

  ## Frames per second

  defp fps(zones, base, password, warmup, seconds) do
    script = Path.join(framework(), "clients/console/bench/fps.mjs")
    node = System.find_executable("node") || Mix.raise("node is not installed (make deps-ts)")

    unless File.exists?(Path.join(framework(), "clients/console/node_modules/playwright-core")),
      do: Mix.raise("playwright-core is missing: make deps-ts (npm ci in clients/console)")

    port =
      External.open([
        node,
        script,
        base,
        "goblins",
        @operator,
        password,
        to_string(warmup),
        to_string(seconds)
      ])

    try do
      :ok = await_line(port, "measuring", (warmup + 90) * 1000)
      cpu0 = Overworld.Metrics.CPU.os_seconds()

      {page, ticks} =
        Ticks.during(zones, fn ->
          {:ok, "result " <> json} = await_prefix(port, "result ", (seconds + 60) * 1000)
          :jiffy.decode(json, [:return_maps])
        end)

      beam_cpu = 100 * (Overworld.Metrics.CPU.os_seconds() - cpu0) / page["seconds"]
      report_fps(page, ticks, beam_cpu)
    after
      External.stop(port, 10_000)
    end
  end

  defp report_fps(page, ticks, beam_cpu) do
    per_second = for s <- page["per_second"], do: s["fullFrames"]
    drawn = page["end"]["entitiesDrawn"]
    tick = merged(ticks)

    Mix.shell().info("""
    Chromium #{page["chromium"]}: #{f(page["full_fps"])} full frames per second over #{f(page["seconds"])} s \
    (#{page["end"]["fullFrames"] - page["start"]["fullFrames"]} frames; each second's: min #{Enum.min(per_second)}, \
    median #{Stats.median(per_second)}); all frames #{f(page["fps"])}/s (full #{pct(page["full_fps"], page["fps"])} of them)
    entities drawn per frame: #{drawn} (the zones have #{tick.entities}); snapshots applied #{f(page["snapshots_per_second"])}/s, \
    the newest decoded in #{f(page["end"]["applyMs"])} ms, scene #{f(page["end"]["sceneMs"])} ms, frame #{f(page["end"]["frameMs"])} ms
    server meanwhile: #{tick_line(tick)}
    CPU (% of one core, over the window): this node #{f(beam_cpu)}, Chromium's processes #{f(page["browser_cpu_percent"])}, \
    the driving script #{f(page["script_cpu_percent"])}\
    """)

    %{
      mode: "fps",
      chromium: page["chromium"],
      full_fps: r(page["full_fps"]),
      fps: r(page["fps"]),
      full_fps_per_second: per_second,
      full_fps_min_second: Enum.min(per_second),
      full_frames: page["end"]["fullFrames"] - page["start"]["fullFrames"],
      measured_seconds: r(page["seconds"]),
      entities_drawn: drawn,
      snapshots_per_second: r(page["snapshots_per_second"]),
      apply_ms: page["end"]["applyMs"],
      decoder: page["end"]["decoder"],
      tick: tick,
      tick_per_zone: Map.new(ticks, fn {z, s} -> {inspect(z), s} end),
      node_cpu_percent: r(beam_cpu),
      browser_cpu_percent: r(page["browser_cpu_percent"]),
      script_cpu_percent: r(page["script_cpu_percent"])
    }
  end

  ## Observers' cost on the tick

  defp observers(zones, base, password, counts, rounds, seconds) do
    token = login!(base, password)
    uri = URI.parse(base)

    runs =
      for round <- 1..rounds, n <- counts do
        s0 = Overworld.Server.stats()
        pids = for _ <- List.duplicate(nil, n), do: drain(uri.port, token)
        Process.sleep(3_000)
        for pid <- pids, do: send(pid, :measure)

        {_, ticks} = Ticks.during(zones, fn -> Process.sleep(seconds * 1000) end)
        bytes = for pid <- pids, do: stop_drain(pid)
        s1 = Overworld.Server.stats()
        closed(s0.connections, 100)
        tick = merged(ticks)

        Mix.shell().info(
          "round #{round}, #{n} observer(s): #{tick_line(tick)}; each observer sent " <>
            "#{if n > 0, do: f(Enum.sum(bytes) / n / seconds / 1_048_576), else: 0} MiB/s; " <>
            "frames skipped #{s1.frames_skipped - s0.frames_skipped}, closed as too slow #{s1.closed_slow - s0.closed_slow}"
        )

        %{
          round: round,
          observers: n,
          tick: tick,
          mib_per_second_each: if(n > 0, do: r(Enum.sum(bytes) / n / seconds / 1_048_576)),
          frames_out: s1.frames_out - s0.frames_out,
          frames_skipped: s1.frames_skipped - s0.frames_skipped,
          closed_slow: s1.closed_slow - s0.closed_slow
        }
      end

    summary =
      for n <- counts do
        mine = Enum.filter(runs, &(&1.observers == n))
        p99s = for run <- mine, run.tick.p99_us != nil, do: run.tick.p99_us
        p50s = for run <- mine, do: run.tick.p50_us

        %{
          observers: n,
          tick_p50_us_median: Stats.median(p50s),
          tick_p99_us_median: Stats.median(p99s)
        }
      end

    [zero | _] = summary

    for s <- summary do
      ratio =
        zero.tick_p99_us_median && s.tick_p99_us_median &&
          s.tick_p99_us_median / zero.tick_p99_us_median

      Mix.shell().info(
        "#{s.observers} observer(s): tick p50 #{s.tick_p50_us_median} µs, p99 #{s.tick_p99_us_median || "n/a"} µs " <>
          "(median of #{rounds} rounds; #{if ratio, do: f(ratio), else: "n/a"} × the p99 with #{zero.observers})"
      )
    end

    %{mode: "observers", rounds: runs, summary: summary}
  end

  defp login!(base, password) do
    uri = URI.parse(base)
    body = :jiffy.encode(%{name: @operator, password: password})

    {:ok, 200, _, reply} =
      Overworld.Client.request(uri.host, uri.port, "POST", "/api/v1/operator/login", body, [])

    :jiffy.decode(reply, [:return_maps])["token"]
  end

  # An observer connection read by a process of its own: counts the bytes from `:measure`
  # until asked.
  defp drain(port, token) do
    me = self()

    pid =
      spawn_link(fn ->
        {:ok, c} = Overworld.Client.connect("127.0.0.1", port, "/ws?zone=goblins", active: true)

        :ok =
          Overworld.Client.send_msg(c, %{
            type: :hello,
            version: Overworld.Protocol.version(),
            token: token
          })

        send(me, {:drain_ready, self()})
        drain_loop(c.sock, nil)
      end)

    receive do
      {:drain_ready, ^pid} -> pid
    after
      10_000 -> Mix.raise("an observer connection did not open")
    end
  end

  defp drain_loop(sock, bytes) do
    receive do
      {:tcp, ^sock, data} -> drain_loop(sock, bytes && bytes + byte_size(data))
      :measure -> drain_loop(sock, 0)
      {:report, to} -> send(to, {:drained, self(), bytes || 0})
      {:tcp_closed, ^sock} -> exit({:observer_closed_by_the_server, bytes})
    end
  end

  # Until the sessions of the round's observers are gone (`tries` × 50 ms at most).
  defp closed(connections, tries) do
    if Overworld.Server.stats().connections > connections and tries > 0 do
      Process.sleep(50)
      closed(connections, tries - 1)
    end
  end

  defp stop_drain(pid) do
    send(pid, {:report, self()})

    receive do
      {:drained, ^pid, bytes} ->
        Process.unlink(pid)
        Process.exit(pid, :kill)
        bytes
    after
      10_000 -> Mix.raise("an observer did not report")
    end
  end

  ## Helpers

  # The ticks of every zone together (a world's zones tick side by side).
  defp merged(ticks) do
    zs = Map.values(ticks)
    p99s = for z <- zs, z.p99_us != nil, do: z.p99_us

    %{
      zones: length(zs),
      ticks: Enum.sum(for z <- zs, do: z.ticks),
      p50_us: Enum.max(for(z <- zs, do: z.p50_us || 0)),
      p99_us: if(p99s == [] or length(p99s) < length(zs), do: nil, else: Enum.max(p99s)),
      max_us: Enum.max(for(z <- zs, do: z.max_us || 0)),
      overruns: Enum.sum(for z <- zs, do: z.overruns),
      entities: Enum.sum(for z <- zs, do: z.entities)
    }
  end

  defp tick_line(t) do
    above = t.ticks / t.zones / 100

    "#{t.zones} zone(s), #{t.ticks} ticks, tick p50 #{t.p50_us} µs, p99 #{t.p99_us || "n/a (under 100 ticks a zone)"} µs" <>
      "#{if t.p99_us, do: " (#{Float.round(above, 1)} ticks above it per zone)", else: ""}, " <>
      "max #{t.max_us} µs, overruns #{t.overruns}#{if t.zones > 1, do: " (worst zone's p50/p99/max)", else: ""}"
  end

  defp await_line(port, line, timeout) do
    case await_prefix(port, line, timeout) do
      {:ok, ^line} -> :ok
      other -> other
    end
  end

  # The script's output until a line starting with `prefix` (others are printed).
  defp await_prefix(port, prefix, timeout) do
    receive do
      {^port, {:data, {:eol, line}}} ->
        cond do
          String.starts_with?(line, prefix) ->
            {:ok, line}

          String.starts_with?(line, "failed: ") ->
            Mix.raise("the browser's script " <> line)

          true ->
            Mix.shell().info("  fps.mjs: " <> line)
            await_prefix(port, prefix, timeout)
        end

      {^port, {:data, {:noeol, _}}} ->
        await_prefix(port, prefix, timeout)

      {^port, {:exit_status, n}} ->
        Mix.raise("the browser's script exited (#{n}) before #{inspect(prefix)}")
    after
      timeout ->
        Mix.raise(
          "no #{inspect(prefix)} from the browser's script within #{div(timeout, 1000)} s"
        )
    end
  end

  # The framework's directory (this project depends on it by path).
  defp framework, do: Mix.Project.deps_paths()[:overworld] || Path.expand("../..")

  defp f(nil), do: "n/a"
  defp f(x) when is_integer(x), do: Integer.to_string(x)
  defp f(x), do: :erlang.float_to_binary(x / 1, decimals: 1)

  defp r(nil), do: nil
  defp r(x), do: Float.round(x / 1, 2)

  defp pct(_a, b) when b in [0, nil], do: "n/a"
  defp pct(a, b), do: "#{round(100 * a / b)} %"
end

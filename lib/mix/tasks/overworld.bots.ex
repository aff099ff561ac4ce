defmodule Mix.Tasks.Overworld.Bots do
  @shortdoc "Runs a swarm of bots against an Overworld server"
  @moduledoc """
  A swarm of bots (`Overworld.Bots`) playing against a running server (`make run` or
  `mix overworld.server`): each authenticates a device over HTTP, opens a WebSocket, and plays,
  sending `--input-hz` inputs per second whose payloads `--input` makes (a module of the
  game's project implementing `Overworld.Bots.Input`; default `Overworld.Bots.Wander`, a random
  walk over the zone's input layout, which the HANDSHAKE carries; two random signed bytes for a
  zone without one).

      mix overworld.bots --url ws://127.0.0.1:4000/ws --count N [--input-hz 10] [--seconds S]
                         [--ramp 200] [--warmup 3] [--ips 1] [--nice N] [--input MODULE]
                         [--decode] [--json PATH]

  Bots connect at `--ramp` per second, then after `--warmup` seconds the measured window of
  `--seconds` starts. `--ips K` spreads the bots over the source addresses 127.0.0.1 ..
  127.0.0.K (loopback servers only). `--nice N` lowers this OS process's scheduling priority
  (`renice`) so that, on a machine it shares with the server, the load generator yields the
  CPU to the server instead of competing with it (as bots on other machines would).
  `--decode` has every bot apply every snapshot to a client view and count snapshots it could
  not decode, snapshots without its own avatar, entities within 40 m that vanished from one
  snapshot to the next, and its crossings of the world's centre lines (`Overworld.Bots`); with
  `--input Overworld.Bots.BorderWalk` the bots walk back and forth across the borders of a
  world of 2 × 2 zones. Printed (and written with `--json`): bots connected and
  failed, snapshots per second per bot, snapshot interval p50/p99 and its jitter p99 (distance
  from the tick period), input-to-acknowledgement latency p50/p99 (ms and ticks), bytes
  received per bot per second, and, from the server's `/api/v1/status`, the zone's tick
  p50/p99 over the same window. Percentiles are bucket floors of a log-linear histogram (3 %
  resolution), and each says how many samples it rests on.
  """
  use Mix.Task

  alias Overworld.Bench.Stats
  alias Overworld.Bots
  alias Overworld.Metrics.Histogram

  @switches [
    url: :string,
    count: :integer,
    input_hz: :integer,
    input: :string,
    seconds: :integer,
    ramp: :integer,
    warmup: :integer,
    ips: :integer,
    nice: :integer,
    decode: :boolean,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "overworld.bots")
    Mix.Task.run("compile")

    input =
      if opts[:input],
        do:
          Overworld.Bench.Args.module!(opts[:input], "--input", "an Overworld.Bots.Input module"),
        else: Overworld.Bots.Wander

    url = URI.parse(Keyword.get(opts, :url, "ws://127.0.0.1:4000/ws"))

    unless url.scheme == "ws" and url.host && url.port,
      do: Mix.raise("--url must look like ws://127.0.0.1:4000/ws")

    o = %{
      host: url.host,
      port: url.port,
      path: (url.path || "/ws") <> if(url.query, do: "?" <> url.query, else: ""),
      count: Keyword.get(opts, :count, 100),
      input_hz: Keyword.get(opts, :input_hz, 10),
      input: input,
      seconds: Keyword.get(opts, :seconds, 30),
      ramp: Keyword.get(opts, :ramp, 200),
      warmup: Keyword.get(opts, :warmup, 3),
      ips: Keyword.get(opts, :ips, 1),
      decode: Keyword.get(opts, :decode, false)
    }

    Overworld.Bench.Args.at_least!(o, [:count, :input_hz, :seconds, :ramp, :ips])

    if n = opts[:nice], do: renice(n)
    Mix.Task.run("app.start")
    result = swarm(o) |> Map.put(:nice, Keyword.get(opts, :nice, 0))
    print(result)

    if path = opts[:json] do
      Stats.write_json(path, result)
      Mix.shell().info("wrote #{path}")
    end

    result
  end

  @doc false
  # Runs the swarm and answers the flat result map.
  @spec swarm(map) :: map
  def swarm(o) do
    m = Bots.new()
    run = :erlang.unique_integer([:positive])
    gap = div(1000, o.ramp)
    t0 = System.monotonic_time(:millisecond)

    bots =
      for i <- 1..o.count do
        Process.sleep(max(t0 + i * gap - System.monotonic_time(:millisecond), 0))

        Bots.start(m,
          host: o.host,
          port: o.port,
          path: o.path,
          device: "overworld-bot-#{run}-#{i}",
          input_hz: o.input_hz,
          input: o.input,
          ip: source_ip(o, i),
          seed: i,
          decode: o.decode
        )
      end

    wait_connected(m, o.count, System.monotonic_time(:millisecond) + 30_000)
    ramp_s = (System.monotonic_time(:millisecond) - t0) / 1000
    Process.sleep(o.warmup * 1000)

    before = Bots.snapshot(m)
    server_before = server_ticks(o)
    cpu0 = Overworld.Metrics.CPU.sample()
    Process.sleep(o.seconds * 1000)
    cpu = Overworld.Metrics.CPU.compare(cpu0, Overworld.Metrics.CPU.sample())
    later = Bots.snapshot(m)
    server_after = server_ticks(o)

    Enum.each(bots, &send(&1, :stop))
    Process.sleep(200)

    o
    |> result(ramp_s, before, later, server_before, server_after)
    |> Map.merge(%{
      # The load generator's own CPU over the window (this OS process: it shares the machine).
      bots_os_cpu: cpu.os_cpu && Float.round(cpu.os_cpu, 3),
      bots_scheduler_utilization: Float.round(cpu.scheduler, 3)
    })
  end

  defp source_ip(%{ips: 1}, _i), do: nil
  defp source_ip(%{ips: k}, i), do: {127, 0, 0, 1 + rem(i, k)}

  defp wait_connected(m, count, deadline) do
    c = Bots.counts(m)

    if c.connected + c.failed < count and System.monotonic_time(:millisecond) < deadline do
      Process.sleep(100)
      wait_connected(m, count, deadline)
    end
  end

  # The zones' raw tick histograms from the server's status route.
  defp server_ticks(o) do
    case Overworld.Client.request(o.host, o.port, "GET", "/api/v1/status") do
      {:ok, 200, _, body} ->
        body
        |> :jiffy.decode([:return_maps])
        |> Map.get("zones", [])
        |> Enum.filter(& &1["tick_histogram"])
        |> Map.new(&{&1["name"], Histogram.from_map(&1["tick_histogram"])})

      _ ->
        %{}
    end
  end

  defp result(o, ramp_s, before, later, server_before, server_after) do
    secs = (later.at - before.at) / 1_000_000
    d = fn k -> later.counts[k] - before.counts[k] end
    connected = later.counts.connected
    interval = Histogram.diff(later.interval, before.interval)
    jitter = Histogram.diff(later.jitter, before.jitter)
    ack = Histogram.diff(later.ack, before.ack)
    period_ms = 1000 / 30
    ms = fn us -> us && Float.round(us / 1000, 2) end
    per_bot = fn v -> if connected > 0, do: Float.round(v / secs / connected, 1), else: 0.0 end

    zone =
      case Map.to_list(server_after) do
        [{name, after_h} | _] ->
          h = Histogram.diff(after_h, Map.get(server_before, name, empty(after_h)))

          %{
            zone: name,
            zone_ticks: h.count,
            tick_p50_us: Histogram.percentile(h, 50),
            tick_p99_us: Histogram.percentile(h, 99),
            tick_max_us: h.max
          }

        [] ->
          %{zone: nil}
      end

    Map.merge(
      %{
        url: "ws://#{o.host}:#{o.port}#{o.path}",
        count: o.count,
        input_hz: o.input_hz,
        seconds: Float.round(secs, 1),
        ramp_seconds: Float.round(ramp_s, 1),
        connected: connected,
        failed: later.counts.failed,
        closed: later.counts.closed,
        snapshots: d.(:snapshots),
        snapshots_per_second_per_bot: per_bot.(d.(:snapshots)),
        interval_samples: interval.count,
        interval_p50_ms: ms.(Histogram.percentile(interval, 50)),
        interval_p99_ms: ms.(Histogram.percentile(interval, 99)),
        jitter_p99_ms: ms.(Histogram.percentile(jitter, 99)),
        inputs: d.(:inputs),
        ack_samples: ack.count,
        ack_p50_ms: ms.(Histogram.percentile(ack, 50)),
        ack_p99_ms: ms.(Histogram.percentile(ack, 99)),
        ack_p99_ticks:
          (p = Histogram.percentile(ack, 99)) && Float.round(p / 1000 / period_ms, 2),
        bytes_per_bot_per_second: per_bot.(d.(:bytes)),
        # With --decode (0 without), in the window.
        decoded: d.(:decoded),
        decode_errors: d.(:decode_errors),
        self_missing: d.(:self_missing),
        vanished: d.(:vanished),
        vanished_held_back: d.(:vanished_held_back),
        crossings: d.(:crossings),
        crossings_per_second: Float.round(d.(:crossings) / secs, 1),
        # Over the whole run: bots the server closed (each would reconnect).
        closed_total: later.counts.closed
      },
      zone
    )
  end

  defp empty(h), do: %{counts: Tuple.duplicate(0, tuple_size(h.counts)), count: 0, sum: 0, max: 0}

  defp print(r) do
    info(
      "Bots: #{r.connected} connected, #{r.failed} failed of #{r.count} (ramp #{r.ramp_seconds} s), #{r.closed} closed by the server; window #{r.seconds} s, #{r.input_hz} inputs/s each"
    )

    info(
      "  snapshots: #{r.snapshots_per_second_per_bot}/s per bot; interval p50 #{r.interval_p50_ms} ms, p99 #{r.interval_p99_ms} ms, jitter p99 #{r.jitter_p99_ms} ms (#{Stats.confidence(99, r.interval_samples)})"
    )

    info(
      "  input to acknowledgement: p50 #{r.ack_p50_ms} ms, p99 #{r.ack_p99_ms} ms = #{r.ack_p99_ticks} ticks (#{r.ack_samples} inputs; #{Stats.confidence(99, r.ack_samples)})"
    )

    info("  received: #{r.bytes_per_bot_per_second} bytes/s per bot")

    info(
      "  the bots' own OS process: CPU #{pct(r.bots_os_cpu)} of the machine (all cores), its schedulers #{pct(r.bots_scheduler_utilization)} busy"
    )

    if r.decoded > 0 do
      info(
        "  decoded: #{r.decoded} snapshots, #{r.decode_errors} refused, #{r.self_missing} without the bot's avatar, #{r.vanished} entities within 40 m vanished from one snapshot to the next (#{r.vanished_held_back} more while cells were held back for the byte budget); #{r.crossings} centre-line crossings (#{r.crossings_per_second}/s)"
      )
    end

    if r.zone do
      info(
        "  server zone #{r.zone}: #{r.zone_ticks} ticks in the window, tick p50 #{r.tick_p50_us} µs, p99 #{r.tick_p99_us} µs, max #{r.tick_max_us} µs (#{Stats.confidence(99, r.zone_ticks)})"
      )
    end
  end

  defp info(line), do: Mix.shell().info(line)

  defp pct(nil), do: "n/a"
  defp pct(f), do: "#{Float.round(f * 100, 1)}%"

  defp renice(n) when is_integer(n) and n in 0..19 do
    case System.cmd("renice", ["-n", Integer.to_string(n), "-p", System.pid()],
           stderr_to_stdout: true
         ) do
      {_, 0} -> info("bots run at nice #{n}")
      {out, _} -> Mix.raise("renice failed: #{String.trim(out)}")
    end
  end

  defp renice(_n), do: Mix.raise("--nice must be an integer in 0..19")
end

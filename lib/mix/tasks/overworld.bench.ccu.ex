defmodule Mix.Tasks.Overworld.Bench.Ccu do
  @shortdoc "Benchmarks concurrent idle WebSocket sessions on one server node"
  @moduledoc """
  How many authenticated WebSocket sessions one server node holds, and what each costs it.

      mix overworld.bench.ccu --count N [--clients 4] [--concurrency 64] [--heartbeat 15000]
                              [--hold 10] [--data-dir DIR] [--json PATH]

  This node runs `Overworld.Server` (no zone: the sessions are idle, joined to nothing). The
  clients are `--clients` separate OS processes (peer nodes, `:peer`), each connecting from its
  own loopback address (127.0.0.2, 127.0.0.3, ...) to stay clear of the ephemeral-port limit;
  each opens its share of sessions, `--concurrency` at a time: first every device
  authenticates over HTTP (`POST /api/v1/auth/device`), then, with the server's memory
  measured, every session connects (`GET /ws?zone=`, HELLO, HANDSHAKE) and stays, sending a
  PING every `--heartbeat` ms. After `--hold` seconds the server's memory is measured again.
  Accounts go to `--data-dir` (default: a new temporary directory).

  Printed (and written with `--json`): sessions held by the server (its own count), sessions
  opened and failed (with the first errors), the accept rate (sessions opened per second over
  the connect phase), the server's memory per session (the growth of `:erlang.memory(:total)`
  over the connect phase divided by the sessions held, measured in the server node after a
  garbage collection of every process; the clients are other OS processes and not counted),
  its process part, and the open-file limit of this node.
  """
  use Mix.Task

  alias Overworld.Bench.{CCUClient, Stats}

  @switches [
    count: :integer,
    clients: :integer,
    concurrency: :integer,
    heartbeat: :integer,
    hold: :integer,
    json: :string,
    data_dir: :string
  ]

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, @switches, "overworld.bench.ccu")

    o =
      Overworld.Bench.Args.positive!(opts,
        count: 1_000,
        clients: 4,
        concurrency: 64,
        heartbeat: 15_000,
        hold: 10
      )

    Mix.Task.run("app.start")

    dir =
      opts[:data_dir] ||
        Path.join(System.tmp_dir!(), "overworld-ccu-#{System.unique_integer([:positive])}")

    {:ok, sup} =
      Overworld.Server.start_link(name: :ccu_server, port: 0, data_dir: dir, idle_timeout: 60_000)

    Process.unlink(sup)
    port = Overworld.Server.port(:ccu_server)
    limit = max_fds()

    info(
      "CCU benchmark: #{o.count} sessions from #{o.clients} client processes; server on port #{port}, " <>
        "max #{Overworld.Server.config(:ccu_server).max_connections} connections, open-file limit #{limit}"
    )

    peers = for _ <- 1..o.clients, do: CCUClient.start_peer()
    shares = CCUClient.shares(o.count, o.clients)
    run_id = System.unique_integer([:positive])

    client_opts =
      for {{peer, i}, share} <- Enum.zip(Enum.with_index(peers, 2), shares) do
        {peer,
         %{
           host: "127.0.0.1",
           port: port,
           ip: {127, 0, 0, i},
           prefix: "ccu-#{run_id}-#{i}",
           count: share,
           concurrency: o.concurrency,
           heartbeat: o.heartbeat
         }}
      end

    {auth_ok, auth_failed, auth_errors, auth_ms} = on_clients(client_opts, :auth)

    info(
      "  authenticated #{auth_ok} devices in #{auth_ms} ms (#{auth_failed} failed #{inspect(auth_errors)})"
    )

    before = server_memory()
    {opened, failed, errors, ms} = on_clients(client_opts, :open)
    rate = if ms > 0, do: round(opened * 1000 / ms), else: opened

    info(
      "  opened #{opened} sessions in #{ms} ms: #{rate} per second (#{failed} failed #{inspect(errors)})"
    )

    Process.sleep(o.hold * 1000)
    later = server_memory()
    held = Overworld.Server.stats(:ccu_server).sessions
    alive = Enum.sum(for {peer, _} <- client_opts, do: :peer.call(peer, CCUClient, :alive, []))

    per = fn k -> if held > 0, do: round((later[k] - before[k]) / held), else: nil end

    result = %{
      count: o.count,
      clients: o.clients,
      sessions_held: held,
      client_sessions_alive: alive,
      opened: opened,
      failed: failed,
      errors: Enum.map(errors, &inspect/1),
      connect_ms: ms,
      accept_rate_per_second: rate,
      bytes_per_session: per.(:total),
      process_bytes_per_session: per.(:processes),
      ets_bytes_per_session: per.(:ets),
      binary_bytes_per_session: per.(:binary),
      server_memory_before: before[:total],
      server_memory_after: later[:total],
      open_file_limit: limit
    }

    info(
      "  held by the server after #{o.hold} s: #{held} sessions (clients report #{alive} open)"
    )

    info(
      "  server memory: #{result.bytes_per_session} bytes per session " <>
        "(processes #{result.process_bytes_per_session}, ETS #{result.ets_bytes_per_session}, " <>
        "binaries #{result.binary_bytes_per_session}); #{before[:total]} -> #{later[:total]} bytes"
    )

    if path = opts[:json] do
      Stats.write_json(path, Map.put(result, :errors, Enum.join(result.errors, "; ")))
      info("wrote #{path}")
    end

    Enum.each(peers, &:peer.stop/1)
    Supervisor.stop(sup)
    result
  end

  defp info(line), do: Mix.shell().info(line)

  defp on_clients(client_opts, fun), do: CCUClient.on_peers(client_opts, fun)

  defp server_memory, do: CCUClient.memory()

  defp max_fds do
    :erlang.system_info(:check_io) |> List.flatten() |> Keyword.get(:max_fds)
  end
end

defmodule Overworld.Bench.ClusterSessions do
  @moduledoc false
  # The sessions part of `mix overworld.bench.cluster` (`--sessions`): a gateway
  # (`Overworld.Server`, with the cluster's accounts) on every server node serving the world;
  # `sessions` idle authenticated sessions spread evenly over the nodes, each node's share
  # opened by a client OS process of its own (a peer without distribution, connecting from a
  # loopback address of its own: `Overworld.Bench.CCUClient`), held and heartbeating (a PING
  # every 15 s); and, while they are held, `players` players connected through every node's
  # gateway in turn by the native load generator (`bench/loadgen`, niced), walking in the
  # world and receiving its snapshots. Measured: each node's memory per idle session (the
  # growth of `:erlang.memory(:total)` over the opening, after a garbage collection of every
  # process, over the sessions it holds, before the players come), sessions held and still
  # open after the players, and the players' snapshot rates and input to acknowledgement,
  # with the generator's own CPU and lag.

  alias Overworld.Bench.{CCUClient, Loadgen}

  @server :bench_gateway

  @doc false
  # On a server node: the cluster's accounts in `dir`, and a gateway serving world `name`
  # (held by a process of its own: the server outlives the call). Answers its port.
  @spec serve(term, Path.t()) :: :inet.port_number()
  def serve(name, dir) do
    :ok = Overworld.Accounts.start(dir)

    Overworld.Bench.Peer.serve(
      name: @server,
      port: 0,
      data_dir: dir,
      idle_timeout: 60_000,
      zones: %{"world" => {:world, name}},
      default_zone: "world"
    )
  end

  @doc false
  # On a server node: the sessions its gateway holds.
  @spec held() :: non_neg_integer
  def held, do: Overworld.Server.stats(@server).sessions

  @doc false
  # On a gateway node: its players' sessions whose last frame is `ticks` or more behind their
  # zone's newest published tick (or that sent none), with what they wait on.
  @spec stalled(pos_integer) :: [map]
  def stalled(ticks) do
    Registry.select(Overworld.Registry, [
      {{{:session, @server, :"$1"}, :"$2", :_}, [], [{{:"$1", :"$2"}}]}
    ])
    |> Enum.flat_map(fn {user, pid} -> stalled(user, pid, ticks) end)
  end

  # Whether `pid` is among the subscribers of this node's mirror of `zone` (nil: no mirror).
  defp subscribed?(zone, pid) do
    case Overworld.Zone.config(zone).shared.mirror do
      nil -> nil
      m -> is_map_key(:sys.get_state(m, 1_000).subscribers, pid)
    end
  end

  defp stalled(user, pid, ticks) do
    case :sys.get_state(pid, 1_000) do
      %Overworld.Session{phase: :live, obs: obs, zone: zone} = st when obs != nil ->
        newest = Overworld.Zone.Wire.newest(Overworld.Zone.config(zone).shared.wire)
        # (The zone's tick of its last frame: a world observer's own `tick` counts frames.)
        last = if is_struct(obs, Overworld.Interest.World), do: obs.home_tick || 0, else: obs.tick

        if newest - last >= ticks,
          do: [
            %{
              user: user,
              zone: zone,
              frame_tick: last,
              newest: newest,
              zone_pid: st.zone_pid,
              holder: Overworld.World.zone_for(elem(zone, 0), user, 0),
              entity: st.entity,
              zone_entity: Overworld.Zone.player_entity(zone, user),
              position: st.table && Overworld.Zone.Wire.position(st.table, st.entity),
              socket_queue: :erlang.port_info(st.sock, :queue_size),
              subscribed: subscribed?(zone, pid),
              queue: Process.info(pid, :message_queue_len)
            }
          ],
          else: []

      _ ->
        []
    end
  catch
    # (A session that ended meanwhile, or a zone gone.)
    _, _ -> []
  end

  @doc """
  Runs the part on the server nodes `nodes` (world `name`, data under `base`): answers the
  figures (also printed).
  """
  @spec run([node], term, Path.t(), map) :: map
  def run(nodes, name, base, o) do
    ports =
      for n <- nodes,
          do: {n, :erpc.call(n, __MODULE__, :serve, [name, Path.join(base, "#{n}.accounts")])}

    IO.puts(
      "sessions: a gateway on each of #{length(nodes)} nodes; #{o.sessions} idle sessions " <>
        "(#{length(nodes)} client processes, one per node), then #{o.players} players walking"
    )

    # Device ids of 10 characters or more (the server's rule), unique to this run.
    run_id = Base.encode16(:crypto.strong_rand_bytes(4), case: :lower)

    clients =
      for {{{n, port}, share}, i} <-
            Enum.with_index(Enum.zip(ports, CCUClient.shares(o.sessions, length(nodes))), 2) do
        {CCUClient.start_peer(),
         %{
           node: n,
           host: "127.0.0.1",
           port: port,
           ip: {127, 0, 0, i},
           prefix: "cs-#{run_id}-#{i}",
           count: share,
           concurrency: 32,
           heartbeat: 15_000
         }}
      end

    {auth_ok, auth_failed, auth_errors, auth_ms} = CCUClient.on_peers(clients, :auth)

    IO.puts(
      "  authenticated #{auth_ok} devices over HTTP in #{auth_ms} ms " <>
        "(#{auth_failed} failed #{inspect(auth_errors)})"
    )

    before = memory(nodes)
    {opened, failed, errors, open_ms} = CCUClient.on_peers(clients, :open)

    IO.puts("  opened #{opened} sessions in #{open_ms} ms (#{failed} failed #{inspect(errors)})")

    later = memory(nodes)
    held = Map.new(nodes, &{&1, :erpc.call(&1, __MODULE__, :held, [])})
    # (The players come and go while the idle sessions are held; then the idle sessions are
    # counted again.)
    players = players(ports, o)
    alive = Enum.sum(for {peer, _} <- clients, do: :peer.call(peer, CCUClient, :alive, []))
    held_at_end = held_at_end(nodes, alive, System.monotonic_time(:millisecond) + 10_000)

    per_node =
      for n <- nodes do
        share = Enum.find_value(clients, fn {_, c} -> c.node == n && c.count end)
        zones = length(:erpc.call(n, Overworld.Names, :zones, []))
        grown = later[n][:total] - before[n][:total]
        idle = held[n]

        %{
          node: n,
          zones: zones,
          asked: share,
          held: held[n],
          bytes_per_session: if(idle > 0, do: round(grown / idle)),
          process_bytes_per_session:
            if(idle > 0, do: round((later[n][:processes] - before[n][:processes]) / idle)),
          memory_before: before[n][:total],
          memory_after: later[n][:total]
        }
      end

    IO.puts(
      "  after the players: the gateways hold #{held_at_end} sessions, the clients report " <>
        "#{alive} open"
    )

    for p <- per_node do
      IO.puts(
        "  #{p.node} (#{p.zones} zones): #{p.held} sessions held (#{p.asked} idle asked), " <>
          "#{p.bytes_per_session} bytes per session (processes #{p.process_bytes_per_session})"
      )
    end

    Enum.each(clients, fn {peer, _} -> :peer.stop(peer) end)

    %{
      sessions: o.sessions,
      authenticated: auth_ok,
      auth_failed: auth_failed,
      auth_ms: auth_ms,
      opened: opened,
      open_failed: failed,
      open_errors: Enum.map(errors, &inspect/1),
      open_ms: open_ms,
      held: Enum.sum(Map.values(held)),
      held_at_end: held_at_end,
      client_sessions_open_at_end: alive,
      per_node: Enum.map(per_node, &%{&1 | node: to_string(&1.node)}),
      max_bytes_per_session: Enum.max(Enum.map(per_node, & &1.bytes_per_session)),
      players: players
    }
  end

  defp memory(nodes), do: Map.new(nodes, &{&1, :erpc.call(&1, CCUClient, :memory, [], 60_000)})

  # The players: the load generator (niced, so that the servers come first on two cores)
  # over every node's gateway in turn.
  defp players(_ports, %{players: 0}), do: nil

  defp players(ports, o) do
    urls = Enum.map_join(ports, ",", fn {_, port} -> "ws://127.0.0.1:#{port}/ws" end)
    bin = Loadgen.build!()
    {ramp, warmup} = {100, 5}

    run =
      Task.async(fn ->
        Loadgen.run!(bin,
          url: urls,
          clients: o.players,
          input_hz: 10,
          ramp: ramp,
          warmup: warmup,
          seconds: o.player_seconds,
          ips: 4,
          nice: 10
        )
      end)

    # Halfway through the window (after the ramp and the warmup): every gateway's sessions
    # that sent no frame for a second.
    Process.sleep(div(o.players * 1000, ramp) + warmup * 1000 + div(o.player_seconds * 1000, 2))
    stalled = for {n, _} <- ports, do: {n, :erpc.call(n, __MODULE__, :stalled, [30], 10_000)}
    {out, result} = Task.await(run, :infinity)
    IO.write(out)

    for {n, list} <- stalled, list != [] do
      IO.puts(
        "  #{n}: #{length(list)} sessions sent no frame for 30 ticks halfway through: " <>
          inspect(Enum.take(list, 5), limit: :infinity)
      )
    end

    k = length(ports)

    per =
      for {{n, _}, i} <- Enum.with_index(ports),
          into: %{},
          do: {to_string(n), length(Enum.take_every(Enum.drop(1..o.players//1, i), k))}

    Map.put(result, "per_gateway", per)
  end

  # The sessions the gateways hold once the players' closing sessions are gone (they close
  # as the generator ends): read again until they hold what the clients report open, or for
  # 10 s at most.
  defp held_at_end(nodes, alive, deadline) do
    held = Enum.sum(for n <- nodes, do: :erpc.call(n, __MODULE__, :held, []))

    if held == alive or System.monotonic_time(:millisecond) > deadline,
      do: held,
      else: Process.sleep(100) && held_at_end(nodes, alive, deadline)
  end
end

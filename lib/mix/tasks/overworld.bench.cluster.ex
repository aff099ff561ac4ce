defmodule Mix.Tasks.Overworld.Bench.Cluster do
  @shortdoc "Benchmarks a world over a local cluster: recovery after node kills"
  @moduledoc """
  A world of zones over a cluster of server nodes on this machine (each a BEAM of its own,
  started with `:peer`, scheduler busy-wait off: `+sbwt none`), replicated durability on
  (the cluster's default), and `--kills` times: the node running the most zones is killed
  with `kill -9` of its OS process, and the time from the kill until each of its zones has
  ticked again on a survivor is measured; then a node of the same name comes back with an
  empty data directory, the zones homed on it move back to it (hand-over), and the world's
  entity ids are read on every node: none may be missing or twice. Run it in the game's Mix
  project:

      mix overworld.bench.cluster --zone MODULE [--wire MODULE] [--nodes 3] [--zones 2x2]
                                  [--entities-per-zone 1000] [--kills 20] [--arg KEY=VALUE ...]
                                  [--probe-seconds 10] [--observers 1,1000,5000]
                                  [--sessions 0] [--players 500] [--player-seconds 30]
                                  [--looters 0]
                                  [--json PATH]

  * `--zone` the game's zone module (it must export `zone_options(entities, extra)`).
  * `--nodes` server nodes (default 3; at least 3 with kills: a majority survives one; 1
    with `--kills 0 --probe-seconds 0` is the reference a cluster's players are held
    against: the same world and players on one node); `--zones CxR` the world (default
    2x2; `4x3` puts about 4 zones on each of 3 nodes); `--entities-per-zone` (default 1000).
  * `--probe-seconds` (default 10; 0: none): before the kills, the first zone is watched by
    an observer on its node and one on another node for that long, and the delay of the
    remote one's frame of each tick after the local one's is measured (OS clock, one for
    every node of this machine), and, for a player of each (an empty map as its input every
    tick), the ticks from writing an input to the frame that acknowledges it; then, for each count of `--observers`, that many observers
    subscribe to the zone on the other node, and the bytes per second the zone's node sends
    there are read from the distribution connection (its whole traffic) over 3 s.
  * `--sessions S` (default 0: none): before the kills, a gateway (`Overworld.Server`, with
    the cluster's accounts) starts on every node, S idle authenticated sessions are spread
    evenly over them (one client OS process per node, from a loopback address of its own;
    each session a device authenticated over HTTP, then a WebSocket held with a PING every
    15 s), and, while they are held, `--players` players (default 500) connect through every
    node's gateway in turn with the native load generator (niced) and walk in the world for
    `--player-seconds` (default 30). Measured: each node's memory per session (the growth of
    `:erlang.memory(:total)` over the opening, after a garbage collection of every process,
    over the idle sessions it holds), the sessions held and still open at the end, the
    players' snapshot rates and input to acknowledgement, and the generator's CPU and lag.
    `--kills 0` skips the kills.
  * `--looters N` (the goblin world; default 0): N players join the world before the kills,
    sessions of this node's own, walking among the goblins and picking their loot up: each
    pickup is a durable event, acknowledged to the player (`"L"` with its new total) once
    journaled on the zone's node and its replica. Like a session, each looter watches its
    zone's server and claims its player again wherever it is when that server goes (a
    recovered zone keeps an unclaimed player for its `rejoin_ms` only). After every kill and
    recovery each avatar is read where it is: an acknowledged total above the one it holds is
    an acknowledged event lost (counted and printed); an avatar found nowhere is counted
    apart.

  Printed (and written with `--json`): per kill, the zones the node ran and the time until the
  last of them ticked again elsewhere; over all kills p50 and max (the p99 of 20 kills is
  their maximum: the count is printed), entities missing and duplicated after each
  recovery, and this machine. Each node's log goes to a file of its own beside the data
  directories; the files are kept (their directory printed) when an entity was missing or
  twice.

  """
  use Mix.Task
  require Overworld.Entity

  alias Overworld.Bench.{Args, Stats}

  @switches [
    zone: :string,
    wire: :string,
    zones: :string,
    entities_per_zone: :integer,
    nodes: :integer,
    kills: :integer,
    probe_seconds: :integer,
    observers: :string,
    sessions: :integer,
    players: :integer,
    player_seconds: :integer,
    looters: :integer,
    arg: :keep,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.cluster")
    o = Args.positive!(Keyword.delete(opts, :kills), nodes: 3, entities_per_zone: 1000)
    o = Map.put(o, :kills, Keyword.get(opts, :kills, 20))
    sessions = sessions!(opts)
    if o.kills < 0, do: Mix.raise("--kills must be at least 0")
    probe_seconds = Keyword.get(opts, :probe_seconds, 10)
    observers = observer_counts!(Keyword.get(opts, :observers, "1,1000,5000"))

    if o.kills > 0 and o.nodes < 3,
      do: Mix.raise("--nodes must be at least 3 with kills (a majority survives a kill)")

    if probe_seconds > 0 and o.nodes < 2,
      do: Mix.raise("--probe-seconds needs --nodes 2 or more (a remote observer)")

    Mix.Task.run("compile")
    {module, wire, {c, r}, args} = Mix.Tasks.Overworld.Bench.World.game!(opts)
    # This node runs no zone (it does not start the application): it starts the servers,
    # kills them and reads them.
    Overworld.Bench.Peer.distributed!("bench", "127.0.0.1")
    name = "bench_cluster"

    world_opts =
      module.zone_options(o.entities_per_zone * c * r, name: name, zones: {c, r}, wire: wire)
      |> Keyword.update(:args, args, &Keyword.merge(&1, args))

    base = Path.join(System.tmp_dir!(), "overworld-bench-cluster-#{System.os_time()}")
    names = for i <- 1..o.nodes, do: :"bc#{i}_#{System.unique_integer([:positive])}"
    nodes = Enum.map(names, &node_name/1)
    world = fn n -> world_opts ++ [cluster: true, data_dir: Path.join(base, "#{n}")] end
    peers = Map.new(names, fn n -> {node_name(n), start_node(n, nodes, module, world)} end)
    zones = for col <- 0..(c - 1), row <- 0..(r - 1), do: {name, {col, row}}

    IO.puts(
      "cluster bench: #{o.nodes} nodes (:peer, +sbwt none), a #{c}x#{r} world of " <>
        "#{o.entities_per_zone} #{inspect(module)} entities per zone, #{o.kills} kills"
    )

    settle!(nodes, zones)
    read = fn -> ids(nodes, zones) end
    start = Overworld.Bench.Soak.settled(read)
    IO.puts("settled: #{length(zones)} zones, #{length(start)} entities")
    tick_ms = 1000 / Keyword.get(world_opts, :tick_rate, 30)
    probe = if probe_seconds > 0, do: probe(nodes, hd(zones), probe_seconds, tick_ms, observers)

    sessions =
      if sessions.sessions > 0,
        do: Overworld.Bench.ClusterSessions.run(nodes, name, base, sessions)

    # (After the probe: a looter walking into the probe's player could push it over a border.
    # Their avatars are not in `start`: new ids are neither missing nor twice.)
    looters = looters(nodes, zones, Keyword.get(opts, :looters, 0))

    {kills, _peers} =
      Enum.map_reduce(1..o.kills//1, peers, fn k, peers ->
        {result, peers} = kill_one(k, peers, nodes, zones, module, world, base)
        ids = Overworld.Bench.Soak.check(read, start)
        loot = loot_lost(nodes, zones, looters)

        result =
          Map.merge(result, %{missing: ids.lost, duplicated: ids.duplicated})
          |> Map.merge(loot)

        IO.puts(
          "kill #{k}: #{result.node} ran #{length(result.zones)} zones; all ticking again " <>
            "after #{result.ms} ms (#{Enum.join(result.per_zone_ms, ", ")} ms); " <>
            "entities missing #{ids.lost}, duplicated #{ids.duplicated} (#{ids.reads} reads)" <>
            if(looters != [],
              do:
                "; acknowledged loot events #{loot.acknowledged}, lost #{loot.acknowledged_lost}" <>
                  " (looters' avatars not found: #{loot.avatars_not_found})",
              else: ""
            ) <>
            if(ids.duplicated + ids.lost > 0, do: " #{inspect(ids.ids)}", else: "")
        )

        {result, peers}
      end)

    summary = Stats.summary(Enum.map(kills, & &1.ms))
    # Where the ids held twice at the end are (for the record: which zones, which nodes).
    twice = holders(nodes, zones)

    if twice != [],
      do: IO.puts("held twice at the end: #{inspect(twice, limit: :infinity)}")

    if kills != [],
      do:
        IO.puts(
          "recovery after kill -9 (kill to the last of the node's zones ticking elsewhere): " <>
            "p50 #{summary.p50} ms, max #{summary.max} ms over #{summary.count} kills " <>
            "(#{Enum.sum(Enum.map(kills, &length(&1.zones)))} zone recoveries); " <>
            "entities missing #{Enum.sum(Enum.map(kills, & &1.missing))}, " <>
            "duplicated #{Enum.sum(Enum.map(kills, & &1.duplicated))}" <>
            if(looters != [],
              do:
                "; acknowledged durable events lost #{Enum.sum(Enum.map(kills, & &1.acknowledged_lost))} " <>
                  "(of #{List.last(kills).acknowledged} acknowledged to #{length(looters)} looters)",
              else: ""
            )
        )

    machine = Stats.machine()
    IO.puts(Stats.machine_line(machine))

    if opts[:json] do
      Stats.write_json(opts[:json], %{
        bench: "cluster",
        nodes: o.nodes,
        zones: "#{c}x#{r}",
        entities_per_zone: o.entities_per_zone,
        game: inspect(module),
        recovery_ms: summary,
        probe: probe,
        sessions: sessions,
        held_twice_at_end:
          Enum.map(twice, fn {id, where} -> %{id: id, zones: Enum.map(where, &inspect/1)} end),
        kills: Enum.map(kills, fn k -> %{k | zones: Enum.map(k.zones, &inspect/1)} end),
        machine: machine
      })

      IO.puts("wrote #{opts[:json]}")
    end

    if Enum.any?(kills, &(&1.missing + &1.duplicated > 0)) do
      for n <- nodes, do: File.rm_rf(Path.join(base, "#{n}"))
      IO.puts("the nodes' logs are kept in #{Path.join(base, "logs")}")
    else
      File.rm_rf(base)
    end

    :ok
  end

  defp node_name(name), do: :"#{name}@127.0.0.1"

  # A server node: a BEAM of its own with this project's code, the application started,
  # joined to the cluster, the world started with its own data directory.
  defp start_node(name, nodes, module, world) do
    # (Not linked: killed with kill -9, it must not take this task down.)
    {peer, node} = Overworld.Bench.Peer.start(name, [~c"+sbwt", ~c"none"], false)
    config = %Overworld.Cluster.Config{nodes: nodes}
    log_to(node, world)
    {:ok, _} = :erpc.call(node, Overworld.Cluster, :join, [config])
    {:ok, _} = :erpc.call(node, Overworld, :start_world, [module, world.(node)])
    %{peer: peer, os_pid: :erpc.call(node, :os, :getpid, [])}
  end

  defp sessions!(opts) do
    o = %{
      sessions: Keyword.get(opts, :sessions, 0),
      players: Keyword.get(opts, :players, 500),
      player_seconds: Keyword.get(opts, :player_seconds, 30)
    }

    unless is_integer(o.sessions) and o.sessions >= 0 and o.players >= 0 and
             o.player_seconds > 0,
           do: Mix.raise("--sessions and --players must be at least 0, --player-seconds positive")

    o
  end

  defp observer_counts!(text) do
    Enum.map(String.split(text, ","), fn part ->
      case Integer.parse(String.trim(part)) do
        {k, ""} when k >= 0 -> k
        _ -> Mix.raise("--observers must be counts separated by commas, got: #{inspect(text)}")
      end
    end)
  end

  # A zone seen from its own node and from another: the frame of each tick built by an
  # observer on each (the remote one through its node's mirror), the OS clock noted (one clock
  # for the nodes of this machine); then the bytes per second the zone's node sends to the
  # other while `counts` observers there are subscribed to the zone (the mirror takes each
  # tick once for all of them).
  defp probe(nodes, z, seconds, tick_ms, counts) do
    live = live(nodes)
    [local] = where(live, z)
    remote = hd(live -- [local])
    ticks = round(seconds * 1000 / tick_ms)
    me = self()
    probe = Overworld.Bench.ClusterProbe
    pos = {20_000, 20_000}
    {name, _} = z
    # (Its input: an empty map, every tick; a player standing.)
    input = %{}

    pids =
      for n <- [local, remote],
          do: :erpc.call(n, probe, :observe, [name, z, pos, ticks, input, me])

    [here, there] =
      for pid <- pids do
        receive do
          {:probe, ^pid, records} -> records
        after
          seconds * 1000 + 30_000 -> Mix.raise("the observer on #{node(pid)} did not answer")
        end
      end

    at = Map.new(here, fn {n, us, _, _} -> {n, us} end)
    delays = for {n, us, _, _} <- there, is_map_key(at, n), do: us - at[n]
    delay = Stats.summary(delays)
    # (Ticks the local observer saw within the remote one's window that it did not: the two
    # start and end a few ticks apart.)
    seen = MapSet.new(there, &elem(&1, 0))
    {lo, hi} = Enum.min_max(Enum.map(there, &elem(&1, 0)), fn -> {0, -1} end)
    missed = Enum.count(here, fn {n, _, _, _} -> n in lo..hi//1 and n not in seen end)
    to_ms = fn us -> us && Float.round(us / 1000, 1) end

    IO.puts(
      "frames of zone #{inspect(z)}: the observer on another node (#{remote}) built each " <>
        "tick's frame after the one on the zone's node (#{local}): " <>
        "p50 #{to_ms.(delay.p50)} ms, p99 #{to_ms.(delay.p99)} ms, max #{to_ms.(delay.max)} ms " <>
        "(p99 #{Float.round((delay.p99 || 0) / 1000 / tick_ms, 2)} ticks of #{Float.round(tick_ms, 1)} ms; " <>
        "#{delay.count} ticks seen by both, #{missed} within the remote one's window seen only " <>
        "on the zone's node)"
    )

    # Input to acknowledgement: ticks from the notice of the tick an input was written at to
    # the frame that acknowledges it (the newest acknowledged, at each tick).
    acks =
      for {where, records} <- [local: here, remote: there], into: %{} do
        ticks_to_ack = for {_, _, _, since} <- records, since != nil, do: since
        summary = Stats.summary(ticks_to_ack)

        IO.puts(
          "input to acknowledgement, a player whose session is on the #{where} node: " <>
            "p50 #{summary.p50}, p99 #{summary.p99}, max #{summary.max} ticks " <>
            "(#{summary.count} ticks)"
        )

        {where, summary}
      end

    bytes =
      for k <- counts do
        subs = :erpc.call(remote, probe, :subscribers, [z, k, me])
        Process.sleep(1_000)
        {b0, t0} = {:erpc.call(local, probe, :sent_bytes, [remote]), now_ms()}
        Process.sleep(3_000)
        {b1, t1} = {:erpc.call(local, probe, :sent_bytes, [remote]), now_ms()}
        :ok = :erpc.call(remote, probe, :stop, [subs])
        rate = b0 && b1 && round((b1 - b0) * 1000 / (t1 - t0))

        IO.puts(
          "distribution bytes/s from #{local} to #{remote} with #{k} observers of the zone " <>
            "there: #{rate} (the link's whole traffic: other zones, replicas, shadows too)"
        )

        %{observers: k, bytes_per_s: rate}
      end

    %{
      zone: inspect(z),
      local: local,
      remote: remote,
      frame_delay_us: delay,
      input_to_ack_ticks: acks,
      ticks_missed_remote: missed,
      tick_ms: tick_ms,
      bytes_per_s: bytes
    }
  end

  defp now_ms, do: System.monotonic_time(:millisecond)

  # The node's log in a file of its own beside the data directories (one per start: a node
  # killed and started again writes a new one), kept when the bench found entities missing or
  # twice.
  defp log_to(node, world) do
    dir = Path.join(Path.dirname(Keyword.fetch!(world.(node), :data_dir)), "logs")
    File.mkdir_p!(dir)
    file = Path.join(dir, "#{node}-#{System.unique_integer([:positive, :monotonic])}.log")

    handler = %{
      # (Every line: no burst limit, no dropping under load.)
      config: %{
        file: String.to_charlist(file),
        burst_limit_enable: false,
        drop_mode_qlen: 1_000_000,
        flush_qlen: 2_000_000
      },
      level: :info,
      formatter:
        {:logger_formatter, %{single_line: true, template: [:time, " ", :level, " ", :msg, "\n"]}}
    }

    :ok = :erpc.call(node, :logger, :add_handler, [:bench_file, :logger_std_h, handler])
  end

  # Every zone runs on its home node among the live nodes, once (at most 60 s).
  defp settle!(nodes, zones, tries \\ 600) do
    live = live(nodes)

    settled =
      Enum.all?(zones, fn z ->
        case where(live, z) do
          [n] -> n == Overworld.Cluster.Placement.home(z, live)
          _ -> false
        end
      end)

    cond do
      settled -> :ok
      tries == 0 -> Mix.raise("the world did not settle on its home nodes within 60 s")
      true -> Process.sleep(100) && settle!(nodes, zones, tries - 1)
    end
  end

  # The nodes of `nodes` connected to this one.
  defp live(nodes), do: Enum.filter(nodes, &(&1 in Node.list()))

  # The nodes whose local registry names a server of zone `z`.
  defp where(live, z) do
    Enum.filter(live, fn n ->
      try do
        :erpc.call(n, Overworld.Names, :whereis, [Overworld.Names.zone(z)], 5_000) != nil
      catch
        _, _ -> false
      end
    end)
  end

  defp kill_one(k, peers, nodes, zones, module, world, base) do
    live = live(nodes)
    on = Map.new(live, fn n -> {n, Enum.filter(zones, &(where([n], &1) == [n]))} end)
    {victim, its} = Enum.max_by(on, fn {_, zs} -> length(zs) end)
    survivors = live -- [victim]
    %{os_pid: os_pid} = Map.fetch!(peers, victim)

    killed_at = System.monotonic_time(:millisecond)
    :ok = Overworld.Bench.OsServer.signal(os_pid, "KILL")
    per_zone = Enum.map(its, &ticking_again(&1, survivors, killed_at))

    # A node of the same name comes back, with an empty data directory: the zones homed on
    # it move back to it.
    File.rm_rf(Path.join(base, "#{victim}"))
    [short, _] = String.split(to_string(victim), "@")
    peer = start_node(String.to_atom(short), nodes, module, world)
    settle!(nodes, zones)

    {%{kill: k, node: victim, zones: its, per_zone_ms: per_zone, ms: Enum.max([0 | per_zone])},
     Map.put(peers, victim, peer)}
  end

  # Looters (the goblin world's loot: durable events acknowledged to players): `count`
  # players joined through the zones in turn, their sessions processes of this node.
  defp looters(_nodes, _zones, 0), do: []

  defp looters(nodes, zones, count) do
    probe = Overworld.Bench.ClusterProbe
    {name, _} = hd(zones)

    for i <- 1..count do
      z = Enum.at(zones, rem(i - 1, length(zones)))
      [n] = where(live(nodes), z)
      player = "looter-#{i}"
      pid = probe.looter(name, player, nodes)
      {:ok, _} = :erpc.call(n, Overworld.Zone, :join, [z, player, %{session: pid}])
      {player, pid}
    end
  end

  # After a recovery: every looter's acknowledged totals against the total its avatar holds
  # (asked of every zone on its own node). The acknowledgements are read first: one
  # that comes after the read is of a later pickup.
  defp loot_lost(_nodes, _zones, []),
    do: %{acknowledged: 0, acknowledged_lost: 0, avatars_not_found: 0}

  defp loot_lost(nodes, zones, looters) do
    probe = Overworld.Bench.ClusterProbe
    zero = %{acknowledged: 0, acknowledged_lost: 0, avatars_not_found: 0}

    Enum.reduce(looters, zero, fn {player, pid}, acc ->
      totals = probe.looted(pid)
      held = avatar_total(nodes, zones, player)
      # (An avatar found nowhere is counted apart: it may be between two zones, or gone.)
      lost = if held, do: Enum.count(totals, &(&1 > held)), else: 0

      cond do
        held == nil and totals != [] ->
          IO.puts("  #{player}: acknowledged totals up to #{hd(totals)}, its avatar not found")

        lost > 0 ->
          IO.puts(
            "  #{player}: acknowledged totals up to #{hd(totals)}, its avatar holds #{held}"
          )

        true ->
          :ok
      end

      %{
        acknowledged: acc.acknowledged + length(totals),
        acknowledged_lost: acc.acknowledged_lost + lost,
        avatars_not_found: acc.avatars_not_found + if(held == nil, do: 1, else: 0)
      }
    end)
  end

  # The loot total of a looter's avatar: asked of every zone on its own node (an avatar
  # between two zones is asked for again, 5 times 100 ms apart); nil when none holds it.
  defp avatar_total(nodes, zones, player, tries \\ 5) do
    found = on_zones(nodes, zones, :total, [player])

    cond do
      found != nil -> found
      tries > 1 -> Process.sleep(100) && avatar_total(nodes, zones, player, tries - 1)
      true -> nil
    end
  end

  # The first truthy answer of `ClusterProbe.fun(zone, ...args)` asked of every zone on its
  # own node (nil when none).
  defp on_zones(nodes, zones, fun, args) do
    live = live(nodes)

    Enum.find_value(zones, fn z ->
      with [n] <- where(live, z) do
        try do
          :erpc.call(n, Overworld.Bench.ClusterProbe, fun, [z | args], 10_000)
        catch
          _, _ -> nil
        end
      else
        _ -> nil
      end
    end)
  end

  # Milliseconds from the kill until zone `z` has completed a tick on a survivor (at most
  # 60 s): its new server found, then its tick counter seen to move.
  defp ticking_again(z, survivors, killed_at, first \\ nil) do
    now = System.monotonic_time(:millisecond)
    if now - killed_at > 60_000, do: Mix.raise("zone #{inspect(z)} did not come back within 60 s")

    tick =
      Enum.find_value(survivors, fn n ->
        try do
          case :erpc.call(n, Overworld.Zone, :metrics, [z], 2_000) do
            %{tick: t} -> if where([n], z) == [n], do: t
            _ -> nil
          end
        catch
          _, _ -> nil
        end
      end)

    cond do
      tick != nil and first == nil ->
        Process.sleep(5) && ticking_again(z, survivors, killed_at, tick)

      tick != nil and tick > first ->
        System.monotonic_time(:millisecond) - killed_at

      true ->
        Process.sleep(5) && ticking_again(z, survivors, killed_at, first)
    end
  end

  # The ids that two zones (or one, twice) hold in each of three reads 100 ms apart:
  # {id, [{zone, node}]} (none read, with a line saying so, while a zone moves). The zones are
  # read one after another, so an entity crossing between two of their reads is in both of
  # one read; held twice three times is no crossing.
  defp holders(nodes, zones) do
    [first | rest] =
      for i <- 1..3 do
        if i > 1, do: Process.sleep(100)

        nodes
        |> held(zones)
        |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
        |> Enum.filter(fn {_, where} -> length(where) > 1 end)
        |> Map.new(fn {id, where} -> {id, Enum.sort(where)} end)
      end

    first
    |> Enum.filter(fn {id, where} -> Enum.all?(rest, &(Map.get(&1, id) == where)) end)
    |> Enum.sort()
  catch
    :exit, reason ->
      IO.puts("held twice at the end: not read (#{inspect(reason)})")
      []
  end

  # Every zone's entity ids, read where it runs, sorted (an id twice if two zones hold it).
  # Entities cross between zones meanwhile: Overworld.Bench.Soak.check/2 reads several times.
  defp ids(nodes, zones), do: nodes |> held(zones) |> Enum.map(&elem(&1, 0)) |> Enum.sort()

  # `[{entity id, {zone, node}}]` for every entity of every zone, read where the zone runs.
  # (A zone moving, or restarting, is an exit: Soak.check/2 reads again.)
  defp held(nodes, zones) do
    live = live(nodes)

    Enum.flat_map(zones, fn z ->
      with [n] <- where(live, z),
           list when is_list(list) <- :erpc.call(n, Overworld.Zone, :entities, [z], 30_000) do
        for e <- list, do: {Overworld.Entity.entity(e, :id), {z, n}}
      else
        _ -> exit(:zone_moving)
      end
    end)
  catch
    :error, {:erpc, reason} -> exit({:erpc, reason})
  end
end

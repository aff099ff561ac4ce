defmodule Mix.Tasks.Overworld.Server do
  @shortdoc "Serves a zone of your game over HTTP/WebSocket and prints its tick statistics"
  @moduledoc """
  Starts a zone of the game in the current project and an `Overworld.Server` serving it (the
  status page on `/`, device authentication, WebSocket sessions on `/ws`), and prints the
  zone's tick statistics every few seconds until stopped (Ctrl-C twice). Run it in the game's
  Mix project (which depends on `:overworld`):

      mix overworld.server --zone MODULE --wire MODULE [--name NAME] [--arg KEY=VALUE ...]
                           [--zones CxR --entities-per-zone N]
                           [--size W,H] [--cell-size M] [--workers N] [--tick-rate 30]
                           [--seed 0] [--port 4000] [--data-dir ./data] [--no-persist]
                           [--snapshot-ticks 300] [--interval 5] [--seconds S]
                           [--no-pace] [--max-players N]

  * `--zone` the module implementing `Overworld.Zone`; `--wire` its templates module (a
    module using `Overworld.Template`; without it players cannot connect).
  * `--name` the zone's name, as clients send it (`/ws?zone=NAME`) and as its directory is
    called (default: the module's last part, underscored: `MyGame.Arena` is `arena`).
  * `--arg KEY=VALUE` (repeatable) the keyword list `init/1` gets; values that read as
    integers, floats, `true` or `false` are those, the rest strings.
  * `--zones CxR --entities-per-zone N`: a world of `C x R` zones (`Overworld.World`, named
    `--name`, one connection sees all of it: clients connect to `/ws?zone=NAME` as to a
    zone) of `N` entities per zone, for a zone module that exports `zone_options(entities,
    extra)` (the zone options for that many entities, as the goblin example's); `--zones
    1x1` is one zone of `N` entities. The world's zones keep their files in
    `<data-dir>/worlds/<name>/zone-<i>/`; the statistics come as a line per zone and one
    for the world (its crossings per second).
  * `--size W,H` (metres), `--cell-size`, `--workers`, `--tick-rate`, `--seed`: the zone
    options of the same names (`Overworld.Zone`).
  * `--data-dir` where accounts, the token secret and (unless `--no-persist`) the zone's
    snapshots and journal live (`<data-dir>/zones/<name>/`); a zone started again on its
    files recovers from them.
  * `--no-pace` keeps a snapshot every tick for every player whatever the load (by default
    the server lowers everyone's snapshot rate evenly when it cannot keep up:
    `Overworld.Server.Pace`); `--max-players N` refuses new players (close 4008) beyond N in
    the zone (the server's `:pace` and `:max_players` options).

  `--port 0` picks a free port. Once the server listens it prints
  `listening on http://127.0.0.1:<port>` (tools and tests wait for that line). Each line then
  covers the last interval: tick duration p50 and max in microseconds with the ticks they
  rest on (the p99 too once 100 ticks lie above it, i.e. 10,000 ticks in the interval),
  overruns, the average of each tick phase, and scheduler utilization beside OS CPU (the BEAM busy-waits, so OS CPU
  over-states the work). The interval a line covers is measured ("N ticks in S s"), and the
  lines come from a process of their own at high priority on absolute timers, written
  straight to standard output: on a saturated node they still come every interval.

  With `OVERWORLD_NODES` or `OVERWORLD_DNS` in the environment the node joins that cluster
  before its zones start (it must run with a name: `elixir --name NAME@HOST -S mix ...`; see
  docs/cluster.md, where a bad setting is a one-line error naming the variable). With more
  than one configured node, a world (`--zones`) is spread over the cluster (`Overworld.World`,
  `cluster: true`; every node starts it with the same options and its own `--data-dir`):
  each node runs the zones homed on it, and its statistics cover those (a line for the node,
  one per zone running there). `mix overworld.cluster` starts such a cluster on this machine.

  A game's own task can start its zones itself and call `serve/2` for the server and the
  statistics (the goblin example's `mix goblins.server` does).
  """
  use Mix.Task

  alias Overworld.Bench.Args

  # The options of `serve/2`, which a game's own server task takes too.
  @server_switches [
    port: :integer,
    data_dir: :string,
    persist: :boolean,
    snapshot_ticks: :integer,
    interval: :integer,
    seconds: :integer,
    pace: :boolean,
    max_players: :integer
  ]

  @switches [
              zone: :string,
              wire: :string,
              name: :string,
              arg: :keep,
              size: :string,
              cell_size: :float,
              workers: :integer,
              tick_rate: :integer,
              seed: :integer,
              zones: :string,
              entities_per_zone: :integer
            ] ++ @server_switches

  @doc "The `OptionParser` switches of `serve/2`'s options, for a game's own server task."
  @spec server_switches() :: keyword
  def server_switches, do: @server_switches

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.server")
    # The game's modules are looked up in the compiled project.
    Mix.Task.run("compile")
    module = Args.module!(opts[:zone], "--zone", "the zone module of your game")
    wire = opts[:wire] && Args.module!(opts[:wire], "--wire", "its templates module")
    name = opts[:name] || default_name(module)

    zone_opts =
      [id: name, wire: wire, args: parse_args(Keyword.get_values(opts, :arg))]
      |> put_given(opts, [:workers, :tick_rate, :seed, :cell_size])
      |> then(&if opts[:size], do: Keyword.put(&1, :size, size!(opts[:size])), else: &1)

    serve([served(module, zone_opts, opts)], opts)
  end

  # Started by another process (`mix overworld.cluster`, OVERWORLD_STDIN_LIFELINE=1): this
  # node exits when its standard input ends, that is when that process goes away.
  defp lifeline do
    if System.get_env("OVERWORLD_STDIN_LIFELINE") == "1" do
      spawn(fn ->
        read_until_eof()
        System.halt(0)
      end)
    end

    :ok
  end

  defp read_until_eof do
    case IO.read(:stdio, :line) do
      :eof -> :ok
      {:error, _} -> :ok
      _line -> read_until_eof()
    end
  end

  # A cluster configured in the environment (Overworld.Cluster.Config; docs/cluster.md): the
  # node joins it before its zones start, and says with whom.
  defp join_cluster! do
    case Overworld.Cluster.join_env() do
      {:ok, :none} ->
        :ok

      {:ok, connected} ->
        Mix.shell().info(
          "cluster: #{node()} joined; connected to #{length(connected)} of the configured " <>
            "nodes#{if connected != [], do: " (#{Enum.join(Enum.sort(connected), ", ")})", else: ""}"
        )

        Mix.shell().info(
          if Overworld.Cluster.TLS.enabled?(),
            do: "cluster: distribution over TLS (inet_tls)",
            else:
              "cluster: distribution over plain TCP: keep the nodes on a private network " <>
                "(docs/cluster.md, Security)"
        )

      {:error, :not_alive} ->
        Mix.raise(
          "a cluster is configured (OVERWORLD_NODES or OVERWORLD_DNS) but this node has no " <>
            "name: start it with elixir --name NAME@HOST -S mix ..."
        )

      {:error, message} ->
        Mix.raise(message)
    end
  end

  @doc false
  # What `serve/2` serves: one zone of `zone_opts` (with `:id` and `:args`), or with `opts`'
  # `:zones` and `:entities_per_zone` a world of them named by the id, their options from the
  # module's zone_options/2 (`1x1`: one zone of that many entities). A game's own server task
  # calls it too.
  @spec served(module, keyword, keyword) :: {module, keyword} | {:world, module, keyword}
  def served(module, zone_opts, opts) do
    case {opts[:zones], opts[:entities_per_zone]} do
      {nil, nil} ->
        {module, zone_opts}

      {nil, _} ->
        Mix.raise("--entities-per-zone goes with --zones CxR")

      {_, nil} ->
        Mix.raise("--zones goes with --entities-per-zone N")

      {shape, n} ->
        Args.at_least!(opts, [:entities_per_zone])
        {c, r} = zones!(shape)

        unless Code.ensure_loaded?(module) and function_exported?(module, :zone_options, 2),
          do:
            Mix.raise(
              "--zones needs #{inspect(module)}.zone_options(entities, extra) (the zone " <>
                "options for that many entities): define it in your zone module"
            )

        with_args = fn extra ->
          base = module.zone_options(n * c * r, Keyword.delete(extra, :args))
          Keyword.update(base, :args, zone_opts[:args], &Keyword.merge(&1, zone_opts[:args]))
        end

        case {c, r} do
          {1, 1} ->
            {module, with_args.(zone_opts)}

          _ ->
            world = Keyword.delete(zone_opts, :id) ++ [name: zone_opts[:id], zones: {c, r}]
            {:world, module, with_args.(world)}
        end
    end
  end

  @doc false
  # `--zones CxR` as `{c, r}` (a game's own server task parses it too).
  @spec zones!(String.t()) :: {pos_integer, pos_integer}
  def zones!(text) do
    with [c, r] <- String.split(text, "x"),
         {c, ""} <- Integer.parse(c),
         {r, ""} <- Integer.parse(r),
         true <- c >= 1 and r >= 1 do
      {c, r}
    else
      _ ->
        Mix.raise(
          "--zones must be CxR (columns x rows of zones, e.g. 2x2), got: #{inspect(text)}"
        )
    end
  end

  @doc """
  Starts the zones (`{module, zone options}`, each with `:id`; their names for clients are
  their ids as strings), a server on them and the statistics loop, with the server options of
  this task (`--port`, `--data-dir`, `--no-persist`, `--snapshot-ticks`, `--interval`,
  `--seconds`) given as parsed `opts`, and more `Overworld.Server` options of the game's own
  (`server_opts`: match handlers, RPC functions, Lua scripts). Returns when `--seconds` are
  over (never without).
  Every invalid option or failed start ends the task with a one-line message.
  """
  @spec serve([{module, keyword}], keyword, keyword) :: :ok
  def serve([_ | _] = zones, opts, server_opts \\ []) do
    o = Args.positive!(opts, interval: 5)
    port = Keyword.get(opts, :port, 4000)

    unless port in 0..65_535,
      do: Mix.raise("--port must be a port number in 0..65535 (0 picks a free one), got: #{port}")

    if opts[:seconds], do: Args.at_least!(opts, [:seconds])
    if opts[:max_players], do: Args.at_least!(opts, [:max_players])
    if opts[:snapshot_ticks], do: Args.at_least!(opts, [:snapshot_ticks])
    data_dir = Keyword.get(opts, :data_dir, "./data")
    # (The application first: its member process joins the cluster.)
    Overworld.Bench.Stats.start_node()
    join_cluster!()
    lifeline()
    # (A world is spread over a cluster of more than one configured node.)
    clustered? = Overworld.Cluster.clustered?()

    started = start_served!(zones, Keyword.put(opts, :data_dir, data_dir))

    public = fn
      {:world, name} -> to_string(name)
      id -> to_string(id)
    end

    names = Map.new(started, fn {id, _config} -> {public.(id), id} end)
    [{first, config} | _] = started

    start_server!(
      [port: port, data_dir: data_dir, zones: names, default_zone: public.(first)] ++
        Keyword.take(opts, [:pace, :max_players]) ++ server_opts
    )

    what =
      case first do
        {:world, name} when clustered? ->
          "world #{inspect(to_string(name))} over the cluster (its zones homed here run here)"

        {:world, name} ->
          "world #{inspect(to_string(name))} of #{length(Overworld.World.zones(name))} zones"

        _ ->
          "zone #{inspect(to_string(first))}"
      end

    Mix.shell().info(
      "Overworld: #{what} (#{inspect(config.module)}) in " <>
        "#{Float.round(elem(config.size, 0) / 1, 1)} m x #{Float.round(elem(config.size, 1) / 1, 1)} m, " <>
        "#{config.tick_rate} Hz, #{config.workers} bucket workers#{if match?({:world, _}, first), do: " per zone", else: ""} on " <>
        "#{System.schedulers_online()} schedulers. Statistics every #{o.interval} s (Ctrl-C to stop)."
    )

    IO.puts("os pid #{System.pid()}")
    IO.puts("listening on http://127.0.0.1:#{Overworld.Server.port()}")

    # (In milliseconds: whole seconds would end a run up to a second early.)
    deadline = if opts[:seconds], do: System.monotonic_time(:millisecond) + opts[:seconds] * 1000

    watched =
      case first do
        {:world, name} when clustered? -> {:cluster_world, name}
        {:world, name} -> {:world, Enum.sort(Overworld.World.zones(name))}
        zone -> zone
      end

    {:ok, reporter} =
      Overworld.Bench.Report.start_link(watched, o.interval * 1000, stdout_writer())

    # A line due at the deadline itself still comes.
    wait(deadline && deadline + 250)
    Process.unlink(reporter)
    Process.exit(reporter, :kill)
    :ok
  end

  @doc false
  # Starts the zones and worlds of `served/3` (`opts`: `:data_dir`, `:persist`,
  # `:snapshot_ticks` as `serve/3` takes them); answers `[{id | {:world, name}, config}]`.
  @spec start_served!([tuple], keyword) :: [{term, map}]
  def start_served!(zones, opts) do
    data_dir = Keyword.fetch!(opts, :data_dir)
    clustered? = Overworld.Cluster.clustered?()
    persist? = Keyword.get(opts, :persist, true)

    for entry <- zones do
      case entry do
        {:world, module, world_opts} ->
          world_opts = put_given(world_opts, opts, [:snapshot_ticks])
          dir = Path.join([data_dir, "worlds", to_string(world_opts[:name])])

          world_opts = if persist?, do: Keyword.put(world_opts, :data_dir, dir), else: world_opts

          if clustered? and not persist?,
            do: Mix.raise("a world over a cluster keeps its zones' files: drop --no-persist")

          world_opts =
            if clustered?, do: Keyword.put(world_opts, :cluster, true), else: world_opts

          start_world!(module, world_opts)

        {module, zone_opts} ->
          zone_opts =
            zone_opts
            |> put_given(opts, [:snapshot_ticks])
            |> then(
              &if persist?,
                do: Keyword.put(&1, :data_dir, Path.join(data_dir, "zones")),
                else: &1
            )

          start_zone!(module, zone_opts)
      end
    end
  end

  # The statistics lines go straight to this OS process's standard output through a port of
  # the reporter's own, so that a saturated node (whose I/O server waits behind the sessions)
  # cannot hold them back. When output is captured (the group leader is not the node's `user`
  # process: tests), through the shell as usual.
  defp stdout_writer do
    if Process.group_leader() == Process.whereis(:user) do
      port = Port.open({:fd, 0, 1}, [:out, :binary])
      fn line -> Port.command(port, [line, ?\n]) end
    else
      &Mix.shell().info/1
    end
  end

  defp start_zone!(module, zone_opts) do
    id = zone_opts[:id]

    started!(
      fn -> Overworld.start_zone(module, zone_opts) end,
      "zone",
      id,
      "zone #{inspect(module)}"
    )

    {id, Overworld.Zone.config(id)}
  end

  defp start_world!(module, world_opts) do
    name = world_opts[:name]
    what = "world of #{inspect(module)}"
    started!(fn -> Overworld.start_world(module, world_opts) end, "world", name, what)
    # (The first zone's configuration, wherever it runs: a world over a cluster may run none
    # of its zones here yet.)
    {_, [%{start: {_, _, [config]}} | _]} = Overworld.World.zone_specs(module, world_opts)
    {{:world, name}, config}
  end

  # A zone or world started, or the task ends with why not.
  defp started!(start, kind, name, what) do
    case start.() do
      {:ok, _} ->
        :ok

      {:error, :already_started} ->
        Mix.raise("a #{kind} named #{inspect(to_string(name))} is already running")

      {:error, reason} ->
        Mix.raise("the #{what} did not start: #{inspect(reason)}")
    end
  rescue
    e in ArgumentError -> Mix.raise(Exception.message(e))
  end

  @doc false
  # Starts the `Overworld.Server` (linked), or the task ends with why not.
  @spec start_server!(keyword) :: :ok
  def start_server!(server_opts) do
    # A server that cannot start exits, and would take this (linked) process with it before
    # its error could be told: exits are trapped for the start only.
    trap = Process.flag(:trap_exit, true)
    result = Overworld.Server.start_link(server_opts)

    # A supervisor that failed to start answers first and exits right after: its exit signal
    # is waited for while exits are still trapped.
    if match?({:error, _}, result) do
      receive do
        {:EXIT, _pid, _reason} -> :ok
      after
        5_000 -> :ok
      end
    end

    Process.flag(:trap_exit, trap)

    case result do
      {:ok, _} ->
        :ok

      {:error, reason} ->
        if eaddrinuse?(reason),
          do: Mix.raise("port #{server_opts[:port]} is in use: pick another with --port"),
          else: Mix.raise("the server did not start: #{inspect(reason)}")
    end
  end

  # The listener's error, however deep the supervisors wrapped it.
  defp eaddrinuse?(:eaddrinuse), do: true
  defp eaddrinuse?(t) when is_tuple(t), do: t |> Tuple.to_list() |> Enum.any?(&eaddrinuse?/1)
  defp eaddrinuse?(_), do: false

  defp wait(nil), do: Process.sleep(:infinity)
  defp wait(deadline), do: Process.sleep(max(deadline - System.monotonic_time(:millisecond), 0))

  defp put_given(zone_opts, opts, keys) do
    Enum.reduce(keys, zone_opts, fn k, acc ->
      if Keyword.has_key?(opts, k), do: Keyword.put(acc, k, opts[k]), else: acc
    end)
  end

  defp default_name(module) do
    module |> Module.split() |> List.last() |> Macro.underscore()
  end

  defp size!(text) do
    with [w, h] <- String.split(text, ","),
         {w, ""} <- Float.parse(String.trim(w)),
         {h, ""} <- Float.parse(String.trim(h)),
         true <- w > 0 and h > 0 do
      {w, h}
    else
      _ -> Mix.raise("--size must be W,H in metres (positive numbers), got: #{inspect(text)}")
    end
  end

  @doc false
  # `KEY=VALUE` pairs into the keyword list `init/1` gets.
  @spec parse_args([String.t()]) :: keyword
  def parse_args(pairs) do
    Enum.map(pairs, fn pair ->
      case String.split(pair, "=", parts: 2) do
        [key, value] when key != "" -> {String.to_atom(key), value(value)}
        _ -> Mix.raise("--arg must be KEY=VALUE, got: #{inspect(pair)}")
      end
    end)
  end

  defp value("true"), do: true
  defp value("false"), do: false

  defp value(v) do
    case Integer.parse(v) do
      {i, ""} ->
        i

      _ ->
        case Float.parse(v) do
          {f, ""} -> f
          _ -> v
        end
    end
  end
end

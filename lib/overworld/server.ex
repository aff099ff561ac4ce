defmodule Overworld.Server do
  @moduledoc """
  The network front of Overworld: one TCP port serving HTTP/1.1 (the status page, health,
  device authentication) and WebSocket sessions of players (docs/protocol.md, "Transport").

      {:ok, _} = Overworld.Server.start_link(port: 4000, zones: %{"arena" => :arena},
                                             default_zone: "arena", data_dir: "./data")

  ## What runs

  1. On start, accounts open in Mnesia (`disc_copies` under `:data_dir`, created on first
     boot; `Overworld.Accounts`) and the token signing secret is read from
     `<data_dir>/secret` (made on first boot, mode 0600) unless `:secret` is given; in a
     cluster, every node signs with the secret the first one shared
     (`Overworld.Accounts.shared_secret/1`).
  2. `:acceptors` processes accept connections on the listening socket; each connection gets
     its own process under a partitioned supervisor (no single supervisor or registry on the
     accept path). When `:max_connections` are open, or the process runs out of file
     descriptors, new connections get `503` and a log line (at most one per second), and the
     acceptors back off; the server never crashes for it.
  3. A connection reads HTTP requests (keep-alive); `GET /ws` upgrades it to a WebSocket and
     the process becomes the player's session (`Overworld.Session`).

  ## Options

  * `:name` - the server's name (default `Overworld.Server`); several servers may run on one
    node with different names and ports (they share the node's Mnesia data directory).
  * `:port` - TCP port (default 4000; 0 picks a free port, see `port/1`).
  * `:ip` - address to listen on (default `{0, 0, 0, 0}`).
  * `:acceptors` - accepting processes (default 8).
  * `:max_connections` - open connections at most (default: the node's file-descriptor limit
    minus 256).
  * `:data_dir` - where accounts and the secret live (default `"./data"`).
  * `:secret` - the token signing secret (at least 32 bytes; default: from `:data_dir`).
  * `:zones` - public zone names (strings, as clients send them) to zone ids (default `%{}`).
  * `:default_zone` - the name joined when a client names none (default nil: join nothing).
  * `:max_message_size` - largest WebSocket message in bytes (default 65,536; closed with 1009).
  * `:idle_timeout` - ms without any frame from the client before closing with 4007 (45,000).
  * `:hello_timeout` - ms to wait for HELLO after the upgrade (default 10,000).
  * `:request_timeout` - ms to read one HTTP request, and to wait for the next (10,000).
  * `:input_rate` - inputs per second per session; more are dropped and counted (default 60).
  * `:grace_period` - ms a disconnected player stays in the zone, resumable (default 15,000).
  * `:session_ttl`, `:refresh_ttl` - token lifetimes in seconds (3,600 and 604,800).
  * `:max_outbound` - bytes queued towards one client before it is closed as too slow (4005;
    default 262,144). The socket's kernel send buffer is set to a sixteenth of it (left alone,
    the kernel grows it to megabytes and a client that stopped reading would go unnoticed for
    a minute); once it is full, snapshots are skipped (coalesced: the next one carries
    everything since) until the client has read, and a client that reads nothing for
    `:slow_timeout` is closed.
  * `:slow_timeout` - ms a client may leave its queue unread before it is closed (5,000).
  * `:interest` - options of each player's `Overworld.Interest` (view radius, budget).
  * `:pace` - adapt the snapshot rate to the load (default true): when the sessions cannot
    keep up, every session gets a snapshot every 2nd, then 3rd tick, and every tick again once
    load falls (`Overworld.Server.Pace`). With false, every tick always.
  * `:max_send_interval` - the most ticks between two snapshots of a session the pace goes to
    (default 3: 10 snapshots a second at 30 Hz).
  * `:pace_window` - ms between two looks of the pace's controller at the load (default 500).
  * `:max_players` - players a zone admits at most (nil, the default: no limit); counted at
    the zone's last tick. Beyond it, and whenever the server is saturated (at the largest send
    interval, late or above 70 % busy), a new player is refused with close code 4008 and ERROR 8
    (`retry_after=N; why`); a player resuming its avatar within the grace period never is.
  * `:retry_after` - the seconds a refused player is told to wait (default 5), doubled for every
    10 s the server has been saturated without a break, up to 8 times as long.
  * `:storage` - the store the storage routes serve (`Overworld.Storage`): a keyword list of
    store options, for a store the server starts (default `[]`: the embedded Mnesia adapter,
    in `:data_dir`, named `:"<name>.Storage"` unless the options name it), the name of a store
    started elsewhere, or nil (no storage routes: 404).
  * `:accounts` - account options (`Overworld.Accounts.Settings`: password hashing, email
    confirmation and its mailer, custom ids, rate limits).
  * `:rpc` - RPC functions in Elixir, `%{"id" => fun/2 | {module, function}}` (`Overworld.RPC`).
  * `:lua` - nil (the default), or the options of an `Overworld.Lua.Runtime` the server starts
    (`dir:` or `files:` of Lua scripts, `workers:`, `timeout:`, ...; named
    `:"<name>.Lua"`): RPC functions and match handlers in Lua, with the server API of
    `Overworld.Lua.Server`.
  * `:matches` - match options: `handlers:` the match handlers clients may create by name,
    `%{"name" => module}` (`Overworld.Match`; Lua handlers are registered by the scripts),
    `grace:` ms a player whose connection was lost stays in its matches (15,000),
    `max_data_bytes:` the largest message a player may send a match (4,096),
    `max_messages:` messages a match takes per tick (1,024), `empty_timeout:` ms a match
    made by a client, the matchmaker or a script lives without players (30,000; `:infinity`).
  * `:matchmaker` - `shards:` (default the schedulers), `interval:` ms (1,000), `matched:` the
    name of the match handler that gets matched players (nil: a relayed match)
    (`Overworld.Matchmaker`).
  * `:observers` - operators' observer connections (the live visualizer,
    `Overworld.Session.Observer`): `max:` how many at once on this server (3), `budget:` the
    bytes per second each may be sent (16 MiB: a whole zone's changes, where a player's view
    has `interest: [budget: ...]`), `max_outbound:` bytes queued towards one before it is
    closed as too slow (8 MiB: a keyframe of a 40,000-entity world is about a megabyte; as
    for `:max_outbound`, past a sixteenth of it frames are skipped until it has read).
  * `:operators` - the operators of the configuration, `[%{name: "alice", password_hash:
    "pbkdf2-sha256$...", role: "operator" | "viewer"}]` (default `[]`; more are added at run
    time: `Overworld.Operators`), who log in to the operator API (docs/operator-api.md).
  * `:operator_api` - the operator API's token lifetime, login limit and audit log
    (`Overworld.Operators.Settings`).
  * `:metrics` - `GET /metrics` (Prometheus, `Overworld.Web.Metrics`): `enabled:` (default
    true), `token:` nil (default) or a bearer token of at least 16 bytes every scrape must
    present.
  """
  use Supervisor
  require Logger

  alias Overworld.Options

  defmodule Config do
    @moduledoc false
    defstruct [
      :name,
      :port,
      :ip,
      :acceptors,
      :max_connections,
      :data_dir,
      :secret,
      :keys,
      :zones,
      :default_zone,
      :max_message_size,
      :idle_timeout,
      :hello_timeout,
      :request_timeout,
      :input_rate,
      :grace_period,
      :session_ttl,
      :refresh_ttl,
      :max_outbound,
      :slow_timeout,
      :interest,
      :counters,
      :pace,
      :max_send_interval,
      :pace_window,
      :max_players,
      :retry_after,
      :storage,
      :accounts,
      :rpc,
      :lua,
      :matches,
      :matchmaker,
      :observers,
      :operators,
      :metrics,
      :started_at
    ]

    @type t :: %__MODULE__{}
  end

  # Counters of a server (`:counters`, one array): see `stats/1`.
  use Overworld.Metrics.Counters, [
    :connections,
    :sessions,
    :bytes_out,
    :frames_out,
    :inputs,
    :inputs_dropped,
    :frames_skipped,
    :frames_late,
    :refused_joins,
    :closed_slow,
    :accepted,
    :refused,
    :warned_at
  ]

  @doc false
  @spec schema() :: Options.schema()
  def schema do
    [
      name: {:atom, __MODULE__},
      port: {{:custom, &(is_integer(&1) and &1 in 0..65_535), "a port number"}, 4000},
      ip: {{:custom, &is_tuple/1, "an IP address tuple"}, {0, 0, 0, 0}},
      acceptors: {:pos_integer, 8},
      max_connections:
        {{:custom, &(is_nil(&1) or (is_integer(&1) and &1 > 0)), "nil or a positive integer"},
         nil},
      data_dir: {{:custom, &is_binary/1, "a path (string)"}, "./data"},
      secret:
        {{:custom, &(is_nil(&1) or (is_binary(&1) and byte_size(&1) >= 32)),
          "nil or a binary of at least 32 bytes"}, nil},
      zones: {{:custom, &valid_zones?/1, "a map of zone names (strings) to zone ids"}, %{}},
      default_zone: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a zone name"}, nil},
      max_message_size: {:pos_integer, 65_536},
      idle_timeout: {:pos_integer, 45_000},
      hello_timeout: {:pos_integer, 10_000},
      request_timeout: {:pos_integer, 10_000},
      input_rate: {:pos_integer, 60},
      grace_period: {:non_neg_integer, 15_000},
      session_ttl: {:pos_integer, 3_600},
      refresh_ttl: {:pos_integer, 604_800},
      max_outbound: {:pos_integer, 262_144},
      slow_timeout: {:pos_integer, 5_000},
      interest: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []},
      pace: {:boolean, true},
      # A frame carries the budget of at most 8 ticks (Overworld.Interest): no longer interval.
      max_send_interval: {{:custom, &(is_integer(&1) and &1 in 1..8), "an integer in 1..8"}, 3},
      pace_window: {:pos_integer, 500},
      max_players:
        {{:custom, &(is_nil(&1) or (is_integer(&1) and &1 > 0)), "nil or a positive integer"},
         nil},
      retry_after: {:pos_integer, 5},
      storage:
        {{:custom, &(is_nil(&1) or is_atom(&1) or Keyword.keyword?(&1)),
          "nil, a store's name or a keyword list of Overworld.Storage options"}, []},
      accounts:
        {{:custom, &Keyword.keyword?/1, "a keyword list (Overworld.Accounts.Settings)"}, []},
      rpc:
        {{:custom, &valid_rpc?/1,
          "a map of ids (strings) to functions of arity 2 or {module, function}"}, %{}},
      lua: {{:custom, &(is_nil(&1) or Keyword.keyword?(&1)), "nil or a keyword list"}, nil},
      matches: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []},
      matchmaker: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []},
      observers: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []},
      operators: {{:custom, &is_list/1, "a list of operators (maps)"}, []},
      operator_api:
        {{:custom, &Keyword.keyword?/1, "a keyword list (Overworld.Operators.Settings)"}, []},
      metrics: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []}
    ]
  end

  defp observer_schema do
    [
      max: {:non_neg_integer, 3},
      budget: {:pos_integer, 16 * 1024 * 1024},
      max_outbound: {:pos_integer, 8 * 1024 * 1024}
    ]
  end

  defp valid_rpc?(rpc) do
    is_map(rpc) and
      Enum.all?(rpc, fn
        {id, f} when is_binary(id) and is_function(f, 2) -> true
        {id, {m, f}} when is_binary(id) and is_atom(m) and is_atom(f) -> true
        _ -> false
      end)
  end

  defp match_schema do
    [
      handlers:
        {{:custom, &valid_handlers?/1, "a map of names (strings) to Overworld.Match handlers"},
         %{}},
      grace: {:non_neg_integer, 15_000},
      max_data_bytes: {:pos_integer, 4_096},
      max_messages: {:pos_integer, 1_024},
      empty_timeout:
        {{:custom, &(&1 == :infinity or (is_integer(&1) and &1 > 0)), "ms or :infinity"}, 30_000}
    ]
  end

  defp valid_handlers?(handlers) do
    is_map(handlers) and
      Enum.all?(handlers, fn
        {k, {m, _}} when is_binary(k) and is_atom(m) -> true
        {k, m} when is_binary(k) and is_atom(m) -> true
        _ -> false
      end)
  end

  defp valid_zones?(zones),
    do: is_map(zones) and Enum.all?(zones, fn {k, _} -> is_binary(k) end)

  @doc "Starts a server (see the options above). Raises `ArgumentError` on invalid options."
  @spec start_link(keyword) :: Supervisor.on_start()
  def start_link(opts) do
    o = Options.validate!(opts, schema(), "Overworld.Server")
    o = %{o | accounts: Overworld.Accounts.Settings.new(o.accounts)}

    o =
      Map.put(
        o,
        :operator_settings,
        Overworld.Operators.Settings.new(o.operators, o.operator_api, o.name, o.data_dir)
      )

    o = %{
      o
      | matches: Options.validate!(o.matches, match_schema(), "Overworld.Server matches"),
        matchmaker:
          Options.validate!(
            o.matchmaker,
            Overworld.Matchmaker.schema(),
            "Overworld.Server matchmaker"
          ),
        observers:
          Options.validate!(o.observers, observer_schema(), "Overworld.Server observers"),
        metrics: Overworld.Web.Metrics.settings!(o.metrics)
    }

    if o.default_zone && not Map.has_key?(o.zones, o.default_zone) do
      raise ArgumentError,
            "invalid options for Overworld.Server: :default_zone #{inspect(o.default_zone)} " <>
              "is not one of :zones #{inspect(Map.keys(o.zones))}"
    end

    Supervisor.start_link(__MODULE__, o, name: o.name)
  end

  @doc false
  def child_spec(opts),
    do: Overworld.Options.supervisor_spec(__MODULE__, opts, Keyword.get(opts, :name, __MODULE__))

  @impl true
  def init(o) do
    with :ok <- Overworld.Accounts.start(o.data_dir),
         :ok <- Overworld.Accounts.LastSeen.start(),
         :ok <- Overworld.Operators.start(),
         {:ok, keys} <- keys(o) do
      config = %Config{
        name: o.name,
        ip: o.ip,
        acceptors: o.acceptors,
        max_connections: o.max_connections || default_max_connections(),
        data_dir: o.data_dir,
        keys: keys,
        zones: o.zones,
        default_zone: o.default_zone,
        max_message_size: o.max_message_size,
        idle_timeout: o.idle_timeout,
        hello_timeout: o.hello_timeout,
        request_timeout: o.request_timeout,
        input_rate: o.input_rate,
        grace_period: o.grace_period,
        session_ttl: o.session_ttl,
        refresh_ttl: o.refresh_ttl,
        max_outbound: o.max_outbound,
        slow_timeout: o.slow_timeout,
        interest: o.interest,
        counters: new_counters(),
        pace: Overworld.Server.Pace.new(),
        max_send_interval: o.max_send_interval,
        pace_window: o.pace_window,
        max_players: o.max_players,
        retry_after: o.retry_after,
        storage: storage_name(o),
        accounts: o.accounts,
        rpc: o.rpc,
        lua: o.lua && lua_name(o),
        matches: o.matches,
        matchmaker: o.matchmaker,
        observers: o.observers,
        operators: o.operator_settings,
        metrics: o.metrics,
        started_at: System.monotonic_time(:millisecond)
      }

      # First, so that it stops last: the config is readable while anything else runs.
      children =
        ([
           {Overworld.Server.Published, {{__MODULE__, o.name}, config}},
           storage_child(o),
           lua_child(o)
         ] ++
           Overworld.Matchmaker.children(o.name, o.matchmaker) ++
           [
             {PartitionSupervisor, child_spec: DynamicSupervisor, name: connections(o.name)},
             {Overworld.Transport.Listener, {o.name, o.port}},
             # After the listener: a writer that crashes and restarts takes nobody's
             # connection with it (a call meanwhile is answered an error, and logged).
             {Overworld.Operators.Audit, {o.name, o.operator_settings}},
             # Last: a controller that crashes and restarts takes nobody's connection with it.
             o.pace && {Overworld.Server.Pace, o.name}
           ])
        |> Enum.filter(& &1)

      Supervisor.init(children, strategy: :rest_for_one)
    else
      {:error, reason} ->
        Logger.error("Overworld.Server #{inspect(o.name)} cannot start: #{inspect(reason)}")
        {:stop, reason}
    end
  end

  defp storage_name(%{storage: nil}), do: nil
  defp storage_name(%{storage: name}) when is_atom(name), do: name

  defp storage_name(%{storage: opts, name: name}),
    do: Keyword.get(opts, :name, :"#{name}.Storage")

  # A store the server starts (options given), before the connections that use it.
  defp storage_child(%{storage: opts} = o) when is_list(opts),
    do: {Overworld.Storage, Keyword.put(opts, :name, storage_name(o))}

  defp storage_child(_o), do: nil

  defp lua_name(o), do: Keyword.get(o.lua, :name, :"#{o.name}.Lua")

  # The Lua runtime of the RPC functions and match handlers, with the server API.
  defp lua_child(%{lua: nil}), do: nil

  defp lua_child(o) do
    api = Overworld.Lua.Server.functions(o.name, storage_name(o))
    functions = Map.merge(api, Keyword.get(o.lua, :functions, %{}))
    {Overworld.Lua.Runtime, Keyword.merge(o.lua, name: lua_name(o), functions: functions)}
  end

  # Tokens are signed with the first key. Without a `:secret`, the cluster's shared secret
  # (`Overworld.Accounts.shared_secret/1`: a single node's own); this node's own one still
  # verifies the tokens it issued before it joined a cluster.
  defp keys(%{secret: s}) when is_binary(s), do: {:ok, [Overworld.Auth.Token.key(s)]}

  defp keys(%{data_dir: dir}) do
    with {:ok, local} <- Overworld.Auth.Token.load_or_create_secret(dir),
         {:ok, shared} <- Overworld.Accounts.shared_secret(local) do
      keys = Enum.uniq([shared, local])
      {:ok, Enum.map(keys, &Overworld.Auth.Token.key/1)}
    end
  end

  defp default_max_connections do
    fds =
      case :erlang.system_info(:check_io) |> List.flatten() |> Keyword.get(:max_fds) do
        n when is_integer(n) -> n
        _ -> 1024
      end

    max(fds - 256, 16)
  end

  @doc false
  def connections(name), do: Overworld.Names.via(Overworld.Names.connections(name))

  @doc false
  # A running server's config (read without copying by every connection); raises
  # `ArgumentError` when no server of that name runs.
  @spec config(atom) :: Config.t()
  def config(name \\ __MODULE__), do: :persistent_term.get({__MODULE__, name})

  @doc "The TCP port the server listens on (useful with `port: 0`)."
  @spec port(atom) :: :inet.port_number()
  def port(name \\ __MODULE__), do: Overworld.Transport.Listener.port(name)

  @doc """
  The server's counters: open connections and sessions, bytes and snapshot frames sent,
  inputs received and dropped (rate limit), snapshots skipped for slow clients, frames built
  late (the next tick had come: see `Overworld.Server.Pace`), players refused at the door
  (saturated server or full zone: 4008), clients closed as too slow, connections accepted and
  refused (limit reached).
  """
  @spec stats(atom) :: %{atom => non_neg_integer}
  def stats(name \\ __MODULE__),
    do: name |> config() |> Map.fetch!(:counters) |> read_counters() |> Map.delete(:warned_at)
end

defmodule Overworld.Server.Published do
  @moduledoc false
  # Keeps a server's config in `:persistent_term` while the server runs, and erases it when
  # the server stops (exits are trapped so that `terminate/2` runs on shutdown): a server
  # started and stopped again and again (tests, a game restarting its front) leaves nothing
  # behind. Erasing a term makes every process of the node scan its heap once, which is why
  # only a server's start and stop do it, never a zone's or a session's. It also keeps the
  # schedulers' wall-time accounting on while the server runs (the flag counts the processes
  # that asked for it), for the status route's CPU counters.
  use GenServer

  @spec start_link({term, term}) :: GenServer.on_start()
  def start_link({key, value}), do: GenServer.start_link(__MODULE__, {key, value})

  @impl true
  def init({key, value}) do
    Process.flag(:trap_exit, true)
    :erlang.system_flag(:scheduler_wall_time, true)
    :persistent_term.put(key, value)
    {:ok, key}
  end

  @impl true
  def terminate(_reason, key) do
    :persistent_term.erase(key)
    :ok
  end
end

defmodule Overworld.Zone do
  @moduledoc """
  A zone: a region of the world simulated at a fixed tick rate, with its entities, its players
  and the game code that drives them. This module is the behaviour game code implements and the
  client API to running zones.

  ## Lifecycle, and where each callback runs

  A zone is a few processes: its **server** (the game state, the players, the clock), its
  **bucket workers** (one per scheduler, each owning a stripe of the grid and every entity in
  it), and, for each connected player, a **session** (the player's connection). Callbacks run
  in one of them; none may block, and each gets only what its process has.

  1. `c:init/1` (server) when the zone starts, and again when it starts over without a data
     directory: the game state and the initial entities (tick 0).
  2. A player joins (`join/3`; a session joins its user): `c:handle_join/3` (server) answers
     the spec of the player's avatar entity, or rejects. A player leaves (`leave/3`, a session
     that ends): `c:handle_leave/3` (server).
  3. Inputs: the session turns the bytes of each INPUT message into an input term with
     `c:decode_input/1` (session), then writes it into the player's input slot (latest wins;
     `input/4` does the same from Elixir). The zone server never sees inputs.
  4. Every tick, in this order:
     1. `c:handle_tick/2` (server) with the tick's `Overworld.Zone.Context`;
     2. `c:handle_entity/3` (bucket workers, in parallel) for every entity. An avatar whose
        player sent input since the last tick has it in `entity(e, :input)` (the newest; the
        field keeps it until the next). Each entity is computed from the previous tick's
        state of its neighbours (`Overworld.Spatial.View`), so the result is the same
        whatever the number of workers;
     3. the grid: entities that crossed a cell or stripe border move; spawns and despawns
        requested during the tick take effect (visible from the next tick).
  5. A client's reliable message (RELIABLE) reaches `c:handle_event/3` (server); any other
     message sent to the zone server `c:handle_info/2` (server).
  6. A durable event is on disk: `c:handle_durable/2` (server). After a crash,
     `c:replay_durable/2` (the recovering server) replays the journal onto the last snapshot.
  7. `c:terminate/2` (server) when the zone stops.

  Callbacks answering `{:ok, state, actions}` may request `{:spawn, spec | [spec]}`,
  `{:despawn, id | [id]}`, `{:durable, event}` (journal a durable event, see
  `c:handle_durable/2`) and `{:send, player, payload}` (a reliable message, binary payload, to
  the player's session: the protocol's EVENT message). An entity spec is a keyword list or map
  of `Overworld.Entity` fields without `id` (`:x` and `:y` are required); `:rng` defaults to
  `Overworld.Random.seed_for(zone_seed, id)`.

  ### Inputs: no `handle_input/3`

  Earlier versions ran `handle_input/3` in the zone server once per player per tick. At
  thousands of players sending inputs ten times a second one process cannot do that within a
  tick, so inputs now go from the sessions straight to the workers. What game code does
  instead: validate and convert in `c:decode_input/1` (it runs in the session, on every
  input, and may refuse it), and act on `entity(e, :input)` in `c:handle_entity/3`. Input that
  must change the game state (a chat command, a purchase) is a reliable message:
  `c:handle_event/3`. A module that still defines `handle_input/3` gets a compile warning.

  ## Failures in game code

  A callback that raises, throws or exits (or returns something invalid) is caught at the
  boundary: it is logged with the zone id and tick, counted in `metrics/1`, reported as a
  `[:overworld, :zone, :callback, :exception]` event, and the zone carries on with the previous
  game state (for `c:handle_entity/3`: the entity keeps its previous state). Other zones never
  notice.

  ## Errors

  Functions answering tagged tuples (`join/3`, `leave/3`, `spawn/2`, `despawn/2`, `tick_now/2`)
  answer `{:error, :not_found}` when the zone is not running; the queries (`entities/1`,
  `count/1`, ...) exit as a `GenServer.call/3` to a missing process does.

  ## Options (`Overworld.start_zone/2`)

  * `:id` (required) — any term naming the zone; zones are found through the registry, never
    through atoms made at run time
  * `:args` — passed to `c:init/1` (default `[]`)
  * `:tick_rate` — ticks per second, 1..1000 (default 30)
  * `:region` — `{first col, first row, last col, last row}`: the cells of the grid the zone
    owns (default nil: all of them). Positions and cell keys stay those of the whole grid (a
    world's); its entities are kept within the region's cells (for a zone of its own, a
    region's border is a wall), and its workers' stripes share the region's rows
  * `:world` — set by `Overworld.start_world/2` (`Overworld.World.Place`): the zone's place in
    a world of zones, from which its region, size, cell size, id space and tick offset
    follow; its entities cross to the neighbouring zones and it holds theirs near its border
    as shadows (see `Overworld.World`)
  * `:id_space` — `{index, count}`: the zone makes only the entity ids `n` with
    `rem(n, count) == index` (default `{0, 1}`: every id), so zones of a world never make the
    same id, also after restarts from disk (`Overworld.Zone.Ids`)
  * `:tick_offset` — where in the tick period the deadlines fall, a fraction in [0, 1) of it
    counted from a whole number of periods of the node's monotonic clock (default nil: from
    the zone's start). Zones of one node given offsets spread over the period (a world's
    zones get `index / count`, `Overworld.World.Layout.tick_offset/2`) share the cores
    instead of all starting their ticks at once.
  * `:clock` — `:realtime` (default) ticks on absolute monotonic deadlines; `:manual` ticks
    only on `tick_now/2`, for tests
  * `:workers` — bucket workers (default `System.schedulers_online/0`)
  * `:size` — `{width, height}` of the world in metres (default `{1000, 1000}`)
  * `:cell_size` — grid cell size in metres, also the largest neighbour radius (default 12)
  * `:seed` — integer seed of every entity's generator (default 0)
  * `:max_entities` — spawns beyond this are refused (default 1_000_000)
  * `:wire` — a module using `Overworld.Template` (default nil): the zone then encodes, once
    per cell per tick in its workers, the cell's delta block (`Overworld.Protocol.Snapshot`),
    readable by any process from the zone's wire table (`wire/1`), and serves keyframe blocks
    on demand (`keyframes/2`); entities whose kind has no template are not replicated. An
    entity with a value its template cannot quantize (`Overworld.Template.Error`) never enters
    the zone: a spawn of one is refused (`{:error, {:invalid_field, message}}`), and
    `c:handle_entity/3` returning one is an invalid return (the entity keeps its previous
    state). **A zone without a wire cannot serve players over the network**: a session that
    tries to join one is refused with ERROR 6 ("zone ... has no wire") and closed with 4006.
    Players joined from Elixir (`join/3`) play it all the same.
  * `:stall_timeout` — milliseconds after which a tick that has not finished is reported (logged
    with the workers that have not answered, counted as a stall), and again every such period
    while it lasts: a `handle_entity/3` that never returns stalls its zone, not the others
    (default 5_000)

  Physics (`Overworld.Zone.Physics`, docs/sidecar.md):

  * `:physics` — nil (default: none), `:elixir` or `:sidecar`: every tick starts by moving the
    bodies by their velocities (`vx`, `vy`), pushing them apart and out of the obstacles, from
    the state the last tick left (physics lags game logic by one tick); `:sidecar` computes it
    in the native sidecar (`Overworld.Sidecar`), with the Elixir step as its fallback: the
    same bits either way
  * `:transport` — how the workers' records reach the sidecar: `:socket` (default: in the
    socket frames) or `:shm` (through a shared-memory segment, the frames only announce
    them; needs the shared-memory NIF: docs/sidecar.md)
  * `:map` — the static obstacles: the path of an obstacle map (`Overworld.Physics.Map`) or
    `[boxes: [{x0, y0, x1, y1}], circles: [{cx, cy, r}]]` in metres (default nil: none)
  * `:body` — `[radius: metres, mass: 1..65535]` of every body when the zone module has no
    `c:body/1` (default `[radius: 0.5, mass: 1]`)
  * `:max_radius` — the largest body radius in metres (default 1); velocities are limited to
    `(cell_size - 2 * max_radius) / 2` per tick and axis
  * `:sidecar` — `executable` (default `Overworld.Sidecar.executable/0`), `threads` (its
    rayon threads, default its machine's cores), `deadline_ms` (how long a worker waits for
    an answer before it computes the step itself; default 10), `pipeline` (default true: the
    bodies go at the end of a tick, the answer is read as the next starts; false: both as
    the next starts), `restart_ms` (default 50), `max_bodies` (`:shm`: the bodies a
    worker's region holds, default 32,768; more go in the frame), `fault`
    (tests only: docs/sidecar.md, "Faults")
  * `:nav` — paths for the entities that ask with `c:path_to/1` (`Overworld.Zone.Paths`):
    `cell` (the navigation grid's cell in metres, default 1), `agent` (the radius obstacles
    grow by, metres, default 0.5), `max_nodes` (cells a search expands before it answers
    `{:error, :too_far}`, default 20,000), `per_tick` (paths a worker computes per tick,
    default 16), `queue` (requests beyond those that wait as `:queued`, default 256; the
    rest are refused with `{:error, :busy}`)

  Persistence and recovery (see "Persistence and recovery" below):

  * `:data_dir` — a directory: the zone keeps snapshots and a journal in `<data_dir>/<id>/`
    and recovers from them when it starts (default nil: no disk)
  * `:snapshot_ticks` — a snapshot every this many ticks (default 300)
  * `:snapshot_ms` — and at least every this many milliseconds (default nil: ticks only)
  * `:commit_ms` — the journal's group commit interval (default 2)
  * `:durability` — `:local` (default): a durable event is acknowledged once fsynced here;
    `:replicated` (the zones of a world spread over a cluster, where it is the default with
    more than one configured node): once fsynced here **and** on the zone's replica node, the
    next in its rendezvous order, which keeps a copy of its files and is where it restarts if
    this node dies (docs/cluster.md, "Surviving a node's loss")
  * `:replica_timeout` — replicated: a durable event that no replica has acknowledged within
    this many milliseconds never is (logged; `c:handle_durable/2` is not called) (default
    5_000)
  * `:history` — ticks kept for time travel (default 300; 0 keeps none)
  * `:keyframe_ticks` — a keyframe of the history every this many ticks (default 30)
  * `:debug` — hashes every tick's state for replay checks and allows `rewind/2` (default false)
  * `:rejoin_ms` — after a recovery from disk, players whose session has not come back within
    this time leave (default 15_000)
  * `:max_restarts`, `:max_seconds` — a zone that restarts more than `max_restarts` times
    within `max_seconds` seconds (a crash loop) is stopped (defaults 20 and 5)

  ## Persistence and recovery

  A zone server that dies (a bug escaping the callback boundary, `Process.exit(pid, :kill)`)
  restarts from an in-memory copy in the zone's ETS table (owned by the zone's supervisor):
  the entities stay in the bucket workers, the server's state (game state, players, pending
  spawns, subscribers, the tick in flight, durable events waiting for their fsync, which it
  acknowledges once synced) is read back, and the first tick runs at once.
  Sessions stay connected. A bucket worker that dies takes the workers down: the zone restarts
  from the last snapshot (kept in memory by the zone's store) plus the journal. A zone started
  on a `:data_dir` that holds a snapshot or a journal (a node that was killed) recovers from
  them: the newest valid snapshot, then every durable record after it (joins, leaves,
  `c:replay_durable/2`). Lost at most: the tick state since the last snapshot, and durable
  events not yet fsynced (never acknowledged).

  ## Example

      defmodule MyZone do
        use Overworld.Zone
        import Overworld.Entity

        @impl true
        def init(_args), do: {:ok, %{}, [{:spawn, [kind: :rock, x: 0, y: 0]}]}

        @impl true
        def handle_join(_player, _meta, state), do: {:ok, [kind: :hero, x: 100, y: 100], state}

        @impl true
        def handle_entity(entity(input: {vx, vy}) = e, _view, _ctx), do: {:ok, entity(e, vx: vx, vy: vy)}
        def handle_entity(e, _view, _ctx), do: {:ok, e}
      end
  """
  alias Overworld.Names
  alias Overworld.Zone.{Config, Context, Inputs, Server}

  @typedoc "A zone: its id, or the pid of its server."
  @type zone :: term | pid
  @type state :: term
  @type player :: term
  @type entity_spec :: keyword | map
  @type action ::
          {:spawn, entity_spec | [entity_spec]}
          | {:despawn, pos_integer | [pos_integer]}
          | {:durable, term}
          | {:send, player, binary}

  @doc """
  The zone starts (server): the game state from `args` (the zone's `:args` option), and
  actions (the initial spawns: tick 0). `{:stop, reason}` stops the zone. Runs again when the
  zone starts over without a data directory (after its workers died).
  """
  @callback init(args :: term) :: {:ok, state} | {:ok, state, [action]} | {:stop, reason :: term}

  @doc """
  A player joins (server): the spec of its avatar entity (owned by the player: its inputs reach
  it), which appears after the next tick, or a rejection (`join/3` answers
  `{:error, {:rejected, reason}}`). `meta` is what the joining caller passed (a session passes
  `%{session: pid}`). Default: rejects (`:not_supported`).
  """
  @callback handle_join(player, meta :: term, state) ::
              {:ok, entity_spec, state}
              | {:ok, entity_spec, state, [action]}
              | {:reject, reason :: term, state}

  @doc """
  A player left (server), after its avatar was despawned: `reason` is `:left`,
  `:disconnected` (its connection did not come back within the grace period), `:moved` or
  what `leave/3` was given. Default: nothing.
  """
  @callback handle_leave(player, reason :: term, state) :: {:ok, state} | {:ok, state, [action]}

  @doc """
  Once per tick, before the entities (server), with the tick's context: zone-wide game logic
  (spawning waves, timers). `{:stop, reason, state}` stops the zone. Default: nothing.
  """
  @callback handle_tick(Context.t(), state) ::
              {:ok, state} | {:ok, state, [action]} | {:stop, reason :: term, state}

  @doc """
  A reliable message of a player's client (the protocol's RELIABLE, in order, never
  dropped; server): `payload` is the message's bytes as the client sent them. Default:
  nothing.
  """
  @callback handle_event(player, payload :: binary, state) ::
              {:ok, state} | {:ok, state, [action]}

  @doc """
  Any other message sent to the zone server (server), e.g. a monitored process's `:DOWN`, a
  timer of the game. Default: nothing.
  """
  @callback handle_info(msg :: term, state) :: {:ok, state} | {:ok, state, [action]}

  @doc """
  Every entity, every tick (the bucket worker that holds it, in parallel with the others): its
  next state from its own and the previous tick's state of its neighbours (`view`, see
  `Overworld.Spatial.View`). An avatar carries its player's newest input in `:input`. May
  answer durable events with the entity (`{:ok, entity, events}`, see `c:handle_durable/2`),
  or `:despawn` (a despawned avatar's player leaves). Has no game state: what it needs of the
  world is in the entities. Default: the entity unchanged.
  """
  @callback handle_entity(Overworld.Entity.t(), Overworld.Spatial.View.t(), Context.t()) ::
              {:ok, Overworld.Entity.t()}
              | {:ok, Overworld.Entity.t(), [event :: term]}
              | :despawn

  @doc "The zone stops (server; optional): the last chance to clean up."
  @callback terminate(reason :: term, state) :: term

  @doc """
  A durable event (returned by `c:handle_entity/3` as `{:ok, entity, events}`, or by any
  callback as the action `{:durable, event}`) is on disk (server): the journal record that
  holds it is fsynced (at once when the zone has no `:data_dir`). The place to acknowledge it
  to players, with the action `{:send, player, payload}` (a reliable message to the player's
  session). Optional.
  """
  @callback handle_durable(event :: term, state) :: {:ok, state} | {:ok, state, [action]}

  @doc """
  Recovery from disk (the recovering server; optional) replays the durable events journaled
  after the last snapshot onto its entities (`%{id => entity}`): the entities the event
  changed, as the simulation changed them. It must be idempotent (a record replayed twice
  changes nothing more). Join and leave records are replayed by the zone itself.
  """
  @callback replay_durable(event :: term, entities :: %{pos_integer => Overworld.Entity.t()}) ::
              %{pos_integer => Overworld.Entity.t()}

  @doc """
  Turns the game payload of a client's INPUT message (bytes from the network) into the input
  term the player's avatar gets in `entity(e, :input)` (the player's session, on every input,
  never in the zone): validate here, an `{:error, reason}` drops the input (counted). It must
  not raise on any bytes (a raise drops the input too). Default: the binary as it is.
  """
  @callback decode_input(payload :: binary) :: {:ok, term} | {:error, reason :: term}

  @doc """
  In a world of zones (`Overworld.World`), an entity of this zone is about to cross into the
  neighbour zone `to` (it went past the hysteresis margin): `:veto` keeps it with this zone,
  stopped at the edge of the margin (a wall between regions, say); `:ok` lets it go. Called by
  the bucket workers, like `c:handle_entity/3`, with the entity's new state; optional
  (without it every crossing goes ahead). A failure counts as `:ok`.
  """
  @callback handle_crossing(Overworld.Entity.t(), from :: term, to :: term) :: :ok | :veto

  @doc """
  With physics (zone option `:physics`): whether an entity is a body, and its `{radius, mass}`
  (radius in units, at most the zone's `:max_radius`; mass 1..65,535), or nil (not a body).
  Called by the bucket workers at every tick, like `c:handle_entity/3`; optional: without it
  every entity is a body of the zone's `:body` radius and mass. A failure, or a value out of
  range, makes no body for that tick. See `Overworld.Zone.Physics`.
  """
  @callback body(Overworld.Entity.t()) :: {pos_integer, pos_integer} | nil

  @doc """
  With physics (zone option `:physics`): where an entity wants a path to (a point in units),
  or nil. Called by the bucket workers on the state each tick leaves, on every entity;
  optional. The answer comes in the next tick's context (`Overworld.Zone.Context.path/2`),
  computed by the sidecar or in Elixir (the same path), at most `nav: [per_tick: n]` per
  worker and tick (the others are `:queued`, or refused with `{:error, :busy}`). An entity
  keeps asking as long as this answers a point: game code keeps the path it got in the
  entity and answers nil. A failure, or anything but nil or `{x, y}` integers, asks for
  nothing. See `Overworld.Zone.Paths`.
  """
  @callback path_to(Overworld.Entity.t()) :: {integer, integer} | nil

  @optional_callbacks terminate: 2,
                      handle_durable: 2,
                      replay_durable: 2,
                      handle_crossing: 3,
                      body: 1,
                      path_to: 1

  defmacro __using__(_opts) do
    quote do
      @behaviour Overworld.Zone
      @before_compile Overworld.Zone

      @impl Overworld.Zone
      def handle_join(_player, _meta, state), do: {:reject, :not_supported, state}

      @impl Overworld.Zone
      def handle_leave(_player, _reason, state), do: {:ok, state}

      @impl Overworld.Zone
      def handle_tick(_ctx, state), do: {:ok, state}

      @impl Overworld.Zone
      def handle_event(_player, _payload, state), do: {:ok, state}

      @impl Overworld.Zone
      def handle_info(_msg, state), do: {:ok, state}

      @impl Overworld.Zone
      def handle_entity(entity, _view, _ctx), do: {:ok, entity}

      @impl Overworld.Zone
      def decode_input(payload), do: {:ok, payload}

      defoverridable decode_input: 1,
                     handle_join: 3,
                     handle_leave: 3,
                     handle_tick: 2,
                     handle_event: 3,
                     handle_info: 2,
                     handle_entity: 3
    end
  end

  @doc false
  defmacro __before_compile__(env) do
    if Module.defines?(env.module, {:handle_input, 3}) do
      IO.warn(
        "#{inspect(env.module)}.handle_input/3 is no longer called: inputs go from the " <>
          "sessions to the bucket workers. Validate them in decode_input/1 and act on " <>
          "entity(e, :input) in handle_entity/3 (see Overworld.Zone, \"Inputs: no handle_input/3\")",
        Macro.Env.stacktrace(env)
      )
    end

    :ok
  end

  ## Client API

  @doc false
  @spec child_spec({module, keyword}) :: Supervisor.child_spec()
  def child_spec({module, opts}) do
    config = Config.new!(module, opts)

    %{
      id: {__MODULE__, config.id},
      start: {Overworld.Zone.Supervisor, :start_link, [config]},
      type: :supervisor,
      restart: :transient
    }
  end

  @doc "The pid of the zone's server (on this node, else on any node of the cluster), or nil."
  @spec whereis(zone) :: pid | nil
  def whereis(pid) when is_pid(pid) and node(pid) == node(),
    do: if(Process.alive?(pid), do: pid, else: nil)

  def whereis(pid) when is_pid(pid), do: pid

  # The registry and :pg drop a process's entries when they see it exit, a moment after it
  # did: a local pid found under the id is checked for life (a zone just stopped is gone).
  def whereis(id) do
    alive(Names.whereis(Names.zone(id))) || alive(Overworld.Cluster.zone(id))
  end

  defp alive(nil), do: nil
  defp alive(pid), do: whereis(pid)

  @doc """
  The zone's configuration (`Overworld.Zone.Config`: the validated options and what follows
  from them, e.g. `tick_rate`, `size`, `width`/`height` and `cell_size` in units, `workers`,
  `wire`), or nil when the zone is not running. Read without a message to the zone and
  without copying its game state: the config is the zone's registry value.
  """
  @spec config(zone) :: Config.t() | nil
  def config(pid) when is_pid(pid) do
    case Names.zone_of(pid) do
      nil -> nil
      id -> config(id)
    end
  end

  def config(id) do
    case Names.lookup(Names.zone(id)) do
      {_pid, config} -> config
      # On another node of the cluster: this node's mirror of it.
      nil -> Overworld.Zone.Mirror.config(id)
    end
  end

  @doc """
  The entity id of a joined player's avatar, or nil (read from the zone's in-memory copy,
  without a message to the zone).
  """
  @spec player_entity(zone, player) :: pos_integer | nil
  def player_entity(zone, player), do: entity_of(config(zone), player)

  # (A zone on another node is asked through this node's mirror of it.)
  defp entity_of(%Config{id: id, shared: %{mirror: m}}, player) when m != nil,
    do: Overworld.Zone.Mirror.player_entity(id, player)

  defp entity_of(%Config{shared: %{memory: table}}, player),
    do: Overworld.Zone.Memory.player_entity(table, player)

  defp entity_of(nil, _player), do: nil

  @doc false
  # Lets go of the zone's state so that another node can run it: stops the clock, writes a
  # snapshot of the last tick and syncs the journal, then answers `{:ok, tick}`; the zone is
  # no longer found by its id and changes no more (`Overworld.Zone.Release`). Only a zone
  # with a data directory can (`{:error, :no_data_dir}`).
  @spec release(zone) :: {:ok, non_neg_integer} | {:error, term}
  def release(zone), do: tagged_call(zone, :release, 60_000)

  @doc """
  Adds `player` to the zone: `c:handle_join/3` decides and returns the spec of the player's
  entity, which appears after the next tick. Returns the entity id.
  """
  @spec join(zone, player, term) :: {:ok, pos_integer} | {:error, :not_found | term}
  def join(zone, player, meta \\ nil), do: tagged_call(zone, {:join, player, meta})

  @doc false
  # A session taking over a player already in the zone: the zone's reliable messages for the
  # player (`{:send, player, payload}`) go to `pid` from now on. Never joins.
  @spec claim_session(zone, player, pid, timeout) :: :ok | {:error, :not_joined | :not_found}
  def claim_session(zone, player, pid, timeout \\ 2_000) when is_pid(pid),
    do: tagged_call(zone, {:claim_session, player, pid}, timeout)

  @doc "Removes `player` and its entity (`c:handle_leave/3` runs first)."
  @spec leave(zone, player, term) :: :ok | {:error, :not_joined | term}
  def leave(zone, player, reason \\ :left), do: tagged_call(zone, {:leave, player, reason})

  @doc """
  Hands a player's input to the zone: the newest input of each player is kept until the tick
  that applies it (latest wins; `entity(e, :input)` of its avatar in `c:handle_entity/3`).
  With a sequence number `seq` (the client's), the player's snapshots acknowledge it once a
  tick applied it (zones with `wire:`). Inputs of players who are not joined are dropped, as
  are those of a zone stopping (or moving to another node) meanwhile.
  No message to the zone server: this looks the player's avatar up in the zone's tables and
  writes its input slot (`input_slot/2` and `put_input/3` skip the lookup for a caller that
  sends many inputs for one player).
  """
  @spec input(zone, player, term, non_neg_integer | nil) :: :ok
  def input(zone, player, input, seq \\ nil) when seq == nil or (is_integer(seq) and seq >= 0) do
    case input_slot(zone, player) do
      {:ok, slot} -> put_input(slot, input, seq)
      {:error, _} -> :ok
    end
  rescue
    # (Its tables went between the lookup and the write: the zone stopped.)
    ArgumentError -> :ok
  end

  @typedoc "Where a player's inputs go (`input_slot/2`)."
  @opaque input_slot :: {Inputs.t(), pos_integer}

  @doc """
  The input slot of a joined player's avatar, for `put_input/3` (valid while the player stays
  joined: a player that leaves and joins again has a new avatar and a new slot). Answers
  `{:error, :not_joined}` or `{:error, :not_found}` (no such zone).
  """
  @spec input_slot(zone, player) :: {:ok, input_slot} | {:error, :not_joined | :not_found}
  def input_slot(zone, player) do
    case config(zone) do
      nil ->
        {:error, :not_found}

      %Config{shared: shared} = config ->
        case entity_of(config, player) do
          nil -> {:error, :not_joined}
          id -> {:ok, local_slot(shared, id)}
        end
    end
  end

  @doc false
  # A slot a zone gave (its own tables), as a session on this node writes it: on another node,
  # through this node's mirror of the zone.
  @spec slot_here(zone, input_slot) :: input_slot
  def slot_here(zone, {_, id} = slot) do
    case config(zone) do
      %Config{shared: %{mirror: m} = shared} when m != nil -> local_slot(shared, id)
      _ -> slot
    end
  end

  # The slot of avatar `id` in the input tables of a zone as this node sees it: on another
  # node, its mirror's (one slot table, every avatar routed to it; the mirror sends the inputs
  # on).
  defp local_slot(%{mirror: nil, inputs: inputs}, id), do: {inputs, id}

  defp local_slot(%{inputs: inputs}, id) do
    Inputs.route(inputs, id, 0)
    {inputs, id}
  end

  @doc "Writes an input into a player's slot (see `input/4`): two ETS writes at most."
  @spec put_input(input_slot, term, non_neg_integer | nil) :: :ok
  def put_input({inputs, id}, input, seq \\ nil) do
    Inputs.put(inputs, id, input, seq)
    :ok
  end

  @doc "Spawns entities from specs (visible after the next tick); returns their ids."
  @spec spawn(zone, [entity_spec]) :: {:ok, [pos_integer]} | {:error, term}
  def spawn(zone, specs) when is_list(specs), do: tagged_call(zone, {:spawn, specs})

  @doc "Despawns entities by id (gone after the next tick)."
  @spec despawn(zone, [pos_integer]) :: :ok | {:error, term}
  def despawn(zone, ids) when is_list(ids), do: tagged_call(zone, {:despawn, ids})

  @doc """
  Tells `pid` (default: the caller) of every tick the zone finishes, with a message
  `{:overworld_tick, zone_id, tick, started_at}` (`started_at`: the tick's start, in native
  monotonic time). Observers build their frames on it (`Overworld.Interest`). The notices are
  sent by the zone's workers, each to its share of the subscribers. A subscriber that exits is
  removed; subscribing twice is one subscription.
  """
  @spec subscribe(zone, pid) :: :ok | {:error, :not_found}
  def subscribe(zone, pid \\ self()) when is_pid(pid),
    do: tagged_call(mirror(zone) || zone, {:subscribe, pid})

  @doc "Stops the notices of `subscribe/2`."
  @spec unsubscribe(zone, pid) :: :ok | {:error, :not_found}
  def unsubscribe(zone, pid \\ self()) when is_pid(pid),
    do: tagged_call(mirror(zone) || zone, {:unsubscribe, pid})

  # A zone on another node is subscribed to through this node's mirror of it (its ticks come
  # once to this node; `Overworld.Zone.Mirror`).
  defp mirror(pid) when is_pid(pid), do: nil

  defp mirror(id) do
    case config(id) do
      %Config{shared: %{mirror: m}} -> m
      nil -> nil
    end
  end

  @doc """
  Runs `count` ticks now and returns the number of the last one. Only for zones started with
  `clock: :manual` (a test hook); a real-time zone answers `{:error, :realtime_clock}`.
  """
  @spec tick_now(zone, pos_integer) :: {:ok, non_neg_integer} | {:error, term}
  def tick_now(zone, count \\ 1) when is_integer(count) and count > 0,
    do: tagged_call(zone, {:tick_now, count}, :infinity)

  @doc "Every entity of the zone after the last completed tick, in no particular order."
  @spec entities(zone) :: [Overworld.Entity.t()]
  def entities(zone), do: call(zone, {:query, :entities})

  @doc "One entity by id, or nil."
  @spec entity(zone, pos_integer) :: Overworld.Entity.t() | nil
  def entity(zone, id), do: call(zone, {:query, {:entity, id}})

  @doc "The number of entities."
  @spec count(zone) :: non_neg_integer
  def count(zone), do: call(zone, {:query, :count})

  @doc "Entities within `radius` units of `(x, y)` (any radius), from the grid."
  @spec query_radius(zone, integer, integer, non_neg_integer) :: [Overworld.Entity.t()]
  def query_radius(zone, x, y, radius), do: call(zone, {:query, {:radius, x, y, radius}})

  @doc """
  A hash of the whole entity state (every field of every entity, in id order): equal hashes
  mean identical worlds. Used to check determinism.
  """
  @spec state_hash(zone) :: binary
  def state_hash(zone) do
    zone
    |> entities()
    |> Enum.sort_by(&elem(&1, 1))
    |> :erlang.term_to_binary()
    |> :erlang.md5()
    |> Base.encode16(case: :lower)
  end

  @doc """
  The last completed tick, the game state and every player (for tests and debugging: it copies
  the game state and the players out of the zone; `config/1` and `player_entity/2` read what
  live code needs without that).
  """
  @spec info(zone) :: %{tick: non_neg_integer, state: term, players: map, config: Config.t()}
  def info(zone), do: call(zone, :info)

  @doc """
  The zone's metrics, read without a message to the zone: ticks, overruns, skipped deadlines,
  callback errors, entity and player counts (after the last tick), tick duration summary in microseconds (count, mean, p50, p90,
  p99, p99.9, max), the average of each phase (input, systems, grid, other), and `cpu`: the
  node's scheduler utilization beside the OS process's CPU share since the zone started (the
  BEAM busy-waits, so the OS figure over-states the work).
  """
  @spec metrics(zone) :: map | nil
  def metrics(zone) do
    case metrics_ref(zone) do
      nil -> nil
      m -> Overworld.Zone.Metrics.report(m)
    end
  end

  @doc """
  The zone's wire: its templates module and the table of cells (`{cell key, tick, delta block |
  nil}`: each cell's delta block against the previous tick, see `Overworld.Protocol.Snapshot`),
  or nil when the zone has no `:wire` option. Read without a message to the zone.
  """
  @spec wire(zone) ::
          %{module: module, templates: [Overworld.Template.t()], table: :ets.tid()} | nil
  def wire(zone) do
    case config(zone) do
      %Config{wire: module, shared: %{wire: table}} when module != nil ->
        %{module: module, templates: module.__templates__(), table: table}

      _ ->
        nil
    end
  end

  @doc """
  Keyframe blocks of the given cells (those that hold replicated entities) after the last
  completed tick, and that tick: what an observer sends for cells entering its view.
  """
  @spec keyframes(zone, [non_neg_integer]) :: {non_neg_integer, [{non_neg_integer, binary}]}
  def keyframes(zone, keys) when is_list(keys), do: call(zone, {:query, {:keyframes, keys}})

  @doc false
  @spec metrics_ref(zone) :: Overworld.Zone.Metrics.t() | nil
  def metrics_ref(zone) do
    case config(zone) do
      %Config{shared: m} -> m
      nil -> nil
    end
  end

  @doc """
  The zone's time-travel history (`Overworld.Zone.History.dump/1`): its oldest complete
  keyframe, the records of every tick since, and the later keyframes. Zones keep
  `:history` ticks (default 300) and a keyframe every `:keyframe_ticks`.
  """
  @spec history(zone) :: {:ok, Overworld.Zone.History.dump()} | {:error, term}
  def history(zone), do: Overworld.Zone.History.dump(zone)

  @doc """
  The cells (`{cell key, entities}`, entities sorted by id) and the game state after a past
  `tick` still in the zone's history, replayed from its keyframe (`Overworld.Zone.History`).
  """
  @spec state_at(zone, non_neg_integer) :: {:ok, list, state} | {:error, term}
  def state_at(zone, tick), do: Overworld.Zone.History.state_at(zone, tick)

  @doc """
  Debug zones (`debug: true`): the zone goes back to a past `tick` still in its history (the
  state replayed from its keyframe, `state_at/2`) and goes on from there; players whose avatar
  did not exist then leave, observers start over from a keyframe, the history starts again.
  Answers `{:ok, tick}`, or `{:error, :not_debug | :no_keyframe | {:out_of_range, range} |
  :not_found}`; a zone of a world answers `{:error, :in_world}` (its neighbours hold what it
  handed them since: its history replays, see `state_at/2`, but it cannot go back alone).
  """
  @spec rewind(zone, non_neg_integer) :: {:ok, non_neg_integer} | {:error, term}
  def rewind(zone, tick) when is_integer(tick) and tick >= 0 do
    with {:ok, dump} <- Overworld.Zone.History.dump(zone),
         {:ok, cells, game} <- Overworld.Zone.History.state_at(dump, tick) do
      entities = for {_key, list} <- cells, e <- list, do: e
      tagged_call(zone, {:rewind, tick, entities, game})
    end
  end

  @doc """
  Writes a snapshot of the zone's last completed tick now (a zone with a `:data_dir`), and
  answers `{:ok, tick}` once it is on disk: a tick running, or a snapshot being written, is
  waited for first. `{:error, :no_data_dir}` for a zone without files, `{:error, :moved}` for
  one letting another node run it, `{:error, :not_found}`.
  """
  @spec snapshot(zone, timeout) :: {:ok, non_neg_integer} | {:error, term}
  def snapshot(zone, timeout \\ 60_000), do: tagged_call(zone, :snapshot, timeout)

  @doc """
  The zone's players: `{player, avatar entity id, session pid or nil}` (nil: joined from
  Elixir, or its session has not come back after a restart), read from the zone's in-memory
  copy without a message to the zone. A zone on another node answers `[]` here (ask its
  node).
  """
  @spec players(zone) :: [{player, pos_integer, pid | nil}]
  def players(zone) do
    case config(zone) do
      %Config{shared: %{mirror: nil, memory: table}} when table != nil ->
        Overworld.Zone.Memory.players(table)

      _ ->
        []
    end
  end

  @doc """
  Writes the zone's history to a file, for `mix overworld.replay FILE` (which replays it
  offline and checks it against the zone's recorded hashes and keyframes).
  """
  @spec dump_history(zone, Path.t()) :: :ok | {:error, term}
  def dump_history(zone, path) do
    with {:ok, dump} <- history(zone), do: Overworld.Zone.History.write(dump, path)
  end

  # Calls that answer a tagged tuple: a zone that is not running is `{:error, :not_found}`.
  defp tagged_call(zone, msg, timeout \\ 30_000) do
    call(zone, msg, timeout)
  catch
    :exit, {:noproc, _} -> {:error, :not_found}
    :exit, {:normal, _} -> {:error, :not_found}
    :exit, {:shutdown, _} -> {:error, :not_found}
  end

  defp call(zone, msg, timeout \\ 30_000), do: GenServer.call(server(zone), msg, timeout)

  defp server(pid) when is_pid(pid), do: pid
  # On this node, else wherever it runs in the cluster (else the name: :noproc).
  defp server(id), do: whereis(id) || Server.via(id)
end

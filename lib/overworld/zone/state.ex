defmodule Overworld.Zone.State do
  @moduledoc false
  # The zone server's state. The server (`Overworld.Zone.Server`) owns it; the modules that
  # hold the server's larger concerns work on it as plain functions, the way
  # `Overworld.Zone.Dispatch` does: `Overworld.Zone.Recovery` (the three ways to start),
  # `Overworld.Zone.Durable` (durable events, the journal, snapshots), `Overworld.Zone.Rewind`
  # (debug zones going back in ticks) and `Overworld.Zone.Actions` (what game code asks for).
  #
  # The entities are not here: the bucket workers own them. Neither are the players' inputs:
  # they go from the sessions to the workers (`Overworld.Zone.Inputs`).

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone.{Config, Dispatch, Metrics, Players}

  @enforce_keys [:config, :metrics, :memory, :epoch, :workers, :started]
  defstruct @enforce_keys ++
              [
                game: nil,
                tick: 0,
                next_id: 1,
                entity_count: 0,
                players: %Players{},
                sessions: %{},
                orphans: %{},
                orphans_timer: nil,
                spawns: [],
                despawns: [],
                running: nil,
                manual: :queue.new(),
                queries: %{},
                held_queries: [],
                clock: nil,
                subscribers: %{},
                shards: {},
                store: nil,
                journal: nil,
                segment: 0,
                unsynced: %{},
                snap_tick: nil,
                snap_at: 0,
                snapshotting: false,
                snapshot_asked: [],
                snapshot_answer: nil,
                rewinds: [],
                world: nil,
                release: nil
              ]

  @typedoc """
  * `config`, `metrics` — the zone's config and its shared counters and tables (the same as
    `config.shared`: the metrics atomics, the wire, memory and input tables), `memory` its
    in-memory copy's table (`Overworld.Zone.Memory`), written before anything it records is
    acted on, so a server that replaces a dead one reads it back.
  * `epoch` — this server's epoch (unique, increasing): every message between the server and
    the workers carries it, so a dead server's late messages are recognised and dropped.
  * `workers` — the bucket workers' pids, by index.
  * `game` — the game state (`c:Overworld.Zone.init/1`'s and the callbacks' since).
  * `tick` — the last tick completed (or loaded); `next_id` the next entity id;
    `entity_count` the entities after the last tick.
  * `players` — who plays which avatar (`Overworld.Zone.Players`); `sessions` player => the
    session pid its reliable messages go to; `orphans` players whose session has not come
    back (recovered from disk, or their session's node died), each with the time it leaves
    at; `orphans_timer` the timer for the first.
  * `spawns`, `despawns` — changes asked for since the last tick was sent (newest first),
    sent with the next.
  * `running` — the tick in flight (`Overworld.Zone.Dispatch.running/0`), or nil.
  * `manual` — queued `tick_now/2` calls (manual clock); `queries` queries waiting for the
    workers' answers (ref => {from, query, pending, answers}); `held_queries` queries asked
    during a tick, sent after it (newest first).
  * `clock` — nil (manual), or `%{t0, slot, timer}`: ticks at `t0 + slot / tick_rate`.
  * `subscribers` — pid => shard; `shards` a list of subscribers per worker (each worker
    tells its share of every finished tick).
  * `store`, `journal` — the zone's store and its journal writer (nil without a data
    directory); `segment` the journal segment written to; `unsynced` durable events handed to
    the journal and not yet on disk (ref => {events, memory rows}).
  * `snap_tick`, `snap_at` — the tick and time (ms) of the last snapshot; `snapshotting`:
    one is being written (only one at a time).
  * `snapshot_asked` — callers of `Overworld.Zone.snapshot/1` waiting for a snapshot to be
    taken (once no tick runs and no other is written); `snapshot_answer` nil, or `{tick,
    callers}`: the snapshot taken for them, answered once written.
  * `rewinds` — rewinds asked for during a tick (debug zones), newest first.
  * `world` — in a world of zones, the neighbours' messages and our transfers
    (`Overworld.Zone.Neighbours`); nil for a zone of its own.
  * `release` — nil, or how far the zone is in letting another node run it
    (`Overworld.Zone.Release`).
  * `started` — when this server's `init/1` began (native time: recovery durations).
  """
  @type t :: %__MODULE__{
          config: Config.t(),
          metrics: Metrics.t(),
          memory: :ets.tid(),
          epoch: pos_integer,
          workers: tuple,
          game: term,
          tick: non_neg_integer,
          next_id: pos_integer,
          entity_count: non_neg_integer,
          players: Players.t(),
          sessions: %{optional(term) => pid},
          orphans: %{optional(term) => integer},
          orphans_timer: reference | nil,
          spawns: [Overworld.Entity.t()],
          despawns: [pos_integer],
          running: Dispatch.running() | nil,
          manual: :queue.queue(),
          queries: map,
          held_queries: list,
          clock: nil | %{t0: integer, slot: non_neg_integer, timer: reference | nil},
          subscribers: %{optional(pid) => non_neg_integer},
          shards: tuple,
          store: pid | nil,
          journal: pid | nil,
          segment: non_neg_integer,
          unsynced: map,
          snap_tick: non_neg_integer | nil,
          snap_at: integer,
          snapshotting: boolean,
          snapshot_asked: [GenServer.from()],
          snapshot_answer: {non_neg_integer, [GenServer.from()]} | nil,
          rewinds: list,
          world: Overworld.Zone.Neighbours.t() | nil,
          started: integer
        }

  @doc "The tick at which changes made now take effect."
  @spec next_tick(t) :: pos_integer
  def next_tick(%__MODULE__{running: nil, tick: t}), do: t + 1
  def next_tick(%__MODULE__{running: %{n: n}}), do: n + 1

  @doc "The bucket worker whose stripe holds an entity."
  @spec worker_of(t, Overworld.Entity.t()) :: non_neg_integer
  def worker_of(%__MODULE__{config: c}, e),
    do: Config.owner_of(c, entity(e, :x), entity(e, :y))

  @doc "Changes between ticks, into the memory table (a restarted server finds them)."
  @spec remember(t) :: t
  def remember(%__MODULE__{} = st) do
    Overworld.Zone.Memory.put_pending(st.memory, next_tick(st), %{
      spawns: st.spawns,
      despawns: st.despawns,
      next_id: st.next_id,
      game: st.game
    })

    st
  end

  @doc """
  A zone that goes back in ticks (recovered from a snapshot, rewound): the published blocks of
  the lost timeline must not mix with the new one's.
  """
  @spec forget_wire_ticks(t) :: true
  def forget_wire_ticks(%__MODULE__{config: %Config{shared: %{wire: table}}}) when table != nil,
    do: Overworld.Zone.Wire.forget_ticks(table)

  def forget_wire_ticks(_st), do: true

  @doc """
  A zone that starts a new world (`init/1` again: entity ids start over) or goes back to an
  older one (its store, a rewind): no input sent before applies, and no avatar keeps a route
  (the load step routes the avatars it loads); the avatars' positions go (they come again
  with the tick), and with `acks: true` (ids start over) their acknowledgements.
  """
  @spec forget_inputs(t, boolean) :: :ok
  def forget_inputs(%__MODULE__{config: %Config{shared: shared}}, acks?) do
    Overworld.Zone.Inputs.reset(shared.inputs)
    if shared.wire, do: Overworld.Zone.Wire.forget_players(shared.wire, acks?)
    :ok
  end
end

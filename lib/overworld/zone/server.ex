defmodule Overworld.Zone.Server do
  @moduledoc false
  # The zone server: owns the game state, the players and the tick clock, and drives the bucket
  # workers, which own the entities. It never touches entities itself: per tick it sends each
  # worker one message (`Overworld.Zone.Dispatch`) and waits, without blocking, for one `:done`
  # per worker; queries are forwarded the same way. Game code runs through
  # `Overworld.Zone.Callbacks`, which catches and reports its failures.
  #
  # The clock fires at absolute monotonic deadlines t0 + k/rate (`Overworld.Zone.Clock`), so
  # ticks never drift. A tick that ends after the next deadline is an overrun: it is counted and
  # the deadlines already passed are skipped, not run in a burst.

  use GenServer, restart: :transient
  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.{Names, Telemetry}
  alias Overworld.Persistence.Journal

  alias Overworld.Zone.{
    Callbacks,
    Clock,
    Config,
    Dispatch,
    Memory,
    Metrics,
    Players,
    Spawn,
    Store
  }

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(%Config{} = config) do
    metrics = config.shared || Metrics.new()
    config = %{config | shared: metrics}

    # The zone's config is its registry value: anybody reads it (and the shared tables and
    # counters in it) without a message to the zone (`Overworld.Zone.config/1`).
    GenServer.start_link(__MODULE__, {config, metrics},
      name: Names.via(Names.zone(config.id), config)
    )
  end

  @spec via(term) :: GenServer.name()
  def via(id), do: Names.via(Names.zone(id))

  @spec child_spec(Config.t()) :: Supervisor.child_spec()
  def child_spec(config) do
    %{
      id: __MODULE__,
      start: {__MODULE__, :start_link, [config]},
      restart: :transient,
      significant: true
    }
  end

  ## Init
  #
  # Three ways to start: fresh (`init/1`), from the in-memory copy (`Overworld.Zone.Memory`:
  # the server died, the workers kept the entities), or from the store (snapshot + journal: a
  # bucket worker died, or the node was restarted on the same data directory).

  @impl true
  def init({%Config{} = config, metrics}) do
    started = System.monotonic_time()
    Logger.metadata(zone: inspect(config.id))
    Process.flag(:trap_exit, true)
    # The clock and the per-tick bookkeeping are small; run them ahead of ordinary work so
    # ticks start on time.
    Process.flag(:priority, :high)

    workers =
      for i <- 0..(config.workers - 1) do
        pid = Names.whereis(Names.bucket(config.id, i))
        Process.monitor(pid)
        pid
      end
      |> List.to_tuple()

    store = config.data_dir && Store.whereis(config.id)

    st = %{
      config: config,
      metrics: metrics,
      memory: metrics.memory,
      # A new epoch: messages of a previous server (before a restart) are recognised and dropped.
      epoch: :erlang.unique_integer([:positive, :monotonic]),
      workers: workers,
      game: nil,
      tick: 0,
      next_id: 1,
      entity_count: 0,
      inputs: %{},
      # Input sequence numbers (player => newest), published when a tick consumes them.
      acks: %{},
      players: %Players{},
      # player => session pid (from the join's meta `%{session: pid}`), for `{:send, ...}`.
      sessions: %{},
      # Players recovered from disk whose session has not come back yet.
      orphans: %{},
      spawns: [],
      despawns: [],
      running: nil,
      manual: :queue.new(),
      queries: %{},
      clock: nil,
      # Processes told of every finished tick: pid => shard; one list per worker, which sends
      # the notices (no single process sends them all).
      subscribers: %{},
      shards: Tuple.duplicate([], config.workers),
      store: store,
      journal: store && Memory.journal(metrics.memory),
      segment: Memory.segment(metrics.memory),
      # Durable events waiting for their fsync: journal ref => events.
      unsynced: %{},
      snap_tick: nil,
      snap_at: System.monotonic_time(:millisecond),
      # Rewinds asked for while a tick runs (debug zones).
      rewinds: [],
      # A snapshot handed to the store and not written yet.
      snapshotting: false,
      # Queries asked for while a tick runs, newest first.
      held_queries: [],
      started: started
    }

    with %{} = last <- Memory.last(st.memory),
         {:ok, st} <- from_memory(st, last) do
      {:ok, st, {:continue, {:recovered, :memory}}}
    else
      _ ->
        attach(st, false)

        case if(store, do: Store.recover(store), else: {nil, []}) do
          {nil, []} -> fresh(st)
          {snapshot, records} -> from_store(st, snapshot, records)
        end
    end
  end

  defp fresh(st) do
    # A world that starts over: nothing of a previous one is remembered (but its subscribers).
    Memory.forget_world(st.memory)
    with {:ok, st} <- run_init(st), do: finish_init(st)
  end

  # init/1: the game state and the initial entities (queued as spawns), or why the zone stops.
  defp run_init(st) do
    case Callbacks.call(st, :init, [st.config.args]) do
      {:ok, {:ok, game}} ->
        {:ok, %{st | game: game}}

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        {:ok, apply_actions(%{st | game: game}, actions, :init)}

      {:ok, {:stop, reason}} ->
        {:stop, reason}

      {:ok, other} ->
        {:stop, {:bad_return, {st.config.module, :init, other}}}

      {:error, kind, reason, _stack} ->
        {:stop, {:init_failed, kind, reason}}
    end
  end

  defp finish_init(st) do
    # Tick 0: the initial entities are loaded, without a simulation pass.
    st = dispatch(st, 0, false, %{}, Dispatch.context(st.config, 0))
    st = await_load(st)

    Telemetry.execute(
      [:overworld, :zone, :start],
      %{system_time: System.system_time()},
      %{
        zone: st.config.id,
        module: st.config.module,
        workers: st.config.workers,
        tick_rate: st.config.tick_rate
      }
    )

    {:ok, start_clock(st)}
  end

  # The workers, told of the new epoch; with `keep?` they keep their entities and answer what
  # they hold. Worker 0 first: it forwards every tick to the others (`Dispatch`), so once it
  # has answered, the others have the last tick it forwarded ahead of our call. Its avatars
  # (a scan of all its entities) come in a second request, answered while the others scan
  # theirs: the scans run in parallel.
  defp attach(st, keep?) do
    [w0 | rest] = Tuple.to_list(st.workers)
    first = GenServer.call(w0, {:attach, st.epoch, st.workers, self(), keep?, false}, :infinity)
    msg = {:attach, st.epoch, st.workers, self(), keep?, keep?}
    refs = for pid <- rest, do: :gen_server.send_request(pid, msg)
    owned = if keep?, do: :gen_server.send_request(w0, :owned)
    others = for ref <- refs, do: reply!(:gen_server.wait_response(ref, :infinity))

    first =
      if keep?,
        do: %{first | owned: reply!(:gen_server.wait_response(owned, :infinity))},
        else: first

    [first | others]
  end

  defp reply!({:reply, r}), do: r
  defp reply!({:error, {reason, _pid}}), do: exit({:shutdown, {:bucket_worker_down, reason}})

  defp from_memory(st, last) do
    summaries = attach(st, true)
    ticks = summaries |> Enum.map(& &1.tick) |> Enum.uniq()

    cond do
      # Workers restarted too (a worker died): their entities are gone.
      not Enum.all?(summaries, & &1.loaded) ->
        :error

      match?([_], ticks) and last.n in [hd(ticks), hd(ticks) + 1] ->
        {:ok, restore(st, last, summaries, hd(ticks))}

      true ->
        Logger.error(
          "zone #{inspect(st.config.id)}: workers at ticks #{inspect(ticks)}, last tick sent " <>
            "#{last.n}: recovering from the store instead"
        )

        :error
    end
  end

  # The server's state from the memory table; the tick in flight when the old server died is
  # sent again if the workers never got it (the record is written before the send).
  defp restore(st, last, summaries, t) do
    mem = st.memory
    empty = %{spawns: [], despawns: [], next_id: 0, game: nil}
    pending = Memory.pending(mem, last.n + 1) || empty
    # The tick in flight (sent again below) brings its spawns and despawns.
    {in_flight, flight_out} = if last.n == t + 1, do: {last.spawns, last.despawns}, else: {[], []}

    # Every player avatar: held by a worker, or coming (pending, in flight); minus those going.
    held =
      for {s, w} <- Enum.with_index(summaries),
          {id, owner} <- s.owned,
          into: %{},
          do: {id, {owner, w}}

    coming =
      for e <- pending.spawns ++ in_flight, entity(e, :owner) != nil, into: %{} do
        {entity(e, :id), {entity(e, :owner), worker_of(st, e)}}
      end

    avatars = Map.drop(Map.merge(held, coming), pending.despawns ++ flight_out)

    # A row whose avatar is gone (a leave cut short) goes; an avatar without a row (a join cut
    # short) is despawned.
    {rows, stale} =
      Enum.split_with(Memory.players(mem), fn {p, id, _} -> match?(%{^id => {^p, _}}, avatars) end)

    for {p, _, _} <- stale, do: Memory.delete_player(mem, p)
    kept = MapSet.new(rows, &elem(&1, 1))
    unowned = for {id, _} <- avatars, not MapSet.member?(kept, id), do: id

    players =
      Enum.reduce(rows, %Players{}, fn {p, id, _}, acc ->
        Players.add(acc, p, id, elem(avatars[id], 1))
      end)

    sessions = for {p, _id, pid} <- rows, is_pid(pid), into: %{}, do: {p, pid}

    st = %{
      st
      | tick: t,
        game: pending.game || last.game,
        next_id: max(last.next_id, pending.next_id),
        players: players,
        sessions: sessions,
        orphans: elem(Memory.orphans(mem), 0),
        entity_count: Enum.sum(Enum.map(summaries, & &1.count)),
        spawns: pending.spawns,
        despawns: unowned ++ pending.despawns
    }

    arm_orphans(st)
    st = adopt_unsynced(st)
    # The workers finished tick t but its report never reached a server: its durable events
    # are journaled now (the workers kept them).
    st =
      if last.n == t and Memory.finished(mem) < t,
        do: durable(st, t, Enum.flat_map(summaries, &events_of(&1, t)), t),
        else: st

    st = Enum.reduce(Memory.subscribers(mem), st, fn {pid, _}, st -> add_subscriber(st, pid) end)

    if last.n == t + 1 do
      # Lost in flight: sent again, with our epoch.
      ctx = Dispatch.context(st.config, last.n)

      running =
        Dispatch.send_tick(
          st.config,
          st.workers,
          st.epoch,
          last.n,
          last.simulate,
          ctx,
          last.inputs,
          last.spawns,
          last.despawns
        )

      await_load(%{st | running: running})
    else
      st
    end
  end

  defp events_of(%{events: {t, events}}, t), do: events
  defp events_of(_summary, _t), do: []

  # Players recovered from disk whose session has not come back: they leave at the deadline
  # (kept in the memory table: a server restarted meanwhile keeps the deadline).
  defp arm_orphans(%{orphans: orphans}) when map_size(orphans) == 0, do: :ok

  defp arm_orphans(st) do
    {_, deadline} = Memory.orphans(st.memory)
    left = max(deadline - System.monotonic_time(:millisecond), 0)
    Process.send_after(self(), :orphans, left)
    :ok
  end

  # From the store: the newest snapshot (or `init/1`'s world when there is none) and the
  # journal records after it, loaded into the workers at the snapshot's tick.
  defp from_store(st, snapshot, records) do
    base =
      case snapshot do
        nil ->
          case fresh_world(st) do
            {:ok, base} -> base
            {:stop, _} = stop -> stop
          end

        s ->
          %{
            tick: s.tick,
            game: s.game,
            next_id: s.next_id,
            players: s.players,
            entities: Map.new(s.entities ++ s.spawns, &{entity(&1, :id), &1}),
            despawns: s.despawns
          }
      end

    case base do
      {:stop, reason} ->
        {:stop, reason}

      base ->
        base = Enum.reduce(records, base, &replay_record(st.config.module, &1, &2))

        entities =
          Map.drop(base.entities, base.despawns) |> Map.values() |> Enum.sort_by(&entity(&1, :id))

        players =
          for {p, id} <- base.players, e = base.entities[id], e != nil, reduce: %Players{} do
            acc ->
              Players.add(acc, p, id, worker_of(st, e))
          end

        # Sessions still alive (the workers restarted, not the node) keep their players.
        live =
          for {p, _id, pid} <- Memory.players(st.memory),
              is_pid(pid),
              Process.alive?(pid),
              into: %{},
              do: {p, pid}

        orphans = for {p, _} <- base.players, not is_map_key(live, p), into: %{}, do: {p, true}

        Logger.info(
          "zone #{inspect(st.config.id)} recovered from " <>
            if(snapshot, do: "the snapshot of tick #{base.tick}", else: "its initial state") <>
            " and #{length(records)} journal records: #{length(entities)} entities, " <>
            "#{map_size(base.players)} players"
        )

        st = %{
          st
          | tick: base.tick,
            game: base.game,
            next_id: base.next_id,
            players: players,
            sessions: Map.take(live, Map.keys(base.players)),
            orphans: orphans,
            spawns: entities
        }

        # The ticks after the snapshot happened in a timeline that is gone: their blocks,
        # history, hashes, pending changes and players go too (the players come back from
        # the snapshot and the journal).
        forget_wire_ticks(st)
        Memory.forget_world(st.memory)
        for {p, id} <- base.players, do: Memory.put_player(st.memory, p, id, live[p])
        deadline = System.monotonic_time(:millisecond) + st.config.rejoin_ms
        Memory.put_orphans(st.memory, orphans, deadline)
        arm_orphans(st)

        st =
          Enum.reduce(Memory.subscribers(st.memory), st, fn {pid, _}, st ->
            add_subscriber(st, pid)
          end)

        st = dispatch(st, base.tick, false, %{}, Dispatch.context(st.config, base.tick))
        st = await_load(st)
        {:ok, st, {:continue, {:recovered, :store}}}
    end
  end

  # init/1's world, as a base for the journal when no snapshot was written yet.
  defp fresh_world(st) do
    with {:ok, st} <- run_init(st) do
      {:ok,
       %{
         tick: 0,
         game: st.game,
         next_id: st.next_id,
         players: %{},
         entities: Map.new(st.spawns, &{entity(&1, :id), &1}),
         despawns: []
       }}
    end
  end

  # One journal record onto the recovering state (idempotent: see Overworld.Zone).
  defp replay_record(module, record, base) do
    case record do
      {:join, _tick, player, e} ->
        id = entity(e, :id)

        if is_map_key(base.players, player) or is_map_key(base.entities, id),
          do: base,
          else: %{
            base
            | players: Map.put(base.players, player, id),
              entities: Map.put(base.entities, id, e),
              next_id: max(base.next_id, id + 1)
          }

      {:leave, _tick, player, id} ->
        %{
          base
          | players: Map.delete(base.players, player),
            entities: Map.delete(base.entities, id)
        }

      {:events, _tick, events} ->
        if function_exported?(module, :replay_durable, 2),
          do: %{
            base
            | entities: Enum.reduce(events, base.entities, &replay_event(module, &1, &2))
          },
          else: base

      _other ->
        base
    end
  end

  # Game code replaying a record: a failure skips the record (logged), never the recovery.
  defp replay_event(module, event, entities) do
    case module.replay_durable(event, entities) do
      %{} = entities ->
        entities

      other ->
        Logger.error("replay_durable/2 returned #{inspect(other, limit: 5)}: record skipped")
        entities
    end
  catch
    kind, reason ->
      Logger.error(
        "replay_durable/2 failed on #{inspect(event, limit: 5)}: " <>
          Exception.format(kind, reason, __STACKTRACE__) <> " (record skipped)"
      )

      entities
  end

  @impl true
  def handle_continue({:recovered, from}, st) do
    took = System.monotonic_time() - st.started

    Telemetry.execute(
      [:overworld, :zone, :recovered],
      %{duration: took},
      %{zone: st.config.id, from: from, tick: st.tick}
    )

    # The first tick runs at once (the clock starts again from it), then the log line.
    st =
      case st.config.clock do
        :manual ->
          st

        :realtime ->
          begin_tick(%{st | clock: %{t0: System.monotonic_time(), slot: 0, timer: nil}}, 0)
      end

    Logger.warning(
      "zone #{inspect(st.config.id)} restarted from #{from} at tick #{st.tick} in " <>
        "#{System.convert_time_unit(took, :native, :microsecond)} µs " <>
        "(#{st.entity_count} entities, #{map_size(st.subscribers)} subscribers)"
    )

    {:noreply, st}
  end

  # The tick sent during a start (a load, or a tick sent again), waited for.
  defp await_load(st), do: await_load(st, worker_set(st))

  defp await_load(%{running: nil} = st, _ws), do: st

  defp await_load(st, ws) do
    epoch = st.epoch
    n = st.running.n

    receive do
      {:done, ^epoch, ^n, w, stats} ->
        await_load(worker_done(st, w, stats, false), ws)

      {:DOWN, _, :process, pid, reason} when is_map_key(ws, pid) ->
        worker_lost(reason)
    end
  end

  # A worker that dies while we wait for a whole tick: the wait would never end. The server
  # exits; the zone's supervisor restarts the workers and then a server, which recovers.
  defp worker_lost(reason), do: exit({:shutdown, {:bucket_worker_down, reason}})

  defp worker_set(st), do: Map.new(Tuple.to_list(st.workers), &{&1, true})

  ## Clock

  defp start_clock(%{config: %Config{clock: :manual}} = st), do: st

  defp start_clock(st),
    do: schedule(%{st | clock: %{t0: System.monotonic_time(), slot: 0, timer: nil}}, 1)

  defp deadline(st, slot), do: Clock.deadline(st.clock.t0, slot, st.config.tick_rate)

  defp schedule(st, slot) do
    ref =
      :erlang.start_timer(Clock.timer_ms(deadline(st, slot)), self(), {:tick, slot}, abs: true)

    %{st | clock: %{st.clock | slot: slot, timer: ref}}
  end

  defp after_tick_clock(%{clock: nil} = st, _duration), do: st

  defp after_tick_clock(st, duration) do
    {next, skipped} =
      Clock.next(st.clock.t0, st.config.tick_rate, st.clock.slot, System.monotonic_time())

    if skipped > 0 do
      Metrics.add(st.metrics, :overruns, 1)
      Metrics.add(st.metrics, :skipped, skipped)

      Telemetry.execute(
        [:overworld, :zone, :overrun],
        %{duration: duration, skipped: skipped},
        %{zone: st.config.id, tick: st.tick}
      )
    end

    schedule(st, next)
  end

  ## Calls

  @impl true
  def handle_call({:tick_now, _count}, _from, %{config: %Config{clock: :realtime}} = st),
    do: {:reply, {:error, :realtime_clock}, st}

  def handle_call({:tick_now, count}, from, st) do
    {:noreply, maybe_manual_tick(%{st | manual: :queue.in({from, count}, st.manual)})}
  end

  # Queries see one completed tick: one asked while a tick runs waits for its end (worker 0
  # forwards the tick to the others, so a query sent now could reach them on either side of it).
  def handle_call({:query, q}, from, %{running: nil} = st), do: {:noreply, query(st, from, q)}

  def handle_call({:query, q}, from, st),
    do: {:noreply, %{st | held_queries: [{from, q} | st.held_queries]}}

  def handle_call({:subscribe, pid}, _from, st), do: {:reply, :ok, add_subscriber(st, pid)}

  def handle_call({:unsubscribe, pid}, _from, st), do: {:reply, :ok, unsubscribe(st, pid)}

  def handle_call(:info, _from, st) do
    {:reply,
     %{tick: st.tick, state: st.game, players: Players.to_map(st.players), config: st.config}, st}
  end

  # A session taking over a joined player (see `Overworld.Zone.claim_session/3`).
  def handle_call({:claim_session, player, pid}, _from, st) do
    if Players.joined?(st.players, player),
      do: {:reply, :ok, set_session(st, player, %{session: pid}) |> unorphan(player)},
      else: {:reply, {:error, :not_joined}, st}
  end

  def handle_call({:join, player, meta}, _from, st) do
    if Players.joined?(st.players, player) do
      # A session coming back (after a reconnect, a takeover or a recovery) takes the player.
      st = set_session(st, player, meta) |> unorphan(player)
      {:reply, {:error, :already_joined}, st}
    else
      case Callbacks.call(st, :handle_join, [player, meta, st.game]) do
        {:ok, {:ok, spec, game}} ->
          join(%{st | game: game}, player, meta, spec, [])

        {:ok, {:ok, spec, game, actions}} when is_list(actions) ->
          join(%{st | game: game}, player, meta, spec, actions)

        {:ok, {:reject, reason, game}} ->
          {:reply, {:error, {:rejected, reason}}, %{st | game: game}}

        {:ok, other} ->
          {:reply, {:error, :callback_failed}, bad_return(st, :handle_join, other)}

        {:error, _, _, _} ->
          {:reply, {:error, :callback_failed}, st}
      end
    end
  end

  def handle_call({:leave, player, reason}, _from, st) do
    case Players.entity(st.players, player) do
      nil ->
        {:reply, {:error, :not_joined}, st}

      id ->
        st = drop_player(st, player, id)

        st =
          game_result(
            st,
            :handle_leave,
            Callbacks.call(st, :handle_leave, [player, reason, st.game])
          )

        {:reply, :ok, remember(st)}
    end
  end

  def handle_call({:spawn, specs}, _from, st) do
    case build_all(st, specs, nil) do
      {:ok, entities, st} -> {:reply, {:ok, Enum.map(entities, &entity(&1, :id))}, remember(st)}
      {:error, reason} -> {:reply, {:error, reason}, st}
    end
  end

  def handle_call({:despawn, ids}, _from, st) do
    {:reply, :ok, remember(%{st | despawns: Enum.reverse(ids, st.despawns)})}
  end

  def handle_call(
        {:rewind, _tick, _entities, _game},
        _from,
        %{config: %Config{debug: false}} = st
      ),
      do: {:reply, {:error, :not_debug}, st}

  # A rewind waits for the tick running, if any (see finish_tick/2).
  def handle_call({:rewind, tick, entities, game}, from, %{running: nil} = st),
    do: {:noreply, rewind(st, from, tick, entities, game)}

  def handle_call({:rewind, _, _, _} = msg, from, st),
    do: {:noreply, %{st | rewinds: [{from, msg} | st.rewinds]}}

  defp join(st, player, meta, spec, actions) do
    case build_all(st, [spec], player) do
      {:ok, [e], st} ->
        # The avatar (pending spawn) before the player's row: a server killed in between
        # leaves an avatar without a player, which the next one despawns (see restore/4).
        st = st |> remember() |> set_session(player, meta)
        journal(st, {:join, next_tick(st), player, e})
        st = if actions == [], do: st, else: remember(apply_actions(st, actions, :handle_join))
        {:reply, {:ok, entity(e, :id)}, st}

      {:error, reason} ->
        {:reply, {:error, reason}, st}
    end
  end

  # The session of a player (from the join's meta `%{session: pid}`), remembered with it.
  defp set_session(st, player, meta) do
    session =
      case meta do
        %{session: pid} when is_pid(pid) -> pid
        _ -> Map.get(st.sessions, player)
      end

    Memory.put_player(st.memory, player, Players.entity(st.players, player), session)
    if session, do: %{st | sessions: Map.put(st.sessions, player, session)}, else: st
  end

  # The avatar's despawn (pending) before the player's row goes: a server killed in between
  # finds a row whose avatar is going, and drops it (see restore/4).
  defp drop_player(st, player, id) do
    case st.config.shared do
      %{wire: table} when table != nil -> Overworld.Zone.Wire.forget_player(table, player, id)
      _ -> true
    end

    st = remember(%{st | despawns: [id | st.despawns]})
    Memory.delete_player(st.memory, player)
    journal(st, {:leave, next_tick(st), player, id})

    %{
      st
      | players: Players.remove(st.players, player),
        inputs: Map.delete(st.inputs, player),
        acks: Map.delete(st.acks, player),
        sessions: Map.delete(st.sessions, player)
    }
    |> unorphan(player)
  end

  defp unorphan(%{orphans: orphans} = st, player) when is_map_key(orphans, player) do
    orphans = Map.delete(orphans, player)
    Memory.put_orphans(st.memory, orphans, elem(Memory.orphans(st.memory), 1))
    %{st | orphans: orphans}
  end

  defp unorphan(st, _player), do: st

  # The tick at which changes made now take effect.
  defp next_tick(%{running: nil, tick: t}), do: t + 1
  defp next_tick(%{running: %{n: n}}), do: n + 1

  # Changes between ticks, into the memory table (a restarted server finds them).
  defp remember(st) do
    Memory.put_pending(st.memory, next_tick(st), %{
      spawns: st.spawns,
      despawns: st.despawns,
      next_id: st.next_id,
      game: st.game
    })

    st
  end

  # The newest input of each joined player is kept until the next tick (latest wins).
  @impl true
  def handle_cast({:input, player, input}, st) do
    if Players.joined?(st.players, player),
      do: {:noreply, %{st | inputs: Map.put(st.inputs, player, input)}},
      else: {:noreply, st}
  end

  def handle_cast({:input, player, input, seq}, st) do
    if Players.joined?(st.players, player),
      do:
        {:noreply,
         %{st | inputs: Map.put(st.inputs, player, input), acks: Map.put(st.acks, player, seq)}},
      else: {:noreply, st}
  end

  ## Messages

  @impl true
  def handle_info({:timeout, ref, {:tick, slot}}, %{clock: %{timer: ref}} = st) do
    {:noreply, begin_tick(st, System.monotonic_time() - deadline(st, slot))}
  end

  def handle_info({:done, epoch, n, w, stats}, %{epoch: epoch, running: %{n: n}} = st) do
    {:noreply, worker_done(st, w, stats, true)}
  end

  # A tick still running after :stall_timeout: say so, with where each silent worker is (a worker
  # stuck in game code, the others waiting for it at the border exchange), and again every
  # period while it lasts.
  def handle_info({:stalled, epoch, n}, %{epoch: epoch, running: %{n: n} = r} = st) do
    waiting = Enum.to_list(0..(st.config.workers - 1)) -- r.reported
    Metrics.add(st.metrics, :stalls, 1)

    where =
      Enum.map_join(waiting, "; ", fn w ->
        stack =
          case Process.info(elem(st.workers, w), :current_stacktrace) do
            {:current_stacktrace, frames} ->
              frames
              |> Enum.take(3)
              |> Enum.map_join(" < ", fn {m, f, a, _} -> Exception.format_mfa(m, f, a) end)

            nil ->
              "dead"
          end

        "worker #{w} in #{stack}"
      end)

    Logger.error(
      "zone #{inspect(st.config.id)} tick #{n} has not finished after " <>
        "#{st.config.stall_timeout} ms: bucket workers #{inspect(waiting)} have not reported " <>
        "(#{where}); the zone waits, other zones carry on",
      tick: n
    )

    Process.send_after(self(), {:stalled, epoch, n}, st.config.stall_timeout)
    {:noreply, st}
  end

  def handle_info({:stalled, _epoch, _n}, st), do: {:noreply, st}

  def handle_info({:query_reply, ref, _w, result}, st) when is_map_key(st.queries, ref) do
    case Map.fetch!(st.queries, ref) do
      {from, q, 1, acc} ->
        GenServer.reply(from, Dispatch.merge(q, [result | acc]))
        {:noreply, %{st | queries: Map.delete(st.queries, ref)}}

      {from, q, pending, acc} ->
        {:noreply,
         %{st | queries: Map.put(st.queries, ref, {from, q, pending - 1, [result | acc]})}}
    end
  end

  def handle_info({:DOWN, _ref, :process, pid, reason} = msg, st) do
    cond do
      # A worker that dies takes `Buckets` down, and the zone supervisor (rest_for_one) then
      # restarts the workers and this server in order. Stopping here as well would race that
      # restart (a new server looking for workers not yet restarted) and could exhaust the
      # supervisor's restart intensity.
      pid in Tuple.to_list(st.workers) ->
        Logger.error("zone #{inspect(st.config.id)}: bucket worker down: #{inspect(reason)}")
        {:noreply, st}

      is_map_key(st.subscribers, pid) ->
        {:noreply, unsubscribe(st, pid)}

      true ->
        {:noreply, game_info(st, msg)}
    end
  end

  # Durable events on disk: now game code may acknowledge them (c:handle_durable/2).
  def handle_info({:journal_synced, ref, _seq}, st) when is_map_key(st.unsynced, ref) do
    {events, st} = pop_unsynced(st, ref)
    {:noreply, durable_done(st, events)}
  end

  def handle_info({:journal_failed, ref, reason}, st) when is_map_key(st.unsynced, ref) do
    {events, st} = pop_unsynced(st, ref)

    Logger.error(
      "zone #{inspect(st.config.id)}: #{length(events)} durable events not journaled " <>
        "(#{inspect(reason)}): not acknowledged"
    )

    {:noreply, st}
  end

  def handle_info({:snapshot_done, _tick}, st), do: {:noreply, %{st | snapshotting: false}}

  # Players recovered from disk whose session never came back leave.
  def handle_info(:orphans, st) do
    st =
      Enum.reduce(Map.keys(st.orphans), st, fn player, st ->
        case Players.entity(st.players, player) do
          nil -> st
          id -> drop_player(st, player, id)
        end
      end)

    Memory.put_orphans(st.memory, %{}, 0)
    {:noreply, %{st | orphans: %{}}}
  end

  # Late or stale messages of the zone's own machinery never reach game code.
  def handle_info({:journal_synced, _ref, _seq}, st), do: {:noreply, st}
  def handle_info({:done, _epoch, _n, _w, _stats}, st), do: {:noreply, st}
  def handle_info({:query_reply, _ref, _w, _result}, st), do: {:noreply, st}
  def handle_info({:timeout, _ref, {:tick, _slot}}, st), do: {:noreply, st}
  def handle_info(msg, st), do: {:noreply, game_info(st, msg)}

  # Subscribers are remembered in the memory table: a restarted server keeps telling them.
  defp add_subscriber(st, pid) do
    cond do
      is_map_key(st.subscribers, pid) ->
        st

      not Process.alive?(pid) ->
        Memory.delete_subscriber(st.memory, pid)
        st

      true ->
        Process.monitor(pid)
        shard = :erlang.phash2(pid, tuple_size(st.shards))
        shards = put_elem(st.shards, shard, [pid | elem(st.shards, shard)])
        Memory.put_subscriber(st.memory, pid, shard)
        %{st | subscribers: Map.put(st.subscribers, pid, shard), shards: shards}
    end
  end

  defp query(st, from, q) do
    ref = make_ref()
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:query, st.epoch, ref, q})
    %{st | queries: Map.put(st.queries, ref, {from, q, st.config.workers, []})}
  end

  defp unsubscribe(st, pid) do
    case Map.pop(st.subscribers, pid) do
      {nil, _} ->
        st

      {shard, subscribers} ->
        Memory.delete_subscriber(st.memory, pid)
        shards = put_elem(st.shards, shard, List.delete(elem(st.shards, shard), pid))
        %{st | subscribers: subscribers, shards: shards}
    end
  end

  defp game_info(st, msg),
    do: game_result(st, :handle_info, Callbacks.call(st, :handle_info, [msg, st.game]))

  # The common result shapes `{:ok, state}` and `{:ok, state, actions}`.
  defp game_result(st, callback, result) do
    case result do
      {:ok, {:ok, game}} ->
        %{st | game: game}

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        apply_actions(%{st | game: game}, actions, callback)

      {:ok, other} ->
        bad_return(st, callback, other)

      {:error, _, _, _} ->
        st
    end
  end

  @impl true
  def terminate(reason, st) do
    if function_exported?(st.config.module, :terminate, 2),
      do: Callbacks.call(st, :terminate, [reason, st.game])

    :ok
  end

  ## The tick

  defp maybe_manual_tick(%{running: nil} = st) do
    if :queue.is_empty(st.manual), do: st, else: begin_tick(st, 0)
  end

  defp maybe_manual_tick(st), do: st

  defp begin_tick(st, lateness) do
    t0 = System.monotonic_time()
    n = st.tick + 1
    {inputs, st} = input_phase(%{st | tick: n})
    t1 = System.monotonic_time()
    ctx = Dispatch.context(st.config, n)

    st =
      case Callbacks.call(st, :handle_tick, [ctx, st.game]) do
        {:ok, {:stop, reason, game}} -> stop_zone(%{st | game: game}, reason)
        result -> game_result(st, :handle_tick, result)
      end

    st = dispatch(%{st | tick: n - 1}, n, true, inputs, ctx)
    %{st | running: %{st.running | t0: t0, input: t1 - t0, lateness: lateness}}
  end

  defp stop_zone(st, reason) do
    Logger.info("zone #{inspect(st.config.id)} stops at tick #{st.tick}: #{inspect(reason)}")
    id = st.config.id
    # Stopping goes through the zone's supervisor; do it from another process.
    Kernel.spawn(fn -> Overworld.stop_zone(id) end)
    st
  end

  # handle_input for the newest input of each player; the inputs per worker (entity id => input).
  defp input_phase(%{inputs: inputs} = st) when map_size(inputs) == 0, do: {%{}, st}

  defp input_phase(%{acks: acks} = st) when map_size(acks) > 0 do
    case st.config.shared do
      %{wire: table} when table != nil -> Overworld.Zone.Wire.put_acks(table, acks)
      _ -> :ok
    end

    input_phase(%{st | acks: %{}})
  end

  defp input_phase(st) do
    Enum.reduce(st.inputs, {%{}, %{st | inputs: %{}}}, fn {player, input}, {acc, st} ->
      id = Players.entity(st.players, player)

      case Callbacks.call(st, :handle_input, [player, input, st.game]) do
        {:ok, {:ok, game}} -> {route_input(acc, st, id, input), %{st | game: game}}
        {:ok, {:ok, input2, game}} -> {route_input(acc, st, id, input2), %{st | game: game}}
        {:ok, {:ignore, game}} -> {acc, %{st | game: game}}
        {:ok, other} -> {acc, bad_return(st, :handle_input, other)}
        {:error, _, _, _} -> {acc, st}
      end
    end)
  end

  defp route_input(acc, st, id, input) do
    case Players.worker(st.players, id) do
      nil -> acc
      w -> Map.update(acc, w, %{id => input}, &Map.put(&1, id, input))
    end
  end

  defp dispatch(st, n, simulate?, inputs, ctx) do
    # The in-memory copy first: a server killed after this line and before the workers have
    # the tick finds the tick here and sends it again.
    Memory.put_tick(st.memory, st.config.history, %{
      n: n,
      simulate: simulate?,
      inputs: inputs,
      spawns: st.spawns,
      despawns: st.despawns,
      game: st.game,
      next_id: st.next_id
    })

    running =
      Dispatch.send_tick(
        st.config,
        st.workers,
        st.epoch,
        n,
        simulate?,
        ctx,
        inputs,
        st.spawns,
        st.despawns
      )

    Process.send_after(self(), {:stalled, st.epoch, n}, st.config.stall_timeout)
    %{st | spawns: [], despawns: [], running: running}
  end

  defp worker_done(st, w, stats, simulated?) do
    ids =
      for player_id <- stats.gone,
          into: %{},
          do: {Players.player(st.players, player_id), player_id}

    {gone, players} = Players.report(st.players, stats.moves, stats.gone)

    # Avatars despawned by game code: their players leave.
    st =
      Enum.reduce(gone, %{st | players: players}, fn player, st ->
        Memory.delete_player(st.memory, player)
        journal(st, {:leave, st.running.n, player, ids[player]})
        %{st | sessions: Map.delete(st.sessions, player)}
      end)

    st = %{st | running: Dispatch.collect(st.running, w, stats)}
    if st.running.pending == 0, do: finish_tick(st, simulated?), else: st
  end

  defp finish_tick(st, simulated?) do
    r = st.running
    total = System.monotonic_time() - r.t0
    st = %{st | running: nil, tick: r.n, entity_count: r.count}
    Metrics.put(st.metrics, :players, Players.count(st.players))
    st = durable(st, r.n, List.flatten(r.events), r.n)
    {st, jobs} = jobs(st, r.n)
    # The whole tick is done: the workers tell the subscribers, do the jobs (snapshot,
    # history), then collect garbage.
    notice = {:overworld_tick, st.config.id, r.n, r.t0}

    for {pid, i} <- Enum.with_index(Tuple.to_list(st.workers)),
        do: send(pid, {:idle, st.epoch, notice, elem(st.shards, i), jobs})

    st =
      Enum.reduce(Enum.reverse(st.held_queries), %{st | held_queries: []}, fn {from, q}, st ->
        query(st, from, q)
      end)

    if simulated? do
      Dispatch.report(st.config, st.metrics, r, total)
      st |> pending_rewinds() |> after_manual_tick() |> after_tick_clock(total)
    else
      Metrics.put(st.metrics, :entities, r.count)
      st
    end
  end

  # What the workers do after the tick: their part of a snapshot, of a history keyframe, and
  # (debug zones) their state hash.
  defp jobs(st, n) do
    c = st.config
    {st, snap} = maybe_snapshot(st, n)
    history? = c.history > 0 and rem(n, c.keyframe_ticks) == 0

    jobs =
      [
        snap,
        history? &&
          {:keyframe, rem(div(n, c.keyframe_ticks), div(c.history, c.keyframe_ticks) + 2)},
        c.debug && {:hash, Memory.slots(c.history)}
      ]
      |> Enum.filter(& &1)

    {st, jobs}
  end

  defp maybe_snapshot(%{store: nil} = st, _n), do: {st, nil}

  defp maybe_snapshot(st, n) do
    c = st.config
    now = System.monotonic_time(:millisecond)

    due =
      st.snap_tick == nil or n - st.snap_tick >= c.snapshot_ticks or
        (c.snapshot_ms != nil and now - st.snap_at >= c.snapshot_ms)

    # One snapshot at a time: the next waits until the store has written (or dropped) this
    # one, so copies of the world never pile up in its mailbox.
    if due and not st.snapshotting do
      # A new journal segment: the records after this snapshot start there.
      segment = st.segment + 1
      # Remembered before the roll: a server killed in between never rolls to it again.
      Memory.put_segment(st.memory, segment)
      Journal.roll(st.journal, Store.segment_path(Store.dir(c), segment))

      part = %{
        game: st.game,
        next_id: st.next_id,
        players: Players.to_map(st.players),
        spawns: st.spawns,
        despawns: st.despawns,
        segment: segment
      }

      send(st.store, {:snapshot_begin, n, part, c.workers, self()})

      {%{st | segment: segment, snap_tick: n, snap_at: now, snapshotting: true},
       {:snapshot, st.store, n}}
    else
      {st, nil}
    end
  end

  ## Durable events

  # Joins and leaves: journaled, nobody waits for their fsync.
  defp journal(%{journal: nil}, _record), do: :ok
  defp journal(st, record), do: Journal.append_async(st.journal, record, nil)

  # Events of tick n: journaled (acknowledged once on disk), or acknowledged at once without
  # a data directory. `finished` (a tick, or nil): that tick's end is handled, recorded in the
  # same insert as the events' row, so a server killed in between cannot journal them twice.
  defp durable(st, n, events, finished \\ nil)

  defp durable(%{journal: j} = st, _n, events, finished) when j == nil or events == [] do
    if finished, do: Memory.put_finished(st.memory, finished)
    durable_done(st, events)
  end

  defp durable(st, n, events, finished) do
    ref = make_ref()
    Journal.append_async(st.journal, {:events, n, events}, ref)
    # Remembered once handed to the journal (never before: a successor acknowledges what it
    # finds here once the journal has synced it).
    Memory.put_unsynced(st.memory, ref, events, finished)
    %{st | unsynced: Map.put(st.unsynced, ref, {events, [ref]})}
  end

  # A dead predecessor's events still waiting for their fsync: acknowledged, in order, once
  # every record it appended is on disk (the journal outlived it). Its rows stay until then.
  defp adopt_unsynced(%{journal: nil} = st), do: st

  defp adopt_unsynced(st) do
    case Memory.unsynced(st.memory) do
      [] ->
        st

      rows ->
        ref = make_ref()
        Journal.notify(st.journal, ref)
        batch = {Enum.flat_map(rows, &elem(&1, 1)), Enum.map(rows, &elem(&1, 0))}
        %{st | unsynced: Map.put(st.unsynced, ref, batch)}
    end
  end

  # A batch is synced (or failed): its rows go, before anything is acknowledged (a server
  # killed in between loses those acknowledgements rather than sending them twice).
  defp pop_unsynced(st, ref) do
    {{events, rows}, unsynced} = Map.pop(st.unsynced, ref)
    Memory.delete_unsynced(st.memory, rows)
    {events, %{st | unsynced: unsynced}}
  end

  defp durable_done(st, events) do
    if function_exported?(st.config.module, :handle_durable, 2) do
      Enum.reduce(events, st, fn ev, st ->
        game_result(st, :handle_durable, Callbacks.call(st, :handle_durable, [ev, st.game]))
      end)
    else
      st
    end
  end

  ## Rewind (debug zones): the workers start over from a past state (from the history).

  defp rewind(st, from, tick, entities, game) do
    st = %{st | epoch: :erlang.unique_integer([:positive, :monotonic])}
    attach(st, false)
    ids = MapSet.new(entities, &entity(&1, :id))

    st =
      Enum.reduce(Players.to_map(st.players), st, fn {player, id}, st ->
        if MapSet.member?(ids, id), do: st, else: drop_player(st, player, id)
      end)

    players =
      Enum.reduce(entities, st.players, fn e, acc ->
        case entity(e, :owner) do
          nil ->
            acc

          owner ->
            Players.add(acc, owner, entity(e, :id), worker_of(st, e))
        end
      end)

    Memory.forget_history(st.memory)
    forget_wire_ticks(st)

    st = %{
      st
      | tick: tick,
        game: game,
        players: players,
        spawns: entities,
        despawns: [],
        inputs: %{}
    }

    st = st |> dispatch(tick, false, %{}, Dispatch.context(st.config, tick)) |> await_load()

    Logger.warning(
      "zone #{inspect(st.config.id)} rewound to tick #{tick} (#{length(entities)} entities)"
    )

    # Observers start over: the ticks went back.
    for pid <- Map.keys(st.subscribers), do: send(pid, {:overworld_rewound, st.config.id})
    GenServer.reply(from, {:ok, tick})
    st
  end

  defp pending_rewinds(%{rewinds: []} = st), do: st

  defp pending_rewinds(st) do
    [{from, {:rewind, tick, entities, game}} | rest] = Enum.reverse(st.rewinds)
    for {f, _} <- rest, do: GenServer.reply(f, {:error, :superseded})
    rewind(%{st | rewinds: []}, from, tick, entities, game)
  end

  defp after_manual_tick(%{config: %Config{clock: :realtime}} = st), do: st

  defp after_manual_tick(st) do
    case :queue.out(st.manual) do
      {{:value, {from, left}}, rest} when left > 1 ->
        begin_tick(%{st | manual: :queue.in_r({from, left - 1}, rest)}, 0)

      {{:value, {from, _}}, rest} ->
        GenServer.reply(from, {:ok, st.tick})
        maybe_manual_tick(%{st | manual: rest})

      {:empty, _} ->
        st
    end
  end

  ## Entities and actions

  defp apply_actions(st, actions, callback) do
    Enum.reduce(actions, st, fn
      {:spawn, specs}, st ->
        case build_all(st, Spawn.specs(specs), nil) do
          {:ok, _entities, st} -> st
          {:error, reason} -> failed(st, callback, {:bad_spawn, reason})
        end

      {:despawn, ids}, st ->
        %{st | despawns: Enum.reverse(List.wrap(ids), st.despawns)}

      {:durable, event}, st ->
        durable(st, next_tick(st), [event])

      {:send, player, payload}, st when is_binary(payload) ->
        case st.sessions do
          %{^player => pid} -> send(pid, {:overworld_send, payload})
          _ -> :ok
        end

        st

      other, st ->
        failed(st, callback, {:bad_action, other})
    end)
  end

  # Builds and queues entities (visible after the next tick); all or nothing.
  defp build_all(st, specs, owner) do
    if st.entity_count + length(st.spawns) + length(specs) > st.config.max_entities do
      {:error, :max_entities}
    else
      specs
      |> Enum.with_index(st.next_id)
      |> Enum.reduce_while({:ok, []}, fn {spec, id}, {:ok, acc} ->
        case Spawn.build(st.config, spec, id, owner) do
          {:ok, e} -> {:cont, {:ok, [e | acc]}}
          {:error, _} = err -> {:halt, err}
        end
      end)
      |> case do
        {:ok, rev} -> {:ok, Enum.reverse(rev), queue_spawns(st, rev, owner)}
        err -> err
      end
    end
  end

  defp queue_spawns(st, rev, owner) do
    players =
      if owner == nil,
        do: st.players,
        else:
          Enum.reduce(rev, st.players, fn e, acc ->
            Players.add(acc, owner, entity(e, :id), worker_of(st, e))
          end)

    %{st | spawns: rev ++ st.spawns, next_id: st.next_id + length(rev), players: players}
  end

  # The bucket worker whose stripe holds an entity.
  defp worker_of(st, e), do: Config.owner_of(st.config, entity(e, :x), entity(e, :y))

  # A zone that goes back in ticks (recovered from a snapshot, rewound): the published blocks
  # of the lost timeline must not mix with the new one's.
  defp forget_wire_ticks(%{config: %Config{shared: %{wire: table}}}) when table != nil,
    do: Overworld.Zone.Wire.forget_ticks(table)

  defp forget_wire_ticks(_st), do: true

  defp bad_return(st, callback, value) do
    Callbacks.bad_return(st, callback, value)
    st
  end

  defp failed(st, callback, reason) do
    Callbacks.failed(st, callback, :error, reason, nil)
    st
  end
end

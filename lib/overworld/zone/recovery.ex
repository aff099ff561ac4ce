defmodule Overworld.Zone.Recovery do
  @moduledoc false
  # How a zone server starts, as functions over its state (`Overworld.Zone.State`). Three
  # ways:
  #
  #   1. **From the in-memory copy** (`Overworld.Zone.Memory`): the server died, the bucket
  #      workers kept the entities. The new server attaches to them with a new epoch (they
  #      keep their entities and say what they hold), reads its own state back, repairs what a
  #      kill cut short (a join whose avatar exists without its player's row, a leave whose
  #      row outlived its avatar), journals the durable events of a tick whose report was
  #      lost, and sends again a tick lost in flight.
  #   2. **From the store** (snapshot + journal): a bucket worker died (the workers restarted
  #      empty), or the node restarted on the same data directory. The newest snapshot (or
  #      `init/1`'s world) plus every journal record after it, loaded into the workers.
  #   3. **Fresh**: `init/1`.

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Zone.{
    Actions,
    Callbacks,
    Dispatch,
    Durable,
    Ids,
    Joins,
    Memory,
    Neighbours,
    Players
  }

  # The tick a transfer replayed from disk was "sent" at: before any, so it goes again at once.
  @again -1_000_000
  alias Overworld.Zone.{Server, State, Store, Subscribers}

  @doc """
  Starts the server's state: `{:ok, st, from}` (`from`: `:fresh`, `:memory` or `:store`) or
  `{:stop, reason}`.
  """
  @spec start(State.t()) :: {:ok, State.t(), :fresh | :memory | :store} | {:stop, term}
  def start(st) do
    with %{} = last <- Memory.last(st.memory),
         {:ok, st} <- from_memory(st, last) do
      {:ok, st, :memory}
    else
      _ ->
        attach(st, false)

        case if(st.store, do: Store.recover(st.store), else: {nil, []}) do
          {nil, []} -> fresh(st)
          {snapshot, records} -> from_store(st, snapshot, records)
        end
    end
  end

  defp fresh(st) do
    # A zone of a world that ran and lost its entities (a worker died, no data directory):
    # init/1's entities describe the world's start, and some of them live in other zones now.
    # It starts again empty rather than make them twice (the world lost this zone's entities).
    prior = st.config.world && Memory.last(st.memory)
    again? = prior != nil
    # (Its ids go on past those it made: some live in other zones now.)
    st = if again?, do: %{st | next_id: Ids.from(st.config.id_space, prior.next_id)}, else: st

    # A world that starts over: nothing of a previous one is remembered (but its subscribers):
    # entity ids start over, so no input, route or acknowledgement of an old avatar may reach
    # a new one.
    Memory.forget_world(st.memory)
    State.forget_inputs(st, true)

    if again? do
      Logger.error(
        "zone #{inspect(st.config.id)} of a world lost its entities (no data directory to " <>
          "recover them from): it starts again empty, not from init/1's world"
      )
    end

    with {:ok, st} <- run_init(st, not again?) do
      # Tick 0: the initial entities are loaded, without a simulation pass. (A zone of a world
      # starting again goes on from its last tick: its neighbours' ticks follow on theirs.)
      n = if again?, do: prior.n, else: 0
      st = %{st | tick: n} |> Dispatch.tick(n, false) |> Server.await_load()
      {:ok, st, :fresh}
    end
  end

  @doc "`init/1`: the game state and the initial entities (queued as spawns), or why not."
  @spec run_init(State.t(), boolean) :: {:ok, State.t()} | {:stop, term}
  def run_init(st, spawns? \\ true) do
    case Callbacks.call(st, :init, [st.config.args]) do
      {:ok, {:ok, game}} ->
        {:ok, %{st | game: game}}

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        {:ok, Actions.perform_init(%{st | game: game}, actions, spawns?)}

      {:ok, {:stop, reason}} ->
        {:stop, reason}

      {:ok, other} ->
        {:stop, {:bad_return, {st.config.module, :init, other}}}

      {:error, kind, reason, _stack} ->
        {:stop, {:init_failed, kind, reason}}
    end
  end

  @doc """
  The workers, told of the new epoch; with `keep?` they keep their entities and answer what
  they hold. Worker 0 first: it forwards every tick to the others (`Overworld.Zone.Dispatch`),
  so once it has answered, the others have the last tick it forwarded ahead of our call. Its
  avatars (a scan of all its entities) come in a second request, answered while the others
  scan theirs: the scans run in parallel.
  """
  @spec attach(State.t(), boolean) :: [map]
  def attach(st, keep?) do
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
  defp reply!({:error, {reason, _pid}}), do: Server.worker_lost(reason)

  ## 1. From memory

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
    held = for s <- summaries, {id, owner} <- s.owned, into: %{}, do: {id, owner}

    coming =
      for e <- pending.spawns ++ in_flight,
          entity(e, :owner) != nil,
          into: %{},
          do: {entity(e, :id), entity(e, :owner)}

    avatars = Map.drop(Map.merge(held, coming), pending.despawns ++ flight_out)

    # A row whose avatar is gone (a leave cut short) goes; an avatar without a row (a join cut
    # short) is despawned.
    {rows, stale} =
      Enum.split_with(Memory.players(mem), fn {p, id, _} -> match?(%{^id => ^p}, avatars) end)

    for {p, _, _} <- stale, do: Memory.delete_player(mem, p)
    kept = MapSet.new(rows, &elem(&1, 1))
    unowned = for {id, _} <- avatars, not MapSet.member?(kept, id), do: id
    players = Enum.reduce(rows, %Players{}, fn {p, id, _}, acc -> Players.add(acc, p, id) end)
    sessions = for {p, _id, pid} <- rows, is_pid(pid), into: %{}, do: {p, pid}

    st = %{
      st
      | tick: t,
        world:
          st.world
          |> Neighbours.restore(Memory.world(mem))
          |> Neighbours.restore_moved(Memory.moved_all(mem)),
        game: pending.game || last.game,
        next_id: Ids.from(st.config.id_space, max(last.next_id, pending.next_id)),
        players: players,
        sessions: sessions,
        orphans: Memory.orphans(mem),
        entity_count: Enum.sum(Enum.map(summaries, & &1.count)),
        spawns: pending.spawns,
        despawns: unowned ++ pending.despawns
    }

    st = st |> Joins.arm_orphans() |> Durable.adopt() |> Neighbours.hold()
    # A world zone: tick t's shadows and handoffs go (again) to the neighbours (the old server
    # may have died before it sent them; they are idempotent).
    st =
      Neighbours.publish(
        st,
        t,
        for({s, w} <- Enum.with_index(summaries), s.world != nil, do: {w, s.world})
      )

    # The workers finished tick t but its report never reached a server: its durable events
    # are journaled now (the workers kept them).
    st =
      if last.n == t and Memory.finished(mem) < t,
        do: Durable.events(st, t, Enum.flat_map(summaries, &events_of(&1, t)), t),
        else: st

    st = Subscribers.restore(st)

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
          last.spawns,
          last.despawns,
          last[:world]
        )

      Server.await_load(%{st | running: running})
    else
      st
    end
  end

  defp events_of(%{events: {t, events}}, t), do: events
  defp events_of(_summary, _t), do: []

  ## 2. From the store

  # The newest snapshot (or `init/1`'s world when there is none) and the journal records after
  # it, loaded into the workers at the snapshot's tick.
  defp from_store(st, snapshot, records) do
    with {:ok, base} <- base(st, snapshot) do
      base = Enum.reduce(records, base, &replay_record(st.config.module, &1, &2))
      # A zone of a world: the entities it handed over and saw no acknowledgement for are sent
      # again (the neighbour adopts a transfer once); they are not ours.
      # (And those handed over at the end of the snapshot's tick, which it still holds,
      # whether acknowledged since or not; unless they came back.)
      # Those handed at the end of the snapshot's tick are still in its cells at that tick:
      # loaded, read-only (`departed` in their worker: shown to game code as shadows, never
      # computed again), as the zone had them then; so a zone released to another node
      # (`Overworld.Zone.Release`) goes on exactly where it stopped.
      departing = MapSet.to_list(base.world.handed)

      handed = for({_tid, {_to, _at, e}} <- base.world.pending, do: entity(e, :id)) -- departing

      kept = Map.drop(base.entities, base.despawns ++ handed)
      departed = Enum.filter(departing, &is_map_key(kept, &1))
      entities = kept |> Map.values() |> Enum.sort_by(&entity(&1, :id))
      held = MapSet.new(entities, &entity(&1, :id)) |> MapSet.difference(MapSet.new(departed))

      players =
        for {p, id} <- base.players, MapSet.member?(held, id), reduce: %Players{} do
          acc -> Players.add(acc, p, id)
        end

      # Sessions still alive (the workers restarted, not the node) keep their players.
      live =
        for {p, _id, pid} <- Memory.players(st.memory),
            is_pid(pid),
            Overworld.Cluster.alive?(pid),
            into: %{},
            do: {p, pid}

      deadline = System.monotonic_time(:millisecond) + st.config.rejoin_ms

      orphans = for {p, _} <- base.players, not is_map_key(live, p), into: %{}, do: {p, deadline}

      Logger.info(
        "zone #{inspect(st.config.id)} recovered from " <>
          if(snapshot, do: "the snapshot of tick #{base.tick}", else: "its initial state") <>
          " and #{length(records)} journal records: #{length(entities)} entities, " <>
          "#{map_size(base.players)} players"
      )

      st = %{
        st
        | tick: base.tick,
          world: Neighbours.restore(st.world, base.world),
          game: base.game,
          next_id: Ids.from(st.config.id_space, base.next_id),
          players: players,
          sessions: Map.take(live, Map.keys(base.players)),
          orphans: orphans,
          spawns: entities,
          # The snapshot and the journal hold this state already: no snapshot of the loaded
          # tick (its handoffs are not this server's to tell: `Neighbours.handed/2` below).
          snap_tick: base.tick,
          snap_at: System.monotonic_time(:millisecond)
      }

      # The ticks after the snapshot happened in a timeline that is gone: their blocks,
      # history, hashes, pending changes and players go too (the players come back from
      # the snapshot and the journal).
      State.forget_wire_ticks(st)
      State.forget_inputs(st, false)
      Memory.forget_world(st.memory)
      for {p, id} <- base.players, do: Memory.put_player(st.memory, p, id, live[p])
      Memory.put_orphans(st.memory, orphans)
      st = st |> Joins.arm_orphans() |> Subscribers.restore()
      st = st |> Dispatch.tick(base.tick, false) |> Server.await_load()
      Dispatch.departed(st, departed)
      # (A snapshot of this tick, a zone released at once, keeps them as handed: read-only.)
      {:ok, Neighbours.handed(st, departed), :store}
    end
  end

  defp base(st, nil), do: fresh_world(st)

  defp base(_st, s) do
    {:ok,
     %{
       tick: s.tick,
       game: s.game,
       next_id: s.next_id,
       players: s.players,
       entities: Map.new(s.entities ++ s.spawns, &{entity(&1, :id), &1}),
       despawns: s.despawns,
       world: restored(s[:world], s.tick)
     }}
  end

  # Transfers of a snapshot or the journal are sent again at once (marked with a tick before
  # any: see Overworld.Zone.Neighbours).
  defp restored(w, tick \\ nil)
  defp restored(nil, _tick), do: %{pending: %{}, adopted: %{}, handed: MapSet.new()}

  defp restored(w, tick) do
    # (A snapshot of an older version has no `handed`: the ids handed at the end of its tick
    # are those of its transfers made at that tick.)
    handed =
      Map.get_lazy(w, :handed, fn ->
        for {_tid, {_to, ^tick, e}} <- w.pending, do: entity(e, :id)
      end)

    Map.merge(w, %{
      pending: Map.new(w.pending, fn {tid, {to, _at, e}} -> {tid, {to, @again, e}} end),
      handed: MapSet.new(handed)
    })
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
         despawns: [],
         world: restored(nil)
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

      # A zone of a world handed entities to a neighbour: not ours any more, sent again until
      # acknowledged.
      {:handoff_out, _tick, handoffs} ->
        pending =
          Enum.reduce(handoffs, base.world.pending, fn {to, tid, e}, acc ->
            Map.put(acc, tid, {to, @again, e})
          end)

        ids = for {_, _, e} <- handoffs, do: entity(e, :id)
        gone = MapSet.new(ids)
        players = Map.reject(base.players, fn {_p, id} -> MapSet.member?(gone, id) end)

        %{
          base
          | entities: Map.drop(base.entities, ids),
            players: players,
            world: %{base.world | pending: pending}
        }

      # ... which acknowledged them: not sent again ...
      {:handoff_acked, _tick, tids} ->
        %{base | world: %{base.world | pending: Map.drop(base.world.pending, tids)}}

      # ... and adopted entities from one (once per transfer; an entity coming back proves our
      # earlier transfers of it were adopted).
      {:handoff_in, tick, adopted} ->
        Enum.reduce(adopted, base, fn {tid, e}, base ->
          if is_map_key(base.world.adopted, tid) do
            base
          else
            id = entity(e, :id)
            pending = Map.reject(base.world.pending, fn {{pid, _}, _} -> pid == id end)
            handed = MapSet.delete(base.world.handed, id)
            base = %{base | world: %{base.world | pending: pending, handed: handed}}

            players =
              if entity(e, :owner) != nil,
                do: Map.put(base.players, entity(e, :owner), entity(e, :id)),
                else: base.players

            %{
              base
              | entities: Map.put(base.entities, entity(e, :id), e),
                players: players,
                world: %{base.world | adopted: Map.put(base.world.adopted, tid, tick)}
            }
          end
        end)

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
end

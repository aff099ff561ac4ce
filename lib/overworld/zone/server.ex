defmodule Overworld.Zone.Server do
  @moduledoc false
  # The zone server: owns the game state, the players and the tick clock, and drives the bucket
  # workers, which own the entities. It never touches entities itself: per tick it sends worker
  # 0 one message (`Overworld.Zone.Dispatch`) and waits, without blocking, for one `:done` per
  # worker; queries are forwarded the same way. Game code runs through
  # `Overworld.Zone.Callbacks`, which catches and reports its failures.
  #
  # Its larger concerns are functions over its state (`Overworld.Zone.State`) in modules of
  # their own: how it starts (`Recovery`), joins and leaves (`Joins`), what game code asks
  # for (`Actions`), durable events and snapshots (`Durable`), subscribers (`Subscribers`),
  # rewinds (`Rewind`). Players' inputs never reach it: the sessions hand them to the
  # workers (`Overworld.Zone.Inputs`).
  #
  # The clock fires at absolute monotonic deadlines t0 + k/rate (`Overworld.Zone.Clock`), so
  # ticks never drift. A tick that ends after the next deadline is an overrun: it is counted and
  # the deadlines already passed are skipped, not run in a burst.

  use GenServer, restart: :transient
  require Logger
  require Overworld.Entity

  alias Overworld.{Names, Telemetry}
  alias Overworld.Zone.Wire

  alias Overworld.Zone.{
    Actions,
    Callbacks,
    Clock,
    Config,
    Crossings,
    Dispatch,
    Durable,
    Joins,
    Memory,
    Metrics,
    Neighbours,
    Players,
    Recovery,
    Release,
    Rewind,
    State,
    Store,
    Subscribers
  }

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(%Config{shared: %Metrics{}} = config) do
    # The zone's config is its registry value: anybody reads it (and the shared tables and
    # counters in it) without a message to the zone (`Overworld.Zone.config/1`). (`shared` is
    # made by the zone's supervisor, the only one to start a zone server: it outlives the
    # server's restarts.)
    GenServer.start_link(__MODULE__, config, name: Names.via(Names.zone(config.id), config))
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

  ## Init (see Overworld.Zone.Recovery for the three ways to start)

  @impl true
  def init(%Config{} = config) do
    started = System.monotonic_time()
    Logger.metadata(zone: inspect(config.id))
    Process.flag(:trap_exit, true)
    # The clock and the per-tick bookkeeping are small; run them ahead of ordinary work so
    # ticks start on time.
    Process.flag(:priority, :high)
    # Found from any node of the cluster (Overworld.Cluster.zone/1).
    :ok = Overworld.Cluster.register_zone(config.id)
    # Its players' sessions may be on other nodes: told when one goes (`Joins.sessions_lost/2`).
    if Node.alive?(), do: :ok = :net_kernel.monitor_nodes(true)

    workers =
      for i <- 0..(config.workers - 1) do
        pid = Names.whereis(Names.bucket(config.id, i))
        Process.monitor(pid)
        pid
      end
      |> List.to_tuple()

    memory = config.shared.memory
    store = config.data_dir && Store.whereis(config.id)

    st = %State{
      config: config,
      next_id: Overworld.Zone.Ids.first(config.id_space),
      metrics: config.shared,
      memory: memory,
      # A new epoch: messages of a previous server (before a restart) are recognised and dropped.
      epoch: :erlang.unique_integer([:positive, :monotonic]),
      workers: workers,
      started: started,
      shards: Tuple.duplicate([], config.workers),
      store: store,
      journal: store && Memory.journal(memory),
      segment: Memory.segment(memory),
      snap_at: System.monotonic_time(:millisecond),
      world: Neighbours.new(config)
    }

    case Recovery.start(st) do
      {:ok, st, :fresh} ->
        Telemetry.execute(
          [:overworld, :zone, :start],
          %{system_time: System.system_time()},
          %{
            zone: config.id,
            module: config.module,
            workers: config.workers,
            tick_rate: config.tick_rate
          }
        )

        Neighbours.hello(st)
        {:ok, start_clock(st)}

      {:ok, st, from} ->
        {:ok, st, {:continue, {:recovered, from}}}

      {:stop, reason} ->
        {:stop, reason}
    end
  end

  @impl true
  def handle_continue({:recovered, from}, st) do
    took = System.monotonic_time() - st.started

    Metrics.record_recovery(
      st.metrics,
      from,
      System.convert_time_unit(took, :native, :microsecond)
    )

    Neighbours.hello(st)

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
          begin_tick(%{st | clock: new_clock(st)}, 0)
      end

    Logger.warning(
      "zone #{inspect(st.config.id)} restarted from #{from} at tick #{st.tick} in " <>
        "#{System.convert_time_unit(took, :native, :microsecond)} µs " <>
        "(#{st.entity_count} entities, #{map_size(st.subscribers)} subscribers)"
    )

    {:noreply, st}
  end

  @doc false
  # The tick sent during a start (a load, or a tick sent again), waited for.
  @spec await_load(State.t()) :: State.t()
  def await_load(%State{running: nil} = st), do: st
  def await_load(st), do: await_load(st, Map.new(Tuple.to_list(st.workers), &{&1, true}))

  defp await_load(%State{running: nil} = st, _ws), do: st

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

  @doc false
  # A worker that dies while we wait for a whole tick: the wait would never end. The server
  # exits; the zone's supervisor restarts the workers and then a server, which recovers.
  @spec worker_lost(term) :: no_return
  def worker_lost(reason), do: exit({:shutdown, {:bucket_worker_down, reason}})

  ## Clock

  defp start_clock(%State{config: %Config{clock: :manual}} = st), do: st

  defp start_clock(st), do: schedule(%{st | clock: new_clock(st)}, 1)

  defp new_clock(%State{config: c}),
    do: %{
      t0: Clock.origin(System.monotonic_time(), c.tick_rate, c.tick_offset),
      slot: 0,
      timer: nil
    }

  defp deadline(st, slot), do: Clock.deadline(st.clock.t0, slot, st.config.tick_rate)

  defp schedule(st, slot) do
    ref =
      :erlang.start_timer(Clock.timer_ms(deadline(st, slot)), self(), {:tick, slot}, abs: true)

    %{st | clock: %{st.clock | slot: slot, timer: ref}}
  end

  defp after_tick_clock(%State{clock: nil} = st, _duration), do: st

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

  ## The tick

  defp begin_tick(st, lateness) do
    t0 = System.monotonic_time()
    n = st.tick + 1
    ctx = Dispatch.context(st.config, n)
    # (`tick` is the tick's own number while handle_tick/2 runs: failures are logged with it.)
    st = %{st | tick: n}

    st =
      case Callbacks.call(st, :handle_tick, [ctx, st.game]) do
        {:ok, {:stop, reason, game}} -> stop_zone(%{st | game: game}, reason)
        result -> Actions.result(st, :handle_tick, result)
      end

    {st, world} = Neighbours.take(st, n)
    st = Crossings.forward(st)
    st = Dispatch.tick(%{st | tick: n - 1}, n, true, world)
    %{st | running: %{st.running | t0: t0, lateness: lateness}}
  end

  defp stop_zone(st, reason) do
    Logger.info("zone #{inspect(st.config.id)} stops at tick #{st.tick}: #{inspect(reason)}")
    id = st.config.id
    # Stopping goes through the zone's supervisor; do it from another process.
    Kernel.spawn(fn -> Overworld.stop_zone(id) end)
    st
  end

  defp worker_done(st, w, stats, simulated?) do
    # Avatars despawned by game code: their players leave.
    st = Joins.gone(st, st.running.n, stats.gone)
    st = %{st | running: Dispatch.collect(st.running, w, stats)}
    # (A zone being released goes on once its last tick is done.)
    if st.running.pending == 0,
      do: st |> finish_tick(simulated?) |> Release.step() |> Durable.take_asked(),
      else: st
  end

  defp finish_tick(st, simulated?) do
    r = st.running
    total = System.monotonic_time() - r.t0
    st = %{st | running: nil, tick: r.n, entity_count: r.count}
    Metrics.put(st.metrics, :players, Players.count(st.players))
    st = Durable.events(st, r.n, List.flatten(r.events), r.n)
    # In a world: our shadows and handoffs of this tick to each neighbour.
    st = Neighbours.publish(st, r.n, r.world)
    {st, jobs} = Durable.jobs(st, r.n)
    # The whole tick is done: the workers tell the subscribers, do the jobs (snapshot,
    # history), then collect garbage.
    notice = {:overworld_tick, st.config.id, r.n, r.t0}
    # (Observers of a world read every zone's newest tick here: Overworld.Interest.World.)
    if st.config.wire && st.config.world,
      do: Overworld.Zone.Wire.put_newest(st.config.shared.wire, r.n)

    for {pid, i} <- Enum.with_index(Tuple.to_list(st.workers)),
        do: send(pid, {:idle, st.epoch, notice, elem(st.shards, i), jobs})

    st =
      Enum.reduce(Enum.reverse(st.held_queries), %{st | held_queries: []}, fn {from, q}, st ->
        query(st, from, q)
      end)

    if simulated? do
      Dispatch.report(st.config, st.metrics, r, total)
      st |> Rewind.pending() |> after_manual_tick() |> after_tick_clock(total)
    else
      Metrics.put(st.metrics, :entities, r.count)
      st
    end
  end

  # (In a world, a tick waits for the neighbours' shadows of the previous one.)
  defp maybe_manual_tick(%State{running: nil, release: nil} = st) do
    cond do
      :queue.is_empty(st.manual) or not Neighbours.ready?(st, st.tick + 1) -> st
      Release.owner?(st) -> begin_tick(st, 0)
      true -> Release.fence(st)
    end
  end

  defp maybe_manual_tick(st), do: st

  defp after_manual_tick(%State{config: %Config{clock: :realtime}} = st), do: st

  defp after_manual_tick(st) do
    case :queue.out(st.manual) do
      {{:value, {from, left}}, rest} when left > 1 ->
        maybe_manual_tick(%{st | manual: :queue.in_r({from, left - 1}, rest)})

      {{:value, {from, _}}, rest} ->
        GenServer.reply(from, {:ok, st.tick})
        maybe_manual_tick(%{st | manual: rest})

      {:empty, _} ->
        st
    end
  end

  defp query(st, from, q) do
    ref = make_ref()
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:query, st.epoch, ref, q})
    %{st | queries: Map.put(st.queries, ref, {from, q, st.config.workers, []})}
  end

  ## Calls

  @impl true
  def handle_call(:release, from, st), do: Release.begin(st, from)

  # A snapshot now (Overworld.Zone.snapshot/1), answered once written: not of a zone without
  # files, nor of one letting go of its state.
  def handle_call(:snapshot, _from, %State{store: nil} = st),
    do: {:reply, {:error, :no_data_dir}, st}

  def handle_call(:snapshot, _from, %State{release: r} = st) when r != nil,
    do: {:reply, {:error, :moved}, st}

  def handle_call(:snapshot, from, st), do: {:noreply, Durable.ask_snapshot(st, from)}

  # A released zone's state went to its next incarnation, a fenced one's node owns it no
  # more: it changes no more.
  def handle_call({:tick_now, _}, _from, %State{release: r} = st) when r != nil,
    do: {:reply, {:error, if(r == :fenced, do: :fenced, else: :released)}, st}

  def handle_call(msg, _from, %State{release: done} = st)
      when done in [:released, :fenced] and msg != :info and
             not (is_tuple(msg) and elem(msg, 0) == :query),
      do: {:reply, {:error, :moved}, st}

  def handle_call({:tick_now, _count}, _from, %State{config: %Config{clock: :realtime}} = st),
    do: {:reply, {:error, :realtime_clock}, st}

  def handle_call({:tick_now, count}, from, st) do
    {:noreply, maybe_manual_tick(%{st | manual: :queue.in({from, count}, st.manual)})}
  end

  # Queries see one completed tick: one asked while a tick runs waits for its end (worker 0
  # forwards the tick to the others, so a query sent now could reach them on either side of it).
  def handle_call({:query, q}, from, %State{running: nil} = st),
    do: {:noreply, query(st, from, q)}

  def handle_call({:query, q}, from, st),
    do: {:noreply, %{st | held_queries: [{from, q} | st.held_queries]}}

  def handle_call({:subscribe, pid}, _from, st), do: {:reply, :ok, Subscribers.add(st, pid)}

  # Another node's mirror of this zone (Overworld.Zone.Mirror): the workers send it their
  # part of every tick they publish.
  def handle_call({:mirror, pid}, _from, %State{config: %Config{wire: w}} = st) when w != nil do
    table = st.config.shared.wire
    mirrors = Wire.mirrors(table)

    # (A server that replaced a dead one watches the mirrors that subscribe again.)
    Process.monitor(pid)
    unless pid in mirrors, do: Wire.put_mirrors(table, [pid | mirrors])

    {:reply, {:ok, st.workers}, st}
  end

  def handle_call({:unsubscribe, pid}, _from, st), do: {:reply, :ok, Subscribers.remove(st, pid)}

  def handle_call(:info, _from, st) do
    {:reply,
     %{tick: st.tick, state: st.game, players: Players.to_map(st.players), config: st.config}, st}
  end

  # A session taking over a joined player (see `Overworld.Zone.claim_session/3`).
  def handle_call({:claim_session, player, pid}, _from, st) do
    {reply, st} = Joins.claim(st, player, pid)
    {:reply, reply, st}
  end

  def handle_call({:join, player, meta}, _from, st) do
    {reply, st} = Joins.join(st, player, meta)
    {:reply, reply, st}
  end

  def handle_call({:leave, player, reason}, _from, st) do
    {reply, st} =
      case Joins.leave(st, player, reason) do
        # (A zone of a world may have handed the avatar on: the leave follows it.)
        {{:error, :not_joined}, st} -> Crossings.leave(st, player, reason)
        done -> done
      end

    {:reply, reply, st}
  end

  def handle_call({:spawn, specs}, _from, st) do
    case Actions.build_all(st, specs, nil) do
      {:ok, entities, st} ->
        {:reply, {:ok, Enum.map(entities, &Overworld.Entity.entity(&1, :id))}, State.remember(st)}

      {:error, reason} ->
        {:reply, {:error, reason}, st}
    end
  end

  def handle_call({:despawn, ids}, _from, st) do
    {:reply, :ok, State.remember(%{st | despawns: Enum.reverse(ids, st.despawns)})}
  end

  def handle_call({:rewind, _, _, _}, _from, %State{config: %Config{debug: false}} = st),
    do: {:reply, {:error, :not_debug}, st}

  # A rewind waits for the tick running, if any (see finish_tick/2).
  # A zone of a world cannot go back alone: its neighbours hold what it handed them since.
  def handle_call({:rewind, _, _, _}, _from, %State{config: %Config{world: %{}}} = st),
    do: {:reply, {:error, :in_world}, st}

  def handle_call({:rewind, tick, entities, game}, from, %State{running: nil} = st),
    do: {:noreply, Rewind.run(st, from, tick, entities, game)}

  def handle_call({:rewind, _, _, _} = msg, from, st),
    do: {:noreply, %{st | rewinds: [{from, msg} | st.rewinds]}}

  ## Messages

  @impl true
  def handle_info({:timeout, ref, {:tick, slot}}, %State{clock: %{timer: ref}} = st) do
    if Release.owner?(st),
      do: {:noreply, begin_tick(st, System.monotonic_time() - deadline(st, slot))},
      else: {:noreply, Release.fence(st)}
  end

  def handle_info({:done, epoch, n, w, stats}, %State{epoch: epoch, running: %{n: n}} = st) do
    {:noreply, worker_done(st, w, stats, true)}
  end

  # A neighbour zone's shadows and transfers (a world of zones).
  def handle_info({:overworld_hello, _, _} = msg, st),
    do: {:noreply, Neighbours.received(st, msg)}

  def handle_info({:overworld_shadows, _, _, _, _, _} = msg, st) do
    st = Neighbours.received(st, msg)
    {:noreply, if(st.config.clock == :manual, do: maybe_manual_tick(st), else: st)}
  end

  def handle_info({:overworld_gone, _from, entries}, st),
    do: {:noreply, Crossings.gone(st, entries)}

  # A reliable message of a player's client (its session's RELIABLE): game code gets it. In a
  # world, one for a player whose avatar we handed away goes on after it (and one sent on to
  # us waits for it), in order (`Crossings.event/5`).
  def handle_info({:overworld_event, player, payload}, st),
    do: {:noreply, player_item(st, player, {:event, payload}, 0, nil)}

  def handle_info({:overworld_event_on, from, player, item, hops}, st),
    do: {:noreply, player_item(st, player, item, hops, from)}

  # The session of a player whose avatar crossed asks to be told once what it sent us before
  # has been handled (wherever the avatar went): only then does it send to its new zone.
  def handle_info({:overworld_flush, player, pid, ref}, st),
    do: {:noreply, player_item(st, player, {:flush, pid, ref}, 0, nil)}

  # What waited for an avatar that is ours now (if nothing for its player came since).
  def handle_info({:overworld_early, player}, st) do
    if Players.joined?(st.players, player) do
      {items, st} = Crossings.early(st, player)
      {:noreply, Enum.reduce(items, st, &handle_item(&2, player, &1))}
    else
      {:noreply, st}
    end
  end

  # A tick still running after :stall_timeout: said, and again every period while it lasts.
  def handle_info({:stalled, epoch, n}, %State{epoch: epoch, running: %{n: n}} = st) do
    Dispatch.stalled(st)
    Process.send_after(self(), {:stalled, epoch, n}, st.config.stall_timeout)
    {:noreply, st}
  end

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

      Subscribers.member?(st, pid) ->
        {:noreply, Subscribers.remove(st, pid)}

      st.config.wire != nil and pid in Wire.mirrors(st.config.shared.wire) ->
        Wire.put_mirrors(
          st.config.shared.wire,
          List.delete(Wire.mirrors(st.config.shared.wire), pid)
        )

        {:noreply, st}

      true ->
        {:noreply, Actions.run(st, :handle_info, [msg, st.game])}
    end
  end

  # Durable events on disk: now game code may acknowledge them (c:handle_durable/2).
  def handle_info({:journal_synced, ref, _seq}, st) do
    cond do
      Durable.waiting?(st, ref) -> {:noreply, Durable.synced(st, ref)}
      Neighbours.waiting?(st, ref) -> {:noreply, Neighbours.synced(st, ref)}
      true -> {:noreply, st}
    end
  end

  def handle_info({:journal_failed, ref, reason}, st) do
    cond do
      Neighbours.waiting?(st, ref) ->
        {:noreply, Neighbours.failed(st, ref, reason)}

      Durable.waiting?(st, ref) ->
        {count, st} = Durable.failed(st, ref)

        Logger.error(
          "zone #{inspect(st.config.id)}: #{count} durable events not journaled " <>
            "(#{inspect(reason)}): not acknowledged"
        )

        {:noreply, st}

      true ->
        {:noreply, st}
    end
  end

  def handle_info({:snapshot_done, tick}, st) do
    st = Durable.snapshot_written(%{st | snapshotting: false}, tick)
    {:noreply, Release.snapshot_done(st, tick)}
  end

  # Players whose session never came back leave.
  def handle_info(:orphans, st), do: {:noreply, Joins.orphans_expired(st)}

  # A node gone: the players whose sessions were there wait for their clients to come back
  # through another node (`Joins.sessions_lost/2`).
  def handle_info({:nodedown, node}, st), do: {:noreply, Joins.sessions_lost(st, node)}
  def handle_info({:nodeup, _node}, st), do: {:noreply, st}

  # Late or stale messages of the zone's own machinery never reach game code.
  def handle_info({:stalled, _epoch, _n}, st), do: {:noreply, st}
  def handle_info({:done, _epoch, _n, _w, _stats}, st), do: {:noreply, st}
  def handle_info({:query_reply, _ref, _w, _result}, st), do: {:noreply, st}
  def handle_info({:timeout, _ref, {:tick, _slot}}, st), do: {:noreply, st}
  def handle_info(msg, st), do: {:noreply, Actions.run(st, :handle_info, [msg, st.game])}

  @impl true
  def terminate(reason, st) do
    if function_exported?(st.config.module, :terminate, 2),
      do: Callbacks.call(st, :terminate, [reason, st.game])

    :ok
  end

  defp player_item(st, player, item, hops, from) do
    if Players.joined?(st.players, player) do
      # What waited for its avatar is older: first.
      {items, st} = Crossings.early(st, player)
      Enum.reduce(items ++ [item], st, &handle_item(&2, player, &1))
    else
      Crossings.event(st, player, item, hops, from)
    end
  end

  defp handle_item(st, player, {:event, payload}),
    do: Actions.run(st, :handle_event, [player, payload, st.game])

  defp handle_item(st, _player, {:flush, pid, ref}) do
    send(pid, {:overworld_flushed, ref})
    st
  end
end

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

  alias Overworld.Telemetry
  alias Overworld.Zone.{Callbacks, Clock, Config, Dispatch, Metrics, Players, Spawn}

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(%Config{} = config) do
    metrics = config.shared || Metrics.new()

    GenServer.start_link(__MODULE__, {config, metrics},
      name: {:via, Registry, {Overworld.Registry, {:zone, config.id}, metrics}}
    )
  end

  @spec via(term) :: GenServer.name()
  def via(id), do: {:via, Registry, {Overworld.Registry, {:zone, id}}}

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

  @impl true
  def init({%Config{} = config, metrics}) do
    Logger.metadata(zone: inspect(config.id))
    Process.flag(:trap_exit, true)
    # The clock and the per-tick bookkeeping are small; run them ahead of ordinary work so
    # ticks start on time.
    Process.flag(:priority, :high)

    workers =
      for i <- 0..(config.workers - 1) do
        [{pid, _}] = Registry.lookup(Overworld.Registry, {:bucket, config.id, i})
        Process.monitor(pid)
        pid
      end
      |> List.to_tuple()

    # A new epoch: messages of a previous server (before a restart) are recognised and dropped.
    epoch = :erlang.unique_integer([:positive, :monotonic])

    for pid <- Tuple.to_list(workers),
        do: :ok = GenServer.call(pid, {:reset, epoch, workers, self()}, :infinity)

    st = %{
      config: config,
      metrics: metrics,
      epoch: epoch,
      workers: workers,
      game: nil,
      tick: 0,
      next_id: 1,
      entity_count: 0,
      inputs: %{},
      # Input sequence numbers (player => newest), published when a tick consumes them.
      acks: %{},
      players: %Players{},
      spawns: [],
      despawns: [],
      running: nil,
      manual: :queue.new(),
      queries: %{},
      clock: nil,
      # Processes told of every finished tick: pid => shard; one list per worker, which sends
      # the notices (no single process sends them all).
      subscribers: %{},
      shards: Tuple.duplicate([], config.workers)
    }

    case Callbacks.call(st, :init, [config.args]) do
      {:ok, {:ok, game}} ->
        finish_init(%{st | game: game}, [])

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        finish_init(%{st | game: game}, actions)

      {:ok, {:stop, reason}} ->
        {:stop, reason}

      {:ok, other} ->
        {:stop, {:bad_return, {config.module, :init, other}}}

      {:error, kind, reason, _stack} ->
        {:stop, {:init_failed, kind, reason}}
    end
  end

  defp finish_init(st, actions) do
    st = apply_actions(st, actions, :init)
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

  defp await_load(%{running: nil} = st), do: st

  defp await_load(st) do
    epoch = st.epoch

    receive do
      {:done, ^epoch, 0, w, stats} -> await_load(worker_done(st, w, stats, false))
    end
  end

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

  def handle_call({:query, q}, from, st) do
    ref = make_ref()
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:query, st.epoch, ref, q})
    {:noreply, %{st | queries: Map.put(st.queries, ref, {from, q, st.config.workers, []})}}
  end

  def handle_call({:subscribe, pid}, _from, st) do
    if is_map_key(st.subscribers, pid) do
      {:reply, :ok, st}
    else
      Process.monitor(pid)
      shard = :erlang.phash2(pid, tuple_size(st.shards))
      shards = put_elem(st.shards, shard, [pid | elem(st.shards, shard)])
      {:reply, :ok, %{st | subscribers: Map.put(st.subscribers, pid, shard), shards: shards}}
    end
  end

  def handle_call({:unsubscribe, pid}, _from, st), do: {:reply, :ok, unsubscribe(st, pid)}

  def handle_call(:info, _from, st) do
    {:reply,
     %{tick: st.tick, state: st.game, players: Players.to_map(st.players), config: st.config}, st}
  end

  def handle_call({:join, player, meta}, _from, st) do
    if Players.joined?(st.players, player) do
      {:reply, {:error, :already_joined}, st}
    else
      case Callbacks.call(st, :handle_join, [player, meta, st.game]) do
        {:ok, {:ok, spec, game}} ->
          join(%{st | game: game}, player, spec, [])

        {:ok, {:ok, spec, game, actions}} when is_list(actions) ->
          join(%{st | game: game}, player, spec, actions)

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
        st = %{
          st
          | players: Players.remove(st.players, player),
            inputs: Map.delete(st.inputs, player),
            acks: Map.delete(st.acks, player)
        }

        case st.config.shared do
          %{wire: table} when table != nil -> Overworld.Zone.Wire.forget_player(table, player, id)
          _ -> true
        end

        st = %{st | despawns: [id | st.despawns]}

        {:reply, :ok,
         game_result(
           st,
           :handle_leave,
           Callbacks.call(st, :handle_leave, [player, reason, st.game])
         )}
    end
  end

  def handle_call({:spawn, specs}, _from, st) do
    case build_all(st, specs, nil) do
      {:ok, entities, st} -> {:reply, {:ok, Enum.map(entities, &entity(&1, :id))}, st}
      {:error, reason} -> {:reply, {:error, reason}, st}
    end
  end

  def handle_call({:despawn, ids}, _from, st) do
    {:reply, :ok, %{st | despawns: Enum.reverse(ids, st.despawns)}}
  end

  defp join(st, player, spec, actions) do
    case build_all(st, [spec], player) do
      {:ok, [e], st} -> {:reply, {:ok, entity(e, :id)}, apply_actions(st, actions, :handle_join)}
      {:error, reason} -> {:reply, {:error, reason}, st}
    end
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

  # Late or stale messages of the zone's own machinery never reach game code.
  def handle_info({:done, _epoch, _n, _w, _stats}, st), do: {:noreply, st}
  def handle_info({:query_reply, _ref, _w, _result}, st), do: {:noreply, st}
  def handle_info({:timeout, _ref, {:tick, _slot}}, st), do: {:noreply, st}
  def handle_info(msg, st), do: {:noreply, game_info(st, msg)}

  defp unsubscribe(st, pid) do
    case Map.pop(st.subscribers, pid) do
      {nil, _} ->
        st

      {shard, subscribers} ->
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
    {_gone, players} = Players.report(st.players, stats.moves, stats.gone)
    st = %{st | running: Dispatch.collect(st.running, w, stats), players: players}
    if st.running.pending == 0, do: finish_tick(st, simulated?), else: st
  end

  defp finish_tick(st, simulated?) do
    r = st.running
    total = System.monotonic_time() - r.t0
    # The whole tick is done: the workers tell the subscribers, then collect garbage.
    notice = {:overworld_tick, st.config.id, r.n, r.t0}

    for {pid, i} <- Enum.with_index(Tuple.to_list(st.workers)),
        do: send(pid, {:idle, st.epoch, notice, elem(st.shards, i)})

    st = %{st | running: nil, tick: r.n, entity_count: r.count}

    if simulated? do
      Dispatch.report(st.config, st.metrics, r, total)
      st |> after_manual_tick() |> after_tick_clock(total)
    else
      Metrics.put(st.metrics, :entities, r.count)
      st
    end
  end

  defp after_manual_tick(%{config: %Config{clock: :realtime}} = st), do: st

  defp after_manual_tick(st) do
    {{:value, {from, left}}, rest} = :queue.out(st.manual)

    if left > 1 do
      begin_tick(%{st | manual: :queue.in_r({from, left - 1}, rest)}, 0)
    else
      GenServer.reply(from, {:ok, st.tick})
      maybe_manual_tick(%{st | manual: rest})
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
            Players.add(
              acc,
              owner,
              entity(e, :id),
              Config.owner_of(st.config, entity(e, :x), entity(e, :y))
            )
          end)

    %{st | spawns: rev ++ st.spawns, next_id: st.next_id + length(rev), players: players}
  end

  defp bad_return(st, callback, value) do
    Callbacks.bad_return(st, callback, value)
    st
  end

  defp failed(st, callback, reason) do
    Callbacks.failed(st, callback, :error, reason, nil)
    st
  end
end

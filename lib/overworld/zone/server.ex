defmodule Overworld.Zone.Server do
  @moduledoc false
  # The zone server: owns the game state, the players and the tick clock, and drives the bucket
  # workers, which own the entities. It never touches entities itself: per tick it sends each
  # worker one message (tick number, the inputs and spawns for its stripe, despawns) and waits,
  # without blocking, for one `:done` per worker. Queries are forwarded the same way.
  #
  # The clock fires at absolute monotonic deadlines t0 + k/rate (`:erlang.start_timer/4` with
  # `abs: true`), so ticks never drift. A tick that ends after the next deadline is an overrun:
  # it is counted and the deadlines already passed are skipped, not run in a burst.

  use GenServer, restart: :transient
  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.{Random, Telemetry}
  alias Overworld.Zone.{Config, Context, Metrics}

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(%Config{} = config) do
    metrics = Metrics.new()

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
      players: %{},
      owners: %{},
      controlled: %{},
      spawns: [],
      despawns: [],
      running: nil,
      manual: :queue.new(),
      queries: %{},
      clock: nil
    }

    case safe(st, :init, [config.args]) do
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
    st = dispatch(st, 0, false, %{})
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

  defp start_clock(st) do
    clock = %{t0: System.monotonic_time(), slot: 0, timer: nil}
    schedule(%{st | clock: clock}, 1)
  end

  defp deadline(%{config: config, clock: clock}, slot) do
    clock.t0 + div(slot * System.convert_time_unit(1, :second, :native), config.tick_rate)
  end

  defp schedule(st, slot) do
    at = deadline(st, slot)
    per_ms = System.convert_time_unit(1, :millisecond, :native)
    # Round the deadline up to the millisecond grid the timer service uses.
    ms = -Integer.floor_div(-at, per_ms)
    ref = :erlang.start_timer(ms, self(), {:tick, slot}, abs: true)
    %{st | clock: %{st.clock | slot: slot, timer: ref}}
  end

  defp after_tick_clock(%{clock: nil} = st, _duration), do: st

  defp after_tick_clock(st, duration) do
    now = System.monotonic_time()
    next = st.clock.slot + 1

    if deadline(st, next) > now do
      schedule(st, next)
    else
      # Overrun: skip every deadline that has already passed.
      passed =
        div(
          (now - st.clock.t0) * st.config.tick_rate,
          System.convert_time_unit(1, :second, :native)
        )

      skipped = passed + 1 - next
      Metrics.add(st.metrics, :overruns, 1)
      Metrics.add(st.metrics, :skipped, skipped)

      Telemetry.execute(
        [:overworld, :zone, :overrun],
        %{duration: duration, skipped: skipped},
        %{zone: st.config.id, tick: st.tick}
      )

      schedule(st, passed + 1)
    end
  end

  ## Calls

  @impl true
  def handle_call({:tick_now, _count}, _from, %{config: %Config{clock: :realtime}} = st),
    do: {:reply, {:error, :realtime_clock}, st}

  def handle_call({:tick_now, count}, from, st) do
    st = %{st | manual: :queue.in({from, count}, st.manual)}
    {:noreply, maybe_manual_tick(st)}
  end

  def handle_call({:query, q}, from, st) do
    ref = make_ref()
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:query, st.epoch, ref, q})
    {:noreply, %{st | queries: Map.put(st.queries, ref, {from, q, st.config.workers, []})}}
  end

  def handle_call(:info, _from, st) do
    {:reply, %{tick: st.tick, state: st.game, players: st.players, config: st.config}, st}
  end

  def handle_call({:join, player, _meta}, _from, st) when is_map_key(st.players, player),
    do: {:reply, {:error, :already_joined}, st}

  def handle_call({:join, player, meta}, _from, st) do
    case safe(st, :handle_join, [player, meta, st.game]) do
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

  def handle_call({:leave, player, reason}, _from, st) do
    case Map.fetch(st.players, player) do
      :error ->
        {:reply, {:error, :not_joined}, st}

      {:ok, id} ->
        st = forget_player(st, player, id)
        st = %{st | despawns: [id | st.despawns]}

        st =
          case safe(st, :handle_leave, [player, reason, st.game]) do
            {:ok, {:ok, game}} ->
              %{st | game: game}

            {:ok, {:ok, game, actions}} when is_list(actions) ->
              apply_actions(%{st | game: game}, actions, :handle_leave)

            {:ok, other} ->
              bad_return(st, :handle_leave, other)

            {:error, _, _, _} ->
              st
          end

        {:reply, :ok, st}
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
      {:ok, [e], st} ->
        id = entity(e, :id)

        st = %{
          st
          | players: Map.put(st.players, player, id),
            owners: Map.put(st.owners, id, player)
        }

        {:reply, {:ok, id}, apply_actions(st, actions, :handle_join)}

      {:error, reason} ->
        {:reply, {:error, reason}, st}
    end
  end

  defp forget_player(st, player, id) do
    %{
      st
      | players: Map.delete(st.players, player),
        owners: Map.delete(st.owners, id),
        controlled: Map.delete(st.controlled, id),
        inputs: Map.delete(st.inputs, player)
    }
  end

  @impl true
  def handle_cast({:input, player, input}, st) do
    if is_map_key(st.players, player) do
      {:noreply, %{st | inputs: Map.put(st.inputs, player, input)}}
    else
      {:noreply, st}
    end
  end

  ## Messages

  @impl true
  def handle_info({:timeout, ref, {:tick, slot}}, %{clock: %{timer: ref}} = st) do
    lateness = System.monotonic_time() - deadline(st, slot)
    {:noreply, begin_tick(st, lateness)}
  end

  def handle_info({:done, epoch, n, w, stats}, %{epoch: epoch, running: %{n: n}} = st) do
    {:noreply, worker_done(st, w, stats, true)}
  end

  def handle_info({:query_reply, ref, _w, result}, st) when is_map_key(st.queries, ref) do
    {from, q, pending, acc} = Map.fetch!(st.queries, ref)

    if pending == 1 do
      GenServer.reply(from, merge(q, [result | acc]))
      {:noreply, %{st | queries: Map.delete(st.queries, ref)}}
    else
      {:noreply,
       %{st | queries: Map.put(st.queries, ref, {from, q, pending - 1, [result | acc]})}}
    end
  end

  def handle_info({:DOWN, _ref, :process, pid, reason}, st) do
    if pid in Tuple.to_list(st.workers) do
      {:stop, {:bucket_down, reason}, st}
    else
      game_info(st, {:DOWN, nil, :process, pid, reason})
    end
  end

  # Late or stale messages of the zone's own machinery never reach game code.
  def handle_info({:done, _epoch, _n, _w, _stats}, st), do: {:noreply, st}
  def handle_info({:query_reply, _ref, _w, _result}, st), do: {:noreply, st}
  def handle_info({:timeout, _ref, {:tick, _slot}}, st), do: {:noreply, st}

  def handle_info(msg, st), do: game_info(st, msg)

  defp game_info(st, msg) do
    case safe(st, :handle_info, [msg, st.game]) do
      {:ok, {:ok, game}} ->
        {:noreply, %{st | game: game}}

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        {:noreply, apply_actions(%{st | game: game}, actions, :handle_info)}

      {:ok, other} ->
        {:noreply, bad_return(st, :handle_info, other)}

      {:error, _, _, _} ->
        {:noreply, st}
    end
  end

  defp merge(:count, results), do: Enum.sum(results)
  defp merge(:entities, results), do: Enum.concat(results)
  defp merge({:entity, _}, results), do: Enum.find(results, &(&1 != nil))
  defp merge({:radius, _, _, _}, results), do: Enum.concat(results)

  @impl true
  def terminate(reason, st) do
    if function_exported?(st.config.module, :terminate, 2) do
      safe(st, :terminate, [reason, st.game])
    end

    :ok
  end

  ## The tick

  defp maybe_manual_tick(%{running: nil} = st) do
    case :queue.peek(st.manual) do
      {:value, _} -> begin_tick(st, 0)
      :empty -> st
    end
  end

  defp maybe_manual_tick(st), do: st

  defp begin_tick(st, lateness) do
    t0 = System.monotonic_time()
    n = st.tick + 1
    {inputs, st} = input_phase(st)
    t1 = System.monotonic_time()
    ctx = context(st, n)

    st =
      case safe(%{st | tick: n}, :handle_tick, [ctx, st.game]) do
        {:ok, {:ok, game}} ->
          %{st | game: game}

        {:ok, {:ok, game, actions}} when is_list(actions) ->
          apply_actions(%{st | game: game}, actions, :handle_tick)

        {:ok, {:stop, reason, game}} ->
          stop_zone(%{st | game: game}, reason)

        {:ok, other} ->
          bad_return(st, :handle_tick, other)

        {:error, _, _, _} ->
          st
      end

    st = dispatch(st, n, true, inputs, ctx)
    %{st | running: Map.merge(st.running, %{t0: t0, input: t1 - t0, lateness: lateness})}
  end

  defp stop_zone(st, reason) do
    Logger.info("zone #{inspect(st.config.id)} stops at tick #{st.tick + 1}: #{inspect(reason)}")
    id = st.config.id
    # Stopping goes through the zone's supervisor; do it from another process.
    Kernel.spawn(fn -> Overworld.stop_zone(id) end)
    st
  end

  # Runs handle_input for the newest input of each player; returns the inputs per worker
  # (entity id => input).
  defp input_phase(%{inputs: inputs} = st) when map_size(inputs) == 0, do: {%{}, st}

  defp input_phase(st) do
    Enum.reduce(st.inputs, {%{}, %{st | inputs: %{}}}, fn {player, input}, {acc, st} ->
      id = Map.fetch!(st.players, player)

      case safe(st, :handle_input, [player, input, st.game]) do
        {:ok, {:ok, game}} -> {put_input(acc, st, id, input), %{st | game: game}}
        {:ok, {:ok, input2, game}} -> {put_input(acc, st, id, input2), %{st | game: game}}
        {:ok, {:ignore, game}} -> {acc, %{st | game: game}}
        {:ok, other} -> {acc, bad_return(st, :handle_input, other)}
        {:error, _, _, _} -> {acc, st}
      end
    end)
  end

  defp put_input(acc, st, id, input) do
    case Map.fetch(st.controlled, id) do
      {:ok, w} -> Map.update(acc, w, %{id => input}, &Map.put(&1, id, input))
      :error -> acc
    end
  end

  defp context(st, n) do
    c = st.config

    %Context{
      zone: c.id,
      tick: n,
      tick_rate: c.tick_rate,
      width: c.width,
      height: c.height,
      cell_size: c.grid.cell,
      seed: c.seed
    }
  end

  defp dispatch(st, n, simulate?, inputs, ctx \\ nil) do
    ctx = ctx || context(st, n)
    spawns = Enum.group_by(st.spawns, &Config.owner_of(st.config, entity(&1, :x), entity(&1, :y)))
    despawns = Map.new(st.despawns, &{&1, true})

    for w <- 0..(st.config.workers - 1) do
      send(
        elem(st.workers, w),
        {:tick, st.epoch, n, simulate?, ctx, Map.get(inputs, w, %{}),
         Enum.reverse(Map.get(spawns, w, [])), despawns, System.monotonic_time()}
      )
    end

    running = %{
      n: n,
      pending: st.config.workers,
      t0: System.monotonic_time(),
      input: 0,
      lateness: 0,
      systems: 0,
      grid: 0,
      count: 0,
      errors: 0
    }

    %{st | spawns: [], despawns: [], running: running}
  end

  defp worker_done(st, w, stats, simulated?) do
    r = st.running

    st = %{
      st
      | running: %{
          r
          | pending: r.pending - 1,
            systems: max(r.systems, stats.systems),
            grid: max(r.grid, stats.grid),
            count: r.count + stats.count,
            errors: r.errors + stats.errors
        }
    }

    st = track_moves(st, w, stats)
    if st.running.pending == 0, do: finish_tick(st, simulated?), else: st
  end

  defp track_moves(st, _w, %{moves: [], gone: []}), do: st

  defp track_moves(st, _w, %{moves: moves, gone: gone}) do
    controlled =
      Enum.reduce(moves, st.controlled, fn {id, w}, acc ->
        if is_map_key(acc, id), do: Map.put(acc, id, w), else: acc
      end)

    st = %{st | controlled: controlled}

    Enum.reduce(gone, st, fn id, st ->
      case Map.fetch(st.owners, id) do
        {:ok, player} -> forget_player(st, player, id)
        :error -> st
      end
    end)
  end

  defp finish_tick(st, simulated?) do
    r = st.running
    total = System.monotonic_time() - r.t0
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:idle, st.epoch})
    st = %{st | running: nil, tick: r.n, entity_count: r.count}
    if r.errors > 0, do: Metrics.add(st.metrics, :callback_errors, r.errors)

    if simulated? do
      other = max(total - r.input - r.systems - r.grid, 0)

      Metrics.record_tick(st.metrics, r.n, %{
        total: us(total),
        input: us(r.input),
        systems: us(r.systems),
        grid: us(r.grid),
        other: us(other),
        entities: r.count
      })

      Telemetry.execute(
        [:overworld, :zone, :tick, :stop],
        %{
          duration: total,
          input: r.input,
          systems: r.systems,
          grid: r.grid,
          other: other,
          entities: r.count,
          lateness: r.lateness
        },
        %{zone: st.config.id, tick: r.n}
      )

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

  defp us(native), do: System.convert_time_unit(native, :native, :microsecond)

  ## Entities and actions

  defp apply_actions(st, actions, callback) do
    Enum.reduce(actions, st, fn
      {:spawn, specs}, st ->
        specs = if is_map(specs) or Keyword.keyword?(specs), do: [specs], else: specs

        case build_all(st, specs, nil) do
          {:ok, _entities, st} -> st
          {:error, reason} -> callback_failed(st, callback, :error, {:bad_spawn, reason}, nil)
        end

      {:despawn, ids}, st ->
        %{st | despawns: Enum.reverse(List.wrap(ids), st.despawns)}

      other, st ->
        callback_failed(st, callback, :error, {:bad_action, other}, nil)
    end)
  end

  # Builds and queues entities; all or nothing.
  defp build_all(st, specs, owner) do
    if st.entity_count + length(st.spawns) + length(specs) > st.config.max_entities do
      {:error, :max_entities}
    else
      specs
      |> Enum.with_index(st.next_id)
      |> Enum.reduce_while({:ok, []}, fn {spec, id}, {:ok, acc} ->
        case build(st.config, spec, id, owner) do
          {:ok, e} -> {:cont, {:ok, [e | acc]}}
          {:error, _} = err -> {:halt, err}
        end
      end)
      |> case do
        {:ok, rev} ->
          controlled =
            if owner == nil do
              st.controlled
            else
              Enum.reduce(rev, st.controlled, fn e, acc ->
                Map.put(
                  acc,
                  entity(e, :id),
                  Config.owner_of(st.config, entity(e, :x), entity(e, :y))
                )
              end)
            end

          {:ok, Enum.reverse(rev),
           %{
             st
             | spawns: rev ++ st.spawns,
               next_id: st.next_id + length(rev),
               controlled: controlled
           }}

        err ->
          err
      end
    end
  end

  @spec_keys [:kind, :x, :y, :vx, :vy, :heading, :state, :rng, :data, :input]

  defp build(config, spec, id, owner) when is_list(spec) or is_map(spec) do
    fields = Map.new(spec)

    with [] <- Map.keys(fields) -- @spec_keys,
         {:ok, x} <- int_field(fields, :x, :required),
         {:ok, y} <- int_field(fields, :y, :required),
         {:ok, vx} <- int_field(fields, :vx, 0),
         {:ok, vy} <- int_field(fields, :vy, 0),
         {:ok, heading} <- int_field(fields, :heading, 0),
         {:ok, rng} <- int_field(fields, :rng, Random.seed_for(config.seed, id)) do
      {:ok,
       entity(
         id: id,
         kind: Map.get(fields, :kind),
         x: x |> max(0) |> min(config.width),
         y: y |> max(0) |> min(config.height),
         vx: vx,
         vy: vy,
         heading: Integer.mod(heading, 65536),
         state: Map.get(fields, :state),
         rng:
           if(rng > 0, do: Bitwise.band(rng, 0xFFFFFFFF), else: Random.seed_for(config.seed, id)),
         data: Map.get(fields, :data),
         owner: owner,
         input: Map.get(fields, :input)
       )}
    else
      unknown when is_list(unknown) -> {:error, {:unknown_fields, unknown}}
      {:error, _} = err -> err
    end
  end

  defp build(_config, spec, _id, _owner), do: {:error, {:bad_spec, spec}}

  defp int_field(fields, key, default) do
    case Map.fetch(fields, key) do
      {:ok, v} when is_integer(v) -> {:ok, v}
      {:ok, v} -> {:error, {:not_an_integer, key, v}}
      :error when default == :required -> {:error, {:missing, key}}
      :error -> {:ok, default}
    end
  end

  ## Calling game code

  # Calls a callback of the zone module; failures are caught, logged, counted and reported.
  defp safe(st, callback, args) do
    {:ok, apply(st.config.module, callback, args)}
  catch
    kind, reason ->
      callback_failed(st, callback, kind, reason, __STACKTRACE__)
      {:error, kind, reason, __STACKTRACE__}
  end

  defp bad_return(st, callback, value),
    do: callback_failed(st, callback, :error, {:bad_return, value}, nil)

  defp callback_failed(st, callback, kind, reason, stack) do
    Metrics.add(st.metrics, :callback_errors, 1)

    Telemetry.execute(
      [:overworld, :zone, :callback, :exception],
      %{count: 1},
      %{zone: st.config.id, tick: st.tick, callback: callback, kind: kind, reason: reason}
    )

    detail = if stack, do: Exception.format(kind, reason, stack), else: inspect(reason, limit: 20)

    Logger.error(
      "zone #{inspect(st.config.id)} tick #{st.tick}: #{inspect(st.config.module)}.#{callback} " <>
        "failed; the zone keeps its previous state: " <> detail,
      tick: st.tick
    )

    st
  end
end

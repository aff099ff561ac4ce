defmodule Overworld.Zone.Bucket do
  @moduledoc false
  # One bucket worker of a zone: it owns a stripe of grid rows and every entity in them, and runs
  # the zone's `handle_entity/3` on them each tick, in parallel with the other workers.
  #
  # A tick (message `{:tick, ...}` from the zone server):
  #
  #   1. take the border exchange of the previous tick from every other worker: the entities of
  #      the rows bordering our stripe (the halo) and the entities that moved into our stripe;
  #   2. the pass: cell by cell, build the 3x3 block of the previous tick's cells (own + halo) and
  #      compute each entity's next state from it; an entity that stays in its cell is written
  #      back to its cell's list, one that crosses a cell border is moved, one that leaves the
  #      stripe is sent to its new owner;
  #   3. apply spawns and send the border exchange of this tick to every other worker;
  #   4. report `{:done, ...}` (counts, phase times, failures, controlled entities that moved).
  #
  # The previous tick's state is never mutated (Erlang data is immutable), so the double buffer
  # of the design costs nothing: the old cell map *is* the previous tick's view. Workers never
  # copy the zone state; only border rows and migrants travel between them.

  use GenServer
  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Spatial.{Grid, View}
  alias Overworld.Zone.Config

  # Tuning measured on the goblin benchmark: a young heap that holds a tick's garbage keeps
  # minor collections to a few per tick.
  @spawn_opt [min_heap_size: 1_000_000]

  @spec start_link({Config.t(), non_neg_integer}) :: GenServer.on_start()
  def start_link({%Config{} = config, index}) do
    scheduler = rem(index, System.schedulers_online()) + 1

    GenServer.start_link(__MODULE__, {config, index},
      name: via(config.id, index),
      spawn_opt: [{:scheduler, scheduler} | @spawn_opt]
    )
  end

  @spec via(term, non_neg_integer) :: GenServer.name()
  def via(zone, index), do: {:via, Registry, {Overworld.Registry, {:bucket, zone, index}}}

  @spec child_spec({Config.t(), non_neg_integer}) :: Supervisor.child_spec()
  def child_spec({config, index}) do
    %{id: {__MODULE__, index}, start: {__MODULE__, :start_link, [{config, index}]}}
  end

  ## Server side

  @impl true
  def init({config, index}) do
    Logger.metadata(zone: inspect(config.id))

    {:ok,
     %{
       config: config,
       index: index,
       server: nil,
       epoch: nil,
       workers: {},
       sends: sends(config, index),
       halo_for: halo_for(config),
       cells: %{},
       halo: %{},
       count: 0,
       inbox: [],
       logged_at: nil
     }}
  end

  # Rows of ours that each other worker needs as its halo.
  defp sends(%Config{stripes: stripes, workers: n}, me) do
    {r0, r1} = elem(stripes, me)

    for d <- 0..(n - 1), d != me do
      {d0, d1} = elem(stripes, d)
      rows = if d1 > d0, do: Enum.filter([d0 - 1, d1], &(&1 >= r0 and &1 < r1)), else: []
      {d, rows}
    end
  end

  # For every row, the workers whose halo it is (the rows just outside their stripe).
  defp halo_for(%Config{stripes: stripes, grid: grid}) do
    stripes = Tuple.to_list(stripes) |> Enum.with_index()

    for row <- 0..(grid.rows - 1) do
      for {{r0, r1}, d} <- stripes, r1 > r0, row == r0 - 1 or row == r1, do: d
    end
    |> List.to_tuple()
  end

  @impl true
  def handle_call({:reset, epoch, workers, server}, _from, st) do
    {:reply, :ok,
     %{
       st
       | epoch: epoch,
         workers: workers,
         server: server,
         cells: %{},
         halo: %{},
         count: 0,
         inbox: []
     }}
  end

  @impl true
  def handle_info(
        {:tick, epoch, n, simulate?, ctx, inputs, spawns, despawns, sent_at},
        %{epoch: epoch} = st
      ) do
    {:noreply, run_tick(st, n, simulate?, ctx, inputs, spawns, despawns, sent_at)}
  end

  def handle_info({:xchg, epoch, _n, _from, _halo, _migrants} = msg, %{epoch: epoch} = st) do
    {:noreply, %{st | inbox: [msg | st.inbox]}}
  end

  def handle_info({:query, epoch, ref, query}, %{epoch: epoch} = st) do
    send(st.server, {:query_reply, ref, st.index, answer(query, st)})
    {:noreply, st}
  end

  # Messages of an older epoch (before the zone server restarted) are dropped.
  def handle_info(_stale, st), do: {:noreply, st}

  defp answer(:count, st), do: st.count
  defp answer(:entities, st), do: Grid.entities(st.cells)

  defp answer({:entity, id}, st) do
    Enum.find_value(st.cells, fn {_k, l} -> Enum.find(l, &(entity(&1, :id) == id)) end)
  end

  defp answer({:radius, x, y, r}, st), do: Grid.query(st.cells, st.config.grid, x, y, r)

  ## The tick

  defp run_tick(st, n, simulate?, ctx, inputs, spawns, despawns, sent_at) do
    t0 = System.monotonic_time()
    grid = st.config.grid

    {pairs, movers, out, moves, gone, errors} =
      if simulate? do
        view_cells = :maps.fold(fn k, l, acc -> Map.put(acc, k, l) end, st.cells, st.halo)
        pass(:maps.to_list(st.cells), view_cells, st, ctx, inputs, despawns)
      else
        {:maps.to_list(st.cells), [], [], [], [], {0, nil}}
      end

    t1 = System.monotonic_time()
    cells = :maps.from_list(pairs)
    cells = Enum.reduce(movers, cells, &Grid.insert(&2, grid, &1))
    # An input sent before the avatar existed reaches it when it spawns.
    cells = Enum.reduce(spawns, cells, &Grid.insert(&2, grid, with_input(&1, inputs)))
    {cells, removed} = remove_despawned(cells, simulate?, despawns)
    {halo, migrants_in, st, waited} = exchange(st, n, cells, out)
    cells = Enum.reduce(migrants_in, cells, &Grid.insert(&2, grid, &1))

    count = st.count + length(migrants_in) - length(out) - length(gone) - removed + length(spawns)

    t2 = System.monotonic_time()
    report_errors(st, n, errors)

    send(
      st.server,
      {:done, st.epoch, n, st.index,
       %{
         count: count,
         systems: t1 - t0,
         grid: t2 - t1,
         lag: t0 - sent_at,
         waited: waited,
         errors: elem(errors, 0),
         moves: moves,
         gone: for(e <- gone, entity(e, :owner) != nil, do: entity(e, :id))
       }}
    )

    st = %{st | cells: cells, halo: halo, count: count, logged_at: log_time(st, errors)}
    collect_garbage(st)
  end

  # Garbage collection between ticks. Every tick rebuilds every entity, so nearly all of a
  # worker's data dies each tick: a generational collector running mid-tick copies the half-built
  # new state again and again. Instead the young heap is sized for a whole tick
  # (`@spawn_opt`) and the worker collects right after reporting the tick done, off the tick's
  # critical path, when only the new state is alive.
  defp collect_garbage(st) do
    :erlang.garbage_collect()
    st
  end

  # Despawns are applied during the pass (the despawned entity is simply not carried over); on
  # the load step (no pass) they are applied here.
  defp remove_despawned(cells, true, _despawns), do: {cells, 0}
  defp remove_despawned(cells, false, despawns) when map_size(despawns) == 0, do: {cells, 0}

  defp remove_despawned(cells, false, despawns) do
    Enum.reduce(cells, {%{}, 0}, fn {k, l}, {acc, removed} ->
      kept = Enum.reject(l, &Map.has_key?(despawns, entity(&1, :id)))
      acc = if kept == [], do: acc, else: Map.put(acc, k, kept)
      {acc, removed + length(l) - length(kept)}
    end)
  end

  ## Border exchange
  #
  # After its pass each worker sends every other worker one message: the entities it produced
  # that lie in the receiver's halo rows (its own cells there, plus any of its emigrants that
  # landed there) and the emigrants that landed in the receiver's stripe. Then it waits for the
  # same message from every other worker. Afterwards each worker holds exactly the zone's state
  # for its stripe, plus the state of the rows around it: the view of the next tick.

  defp exchange(%{config: %Config{workers: 1}} = st, _n, _cells, _out), do: {%{}, [], st, 0}

  defp exchange(st, n, cells, out) do
    %Config{grid: grid} = st.config
    me = st.index
    {own_extra, extra} = route_emigrants(out, grid, st.halo_for, me)

    Enum.each(st.sends, fn {d, rows} ->
      halo =
        for row <- rows,
            col <- 0..(grid.cols - 1),
            k = Grid.key_at(grid, col, row),
            l = Map.get(cells, k),
            l != nil,
            do: {k, l}

      migrants = for {^d, e} <- out, do: e
      send(elem(st.workers, d), {:xchg, st.epoch, n, me, halo ++ Map.get(extra, d, []), migrants})
    end)

    {mine, rest} = Enum.split_with(st.inbox, fn msg -> elem(msg, 2) == n end)
    w0 = System.monotonic_time()
    msgs = receive_exchange(st.epoch, n, st.config.workers - 1 - length(mine), mine)
    waited = System.monotonic_time() - w0

    {halo, migrants} =
      Enum.reduce(msgs, {%{}, []}, fn {:xchg, _, _, _, halo_cells, migrants}, {h, m} ->
        {Enum.reduce(halo_cells, h, fn {k, l}, acc -> merge_cell(acc, k, l) end), migrants ++ m}
      end)

    halo = Enum.reduce(own_extra, halo, fn {k, l}, acc -> merge_cell(acc, k, l) end)
    {halo, migrants, %{st | inbox: rest}, waited}
  end

  # Emigrants that landed in some worker's halo rows: {for me, %{worker => [{key, [e]}]}}.
  defp route_emigrants([], _grid, _halo_for, _me), do: {[], %{}}

  defp route_emigrants(out, grid, halo_for, me) do
    Enum.reduce(out, {[], %{}}, fn {_owner, e}, {own, extra} ->
      k = Grid.key(grid, entity(e, :x), entity(e, :y))

      Enum.reduce(elem(halo_for, Grid.row(grid, k)), {own, extra}, fn
        ^me, {own, extra} -> {[{k, [e]} | own], extra}
        d, {own, extra} -> {own, Map.update(extra, d, [{k, [e]}], &[{k, [e]} | &1])}
      end)
    end)
  end

  # Halo cells can come in parts from several workers: merge them, sorted by id.
  defp merge_cell(halo, k, l) do
    case halo do
      %{^k => l0} -> %{halo | k => :lists.merge(&(entity(&1, :id) <= entity(&2, :id)), l0, l)}
      _ -> Map.put(halo, k, l)
    end
  end

  defp receive_exchange(_epoch, _n, 0, acc), do: acc

  defp receive_exchange(epoch, n, missing, acc) do
    receive do
      {:xchg, ^epoch, ^n, _from, _cells, _migrants} = msg ->
        receive_exchange(epoch, n, missing - 1, [msg | acc])
    end
  end

  ## The simulation pass

  # Walks our cells; returns the new cells as {key, entities} pairs plus what moved.
  defp pass(cell_list, view_cells, st, ctx, inputs, despawns) do
    %Config{grid: grid, module: mod, owners: owners, width: w, height: h} = st.config
    env = {mod, grid, owners, st.index, w, h, ctx, inputs, despawns, view_cells}
    pass_cells(cell_list, env, [], {[], [], [], [], {0, nil}})
  end

  defp pass_cells([], _env, pairs, {movers, out, moves, gone, errors}),
    do: {pairs, movers, out, moves, gone, errors}

  defp pass_cells([{k, list} | rest], env, pairs, acc) do
    {mod, %Grid{cell: cell} = grid, _, _, w, h, ctx, inputs, despawns, view_cells} = env
    view = %View{cells: view_cells, grid: grid, block: Grid.block(view_cells, grid, k)}
    # The cell's bounds: an entity whose new position is inside stays (no division needed).
    x0 = Grid.col(grid, k) * cell
    y0 = Grid.row(grid, k) * cell

    {stays, acc} =
      if map_size(inputs) == 0 and map_size(despawns) == 0 do
        step_plain(list, x0, x0 + cell, y0, y0 + cell, view, mod, ctx, w, h, [], acc, env)
      else
        step_list(list, k, view, env, [], acc)
      end

    case stays do
      [] -> pass_cells(rest, env, pairs, acc)
      _ -> pass_cells(rest, env, [{k, :lists.reverse(stays)} | pairs], acc)
    end
  end

  # The common case (no inputs, no despawns this tick for this worker): the tightest loop.
  defp step_plain([], _x0, _x1, _y0, _y1, _view, _mod, _ctx, _w, _h, stays, acc, _env),
    do: {stays, acc}

  defp step_plain([e | rest], x0, x1, y0, y1, view, mod, ctx, w, h, stays, acc, env) do
    id = entity(e, :id)

    case call(mod, e, view, ctx) do
      {:ok, {:entity, ^id, _, x, y, _, _, _, _, _, _, _, _} = e2}
      when is_integer(x) and x >= x0 and x < x1 and is_integer(y) and y >= y0 and y < y1 and
             x <= w and y <= h ->
        step_plain(rest, x0, x1, y0, y1, view, mod, ctx, w, h, [e2 | stays], acc, env)

      result ->
        {stays, acc} = settle(result, e, id, Grid.key(elem(env, 1), x0, y0), stays, acc, env)
        step_plain(rest, x0, x1, y0, y1, view, mod, ctx, w, h, stays, acc, env)
    end
  end

  defp step_list([], _k, _view, _env, stays, acc), do: {stays, acc}

  defp step_list([e | rest], k, view, env, stays, acc) do
    {mod, _grid, _owners, _me, _w, _h, ctx, inputs, despawns, _} = env
    id = entity(e, :id)

    if map_size(despawns) > 0 and is_map_key(despawns, id) do
      step_list(rest, k, view, env, stays, gone(acc, e))
    else
      e = with_input(e, inputs)
      {stays, acc} = settle(call(mod, e, view, ctx), e, id, k, stays, acc, env)
      step_list(rest, k, view, env, stays, acc)
    end
  end

  # Where the result of handle_entity goes: back into its cell, to another cell, to another
  # worker, nowhere (despawned), or (a failure) the entity keeps its previous state.
  defp settle(result, e, id, k, stays, acc, env) do
    {_mod, grid, _owners, _me, w, h, _ctx, _inputs, _despawns, _} = env

    case result do
      {:ok, {:entity, ^id, _, x, y, _, _, _, _, _, _, _, _} = e2}
      when is_integer(x) and is_integer(y) ->
        e2 = clamp(e2, x, y, w, h)
        k2 = Grid.key(grid, entity(e2, :x), entity(e2, :y))
        if k2 == k, do: {[e2 | stays], acc}, else: {stays, moved(acc, e2, k2, env)}

      :despawn ->
        {stays, gone(acc, e)}

      other ->
        {[e | stays], failed(acc, e, other)}
    end
  end

  defp with_input(e, inputs) when map_size(inputs) == 0, do: e

  defp with_input(e, inputs) do
    if entity(e, :owner) == nil do
      e
    else
      id = entity(e, :id)

      case inputs do
        %{^id => input} -> entity(e, input: input)
        _ -> e
      end
    end
  end

  defp call(mod, e, view, ctx) do
    mod.handle_entity(e, view, ctx)
  catch
    kind, reason -> {:__failed__, kind, reason, __STACKTRACE__}
  end

  defp clamp(e, x, y, w, h) when x >= 0 and x <= w and y >= 0 and y <= h, do: e
  defp clamp(e, x, y, w, h), do: entity(e, x: x |> max(0) |> min(w), y: y |> max(0) |> min(h))

  defp moved({movers, out, moves, gone, errors}, e, k2, env) do
    {_, grid, owners, me, _, _, _, _, _, _} = env
    owner = elem(owners, Grid.row(grid, k2))

    cond do
      owner == me ->
        {[e | movers], out, moves, gone, errors}

      entity(e, :owner) == nil ->
        {movers, [{owner, e} | out], moves, gone, errors}

      true ->
        {movers, [{owner, e} | out], [{entity(e, :id), owner} | moves], gone, errors}
    end
  end

  defp gone({movers, out, moves, gone, errors}, e), do: {movers, out, moves, [e | gone], errors}

  defp failed({movers, out, moves, gone, {count, first}}, e, result) do
    first = first || {entity(e, :id), result}
    {movers, out, moves, gone, {count + 1, first}}
  end

  ## Failures in game code: counted every tick, logged at most once a second per worker.

  defp report_errors(_st, _n, {0, _}), do: :ok

  defp report_errors(st, n, {count, {id, result}}) do
    zone = st.config.id

    {kind, reason, detail} =
      case result do
        {:__failed__, kind, reason, stack} ->
          {kind, reason, Exception.format(kind, reason, stack)}

        other ->
          {:error, {:bad_return, other}, "invalid return value: #{inspect(other, limit: 10)}"}
      end

    Overworld.Telemetry.execute(
      [:overworld, :zone, :callback, :exception],
      %{count: count},
      %{zone: zone, tick: n, callback: :handle_entity, kind: kind, reason: reason}
    )

    if should_log?(st) do
      Logger.error(
        "zone #{inspect(zone)} tick #{n}: handle_entity/3 of #{inspect(st.config.module)} " <>
          "failed for entity #{id} (#{count} failures in this worker this tick; the entities " <>
          "keep their previous state): " <> detail,
        tick: n
      )
    end
  end

  defp should_log?(%{logged_at: nil}), do: true

  defp should_log?(%{logged_at: t}),
    do: System.monotonic_time(:millisecond) - t >= 1000

  defp log_time(st, {0, _}), do: st.logged_at

  defp log_time(st, _errors) do
    if should_log?(st), do: System.monotonic_time(:millisecond), else: st.logged_at
  end
end

defmodule Overworld.Zone.Bucket do
  @moduledoc false
  # One bucket worker of a zone: it owns a stripe of grid rows and every entity in them, and runs
  # the zone's `handle_entity/3` on them each tick, in parallel with the other workers. Workers
  # are spread one per scheduler (bound to it), and never copy the zone state: only border rows
  # and entities that cross a stripe border travel between them.
  #
  # A tick (message `{:tick, ...}` from the zone server):
  #
  #   0. the players' inputs: the slots of our avatars (`Overworld.Zone.Inputs`), taken once;
  #   1. the pass (`Overworld.Zone.Pass`): every entity's next state from the previous tick's
  #      view, i.e. our cells plus the halo (the rows just outside our stripe), each avatar
  #      with its newest input;
  #   2. the grid: entities that changed cell move, spawns come in;
  #   3. the border exchange: one message to every other worker (the entities it needs for its
  #      halo, and those that moved into its stripe), then the same from every other worker;
  #   4. `{:done, ...}` to the server: counts, phase times, failures, avatars gone;
  #   5. on `:idle` (the whole tick is done), the notice of the tick to our share of the zone's
  #      subscribers, then garbage collection (see `collect_garbage/1`).
  #
  # The previous tick's state is never mutated (Erlang data is immutable), so the double buffer
  # of the design costs nothing: the old cells *are* the previous tick's view.

  use GenServer
  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Protocol.Snapshot
  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.World.Place
  alias Overworld.Sidecar.Link
  alias Overworld.Zone.{Config, Inputs, Memory, Pass, Wire}

  # The smallest young heap (words, 80 KB); it grows with the zone's live state after the first
  # tick (see collect_garbage/1), so a small zone stays small.
  @min_heap 10_000
  # Binaries made in a tick (the wire's published blocks) count towards a collection too: room
  # for a few ticks' worth (words, 2 MB), so they do not force one mid-tick.
  @bin_vheap 262_144

  @spec start_link({Config.t(), non_neg_integer}) :: GenServer.on_start()
  def start_link({%Config{} = config, index}) do
    # Bucket workers are bound one per scheduler (an undocumented but long-standing spawn
    # option): the scheduler's run queue never hands them to another scheduler, so the workers
    # of a zone run in parallel instead of waiting for the load balancer.
    scheduler = rem(index, System.schedulers_online()) + 1

    GenServer.start_link(__MODULE__, {config, index},
      name: via(config.id, index),
      spawn_opt: bind_to(scheduler) ++ [min_heap_size: @min_heap, min_bin_vheap_size: @bin_vheap]
    )
  end

  @doc false
  # The spawn option, if this runtime still has it (checked once); otherwise workers are left to
  # the schedulers' load balancing.
  @spec bind_to(pos_integer) :: [{:scheduler, pos_integer}]
  def bind_to(scheduler) do
    supported? =
      case :persistent_term.get({__MODULE__, :bind}, nil) do
        nil ->
          ok =
            try do
              :erlang.spawn_opt(fn -> :ok end, [{:scheduler, 1}])
              true
            rescue
              ArgumentError -> false
            end

          :persistent_term.put({__MODULE__, :bind}, ok)
          ok

        ok ->
          ok
      end

    if supported?, do: [{:scheduler, scheduler}], else: []
  end

  @spec via(term, non_neg_integer) :: GenServer.name()
  def via(zone, index), do: Overworld.Names.via(Overworld.Names.bucket(zone, index))

  @spec child_spec({Config.t(), non_neg_integer}) :: Supervisor.child_spec()
  def child_spec({config, index}) do
    # Nothing to flush on shutdown (yet): a worker stuck in game code is not waited for long.
    %{
      id: {__MODULE__, index},
      start: {__MODULE__, :start_link, [{config, index}]},
      shutdown: 1_000
    }
  end

  ## Messages

  @impl true
  def init({config, index}) do
    Logger.metadata(zone: inspect(config.id))
    # The simulation runs ahead of ordinary work (sessions building frames, HTTP): a tick is
    # not queued behind the frames of the previous one.
    Process.flag(:priority, :high)

    {:ok,
     %{
       config: config,
       index: index,
       server: nil,
       epoch: nil,
       workers: {},
       sends: sends(config, index),
       halo_for: halo_for(config),
       bounds: bounds(config, index),
       view: [],
       own: [],
       count: 0,
       inbox: [],
       logged_at: nil,
       heap: @min_heap,
       encoder: config.wire && Snapshot.encoder(config.wire),
       wants: %{},
       collect_due: false,
       jobs: [],
       loaded: false,
       # The durable events of our last tick, for a server that restarts before it heard of
       # them (Overworld.Zone.Recovery).
       events: [],
       tick: 0,
       # The players' avatars we hold (id => true): whose input slots we take.
       avatars: %{},
       inputs: config.shared && config.shared.inputs,
       # In a world of zones (Overworld.World.Place): which neighbours need which of our cells
       # as shadows (by row), and the entities we handed to a neighbour at the end of the last
       # tick (id => true: still in our cells, not computed; the wire says they left).
       place: config.world,
       shadow_rows: config.world && Place.shadow_rows(config.world),
       departed: %{},
       # The wire rows of the avatars we handed to a neighbour at the end of the last tick
       # (their acknowledgement and position), deleted after our next publication.
       unwire: [],
       # Our last tick's shadows and handoffs, for a server that restarts before it heard of
       # them (it publishes them again).
       world: nil,
       # Our connection to the zone's sidecar (physics: :sidecar).
       link: %Link{},
       # {tick, plan}: our path requests that tick answers, planned when our bodies went to
       # the sidecar (Overworld.Zone.Paths).
       plan: nil
     }}
  end

  # Keys of our stripe: {first key past it, first key past our first row, first key of our last
  # row}. The rows in front of and behind these last two are the border rows others need.
  defp bounds(%Config{stripes: stripes, grid: grid}, me) do
    case elem(stripes, me) do
      {r0, r1} when r1 > r0 ->
        {Grid.key_at(grid, 0, r1), Grid.key_at(grid, 0, r0 + 1), Grid.key_at(grid, 0, r1 - 1)}

      _empty ->
        {0, 0, 0}
    end
  end

  # Our own cells (the view from our first cell up to the halo behind us).
  @doc false
  @spec own_pairs(map) :: Sweep.pairs()
  def own_pairs(%{own: own, bounds: {stop, _, _}}),
    do: Enum.take_while(own, fn {k, _} -> k < stop end)

  # (Entities handed to a neighbour zone at the end of a tick are still ours at that tick: we
  # computed them, and our neighbour computes them from the next. So queries and snapshots of
  # a world's zones at one tick hold every entity exactly once.)

  # The players' entities we hold, `{id, owner}` (a scan of every entity of ours).
  defp owned(st) do
    for {_k, l} <- own_pairs(st),
        e <- l,
        entity(e, :owner) != nil,
        do: {entity(e, :id), entity(e, :owner)}
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
    stripes = stripes |> Tuple.to_list() |> Enum.with_index()

    for row <- 0..(grid.rows - 1) do
      for {{r0, r1}, d} <- stripes, r1 > r0, row == r0 - 1 or row == r1, do: d
    end
    |> List.to_tuple()
  end

  # A (new) zone server takes the workers over: with `keep?` they keep their entities (the
  # server restarts from memory) and say what they hold (with `owned?`, their avatars too);
  # otherwise they start empty.
  @impl true
  def handle_call({:attach, epoch, workers, server, keep?, owned?}, _from, st) do
    st = %{st | epoch: epoch, workers: workers, server: server, inbox: []}

    st =
      if keep?,
        do: st,
        else: %{
          st
          | view: [],
            own: [],
            count: 0,
            collect_due: false,
            jobs: [],
            loaded: false,
            events: [],
            tick: 0,
            avatars: %{},
            departed: %{},
            world: nil,
            link: Link.close(st.link)
        }

    {:reply,
     %{
       tick: st.tick,
       loaded: st.loaded,
       count: st.count,
       owned: if(owned?, do: owned(st), else: []),
       events: {st.tick, st.events},
       world: st.world
     }, st}
  end

  def handle_call(:owned, _from, st), do: {:reply, owned(st), st}

  # The server sends each tick to worker 0, which hands the others their parts.
  @impl true
  def handle_info({:tick_all, others, mine}, st) do
    for {pid, msg} <- others, do: send(pid, msg)
    handle_info(mine, st)
  end

  def handle_info(
        {:tick, epoch, n, simulate?, ctx, spawns, despawns, world, sent_at, sidecar},
        %{epoch: epoch} = st
      )
      when n > st.tick or not st.loaded do
    st = if st.collect_due, do: collect_garbage(st), else: st
    # (Before a world's adoptions change our cells: the physics is the last tick's state's.)
    back = Overworld.Zone.Bucket.World.back(st, world)

    {phys, paths, t_phys, st} =
      Overworld.Zone.Bucket.Physics.physics_in(st, n, simulate?, back, sidecar)

    {st, world} = Overworld.Zone.Bucket.World.world_in(st, world, back)

    {:noreply,
     run_tick(
       st,
       n,
       simulate?,
       %{ctx | paths: paths},
       spawns,
       despawns,
       world,
       sent_at,
       {phys, t_phys, sidecar}
     )}
  end

  # Every worker of the zone is done with the tick: collect garbage (see collect_garbage/1).
  # With subscribers (`Overworld.Zone.subscribe/2`), first tell our share of them, and collect
  # a little later (an eighth of the tick period), once they have had the CPU to build their
  # frames: the collection would only delay them; or at the next tick at the latest.
  def handle_info({:idle, epoch, _notice, [], jobs}, %{epoch: epoch} = st),
    do: {:noreply, collect_garbage(%{st | jobs: jobs})}

  def handle_info({:idle, epoch, notice, subscribers, jobs}, %{epoch: epoch} = st) do
    for pid <- subscribers, do: send(pid, notice)
    Process.send_after(self(), {:collect, epoch}, max(div(1000, st.config.tick_rate * 8), 1))
    {:noreply, %{st | collect_due: true, jobs: jobs}}
  end

  def handle_info({:collect, epoch}, %{epoch: epoch, collect_due: true} = st),
    do: {:noreply, collect_garbage(st)}

  # A faster worker's exchange can arrive before our tick starts; keep it for then.
  def handle_info({:xchg, epoch, _n, _from, _halo, _migrants} = msg, %{epoch: epoch} = st) do
    {:noreply, %{st | inbox: [msg | st.inbox]}}
  end

  def handle_info({:query, epoch, ref, query}, %{epoch: epoch} = st) do
    send(st.server, {:query_reply, ref, st.index, answer(query, st)})
    {:noreply, st}
  end

  # After a load step: those of the ids loaded here are ours read-only for one more tick
  # (handed to a neighbour at the end of the loaded tick: Overworld.Zone.Recovery).
  def handle_info({:departed, epoch, ids}, %{epoch: epoch} = st) do
    wanted = Map.new(ids, &{&1, true})

    mine =
      for {_k, l} <- own_pairs(st), e <- l, is_map_key(wanted, entity(e, :id)), do: entity(e, :id)

    {:noreply, %{st | departed: Map.merge(st.departed, Map.new(mine, &{&1, true}))}}
  end

  # Jobs asked for between ticks (a snapshot of a zone being released: Overworld.Zone.Release).
  def handle_info({:jobs_now, epoch, jobs}, %{epoch: epoch} = st) do
    run_jobs(%{st | jobs: jobs})
    {:noreply, st}
  end

  # An observer wants the keyframes of cells entering its view (see publish_wire/5).
  def handle_info({:wire_want, keys}, st), do: {:noreply, %{st | wants: want(st.wants, keys)}}

  # Messages of an older epoch (before the zone server restarted) are dropped.
  def handle_info(_stale, st), do: {:noreply, st}

  defp answer(:count, st), do: st.count
  defp answer(:entities, st), do: Sweep.entities(own_pairs(st))

  defp answer({:entity, id}, st) do
    Enum.find_value(own_pairs(st), fn {_k, l} -> Enum.find(l, &(entity(&1, :id) == id)) end)
  end

  defp answer({:keyframes, _keys}, %{encoder: nil}), do: {0, []}

  defp answer({:keyframes, keys}, st),
    do:
      {st.tick,
       Wire.keyframes(Wire.funs(st.config.wire), st.encoder, own_pairs(st), keys, st.place)}

  defp answer({:radius, x, y, r}, st),
    do: Grid.query(Map.new(own_pairs(st)), st.config.grid, x, y, r)

  ## The tick

  defp run_tick(st, n, simulate?, ctx, spawns, despawns, world, sent_at, {phys, t_phys, sidecar}) do
    t_in = System.monotonic_time()
    %Config{grid: grid} = st.config
    st = arrived(st, spawns, simulate?)
    {inputs, acks} = Inputs.take(st.inputs, st.index, st.avatars)
    record_inputs(st, n, inputs)
    t0 = System.monotonic_time()

    pass =
      if simulate? do
        Pass.run(
          st.own,
          st.view,
          st.bounds,
          st.config,
          st.index,
          ctx,
          inputs,
          despawns,
          world,
          phys
        )
      else
        own = own_pairs(st)
        {_, lo, hi} = st.bounds
        border = Enum.filter(own, fn {k, _} -> k < lo or k >= hi end)

        %{
          desc: Enum.reverse(own),
          border: border,
          wire: [],
          movers: [],
          out: [],
          moves: [],
          gone: [],
          errors: {0, nil},
          events: []
        }
      end

    t1 = System.monotonic_time()
    # An input sent before the avatar existed reaches it when it spawns.
    arrivals = Enum.map(spawns, &Pass.with_input(&1, inputs)) ++ pass.movers
    {desc, border, removed} = remove_despawned(pass.desc, pass.border, simulate?, despawns)
    {halo, migrants_in, st, waited} = exchange(st, n, border, arrivals, pass.out)
    # The new cells, the halo behind our stripe appended without a copy, the halo in front of
    # it prepended (a row): the next tick's view, in one walk.
    {before, behind} =
      Enum.split_while(halo, fn {k, _} -> k < st.bounds |> elem(1) |> first_key(grid) end)

    own = Sweep.insert_desc(desc, grid, arrivals ++ migrants_in, behind)
    shadows? = st.place == nil or rem(n, st.place.every) == 0
    {out_world, departed} = Overworld.Zone.Bucket.World.world_out(st, own, simulate?, shadows?)
    {st, gone, handed} = avatars(st, pass, migrants_in, despawns, out_world)
    st = publish_wire(%{st | tick: n}, n, pass.wire, arrivals ++ migrants_in, own, acks)
    st = forget_avatars(st, gone, handed)

    count =
      st.count + length(migrants_in) - length(pass.out) - length(pass.gone) - removed +
        length(spawns) - map_size(st.departed)

    t2 = System.monotonic_time()
    report_errors(st, n, pass.errors)

    send(
      st.server,
      {:done, st.epoch, n, st.index,
       %{
         count: count,
         input: t0 - t_in,
         systems: t1 - t0 + t_phys,
         grid: t2 - t1,
         lag: t_in - sent_at,
         waited: waited,
         errors: elem(pass.errors, 0),
         events: pass.events,
         gone: for(e <- pass.gone, entity(e, :owner) != nil, do: entity(e, :id)),
         world: out_world
       }}
    )

    st = %{
      st
      | view: before ++ own,
        own: own,
        count: count,
        loaded: true,
        events: pass.events,
        logged_at: log_time(st, pass.errors),
        departed: departed,
        world: out_world
    }

    Overworld.Zone.Bucket.Physics.physics_out(st, n, sidecar)
  end

  @doc false
  # The first key of our stripe, from the first key past its first row.
  @spec first_key(integer, Grid.t()) :: integer
  def first_key(lo, %Grid{stride: stride}), do: lo - stride

  ## Avatars and their inputs (Overworld.Zone.Inputs)

  # Avatars spawning here: ours from this tick on (an input sent before the avatar existed
  # reaches it as it spawns: the zone routed it here when its player joined). A load step (a
  # recovery from the store, a rewind) loads avatars without a join: they are routed here.
  defp arrived(st, spawns, simulate?) do
    case for e <- spawns, entity(e, :owner) != nil, do: entity(e, :id) do
      [] ->
        st

      ids ->
        if not simulate?, do: Inputs.routes(st.inputs, for(id <- ids, do: {id, st.index}))
        %{st | avatars: Enum.reduce(ids, st.avatars, &Map.put(&2, &1, true))}
    end
  end

  # After the pass and the exchange: avatars that left for another stripe (routed there, if
  # their player is still in the zone), came from one, or are gone (answered: their route,
  # input slot, position and acknowledgement are then forgotten, rows that may have been
  # written while their despawn was on its way).
  # Answers the avatars gone from this worker, to forget once the tick's blocks are published:
  # those despawned, and those handed to a neighbour zone (their inputs go there now, their
  # player's session follows, see Overworld.Zone.Neighbours).
  defp avatars(st, pass, migrants_in, despawns, world) do
    handed =
      case world do
        {_shadows, [_ | _] = handoffs} ->
          for {_n, e} <- handoffs, entity(e, :owner) != nil, do: entity(e, :id)

        _ ->
          []
      end

    case {pass.moves, pass.gone, migrants_in, map_size(despawns), handed} do
      {[], [], [], 0, []} ->
        {st, [], []}

      _ ->
        if pass.moves != [], do: Inputs.reroute(st.inputs, pass.moves)
        gone = for e <- pass.gone, entity(e, :owner) != nil, do: entity(e, :id)
        despawned = for {id, _} <- despawns, is_map_key(st.avatars, id), do: id
        gone = Enum.uniq(gone ++ despawned)
        left = Enum.map(pass.moves, &elem(&1, 0)) ++ gone ++ handed
        came = for e <- migrants_in, entity(e, :owner) != nil, do: {entity(e, :id), true}
        avatars = st.avatars |> Map.drop(left) |> Map.merge(Map.new(came))
        {%{st | avatars: avatars}, gone, handed -- gone}
    end
  end

  # Avatars gone forget their input route and slot at once, and their wire rows (the
  # acknowledgement of their player's last input, their position): at once for those
  # despawned; for those handed to a neighbour zone after our next publication (rows written
  # since, by an avatar that came back, stay), so that the frame of this tick still
  # acknowledges the input it applied (their sessions follow them only once adopted).
  # (Without a wire, `unwire` stays empty.)
  defp forget_avatars(%{unwire: []} = st, [], []), do: st

  defp forget_avatars(st, gone, handed) do
    for id <- gone ++ handed, do: Inputs.forget(st.inputs, id)

    case st.encoder do
      nil ->
        st

      _ ->
        table = st.config.shared.wire
        Wire.forget_rows(table, st.unwire)
        for id <- gone, do: Wire.forget_player(table, id)
        %{st | unwire: Wire.player_rows(table, handed)}
    end
  end

  # The inputs a tick applied, for the zone's time-travel history (Overworld.Zone.History).
  defp record_inputs(_st, _n, inputs) when map_size(inputs) == 0, do: :ok
  defp record_inputs(%{config: %Config{history: 0}}, _n, _inputs), do: :ok

  defp record_inputs(st, n, inputs),
    do: Memory.put_inputs(st.config.shared.memory, st.config.history, st.index, n, inputs)

  ## Wire (see Overworld.Zone.Wire and Overworld.Interest): the delta blocks of tick n, and
  ## the keyframe blocks observers asked for, into the zone's wire table.

  defp publish_wire(%{encoder: nil} = st, _n, _cells, _arrivals, _own, _acks), do: st

  defp publish_wire(st, n, cells, arrivals, own, acks) do
    %Config{wire: mod, grid: grid, shared: %{wire: table}} = st.config
    {stop, _, _} = st.bounds
    first = first_key(elem(st.bounds, 1), grid)
    funs = Wire.funs(mod)

    {data, index} =
      Wire.publish(funs, st.encoder, cells || [], arrivals, grid, first, stop, st.place)

    Wire.put_tick(table, st.index, n, data, index, first)
    positions = Wire.put_positions(table, own, stop, n)
    if acks != [], do: Wire.put_acks(table, acks)

    {st, kfs} =
      case drain_wants(st.wants) do
        wants when map_size(wants) == 0 ->
          {st, []}

        wants ->
          keys = for {k, _} <- wants, k >= first and k < stop, do: k
          own = Enum.take_while(own, fn {k, _} -> k < stop end)
          blocks = Map.new(Wire.keyframes(funs, st.encoder, own, keys, st.place))
          kfs = for k <- keys, do: {k, Map.get(blocks, k)}
          Wire.put_keyframes(table, n, kfs)
          {%{st | wants: %{}}, kfs}
      end

    # The zone's mirrors on other nodes get what we wrote (Overworld.Zone.Mirror). A
    # congested link never suspends the worker: the part is dropped (the mirror's observers
    # skip that tick, and catch up from the next).
    case Wire.mirrors(table) do
      [] ->
        :ok

      mirrors ->
        part =
          {:overworld_wire, st.config.id, st.index, n, data, index, first, positions, acks, kfs}

        for pid <- mirrors, do: :erlang.send(pid, part, [:nosuspend])
    end

    st
  end

  # Keyframe requests that came during the tick are served with it.
  defp drain_wants(wants) do
    receive do
      {:wire_want, keys} -> drain_wants(want(wants, keys))
    after
      0 -> wants
    end
  end

  # At most one entry per cell, whatever observers send.
  defp want(wants, keys) when is_list(keys),
    do:
      Enum.reduce(keys, wants, fn k, w -> if is_integer(k), do: Map.put(w, k, true), else: w end)

  defp want(wants, _bad), do: wants

  # Garbage collection between ticks. Every tick rebuilds every entity, so nearly all of a
  # worker's data dies each tick, and a collection in the middle of a tick copies the half-built
  # new state, maybe several times. Instead the young heap is kept large enough for a whole
  # tick, and the worker collects when the server reports the whole tick done (`:idle`), off
  # the critical path, when only the new state is alive: one copy of the live state per tick.
  # Not right after our own part: a collection of a large heap runs on a dirty scheduler, which
  # would take CPU from a worker still finishing the tick. The heap size follows the live
  # state, so a zone of any size never collects mid-tick.
  defp collect_garbage(st) do
    run_jobs(st)
    st = %{st | collect_due: false, jobs: []}
    # What the tick allocated: the young heap in use since the last collection.
    {:garbage_collection_info, before} = Process.info(self(), :garbage_collection_info)
    :erlang.garbage_collect()
    {:garbage_collection_info, info} = Process.info(self(), :garbage_collection_info)
    recent = info[:recent_size]
    # What survived is the new state; the heap must hold it and a whole tick's allocations
    # (about one and a half times the state for the simulation alone, more with a wire). (A
    # larger heap collected every other tick measured slower: the live state stays compact
    # and the allocation area small when the copy happens every tick.)
    used = before[:heap_size] + before[:mbuf_size]
    target = Enum.max([@min_heap, recent * 4, min(recent + div(used * 5, 4), recent * 10)])

    if target > st.heap + div(st.heap, 10) or target < div(st.heap, 3) do
      Process.flag(:min_heap_size, target)
      %{st | heap: target}
    else
      st
    end
  end

  # After a tick, before the collection: our cells for a snapshot (to the zone's store), for a
  # history keyframe, our state hash (debug zones). Each is one copy of our cells, off the
  # tick's critical path.
  defp run_jobs(%{jobs: []}), do: :ok

  defp run_jobs(st) do
    memory = st.config.shared.memory

    Enum.each(st.jobs, fn
      {:snapshot, store, n} ->
        send(store, {:snapshot_part, n, st.index, own_pairs(st)})

      {:keyframe, slot} ->
        Memory.put_keyframe(memory, st.index, slot, st.tick, own_pairs(st))

      {:hash, slots} ->
        Memory.put_hash(memory, st.index, slots, st.tick, Memory.cells_hash(own_pairs(st)))
    end)
  end

  # Despawns are applied during the pass (the entity is simply not carried over); on the load
  # step (no pass) they are applied here.
  defp remove_despawned(desc, border, true, _despawns), do: {desc, border, 0}

  defp remove_despawned(desc, border, false, despawns) when map_size(despawns) == 0,
    do: {desc, border, 0}

  defp remove_despawned(desc, border, false, despawns) do
    keep = fn pairs ->
      Enum.flat_map(pairs, fn {k, l} ->
        case Enum.reject(l, &is_map_key(despawns, entity(&1, :id))) do
          [] -> []
          kept -> [{k, kept}]
        end
      end)
    end

    kept = keep.(desc)
    removed = length(Sweep.entities(desc)) - length(Sweep.entities(kept))
    {kept, keep.(border), removed}
  end

  ## Border exchange
  #
  # After its pass each worker sends every other worker one message: the entities it produced
  # that lie in the receiver's halo rows (its own cells there, plus any of its emigrants that
  # landed there) and the emigrants that landed in the receiver's stripe. Then it waits for the
  # same message from every other worker. Afterwards each worker holds exactly the zone's state
  # for its stripe, plus the state of the rows around it: the view of the next tick.

  defp exchange(%{config: %Config{workers: 1}} = st, _n, _border, _arrivals, _out),
    do: {[], [], st, 0}

  defp exchange(st, n, border, arrivals, out) do
    %Config{grid: grid} = st.config
    me = st.index
    {own_extra, extra} = route_emigrants(out, grid, st.halo_for, me)
    {_, lo, hi} = st.bounds
    # Our border rows as they end the tick: what stayed, plus what moved or spawned into them.
    border =
      Sweep.insert(
        border,
        grid,
        for(
          e <- arrivals,
          k = Grid.key(grid, entity(e, :x), entity(e, :y)),
          k < lo or k >= hi,
          do: e
        )
      )

    Enum.each(st.sends, fn {d, rows} ->
      halo = Enum.filter(border, fn {k, _} -> Grid.row(grid, k) in rows end)
      migrants = for {^d, e} <- out, do: e

      send(
        elem(st.workers, d),
        {:xchg, st.epoch, n, me, [halo | Map.get(extra, d, [])], migrants}
      )
    end)

    {mine, rest} = Enum.split_with(st.inbox, fn msg -> elem(msg, 2) == n end)
    w0 = System.monotonic_time()
    msgs = receive_exchange(st.epoch, n, st.config.workers - 1 - length(mine), mine)
    waited = System.monotonic_time() - w0
    parts = Enum.flat_map(msgs, fn {:xchg, _, _, _, parts, _} -> parts end)
    halo = Sweep.union(own_extra ++ parts)
    migrants = Enum.flat_map(msgs, fn {:xchg, _, _, _, _, migrants} -> migrants end)
    {halo, migrants, %{st | inbox: rest}, waited}
  end

  # Emigrants that landed in some worker's halo rows, as one-entity cells:
  # {those for our own halo, %{worker => [[{key, [e]}]]}}.
  defp route_emigrants([], _grid, _halo_for, _me), do: {[], %{}}

  defp route_emigrants(out, grid, halo_for, me) do
    Enum.reduce(out, {[], %{}}, fn {_owner, e}, {own, extra} ->
      k = Grid.key(grid, entity(e, :x), entity(e, :y))

      Enum.reduce(elem(halo_for, Grid.row(grid, k)), {own, extra}, fn
        ^me, {own, extra} -> {[[{k, [e]}] | own], extra}
        d, {own, extra} -> {own, Map.update(extra, d, [[{k, [e]}]], &[[{k, [e]}] | &1])}
      end)
    end)
  end

  defp receive_exchange(_epoch, _n, 0, acc), do: acc

  defp receive_exchange(epoch, n, missing, acc) do
    receive do
      {:xchg, ^epoch, ^n, _from, _parts, _migrants} = msg ->
        receive_exchange(epoch, n, missing - 1, [msg | acc])
    end
  end

  ## Failures in game code: counted every tick, logged at most once a second per worker.

  defp report_errors(_st, _n, {0, _}), do: :ok

  defp report_errors(st, n, {count, {id, result}}) do
    zone = st.config.id

    {kind, reason, detail} =
      case result do
        {:__failed__, kind, reason, stack} ->
          {kind, reason, Exception.format(kind, reason, stack)}

        # The entity returned has a value its wire template cannot quantize (the error names
        # template and field; where in the encoder does not matter), or a `{module, function}`
        # source of the template failed.
        {:__unencodable__, kind, reason, stack} ->
          detail =
            if is_exception(reason, Overworld.Template.Error),
              do: Exception.message(reason),
              else: Exception.format(kind, reason, stack)

          {kind, reason, "the wire cannot encode the entity returned: " <> detail}

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
  defp should_log?(%{logged_at: t}), do: System.monotonic_time(:millisecond) - t >= 1000

  defp log_time(st, {0, _}), do: st.logged_at

  defp log_time(st, _errors) do
    if should_log?(st), do: System.monotonic_time(:millisecond), else: st.logged_at
  end
end

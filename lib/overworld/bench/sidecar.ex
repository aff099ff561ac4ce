defmodule Overworld.Bench.Sidecar do
  @moduledoc false
  # `mix overworld.bench.sidecar`: what the zone's physics costs per tick, computed by the
  # Elixir fallback and by the sidecar, and a zone that keeps its ticks while its sidecar is
  # killed again and again.
  #
  # 1. The crossover (`crossover/2`): for each number of bodies, a scene of wandering bodies
  #    among walls, split in two stripes as a zone of two workers splits it, stepped `ticks`
  #    times by two worker processes in parallel:
  #    * Elixir: each worker's `Overworld.Zone.Physics.step/3` of its stripe and its halo;
  #    * sidecar over sockets: each worker turns its entities into body records and sends
  #      them (`in`), waits for the answer (`wait`: the sidecar's compute and the transfer),
  #      decodes and checks it and moves its entities (`out`), as the bucket workers do.
  #    Per tick: the slower worker's time (they run in parallel), and the CPU both processes
  #    used (the node's and the sidecar's, from /proc).
  # 2. Kills (`kills/1`): a zone of `bodies` bodies with `physics: :sidecar` at 30 Hz while
  #    its sidecar gets SIGKILL `kills` times at random moments; its tick durations, entities
  #    before and after, the fallback's ticks, and the detection time of each kill (from the
  #    kill, or from when a worker started waiting if later, to the worker's failure or the
  #    sidecar's owner seeing the process exit, whichever came first).

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.Bench.{Stats, Ticks}
  alias Overworld.Metrics.CPU
  alias Overworld.Sidecar.Link
  alias Overworld.Zone.Physics

  # Bodies wander among the walls of a grid of rooms: they pick a new velocity every 20 ticks.
  defmodule Zone do
    @moduledoc false
    use Overworld.Zone

    @impl true
    def init(bodies), do: {:ok, %{}, [{:spawn, bodies}]}

    @impl true
    def handle_entity(entity(rng: rng) = e, _view, ctx) do
      if rem(ctx.tick + entity(e, :id), 20) == 0 do
        {a, rng} = Overworld.Random.uniform(rng, 4_096)
        {b, rng} = Overworld.Random.uniform(rng, 4_096)
        {:ok, entity(e, vx: a - 2_048, vy: b - 2_048, rng: rng)}
      else
        {:ok, e}
      end
    end
  end

  # A zone module that asks for paths (the requests are made by the bench: `paths/1`).
  defmodule Walkers do
    @moduledoc false
    def path_to(_entity), do: nil
  end

  @doc false
  # The world of `n` bodies: a side giving each about 16 m² (metres), rooms of 40 m with walls
  # and pillars, the bodies (entity specs) spread at random.
  @spec scene(pos_integer, integer) :: {pos_integer, keyword, [keyword]}
  def scene(n, seed) do
    side = max(80, 40 * ceil(:math.sqrt(n * 16) / 40))
    rooms = div(side, 40)

    walls =
      for i <- 1..(rooms - 1)//1, j <- 0..(rooms - 1) do
        # A wall between rooms with a 6 m door in its middle, both ways.
        [
          {i * 40, j * 40, i * 40 + 1, j * 40 + 17},
          {i * 40, j * 40 + 23, i * 40 + 1, j * 40 + 40},
          {j * 40, i * 40, j * 40 + 17, i * 40 + 1},
          {j * 40 + 23, i * 40, j * 40 + 40, i * 40 + 1}
        ]
      end
      |> List.flatten()

    pillars = for i <- 0..(rooms - 1), j <- 0..(rooms - 1), do: {i * 40 + 20, j * 40 + 20, 2}
    :rand.seed(:exsss, seed)
    unit = Overworld.Entity.unit()

    bodies =
      for _ <- 1..n do
        [
          kind: :body,
          x: :rand.uniform(side * unit - 2 * unit) + unit,
          y: :rand.uniform(side * unit - 2 * unit) + unit,
          vx: :rand.uniform(4_096) - 2_048,
          vy: :rand.uniform(4_096) - 2_048
        ]
      end

    {side, [boxes: walls, circles: pillars], bodies}
  end

  ## 1. The crossover

  @doc false
  @spec crossover([pos_integer], keyword) :: [map]
  def crossover(sizes, opts) do
    ticks = Keyword.fetch!(opts, :ticks)
    print = Keyword.get(opts, :print, fn _ -> :ok end)

    for n <- sizes do
      {p, stripes} = setup(n)
      elixir = elixir_ticks(p, stripes, ticks)

      print.(
        "#{n} bodies: Elixir #{ms(elixir.tick_ms.p50)} ms/tick (p99 " <>
          "#{ms(elixir.tick_ms.p99)}, CPU #{ms(elixir.cpu_ms)} ms; p50s of #{ticks} ticks)"
      )

      socket = sidecar_ticks(p, stripes, ticks, :socket, opts)
      print.(line("sockets", elixir, socket))
      shm = sidecar_ticks(p, stripes, ticks, :shm, opts)
      print.(line("shared memory", elixir, shm))
      %{bodies: n, ticks: ticks, elixir: elixir, socket: socket, shm: shm}
    end
  end

  @doc """
  For each number of bodies the crossover measured more than once (`--bodies 10000,10000,…`:
  one machine's speed swings from one minute to the next), its runs' shared-memory marshalling
  (each run's p50, in the order run), their median, how many were above the 0.5 ms bar, and
  each run's marshalling as a fraction of the sockets' marshalling and of the Elixir step's
  tick in the same run.

      iex> run = fn n, shm, socket, elixir ->
      ...>   %{bodies: n, shm: %{marshal_ms: %{p50: shm}},
      ...>     socket: %{marshal_ms: %{p50: socket}}, elixir: %{tick_ms: %{p50: elixir}}}
      ...> end
      iex> runs = [run.(10, 0.4, 1.0, 8.0), run.(20, 0.9, 1.0, 9.0),
      ...>         run.(10, 0.6, 1.2, 10.0), run.(10, 0.1 + 0.2, 1.0, 6.0)]
      iex> [r] = Overworld.Bench.Sidecar.repeated(runs)
      iex> {r.bodies, r.runs, r.marshal_p50s_ms, r.median_ms, r.above_bar}
      {10, 3, [0.4, 0.6, 0.3], 0.4, 1}
      iex> {r.of_sockets, r.of_elixir}
      {[0.4, 0.5, 0.3], [0.05, 0.06, 0.05]}
  """
  @spec repeated([map]) :: [map]
  def repeated(crossover) do
    crossover
    |> Enum.group_by(& &1.bodies)
    |> Enum.filter(fn {_n, runs} -> length(runs) > 1 end)
    |> Enum.sort()
    |> Enum.map(fn {n, runs} ->
      p50s = Enum.map(runs, &Float.round(&1.shm.marshal_ms.p50 / 1, 3))

      %{
        bodies: n,
        runs: length(runs),
        marshal_p50s_ms: p50s,
        median_ms: Float.round(Stats.median(p50s) / 1, 3),
        above_bar: Enum.count(p50s, &(&1 > 0.5)),
        of_sockets:
          Enum.map(runs, &Float.round(&1.shm.marshal_ms.p50 / &1.socket.marshal_ms.p50, 2)),
        of_elixir: Enum.map(runs, &Float.round(&1.shm.marshal_ms.p50 / &1.elixir.tick_ms.p50, 3))
      }
    end)
  end

  defp line(how, e, s) do
    ratio = if s.tick_ms.p50 > 0, do: Float.round(e.tick_ms.p50 / s.tick_ms.p50, 2)

    "  sidecar over #{how} #{ms(s.tick_ms.p50)} ms/tick (p99 #{ms(s.tick_ms.p99)}): " <>
      "marshalling #{ms(s.marshal_ms.p50)} ms (in #{ms(s.in_ms.p50)} + out " <>
      "#{ms(s.out_ms.p50)}), waiting " <>
      "#{ms(s.wait_ms.p50)} ms; CPU node #{ms(s.cpu_node_ms)} + sidecar " <>
      "#{ms(s.cpu_sidecar_ms)} ms; Elixir/sidecar #{ratio}×"
  end

  defp ms(nil), do: "-"
  defp ms(v), do: :erlang.float_to_binary(v / 1, decimals: 2)

  # A zone's physics for the scene, and its two stripes: each a worker's cells (entities by
  # grid cell, in key order) and the halo of its stripe (the row beyond its border).
  defp setup(n) do
    {side, walls, specs} = scene(n, n)

    config =
      Overworld.Zone.Config.new!(Zone,
        id: {:bench_sidecar, n},
        size: {side, side},
        workers: 2,
        physics: :elixir,
        map: walls
      )

    grid = config.grid

    entities =
      specs
      |> Enum.with_index(1)
      |> Enum.map(fn {spec, id} ->
        entity(id: id, kind: :body, x: spec[:x], y: spec[:y], vx: spec[:vx], vy: spec[:vy])
      end)

    pairs = Overworld.Spatial.Sweep.from_entities(grid, entities)

    stripes =
      for {r0, r1} <- Tuple.to_list(config.stripes) do
        own = Enum.filter(pairs, fn {k, _} -> (div(k, grid.stride) - 1) in r0..(r1 - 1)//1 end)

        halo = Enum.filter(pairs, fn {k, _} -> (div(k, grid.stride) - 1) in [r0 - 1, r1] end)

        {own, halo}
      end

    {%{config.physics | stripes: 2}, stripes}
  end

  defp elixir_ticks(p, stripes, ticks) do
    cpu0 = CPU.os_seconds()

    samples =
      stripes
      |> workers(ticks, fn {own, halo} = stripe, _t ->
        {t, _} =
          :timer.tc(fn -> Physics.step(Physics.bodies(own, p), Physics.bodies(halo, p), p) end)

        {t / 1000, stripe}
      end)
      |> Enum.map(&Enum.max/1)

    cpu = (CPU.os_seconds() - cpu0) * 1000 / ticks
    %{tick_ms: summary(samples), cpu_ms: cpu}
  end

  defp sidecar_ticks(p, stripes, ticks, transport, opts) do
    # The sidecar as a zone runs it (Overworld.Sidecar), its workers' links made here.
    zone = {:bench_sidecar, System.unique_integer([:positive])}
    {p, sidecar} = start_sidecar(p, zone, transport, opts)
    os_pid = sidecar_os_pid(zone)

    try do
      links =
        for {_, s} <- Enum.with_index(stripes) do
          {:ok, link} = Link.connect(%Link{}, p, s, 1)
          link
        end

      cpu0 = {CPU.os_seconds(), CPU.os_seconds(os_pid)}

      samples =
        stripes
        |> Enum.zip(links)
        |> Enum.with_index(fn {{own, _halo}, link}, s -> {own, link, s} end)
        |> workers(ticks, fn {own, link, s}, t ->
          {sample, link} = round_trip(p, own, link, s, t)
          {sample, {own, link, s}}
        end)

      {n1, s1} = {CPU.os_seconds(), CPU.os_seconds(os_pid)}
      {n0, s0} = cpu0

      %{
        ticks: ticks,
        tick_ms: summary(for(ws <- samples, do: ws |> Enum.map(&total/1) |> Enum.max())),
        in_ms: summary(for(ws <- samples, do: ws |> Enum.map(&elem(&1, 0)) |> Enum.max())),
        wait_ms: summary(for(ws <- samples, do: ws |> Enum.map(&elem(&1, 1)) |> Enum.max())),
        out_ms: summary(for(ws <- samples, do: ws |> Enum.map(&elem(&1, 2)) |> Enum.max())),
        # Per tick, what marshalling adds to it: the slower worker's `in` and the slower
        # worker's `out` (each delays the tick's end or start for every worker).
        marshal_ms:
          summary(
            for ws <- samples do
              Enum.max(Enum.map(ws, &elem(&1, 0))) + Enum.max(Enum.map(ws, &elem(&1, 2)))
            end
          ),
        marshal_cpu_ms:
          summary(
            for(ws <- samples, do: ws |> Enum.map(&(elem(&1, 0) + elem(&1, 2))) |> Enum.sum())
          ),
        cpu_node_ms: (n1 - n0) * 1000 / ticks,
        cpu_sidecar_ms: (s1 - s0) * 1000 / ticks
      }
    after
      GenServer.stop(sidecar)
    end
  end

  # The sidecar of zone `zone` over `transport`, started as a zone runs it
  # (Overworld.Sidecar) and answering: the zone's physics `p` with it, and its process.
  defp start_sidecar(p, zone, transport, opts) do
    p = as_sidecar(p, zone, transport, opts)
    if transport == :shm, do: :ok = Overworld.Sidecar.Shm.load()
    {:ok, sidecar} = Overworld.Sidecar.start_link(p)
    Overworld.Sidecar.await(p, 10_000) || raise "the sidecar did not start"
    {p, sidecar}
  end

  # The zone's physics `p` with the sidecar of zone `zone` over `transport`.
  defp as_sidecar(p, zone, transport, opts) do
    name = "ow-bench-#{System.unique_integer([:positive])}.sock"

    %{
      p
      | mode: :sidecar,
        zone: zone,
        ref: Overworld.Sidecar.new_ref(),
        socket: Path.join(System.tmp_dir!(), name),
        transport: transport,
        sidecar: Map.merge(p.sidecar, Map.new(Keyword.take(opts, [:executable, :threads])))
    }
  end

  defp total({a, b, c}), do: a + b + c

  # `ticks` ticks of one long-lived process per stripe, as a zone's bucket workers (each holds
  # its own state, so no copy of it is timed; its garbage collected between ticks, in a heap
  # that holds a tick's allocations: Overworld.Zone.Bucket does the same): `fun.(state, t)`
  # answers `{sample, state}`; the samples, per tick, in the stripes' order.
  defp workers(states, ticks, fun) do
    me = self()

    # Bound one per scheduler, as the zone binds its workers.
    pids =
      for {state, i} <- Enum.with_index(states) do
        bind = Overworld.Zone.Bucket.bind_to(rem(i, System.schedulers_online()) + 1)
        :erlang.spawn_opt(fn -> worker_loop(me, state, fun) end, [:link | bind])
      end

    samples =
      for t <- 1..ticks do
        Enum.each(pids, &send(&1, {:tick, t}))
        for pid <- pids, do: receive(do: ({^pid, sample} -> sample))
      end

    Enum.each(pids, &send(&1, :stop))
    samples
  end

  defp worker_loop(parent, state, fun) do
    receive do
      {:tick, t} ->
        {sample, state} = fun.(state, t)
        send(parent, {self(), sample})
        :erlang.garbage_collect()
        {:garbage_collection_info, info} = Process.info(self(), :garbage_collection_info)
        # What survived (the state) four times: room for the tick's allocations.
        Process.flag(:min_heap_size, max(10_000, info[:recent_size] * 4))
        worker_loop(parent, state, fun)

      :stop ->
        :ok
    end
  end

  # One worker's tick through its link, as a bucket worker does it: in (bodies and records,
  # written and announced), wait (for the answer's frame), out (the results read, checked
  # and merged into the entities); milliseconds.
  defp round_trip(p, own, link, stripe, tick) do
    t0 = System.monotonic_time(:microsecond)
    %Link{pending: {^tick, _, _, []}} = link = Link.request(link, p, stripe, 1, tick, own)
    t1 = System.monotonic_time(:microsecond)
    {:ok, frame} = Link.receive_frame(link, System.monotonic_time(:millisecond) + 60_000)
    t2 = System.monotonic_time(:microsecond)
    {:ok, results, %{}} = Link.decode(link, frame, fn -> own end)
    _ = merge(own, results, [])
    t3 = System.monotonic_time(:microsecond)
    {{(t1 - t0) / 1000, (t2 - t1) / 1000, (t3 - t2) / 1000}, %{link | pending: nil}}
  end

  # The entities moved to their results, as the pass takes them (Overworld.Zone.Pass's
  # `stepped/2`: entity by entity in order, a result `{id, x, y}` copied into its entity, an
  # entity already moved by the link as it read the shared segment taken as it is), into one
  # list. (The pass rebuilds its cells whether or not the zone has physics: not counted.)
  defp merge([], [], acc), do: acc
  defp merge([{_k, list} | rest], results, acc), do: merge_cell(list, rest, results, acc)

  defp merge_cell([], cells, results, acc), do: merge(cells, results, acc)

  defp merge_cell([e | rest], cells, [{id, x, y} | results], acc) when elem(e, 1) == id,
    do: merge_cell(rest, cells, results, [entity(e, x: x, y: y) | acc])

  defp merge_cell([e | rest], cells, [moved | results], acc) when elem(moved, 1) == elem(e, 1),
    do: merge_cell(rest, cells, results, [moved | acc])

  defp summary(samples) do
    s = Stats.summary(samples)
    %{p50: s.p50, p99: s.p99, max: s.max, samples: s.count}
  end

  ## 3. Paths

  @doc false
  # `q` path requests per worker and tick (`ticks` ticks, two workers in parallel, bound one
  # per scheduler) on the navigation grid of the scene of `bodies` bodies, each from a random
  # point of a room to a random point of a neighbouring one (through a door, around the
  # pillars): computed in Elixir (`Overworld.Zone.Paths.answers/2`, the fallback's code) and
  # by the sidecar over its sockets (the requests in the link's request frame with no bodies,
  # as a tick with paths sends them). Per tick, the slower worker's time; the sidecar's answers
  # are checked to equal Elixir's.
  @spec paths(keyword) :: map
  def paths(opts) do
    n = Keyword.get(opts, :bodies, 10_000)
    q = Keyword.fetch!(opts, :q)
    ticks = Keyword.fetch!(opts, :ticks)
    {p, _stripes} = setup(n)
    side = div(p.world.width, Overworld.Entity.unit())
    # The zone's paths as a zone with `nav: [per_tick: q]` makes them (the default grid).
    # (Loaded first: Paths.new/4 looks for an exported path_to/1.)
    Code.ensure_loaded!(Walkers)
    paths = Overworld.Zone.Paths.new([per_tick: q, queue: 0], Walkers, p.world, [])
    p = %{p | paths: paths}
    :rand.seed(:exsss, q)
    # Each worker's requests, per tick.
    requests = for _ <- 1..2, do: for(t <- 1..ticks, do: room_requests(side, q, t))

    elixir =
      requests
      |> workers(ticks, fn [reqs | rest], _t ->
        {us, answers} = :timer.tc(fn -> Overworld.Zone.Paths.answers({reqs, %{}}, paths) end)
        {{us / 1000, answers}, rest}
      end)

    sidecar = paths_sidecar(p, requests, ticks, :socket, opts)
    shm = paths_sidecar(p, requests, ticks, :shm, opts)
    answers = fn samples -> for ws <- samples, {_, a} <- ws, do: a end

    slower = fn samples ->
      summary(for ws <- samples, do: ws |> Enum.map(&elem(&1, 0)) |> Enum.max())
    end

    statuses =
      elixir |> answers.() |> Enum.flat_map(&Map.values/1) |> Enum.frequencies_by(&status/1)

    %{
      bodies: n,
      per_worker: q,
      ticks: ticks,
      elixir_ms: slower.(elixir),
      sidecar_ms: slower.(sidecar),
      shm_ms: slower.(shm),
      same: answers.(elixir) == answers.(sidecar) and answers.(elixir) == answers.(shm),
      answers: statuses
    }
  end

  defp status({:ok, _}), do: :ok
  defp status({:error, reason}), do: reason
  defp status(other), do: other

  # `q` requests between neighbouring rooms of the scene (side `side` metres, rooms of 40 m).
  defp room_requests(side, q, t) do
    rooms = div(side, 40)

    for i <- 1..q do
      {ri, rj} = {:rand.uniform(rooms) - 1, :rand.uniform(rooms) - 1}

      {ti, tj} =
        Enum.random(
          [{ri + 1, rj}, {ri - 1, rj}, {ri, rj + 1}, {ri, rj - 1}]
          |> Enum.filter(fn {a, b} -> a in 0..(rooms - 1) and b in 0..(rooms - 1) end)
        )

      {t * 1_000_000 + i, room_point(ri, rj), room_point(ti, tj)}
    end
  end

  # A random point of room (i, j): clear of its walls and of its pillar (at its centre).
  defp room_point(i, j) do
    unit = Overworld.Entity.unit()

    {dx, dy} =
      Stream.repeatedly(fn -> {3 + :rand.uniform(34), 3 + :rand.uniform(34)} end)
      |> Enum.find(fn {dx, dy} -> abs(dx - 20) > 4 or abs(dy - 20) > 4 end)

    {(i * 40 + dx) * unit, (j * 40 + dy) * unit}
  end

  # The requests through a sidecar over `transport` (over the shared segment, the queries
  # and their answers in the worker's regions, with no bodies).
  defp paths_sidecar(p, requests, ticks, transport, opts) do
    zone = {:bench_sidecar_paths, System.unique_integer([:positive])}
    {p, sidecar} = start_sidecar(p, zone, transport, opts)

    try do
      requests
      |> Enum.with_index(fn reqs, s ->
        {:ok, link} = Link.connect(%Link{}, p, s, 1)
        {reqs, link, s}
      end)
      |> workers(ticks, fn {[reqs | rest], link, s}, t ->
        t0 = System.monotonic_time(:microsecond)
        link = Link.request(link, p, s, 1, t, [], reqs)
        {:ok, frame} = Link.receive_frame(link, System.monotonic_time(:millisecond) + 60_000)
        {:ok, [], answers} = Link.decode(link, frame, fn -> [] end)
        t1 = System.monotonic_time(:microsecond)
        {{(t1 - t0) / 1000, answers}, {rest, %{link | pending: nil}, s}}
      end)
    after
      GenServer.stop(sidecar)
    end
  end

  ## 2. Kills

  @doc false
  @spec kills(keyword) :: map
  def kills(opts) do
    n = Keyword.fetch!(opts, :bodies)
    kills = Keyword.fetch!(opts, :kills)
    print = Keyword.get(opts, :print, fn _ -> :ok end)
    {side, walls, specs} = scene(n, 7)
    id = {:bench_sidecar_kills, System.unique_integer([:positive])}

    {:ok, _} =
      Overworld.start_zone(Zone,
        id: id,
        args: specs,
        size: {side, side},
        physics: :sidecar,
        transport: Keyword.get(opts, :transport, :socket),
        map: walls,
        history: 0,
        sidecar: Keyword.take(opts, [:executable, :threads])
      )

    p = Overworld.Zone.config(id).physics

    try do
      Overworld.Sidecar.await(p, 10_000)
      Process.sleep(Keyword.get(opts, :warmup, 2) * 1000)
      before = Overworld.Zone.count(id)
      c0 = Overworld.Sidecar.counters(p)

      {detections, ticks} =
        Ticks.during([id], fn ->
          for k <- 1..kills do
            # A random moment of the tick cycle (kills 0.3 to 0.9 s apart: each sidecar
            # answers a few ticks before the next kill).
            Process.sleep(300 + :rand.uniform(600))
            Overworld.Sidecar.await(p, 5_000)
            os_pid = sidecar_os_pid(id)
            seen = {:atomics.get(p.ref, 4), :atomics.get(p.ref, 3)}
            t_kill = System.monotonic_time(:microsecond)
            System.cmd("kill", ["-KILL", Integer.to_string(os_pid)])
            t_killed = System.monotonic_time(:microsecond)
            if rem(k, 10) == 0, do: print.("#{k} kills")

            # From the kill, or from when the worker started waiting if that was later (a
            # kill between ticks is seen when the next tick starts: nothing waits before).
            # The kill happened while the `kill` command ran: between t_kill (its start
            # included: an upper bound of the detection time) and t_killed (a lower bound).
            case await_detection(p, seen, 2_000) do
              {at, waiting} ->
                {at - max(t_kill, waiting || t_kill),
                 max(at - max(t_killed, waiting || t_killed), 0)}

              nil ->
                nil
            end
          end
        end)

      after_ = Overworld.Zone.count(id)
      c1 = Overworld.Sidecar.counters(p)
      t = ticks[id]
      found = Enum.reject(detections, &is_nil/1)
      found_after = Enum.map(found, &elem(&1, 1))
      found = Enum.map(found, &elem(&1, 0))

      %{
        bodies: n,
        transport: Keyword.get(opts, :transport, :socket),
        kills: kills,
        entities_before: before,
        entities_after: after_,
        ticks: t.ticks,
        tick_p50_ms: t.p50_us && t.p50_us / 1000,
        tick_p99_ms: t.p99_us && t.p99_us / 1000,
        tick_max_ms: t.max_us && t.max_us / 1000,
        overruns: t.overruns,
        fallback_ticks: c1.fallback - c0.fallback,
        sidecar_ticks: c1.sidecar - c0.sidecar,
        starts: c1.starts - c0.starts,
        exits: c1.exits - c0.exits,
        failures: c1.failures - c0.failures,
        detection_ms: summary(Enum.map(found, &(&1 / 1000))),
        detection_after_kill_command_ms: summary(Enum.map(found_after, &(&1 / 1000))),
        undetected: length(detections) - length(found)
      }
    after
      Overworld.stop_zone(id)
    end
  end

  # After a kill: when the zone saw it (µs), and since when what saw it was waiting: a worker
  # whose answer failed (since it started waiting for it), or the sidecar's owner seeing the
  # process exit (no wait); nil after `wait` ms. `{failures, exits}`: the counters before.
  defp await_detection(p, {failures, exits} = before, wait) do
    failed =
      if :atomics.get(p.ref, 4) > failures,
        do: {:atomics.get(p.ref, 7), :atomics.get(p.ref, 8)}

    exited = if :atomics.get(p.ref, 3) > exits, do: {:atomics.get(p.ref, 9), nil}

    cond do
      failed && exited -> Enum.min_by([failed, exited], &elem(&1, 0))
      failed || exited -> failed || exited
      wait <= 0 -> nil
      true -> Process.sleep(1) && await_detection(p, before, wait - 1)
    end
  end

  defp sidecar_os_pid(id) do
    pid = Overworld.Names.whereis(Overworld.Names.sidecar(id))
    :sys.get_state(pid).os_pid
  end

  @doc false
  @spec machine() :: map
  def machine, do: Stats.machine()
end

defmodule Overworld.InterestTest do
  # Observers of a zone fed the frames of Overworld.Interest, applied by the client-side view:
  # what they hold against the zone's own state, tick after tick.
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.{Interest, Template, Zone}
  alias Overworld.Protocol.Snapshot
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.{Observe, Walkers}

  defp start(opts \\ []) do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(
        Walkers,
        Keyword.merge([id: id, clock: :manual, size: {200, 200}, wire: Wire], opts)
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  # The zone's walkers: id => {position, quantized values}.
  defp world(zone) do
    [walker | _] = Wire.__templates__()

    for e <- Zone.entities(zone), entity(e, :kind) == :walker, into: %{} do
      {entity(e, :id), {{entity(e, :x), entity(e, :y)}, {0, Template.quantize(walker, e)}}}
    end
  end

  defp dist({x, y}, {a, b}), do: :math.sqrt((x - a) * (x - a) + (y - b) * (y - b))

  # Runs `ticks` ticks; after each, the observer's frame (at the position `path.(n)`) is applied
  # to a client view; `check.(n, frame_info, view_entities, world, position)` on each.
  defp run(zone, obs, ticks, path, check) do
    Observe.follow(zone, obs, ticks, path, fn n, info, view, pos ->
      check.(n, info, Snapshot.View.entities(view), world(zone), pos)
    end)
  end

  test "an observer of the whole world holds exactly the zone's state from the second tick (1 and 3 workers)" do
    for workers <- [1, 3] do
      zone = start(workers: workers)
      {:ok, obs} = Interest.new(zone, radius: 400, budget: 10_000_000)

      run(zone, obs, 1..40, fn _ -> {100 * 1024, 100 * 1024} end, fn n, info, held, world, _ ->
        if n == 1, do: assert(held == %{} and info.pending > 0)
        if n >= 2, do: assert(held == Map.new(world, fn {id, {_, q}} -> {id, q} end))
      end)
    end
  end

  test "a walking observer gets every entity within the view radius within a tick, and none beyond the leave radius" do
    zone = start(workers: 2)
    {r, l} = {40, 70}
    {:ok, obs} = Interest.new(zone, radius: r, leave_radius: l, budget: 10_000_000)
    {r, l} = {r * 1024, l * 1024}
    # Around the world's centre, a circle of 50 m in 150 ticks (about 2 m per tick).
    path = fn n ->
      a = n * 2 * :math.pi() / 150
      {round(100 * 1024 + 50 * 1024 * :math.cos(a)), round(100 * 1024 + 50 * 1024 * :math.sin(a))}
    end

    {_, _} =
      run(zone, obs, 1..200, path, fn n, _info, held, world, pos ->
        for {id, {at, q}} <- world do
          # Within the radius now and from where the observer was a tick ago: held, exactly.
          if n >= 2 and dist(at, pos) <= r and dist(at, path.(n - 1)) <= r,
            do: assert(held[id] == q, "tick #{n}: entity #{id} at #{inspect(at)} is missing")
        end

        for {id, _} <- held do
          {at, _} = Map.fetch!(world, id)
          assert dist(at, pos) <= l, "tick #{n}: entity #{id} held beyond the leave radius"
        end
      end)
  end

  # The zone's walkers by cell: key => entries sorted by id, as a client holds them.
  defp cells(zone) do
    [walker | _] = Wire.__templates__()
    g = Overworld.Spatial.Grid.new(200 * 1024, 200 * 1024, 12 * 1024)

    for e <- Zone.entities(zone), entity(e, :kind) == :walker do
      key = Overworld.Spatial.Grid.key(g, entity(e, :x), entity(e, :y))
      {key, {entity(e, :id), 0, Template.quantize(walker, e)}}
    end
    |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
    |> Map.new(fn {k, es} -> {k, Enum.sort(es)} end)
  end

  test "under a small budget every frame fits it, and every cell held is the zone's cell of a recent tick" do
    zone = start(workers: 2)
    budget = 9_000
    {:ok, obs} = Interest.new(zone, radius: 60, budget: budget)
    per_tick = div(budget, 30)
    templates = Wire.__templates__()

    # The zone's cells at every tick: what the client holds of a cell must be exactly the
    # cell at some tick, and a recent one.
    {_, _, _, deferred, lags} =
      Enum.reduce(1..200, {obs, %Snapshot.View{}, %{}, 0, []}, fn n,
                                                                  {obs, view, history, deferred,
                                                                   lags} ->
        {:ok, ^n} = Zone.tick_now(zone)
        history = Map.put(history, n, cells(zone))
        {frame, info, obs} = Interest.frame(obs, n, {100 * 1024, 100 * 1024})
        assert info.bytes <= per_tick, "tick #{n}: #{inspect(info)}"
        {:ok, view} = Snapshot.apply(view, IO.iodata_to_binary(frame), templates)

        lag =
          for {k, entries} <- view.cells do
            # The tick the client holds the cell at (the frames' held-back lists) is the tick
            # whose state it holds: a cell held back is never also sent.
            t = Map.fetch!(view.ticks, k)

            assert Map.get(history[t], k) == entries,
                   "tick #{n}: cell #{k} is not the zone's cell at tick #{t}, the tick the client has for it"

            n - t
          end

        {obs, view, history, deferred + info.deferred, lags ++ lag}
      end)

    # The budget did cut (the test means something), and nothing starved.
    assert deferred > 0
    assert Enum.max(lags) <= 20, inspect(Enum.frequencies(lags))
  end

  test "a sender that skips ticks gets their budget in its next frame and keeps up with deltas" do
    zone = start(workers: 2)
    budget = 30_000
    per_tick = div(budget, 30)
    templates = Wire.__templates__()
    {:ok, obs} = Interest.new(zone, radius: 60, budget: budget)
    here = {100 * 1024, 100 * 1024}

    # A frame every tick until the view is full, then one every 4th tick (a lagging client).
    {obs, view} = Observe.follow(zone, obs, 1..60, fn _ -> here end)

    {_obs, _view, infos} =
      Enum.reduce(61..160, {obs, view, []}, fn n, {obs, view, infos} ->
        {:ok, ^n} = Zone.tick_now(zone)

        if rem(n, 4) == 0 do
          {frame, info, obs} = Interest.frame(obs, n, here)
          {:ok, view} = Snapshot.apply(view, IO.iodata_to_binary(frame), templates)
          # Once caught up, every cell the client holds is the zone's cell as it is now.
          now = cells(zone)

          if n > 72,
            do:
              for({k, entries} <- view.cells, do: assert(entries == Map.get(now, k), "tick #{n}"))

          {obs, view, [info | infos]}
        else
          {obs, view, infos}
        end
      end)

    # Frames went beyond one tick's budget (they carried four ticks), never beyond four.
    assert Enum.any?(infos, &(&1.bytes > per_tick))
    assert Enum.all?(infos, &(&1.bytes <= 4 * per_tick))
    # Caught up with deltas: after the first gaps no cell waits, none needs a keyframe again.
    assert infos |> Enum.drop(-3) |> Enum.all?(&(&1.pending == 0 and &1.deferred == 0))
    # And from then on the frames (every 4th tick, as a paced session sends) take the fast path:
    # per row, one slice of each of the four ticks.
    assert infos |> Enum.drop(-3) |> Enum.all?(& &1.fast), inspect(Enum.map(infos, & &1.fast))
  end

  test "resync starts over from nothing; a jump away lists the cells left behind" do
    zone = start(workers: 1)
    {:ok, obs} = Interest.new(zone, radius: 30, budget: 10_000_000)
    templates = Wire.__templates__()
    here = {50 * 1024, 50 * 1024}

    step = fn {obs, view}, n, pos ->
      {:ok, ^n} = Zone.tick_now(zone)
      {frame, info, obs} = Interest.frame(obs, n, pos)
      {:ok, view} = Snapshot.apply(view, IO.iodata_to_binary(frame), templates)
      {obs, view, info}
    end

    {obs, view, _} = step.({obs, %Snapshot.View{}}, 1, here)
    {obs, view, _} = step.({obs, view}, 2, here)
    assert map_size(view.cells) > 0

    # A client that lost track: the next frame has baseline 0 and rebuilds the view from
    # keyframes alone, whatever the client held (here: garbage).
    obs = Interest.resync(obs, :test)
    junk = %{view | cells: %{1 => [{999_999, 0, {1, 1, 0, 0}}]}, tick: 77}
    {obs, view2, _} = step.({obs, junk}, 3, here)
    refute Map.has_key?(Snapshot.View.entities(view2), 999_999)
    {obs, view2, _} = step.({obs, view2}, 4, here)
    held = Snapshot.View.entities(view2)
    world = world(zone)

    for {id, {at, q}} <- world, dist(at, here) <= 30 * 1024, do: assert(held[id] == q)
    for {id, q} <- held, do: assert({_, ^q} = world[id])

    far = {170 * 1024, 170 * 1024}
    {_obs, view3, info} = step.({obs, view2}, 5, far)
    assert info.left == map_size(Interest.region_cells(obs))
    assert view3.cells == %{}
  end

  test "errors: a zone that is not running, a zone without a wire, invalid options" do
    assert Interest.new({__MODULE__, :nope}) == {:error, :not_found}
    zone = start(wire: nil)
    assert Interest.new(zone) == {:error, :no_wire}
    zone = start()

    assert_raise ArgumentError,
                 ~r/leave radius \(95\) must be at least the view radius \(90\)/,
                 fn ->
                   Interest.new(zone, radius: 90, leave_radius: 95)
                 end

    assert_raise ArgumentError, ~r/unknown option :radios/, fn ->
      Interest.new(zone, radios: 3)
    end
  end
end

defmodule Overworld.Zone.PathsTest do
  # Paths for game code: requests of path_to/1, answered in the next tick's context, bounded
  # per worker and tick; the same answers from the sidecar (over both transports) and from
  # Elixir, and in a replay of the zone's history.
  # (Not async: it runs real sidecars, see Overworld.SidecarTest.)
  use ExUnit.Case, async: false

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Physics.Nav
  alias Overworld.Zone
  alias Overworld.Zone.Paths

  @moduletag timeout: 120_000

  doctest Overworld.Zone.Paths
  doctest Overworld.Zone.Context

  # Walkers in a room with walls: each wants a path to its goal until it has one, follows it,
  # and picks a new goal at its end (or when refused). Every answer it got is kept in its data
  # (`last`), for the tests.
  defmodule Walkers do
    use Overworld.Zone

    @speed 12_000

    @impl true
    def init(count) do
      walkers =
        for i <- 1..count do
          [
            kind: :walker,
            x: 2_000 + rem(i * 7_919, 60) * 1_000,
            y: 2_000 + rem(i * 104_729, 60) * 1_000,
            rng: i,
            data: %{goal: nil, path: nil, last: nil}
          ]
        end

      {:ok, %{}, [{:spawn, walkers}]}
    end

    @impl true
    def path_to(entity(data: %{goal: goal, path: nil})) when goal != nil, do: goal
    def path_to(_), do: nil

    @impl true
    def handle_entity(entity(data: data) = e, _view, ctx) do
      answer = Overworld.Zone.Context.path(ctx, entity(e, :id))
      data = if answer, do: %{data | last: {ctx.tick, answer}}, else: data

      data =
        case answer do
          {:ok, waypoints} -> %{data | path: waypoints}
          {:error, _} -> %{data | goal: nil, path: nil}
          _ -> data
        end

      e |> entity(data: data) |> steer()
    end

    defp steer(entity(data: %{goal: nil}, rng: rng) = e) do
      {a, rng} = Overworld.Random.uniform(rng, 62)
      {b, rng} = Overworld.Random.uniform(rng, 62)
      data = %{entity(e, :data) | goal: {1_024 + a * 1_024, 1_024 + b * 1_024}}
      {:ok, entity(e, rng: rng, data: data, vx: 0, vy: 0)}
    end

    defp steer(entity(data: %{path: nil}) = e), do: {:ok, entity(e, vx: 0, vy: 0)}

    defp steer(entity(data: %{path: []} = data) = e),
      do: {:ok, entity(e, data: %{data | goal: nil, path: nil}, vx: 0, vy: 0)}

    defp steer(entity(x: x, y: y, data: %{path: [{wx, wy} | rest] = path} = data) = e) do
      {dx, dy} = {wx - x, wy - y}

      if abs(dx) < 500 and abs(dy) < 500 do
        steer(entity(e, data: %{data | path: rest}))
      else
        {:ok, entity(e, vx: clamp(dx * 20), vy: clamp(dy * 20), data: %{data | path: path})}
      end
    end

    defp clamp(v), do: v |> max(-@speed) |> min(@speed)
  end

  @walls [
    boxes: [{20, 0, 21, 40}, {40, 24, 41, 64}, {0, 44, 14, 45}],
    circles: [{30, 50, 3}]
  ]

  defp start(opts) do
    base = [
      args: 120,
      clock: :manual,
      size: {64, 64},
      cell_size: 8,
      workers: 2,
      physics: :elixir,
      map: @walls,
      nav: [per_tick: 6, queue: 20]
    ]

    Overworld.Test.SidecarFrames.start_zone!(Walkers, Keyword.merge(base, opts))
  end

  defp state(id) do
    id
    |> Zone.entities()
    |> Enum.map(&{entity(&1, :id), entity(&1, :x), entity(&1, :y), entity(&1, :data)})
    |> Enum.sort()
  end

  defp run(id, ticks), do: for(_ <- 1..ticks, do: tick(id))

  defp tick(id) do
    {:ok, _} = Zone.tick_now(id)
    state(id)
  end

  test "every request gets the Nav path, :queued or {:error, :busy}: the plan of each stripe" do
    id = start(history: 100, keyframe_ticks: 10, debug: true)
    # After tick 1 every walker has a goal and asks.
    _ = run(id, 1)
    c = Zone.config(id)
    paths = c.physics.paths
    pairs = Overworld.Spatial.Sweep.from_entities(c.grid, Zone.entities(id))
    expected = Paths.all(pairs, paths, 2)
    asked = Paths.requests(pairs, paths)
    assert length(asked) == 120

    got = for {id, _, _, %{last: {2, answer}}} <- tick(id), into: %{}, do: {id, answer}
    assert got == expected

    kinds =
      Enum.frequencies_by(Map.values(got), fn
        {:ok, _} -> :ok
        {:error, reason} -> reason
        :queued -> :queued
      end)

    # Each of the 2 workers computes 6, queues 20 and refuses the others of its stripe.
    computed =
      Map.get(kinds, :ok, 0) + Map.get(kinds, :blocked, 0) + Map.get(kinds, :unreachable, 0)

    assert computed == 12, inspect(kinds)
    assert kinds[:queued] == 40 and kinds[:busy] == 120 - 12 - 40, inspect(kinds)

    # Each computed path is Overworld.Physics.Nav's, from where the entity stood.
    for {eid, _from, _to} = r <- asked, match?({:ok, _}, got[eid]) do
      {_, from, to} = r
      assert got[eid] == Nav.path(paths.nav, from, to)
    end

    # A replay of the zone's history (each stripe planned as its worker did): the same bits.
    Overworld.Test.SidecarFrames.assert_replays!(id, 40)
  end

  test "a walker reaches its goal around the walls" do
    id = start(args: 4, nav: [])
    states = run(id, 300)

    reached = for s <- states, {_id, _x, _y, %{last: {_, {:ok, _}}, path: nil}} <- s, do: true

    assert reached != []
  end

  test "the sidecar's paths, over sockets and over shared memory: the Elixir bits" do
    want = run(start([]), 40)
    Overworld.Test.SidecarFrames.assert_over_transports!(&start/1, &run(&1, 40), want, 40)
  end

  test "over shared memory, queries and their answers go through the regions" do
    exe = Overworld.Test.SidecarFrames.build_sidecar!()

    id =
      start(
        physics: :sidecar,
        transport: :shm,
        sidecar: [executable: exe, deadline_ms: 1_000]
      )

    p = Zone.config(id).physics
    Overworld.Test.SidecarFrames.ready!(p)
    st = :sys.get_state(Overworld.Names.whereis(Overworld.Names.sidecar(id)))
    layout = Overworld.Sidecar.layout(st.physics)

    # After each tick, each stripe's request region (the request just sent) and answer region
    # (the answer just read): their headers' q.
    qs =
      for _ <- 1..8, stripe <- 0..1 do
        _ = tick(id)
        base = 64 + stripe * (layout.request + layout.answer)
        {:ok, <<_::binary-24, asked::little-64>>} = Overworld.Sidecar.Shm.read(st.shm, base, 32)

        {:ok, <<_::binary-24, answered::little-64>>} =
          Overworld.Sidecar.Shm.read(st.shm, base + layout.request, 32)

        {asked, answered}
      end

    assert Enum.any?(qs, fn {asked, answered} -> asked > 0 and answered > 0 end), inspect(qs)
    c = Overworld.Sidecar.counters(p)
    assert c.failures == 0 and c.fallback == 2, inspect(c)
  end

  test "a sidecar killed, or garbling its answer: the fallback's paths, the same bits" do
    exe = Overworld.Test.SidecarFrames.build_sidecar!()
    want = run(start([]), 30)

    for fault <- ["kill:5", "garble:9"] do
      id =
        start(
          physics: :sidecar,
          sidecar: [executable: exe, fault: fault, deadline_ms: 1_000, restart_ms: 20]
        )

      p = Zone.config(id).physics
      Overworld.Test.SidecarFrames.ready!(p)

      assert run(id, 30) == want, fault
      c = Overworld.Sidecar.counters(p)
      assert c.failures >= 1 and c.fallback >= 2 and c.sidecar > 0, "#{fault}: #{inspect(c)}"
    end
  end

  test "answers in a sidecar's frame are checked against the requests" do
    plan = {[{5, {0, 0}, {9, 9}}, {6, {0, 0}, {9, 9}}], %{7 => :queued}}
    ok = <<5::little-64, 0::little-64, 1::little-64, 9::little-64, 9::little-64>>
    blocked = <<6::little-64, 1::little-64, 0::little-64>>

    assert Paths.decode(ok <> blocked, plan) ==
             {:ok, %{5 => {:ok, [{9, 9}]}, 6 => {:error, :blocked}, 7 => :queued}}

    # Another tag, a missing answer, a trailing byte, a status with points, an empty ok.
    assert Paths.decode(ok <> <<8::little-64, 1::little-64, 0::little-64>>, plan) == :error
    assert Paths.decode(ok, plan) == :error
    assert Paths.decode(ok <> blocked <> <<0>>, plan) == :error

    assert Paths.decode(ok <> <<6::little-64, 1::little-64, 1::little-64, 0::128>>, plan) ==
             :error

    assert Paths.decode(<<5::little-64, 0::little-64, 0::little-64>> <> blocked, plan) == :error
  end

  test "invalid options are refused with a clear error" do
    opts = [id: :bad, args: 1, size: {64, 64}, cell_size: 8]

    for {extra, message} <- [
          {[nav: [per_tick: 2]], ~r/:nav \(paths\) needs :physics/},
          {[physics: :elixir, nav: [per_tick: 0]], ~r/per_tick/},
          {[physics: :elixir, nav: [cells: 2]], ~r/unknown option :cells/}
        ] do
      assert_raise ArgumentError, message, fn -> Zone.Config.new!(Walkers, opts ++ extra) end
    end
  end
end

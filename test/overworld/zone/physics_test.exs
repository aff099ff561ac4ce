defmodule Overworld.Zone.PhysicsTest do
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Zone

  @moduletag timeout: 120_000

  # Goblins in a dense pile that walk about (velocities from their own generator, changed
  # every 10 ticks), rocks that are not bodies, walls.
  defmodule Pile do
    use Overworld.Zone

    @impl true
    def init(count) do
      goblins =
        for i <- 1..count do
          [
            kind: :goblin,
            x: 40_000 + rem(i, 30) * 400,
            y: 40_000 + div(i, 30) * 400,
            vx: 0,
            vy: 0
          ]
        end

      rocks = for i <- 1..5, do: [kind: :rock, x: 41_000 + i * 600, y: 41_000]
      {:ok, %{}, [{:spawn, goblins ++ rocks}]}
    end

    @impl true
    def handle_entity(entity(kind: :goblin, rng: rng) = e, _view, ctx) do
      if rem(ctx.tick + entity(e, :id), 10) == 0 do
        {a, rng} = Overworld.Random.uniform(rng, 8_000)
        {b, rng} = Overworld.Random.uniform(rng, 8_000)
        {:ok, entity(e, vx: a - 4_000, vy: b - 4_000, rng: rng)}
      else
        {:ok, e}
      end
    end

    def handle_entity(e, _view, _ctx), do: {:ok, e}

    @impl true
    def body(entity(kind: :goblin)), do: {400, 2}
    def body(_rock), do: nil
  end

  @walls [boxes: [{30, 30, 70, 31}, {30, 30, 31, 70}, {45, 45, 47, 47}], circles: [{55, 55, 2}]]

  defp start(opts) do
    base = [
      args: 300,
      clock: :manual,
      size: {100, 100},
      cell_size: 8,
      physics: :elixir,
      map: @walls
    ]

    Overworld.Test.SidecarFrames.start_zone!(Pile, Keyword.merge(base, opts))
  end

  defp run(id, ticks) do
    {:ok, _} = Zone.tick_now(id, ticks)
    id |> Zone.entities() |> Enum.map(&Overworld.Entity.to_map/1) |> Enum.sort_by(& &1.id)
  end

  test "bodies are pushed apart, out of the walls and inside the world; rocks stay put" do
    id = start([])
    es = run(id, 60)
    goblins = Enum.filter(es, &(&1.kind == :goblin))
    assert length(goblins) == 300

    # No goblin centre inside a wall (the step pushes every body out of what it meets).
    for g <- goblins do
      refute g.x > 30 * 1024 and g.x < 70 * 1024 and g.y > 30 * 1024 and g.y < 31 * 1024
      refute g.x > 45 * 1024 and g.x < 47 * 1024 and g.y > 45 * 1024 and g.y < 47 * 1024
      assert (g.x - 55 * 1024) ** 2 + (g.y - 55 * 1024) ** 2 >= (2 * 1024) ** 2
    end

    # The pile spread: the start was 400 units apart for radius 400, overlapping.
    assert Enum.any?(goblins, &(&1.x != 40_000 + rem(&1.id, 30) * 400))

    rocks = Enum.filter(es, &(&1.kind == :rock))
    assert Enum.map(rocks, &{&1.x, &1.y}) == for(i <- 1..5, do: {41_000 + i * 600, 41_000})
  end

  test "the same bits whatever the number of workers (each steps its stripe and its halo)" do
    one = run(start(workers: 1), 40)
    assert run(start(workers: 2), 40) == one
    assert run(start(workers: 5), 40) == one
  end

  test "body/1's bodies through the sidecar, over sockets and over shared memory: same bits" do
    want = run(start(workers: 1), 40)
    start = &start(Keyword.put(&1, :workers, 2))
    Overworld.Test.SidecarFrames.assert_over_transports!(start, &run(&1, 40), want, 40)
  end

  test "a zone's history replays its physics exactly" do
    id = start(workers: 3, history: 100, keyframe_ticks: 10, debug: true)
    Overworld.Test.SidecarFrames.assert_replays!(id, 45)
  end

  test "the step is Overworld.Physics.step/3 of the last tick's bodies" do
    id = start(workers: 2)
    before = run(id, 10)
    config = Zone.config(id)
    p = config.physics

    bodies = for e <- before, e.kind == :goblin, do: {e.id, e.x, e.y, e.vx, e.vy, 400, 2}

    expected =
      Map.new(Overworld.Physics.step(bodies, p.world, 30), fn {i, x, y} -> {i, {x, y}} end)

    after_ = run(id, 1)

    # Tick 11 moved every goblin to its step result (game code changes velocities only).
    for e <- after_, e.kind == :goblin, do: assert({e.x, e.y} == expected[e.id])
  end

  test "velocities are limited so that contacts stay within a row of cells" do
    p = Zone.config(start([])).physics
    # (8 m cells - 2 * 1 m) / 2 per tick at 30 Hz.
    assert p.max_speed == div((8 * 1024 - 2 * 1024) * 30, 2)
  end

  test "invalid options are refused with a clear error" do
    opts = [id: :bad, args: 1, size: {100, 100}, cell_size: 8, physics: :elixir]

    assert_raise ArgumentError, ~r/:map: .*line 1: unknown obstacle "wall"/, fn ->
      path = Path.join(System.tmp_dir!(), "ow-map-#{System.unique_integer([:positive])}.txt")
      File.write!(path, "wall 1 2 3 4\n")
      on_exit(fn -> File.rm(path) end)
      Zone.Config.new!(Pile, opts ++ [map: path])
    end

    assert_raise ArgumentError, ~r/:map: .*no such file/, fn ->
      Zone.Config.new!(Pile, opts ++ [map: "/nonexistent/map.txt"])
    end

    assert_raise ArgumentError, ~r/must exceed twice :max_radius/, fn ->
      Zone.Config.new!(Pile, Keyword.put(opts, :cell_size, 2))
    end

    assert_raise ArgumentError, ~r/radius: 3\] must be in/, fn ->
      Zone.Config.new!(Pile, opts ++ [body: [radius: 3]])
    end

    assert_raise ArgumentError, ~r/expected :physics to be one of/, fn ->
      Zone.Config.new!(Pile, Keyword.put(opts, :physics, :rust))
    end

    assert_raise ArgumentError, ~r/expected :transport to be one of/, fn ->
      Zone.Config.new!(Pile, opts ++ [transport: :udp])
    end

    assert_raise ArgumentError, ~r/max_bodies/, fn ->
      Zone.Config.new!(Pile, opts ++ [sidecar: [max_bodies: 0]])
    end

    assert_raise ArgumentError, ~r/unknown option :deadline/, fn ->
      Zone.Config.new!(Pile, opts ++ [sidecar: [deadline: 5]])
    end
  end
end

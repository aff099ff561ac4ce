defmodule Overworld.Physics.SidecarEqualityTest do
  # The native sidecar (sidecar/, Rust) and Overworld.Physics (Elixir) implement
  # docs/sidecar.md bit for bit: random scenes and path queries, encoded as the spec's test
  # frames, answered by `overworld-sidecar step|path --threads T` (T = 1, 2, 4) and compared
  # with Physics.step/3 and Physics.Nav.path/3.
  use ExUnit.Case, async: true
  import Bitwise
  alias Overworld.Physics
  alias Overworld.Physics.Nav
  alias Overworld.Test.SidecarFrames, as: Frames

  @moduletag :tmp_dir
  @root Path.expand("../../..", __DIR__)
  @exe Path.join(@root, "sidecar/target/release/overworld-sidecar")
  @max_coord 1 <<< 40
  @max_radius 1 <<< 20
  @m 1024

  setup_all do
    Overworld.Test.SidecarFrames.build_sidecar!()
    :ok
  end

  # Runs the sidecar on a frame: {status, stdout, stderr}.
  defp run(dir, sub, frame, threads) do
    name = "#{sub}-#{System.unique_integer([:positive])}"
    input = Path.join(dir, name <> ".in")
    err = Path.join(dir, name <> ".err")
    File.write!(input, frame)
    script = ~s(exec "$0" "$1" --threads "$2" < "$3" 2> "$4")
    {out, status} = System.cmd("sh", ["-c", script, @exe, sub, "#{threads}", input, err])
    {status, out, File.read!(err)}
  end

  defp sidecar_step(dir, frame, threads) do
    {status, out, err} = run(dir, "step", frame, threads)
    assert status == 0, "overworld-sidecar step --threads #{threads}: status #{status}: #{err}"
    {:ok, positions} = Frames.decode_step_answer(out)
    positions
  end

  defp sidecar_path(dir, frame, threads) do
    {status, out, err} = run(dir, "path", frame, threads)
    assert status == 0, "overworld-sidecar path --threads #{threads}: status #{status}: #{err}"
    {:ok, paths} = Frames.decode_path_answer(out)
    paths
  end

  # --- Scenes ------------------------------------------------------------------------------

  defp int(lo, hi), do: lo + :rand.uniform(hi - lo + 1) - 1

  # Velocities of every magnitude up to `max`: most far slower.
  defp speed(max), do: int(-max, max) >>> int(0, 40)

  defp coord(origin, span), do: min(origin + int(0, span), @max_coord)

  # A scene: n bodies in [origin, origin + span]², radii in `radii`, obstacles up to `size`.
  defp scene(o) do
    {origin, span} = {o[:origin], o[:span]}
    {r0, r1} = o[:radii]

    ids = Enum.shuffle(Enum.map(1..o[:n]//1, &(&1 * 3 + int(0, 2))))

    bodies =
      for id <- ids do
        m = Enum.random([1, 65_535, int(1, 65_535)])

        {id, coord(origin, span), coord(origin, span), speed(o[:speed]), speed(o[:speed]),
         int(r0, r1), m}
      end

    boxes =
      for _ <- 1..o[:boxes]//1 do
        {x0, y0} = {coord(origin, span), coord(origin, span)}
        {x0, y0, min(x0 + int(0, o[:size]), @max_coord), min(y0 + int(0, o[:size]), @max_coord)}
      end

    circles =
      for _ <- 1..o[:circles]//1,
          do: {coord(origin, span), coord(origin, span), int(1, min(o[:size], @max_radius))}

    {o[:world], Enum.random([1, 10, 30, 60, 1000]), boxes, circles, bodies}
  end

  defp compare_step(dir, {size, rate, boxes, circles, bodies}) do
    world = Physics.world(size, size, boxes: boxes, circles: circles)
    assert Physics.check(bodies, rate) == :ok
    expected = Physics.step(bodies, world, rate)
    frame = Frames.step_frame(size, size, rate, boxes, circles, bodies)

    for threads <- [1, 2, 4] do
      assert sidecar_step(dir, frame, threads) == expected,
             "#{length(bodies)} bodies, rate #{rate}, #{threads} threads"
    end

    # How many bodies met something (the step is not the integration alone).
    alone = Physics.world(size, size)

    Enum.zip(bodies, expected)
    |> Enum.count(fn {b, e} -> Physics.step([b], alone, rate) != [e] end)
  end

  @field [
    world: 200 * @m,
    origin: 0,
    span: 200 * @m,
    radii: {256, 1024},
    speed: 10_000,
    boxes: 60,
    circles: 60,
    size: 8 * @m
  ]

  test "random scenes of 2 to 2,000 bodies", %{tmp_dir: dir} do
    :rand.seed(:exsss, {1, 2, 3})

    for n <- [2, 10, 200, 2000, 2000, 2000] do
      met = compare_step(dir, scene(Keyword.put(@field, :n, n)))
      if n >= 200, do: assert(met > 0)
    end

    # Crowded little scenes.
    for _ <- 1..10 do
      compare_step(dir, scene(Keyword.merge(@field, n: 40, span: 8 * @m, boxes: 3, circles: 3)))
    end
  end

  test "dense piles", %{tmp_dir: dir} do
    :rand.seed(:exsss, {4, 5, 6})
    pile = [world: 100 * @m, origin: 48 * @m, span: 4 * @m, radii: {200, 600}, speed: 3000]

    met =
      compare_step(
        dir,
        scene(Keyword.merge(@field, pile ++ [n: 400, boxes: 4, circles: 4, size: 2048]))
      )

    assert met > 300

    # All at one of three points, around a circle.
    bodies =
      for id <- 1..300, do: {id, 5000 + 10 * int(0, 2), 5000, 0, 0, int(100, 900), int(1, 65_535)}

    compare_step(dir, {10_240, 30, [], [{5000, 5000, 50}], bodies})
  end

  test "extreme coordinates, radii, masses and speeds", %{tmp_dir: dir} do
    :rand.seed(:exsss, {7, 8, 9})

    # Huge bodies near 0 (velocities up to 2^40 take some far below it; circles reach below
    # it), then near 2^40; obstacles as large as the bodies.
    huge = [
      world: @max_coord,
      origin: 0,
      span: 1 <<< 22,
      n: 150,
      radii: {@max_radius - 4096, @max_radius},
      speed: @max_coord,
      boxes: 10,
      circles: 10,
      size: @max_radius
    ]

    for _ <- 1..3 do
      assert compare_step(dir, scene(huge)) > 0
      assert compare_step(dir, scene(Keyword.put(huge, :origin, @max_coord - (1 <<< 22)))) > 0
    end

    # Huge bodies among small obstacles.
    assert compare_step(dir, scene(Keyword.merge(huge, boxes: 100, circles: 100, size: 300_000))) >
             0

    # Small fast bodies near 0 in a 2^40 world.
    small =
      Keyword.merge(huge,
        span: 1 <<< 16,
        n: 300,
        radii: {1, 64},
        speed: 1 <<< 22,
        boxes: 20,
        circles: 20,
        size: 4096
      )

    for _ <- 1..3, do: assert(compare_step(dir, scene(small)) > 0)

    # A circle reaching below 0, and a body wholly below 0 after its step.
    compare_step(dir, {1 <<< 20, 30, [], [{0, 5000, 2000}], [{1, 0, 5000, -9000, 9000, 100, 1}]})
  end

  # --- Paths -------------------------------------------------------------------------------

  defp compare_paths(dir, size, cell, agent, max_nodes, boxes, circles, queries) do
    {w, h} = size

    nav =
      Nav.new(Physics.world(w, h, boxes: boxes, circles: circles),
        cell: cell,
        agent: agent,
        max_nodes: max_nodes
      )

    expected = Enum.map(queries, fn {from, to} -> Nav.path(nav, from, to) end)
    frame = Frames.path_frame(w, h, cell, agent, max_nodes, boxes, circles, queries)

    for threads <- [1, 2, 4] do
      assert sidecar_path(dir, frame, threads) == expected, "#{threads} threads"
    end

    Enum.frequencies_by(expected, fn
      {:ok, _} -> :ok
      {:error, why} -> why
    end)
  end

  defp walls(n, w, h) do
    for _ <- 1..n do
      {x, y} = {int(0, w), int(0, h)}
      {dx, dy} = if :rand.uniform(2) == 1, do: {int(0, 8 * @m), 300}, else: {300, int(0, 8 * @m)}
      {x, y, min(x + dx, w), min(y + dy, h)}
    end
  end

  test "random path queries", %{tmp_dir: dir} do
    :rand.seed(:exsss, {10, 11, 12})
    outcomes = %{}

    # 100 m × 100 m (minus a bit), 1 m cells, agents of 0.25 m; then 3 m cells, agents of
    # 0.5 m; cells of 700 units; then a small max_nodes.
    outcomes =
      for {cell, agent, max_nodes} <- [
            {@m, 256, 20_000},
            {3 * @m, 512, 20_000},
            {700, 100, 20_000},
            {@m, 0, 300}
          ],
          reduce: outcomes do
        acc ->
          {w, h} = {100 * @m, 100 * @m - int(0, @m)}
          boxes = walls(100, w, h)
          circles = for _ <- 1..40, do: {int(0, w), int(0, h), int(1, 2 * @m)}

          queries =
            for _ <- 1..300 do
              # Some points past the world's edge (outside the grid: blocked).
              point = fn -> {int(0, w + 2 * @m), int(0, h)} end
              {point.(), point.()}
            end

          compare_paths(dir, {w, h}, cell, agent, max_nodes, boxes, circles, queries)
          |> Map.merge(acc, fn _k, a, b -> a + b end)
      end

    # A wall from edge to edge: unreachable across it.
    wall = [{30 * @m, 0, 30 * @m + 100, 40 * @m}]

    queries =
      for _ <- 1..20,
          do: {{int(0, 29 * @m), int(0, 39 * @m)}, {int(31 * @m, 40 * @m), int(0, 39 * @m)}}

    outcomes =
      compare_paths(dir, {40 * @m, 40 * @m}, @m, 0, 20_000, wall, [], queries)
      |> Map.merge(outcomes, fn _k, a, b -> a + b end)

    for o <- [:ok, :blocked, :unreachable, :too_far],
        do: assert(outcomes[o] > 0, inspect(outcomes))
  end

  # --- Refusals ----------------------------------------------------------------------------

  test "a frame out of range is refused: status 2, one line on stderr, nothing on stdout",
       %{tmp_dir: dir} do
    body = {1, 5000, 5000, 0, 0, 512, 1}

    for {sub, frame} <- [
          {"step", Frames.step_frame(10_240, 10_240, 30, [], [], [put_elem(body, 6, 0)])},
          {"step",
           Frames.step_frame(10_240, 10_240, 30, [], [], [put_elem(body, 5, @max_radius + 1)])},
          {"step", Frames.step_frame(10_240, 10_240, 1001, [], [], [body])},
          {"step", Frames.step_frame(10_240, 10_240, 30, [{5, 0, 4, 1}], [], [body])},
          {"step", binary_part(Frames.step_frame(10_240, 10_240, 30, [], [], [body]), 0, 60)},
          {"path", Frames.path_frame(10_240, 10_240, 0, 0, 100, [], [], [{{0, 0}, {1, 1}}])},
          {"path", Frames.path_frame(10_240, 10_240, 1024, 0, 100, [], [], [{{-1, 0}, {1, 1}}])}
        ] do
      {status, out, err} = run(dir, sub, frame, 2)
      assert status == 2
      assert out == ""
      assert [line] = String.split(err, "\n", trim: true)
      assert line =~ "overworld-sidecar: refused frame: "
    end

    # The same frames, in range, are answered.
    assert sidecar_step(dir, Frames.step_frame(10_240, 10_240, 30, [], [], [body]), 1) == [
             {1, 5000, 5000}
           ]
  end
end

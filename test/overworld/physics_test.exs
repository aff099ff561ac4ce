defmodule Overworld.PhysicsTest do
  use ExUnit.Case, async: true
  import Bitwise
  alias Overworld.Test.Prop
  alias Overworld.Physics
  doctest Physics

  @m 1024

  defp body(id, x, y, opts \\ []),
    do:
      {id, x, y, Keyword.get(opts, :vx, 0), Keyword.get(opts, :vy, 0), Keyword.get(opts, :r, 512),
       Keyword.get(opts, :m, 1)}

  test "a body moves by its velocity divided by the tick rate (truncated toward zero)" do
    w = Physics.world(100 * @m, 100 * @m)

    assert [{1, 50_030, 49_967}] =
             Physics.step([body(1, 50_000, 50_000, vx: 900, vy: -999)], w, 30)
  end

  test "the lighter body moves more: corrections in the ratio of the masses" do
    w = Physics.world(100 * @m, 100 * @m)
    # s = 1024, d = 600, overlap 424: the light one takes 424 * 3/4, the heavy one 424 / 4.
    [{1, x1, _}, {2, x2, _}] =
      Physics.step([body(1, 50_000, 50_000, m: 1), body(2, 50_600, 50_000, m: 3)], w, 30)

    assert {x1, x2} == {50_000 - 318, 50_600 + 106}
  end

  test "two bodies on the same point: the smaller id goes +x, the other -x" do
    w = Physics.world(100 * @m, 100 * @m)

    assert [{7, 49_488, 50_000}, {3, 50_512, 50_000}] =
             Physics.step([body(7, 50_000, 50_000), body(3, 50_000, 50_000)], w, 30)
  end

  test "a centre inside a box leaves by the nearest side; near a box or circle, pushed to touch it" do
    w =
      Physics.world(100 * @m, 100 * @m,
        boxes: [{10 * @m, 10 * @m, 20 * @m, 30 * @m}],
        circles: [{60 * @m, 60 * @m, 2 * @m}]
      )

    # Inside, 1 m from the left side: out to x0 - r.
    assert [{1, 9_728, 20_480}] = Physics.step([body(1, 11 * @m, 20 * @m)], w, 30)
    # 0.25 m right of the box: pushed to r = 0.5 m from it.
    assert [{1, 20_992, 20_480}] = Physics.step([body(1, 20 * @m + 256, 20 * @m)], w, 30)
    # 2.25 m from the circle's centre (radius 2 m, r 0.5 m): pushed out to 2.5 m.
    assert [{1, 64_000, 61_440}] = Physics.step([body(1, 62 * @m + 256, 60 * @m)], w, 30)
  end

  test "bodies stay inside the world, r from its edges" do
    w = Physics.world(10 * @m, 10 * @m)

    assert [{1, 512, 9_728}] =
             Physics.step([body(1, 100, 10 * @m - 10, vx: -30_000, vy: 30_000)], w, 30)
  end

  test "check/2 refuses bodies out of range" do
    assert {:error, "two bodies have the same id"} =
             Physics.check([body(1, 0, 0), body(1, 5, 5)], 30)

    assert {:error, "body 1: mass 0 outside 1..65535"} = Physics.check([body(1, 0, 0, m: 0)], 30)
    assert {:error, "body 1: position outside 0..2^40"} = Physics.check([body(1, -1, 0)], 30)
    assert {:error, "tick rate 0 outside 1..1000"} = Physics.check([], 0)

    assert_raise ArgumentError, ~r/invalid box/, fn ->
      Physics.world(100, 100, boxes: [{5, 5, 1, 1}])
    end
  end

  # A random scene of a seed: up to 60 bodies in a square of 1..20 m (dense piles too).
  defp scene(seed) do
    :rand.seed(:exsss, {seed, seed * 7 + 1, 11})
    n = :rand.uniform(60)
    spread = :rand.uniform(20) * @m

    for i <- 1..n do
      {i * 7, 40 * @m + :rand.uniform(spread + 1) - 1, 40 * @m + :rand.uniform(spread + 1) - 1,
       :rand.uniform(6001) - 3001, :rand.uniform(6001) - 3001, 99 + :rand.uniform(1401),
       :rand.uniform(65_535)}
    end
  end

  defp seeds(check),
    do: :proper.forall(:proper_types.integer(1, 1 <<< 40), fn seed -> check.(scene(seed)) end)

  test "the result does not depend on the order of the bodies (a Jacobi step)" do
    w =
      Physics.world(100 * @m, 100 * @m,
        boxes: [{45 * @m, 45 * @m, 48 * @m, 60 * @m}],
        circles: [{52 * @m, 52 * @m, 1 * @m}]
      )

    Prop.check(
      seeds(fn bodies ->
        Enum.sort(Physics.step(bodies, w, 30)) ==
          Enum.sort(Physics.step(Enum.shuffle(bodies), w, 30))
      end)
    )
  end

  test "no centre ends inside a box or a circle it met; everyone stays inside the world" do
    {x0, y0, x1, y1} = box = {45 * @m, 45 * @m, 48 * @m, 60 * @m}
    {cx, cy, r} = circle = {52 * @m, 52 * @m, 1 * @m}
    w = Physics.world(100 * @m, 100 * @m, boxes: [box], circles: [circle])

    Prop.check(
      seeds(fn bodies ->
        Enum.all?(Physics.step(bodies, w, 30), fn {_id, x, y} ->
          not (x > x0 and x < x1 and y > y0 and y < y1) and
            (x - cx) * (x - cx) + (y - cy) * (y - cy) >= (r - 1) * (r - 1) and
            x >= 0 and x <= 100 * @m and y >= 0 and y <= 100 * @m
        end)
      end)
    )
  end

  test "isqrt is the floor of the square root" do
    Prop.check(
      :proper.forall(
        :proper_types.oneof([
          :proper_types.integer(0, 1_000_000),
          :proper_types.integer(0, 1 <<< 62)
        ]),
        fn n ->
          s = Physics.isqrt(n)
          s * s <= n and (s + 1) * (s + 1) > n
        end
      ),
      1000
    )
  end
end

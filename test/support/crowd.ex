defmodule Overworld.Test.Crowd do
  @moduledoc false
  # A crowd that reads its neighbours: each entity walks with a velocity that turns at random
  # (its own generator), is pushed away by every neighbour within a cell (from their previous
  # positions), bounces off the world's edges, and keeps in `state` how many neighbours it saw
  # and whether any was a shadow. Fast (up to ~8 m/s) so that it crosses zone borders often.
  # `args`: `n` entities, placed over the whole world of `side` metres.
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Random
  alias Overworld.Spatial.View
  use Overworld.Zone

  @radius 12 * 1024

  @impl true
  def init(args) do
    n = Keyword.get(args, :n, 600)
    side = Keyword.get(args, :side, 240) * 1024

    crowd =
      for i <- 1..n do
        r = Random.next(Random.seed_for(7, i))
        x = rem(r, side)
        r = Random.next(r)
        y = rem(r, side)

        [
          kind: :walker,
          x: x,
          y: y,
          vx: rem(r, 8000) - 4000,
          vy: rem(div(r, 8000), 8000) - 4000,
          state: :idle,
          data: {0, false}
        ]
      end

    {:ok, %{}, [{:spawn, crowd}]}
  end

  @impl true
  def handle_entity(e, view, ctx) do
    near = View.neighbours(view, e, @radius)
    {x, y} = {entity(e, :x), entity(e, :y)}

    {px, py} =
      Enum.reduce(near, {0, 0}, fn n, {px, py} ->
        dx = x - entity(n, :x)
        dy = y - entity(n, :y)
        d = max(abs(dx) + abs(dy), 256)
        {px + div(dx * 600, d), py + div(dy * 600, d)}
      end)

    {turn, s} = Random.uniform(entity(e, :rng), 9)
    vx = clamp(entity(e, :vx) + px + (turn - 4) * 300, -8000, 8000)
    vy = clamp(entity(e, :vy) + py + (4 - turn) * 200, -8000, 8000)
    x2 = x + div(vx, ctx.tick_rate)
    y2 = y + div(vy, ctx.tick_rate)
    {x2, vx} = bounce(x2, vx, ctx.width)
    {y2, vy} = bounce(y2, vy, ctx.height)
    shadows? = Enum.any?(near, &View.shadow?(view, &1))

    {:ok,
     entity(e,
       x: x2,
       y: y2,
       vx: vx,
       vy: vy,
       rng: s,
       state: if(near == [], do: :idle, else: :wander),
       data: {length(near), shadows?}
     )}
  end

  defp clamp(v, lo, hi), do: v |> max(lo) |> min(hi)

  defp bounce(p, v, _max) when p < 0, do: {-p, -v}
  defp bounce(p, v, max) when p > max, do: {2 * max - p, -v}
  defp bounce(p, v, _max), do: {p, v}
end

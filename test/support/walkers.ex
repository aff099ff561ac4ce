defmodule Overworld.Test.Walkers do
  @moduledoc false
  # 300 walkers wandering in a 200 m world (and 20 rocks, not replicated); every 7th tick one
  # walker disappears and another appears.
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Random
  use Overworld.Zone

  @impl true
  def init(_args) do
    walkers =
      for i <- 1..300,
          do: [
            kind: :walker,
            x: rem(i * 7919, 200 * 1024),
            y: rem(i * 104_729, 200 * 1024),
            state: :idle
          ]

    rocks = for i <- 1..20, do: [kind: :rock, x: i * 5000, y: i * 5000]
    {:ok, %{}, [{:spawn, walkers ++ rocks}]}
  end

  # Now and then a walker disappears and another appears.
  @impl true
  def handle_tick(ctx, state) do
    if rem(ctx.tick, 7) == 0,
      do:
        {:ok, state,
         [
           {:despawn, ctx.tick},
           {:spawn, [kind: :walker, x: ctx.tick * 300, y: 1000, state: :flee]}
         ]},
      else: {:ok, state}
  end

  @impl true
  def handle_entity(e, _view, ctx) do
    if entity(e, :kind) == :walker do
      {r, s} = Random.uniform(entity(e, :rng), 100)
      {vx, s} = if r < 10, do: Random.uniform(s, 40_000), else: {entity(e, :vx) + 20_000, s}
      {vy, s} = if r < 10, do: Random.uniform(s, 40_000), else: {entity(e, :vy) + 20_000, s}
      {vx, vy} = {vx - 20_000, vy - 20_000}
      st = if r < 5, do: :wander, else: entity(e, :state)

      {:ok,
       entity(e,
         rng: s,
         vx: vx,
         vy: vy,
         heading: rem(entity(e, :heading) + r, 65_536),
         state: st,
         x: entity(e, :x) + div(vx, ctx.tick_rate),
         y: entity(e, :y) + div(vy, ctx.tick_rate)
       )}
    else
      {:ok, e}
    end
  end
end

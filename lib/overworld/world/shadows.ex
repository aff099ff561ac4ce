defmodule Overworld.World.Shadows do
  @moduledoc """
  Shadows between updates: the read-only copies a zone holds of its neighbours' entities near
  their common border (`Overworld.World`) come once per tick; a zone whose neighbour's message
  is late (the realtime clock) moves them on by their velocity (`reckon/3`), and drops them
  past the world's `:shadow_late` bound rather than draw them wrong.
  """
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Entity

  @doc """
  A shadow dead-reckoned `ticks` ticks past the tick it describes: moved by its velocity
  (units per second) at `tick_rate`.

      iex> require Overworld.Entity
      iex> e = Overworld.Entity.entity(id: 1, x: 1000, y: 500, vx: 3000, vy: -600)
      iex> e |> Overworld.World.Shadows.reckon(2, 30) |> then(&{Overworld.Entity.entity(&1, :x), Overworld.Entity.entity(&1, :y)})
      {1200, 460}
  """
  @spec reckon(Entity.t(), non_neg_integer, pos_integer) :: Entity.t()
  def reckon(e, 0, _rate), do: e

  def reckon(e, ticks, rate) do
    entity(e,
      x: entity(e, :x) + div(entity(e, :vx) * ticks, rate),
      y: entity(e, :y) + div(entity(e, :vy) * ticks, rate)
    )
  end
end

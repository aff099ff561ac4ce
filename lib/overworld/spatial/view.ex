defmodule Overworld.Spatial.View do
  @moduledoc """
  What an entity can see while `c:Overworld.Zone.handle_entity/3` runs: the whole zone as it
  was at the end of the **previous** tick.

  Every entity of a tick is computed from the same previous-tick view (a double buffer), so the
  result does not depend on the order in which entities are updated or on how many workers share
  the zone. Each worker holds its own cells plus a one-row halo of its neighbours' border cells,
  so a query reaches at most one cell size (the zone's `:cell_size`) around the entity.

  Neighbour lists come out in a canonical order (the 3x3 block of cells in a fixed pattern, then
  by id within a cell), whichever worker computes them.
  """
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Spatial.Grid

  @enforce_keys [:grid, :block]
  defstruct [:shadows | @enforce_keys]

  @typedoc """
  The view of one cell during one tick: the grid, and the entity lists (previous tick) of the
  3x3 block of cells around the cell being simulated.
  In a world of zones, `shadows` holds the ids of the neighbour zones' entities in the view
  (nil in a zone of its own).
  """
  @type t :: %__MODULE__{
          grid: Grid.t(),
          block: [[Overworld.Entity.t()]],
          shadows: nil | %{optional(pos_integer) => true}
        }

  @doc """
  Whether `entity`, seen in the view, is a **shadow**: an entity of a neighbour zone near the
  border (in a world of zones, `Overworld.World`), read-only here. It is seen like any other
  (same fields, same previous tick), but this zone's game code never updates it: its own zone
  does. Always false in a zone of its own.
  """
  @spec shadow?(t, Overworld.Entity.t()) :: boolean
  def shadow?(%__MODULE__{shadows: nil}, _e), do: false
  def shadow?(%__MODULE__{shadows: shadows}, e), do: is_map_key(shadows, entity(e, :id))

  @doc """
  The entities within `radius` units of `entity` (distance `<= radius`), without the entity
  itself, as they were at the end of the previous tick.

  `radius` may be at most the zone's cell size (`:cell_size`); a larger radius raises
  `ArgumentError`, since the worker only holds one ring of cells around its stripe.
  """
  @spec neighbours(t, Overworld.Entity.t(), non_neg_integer) :: [Overworld.Entity.t()]
  def neighbours(%__MODULE__{block: block, grid: %Grid{cell: cell}}, e, radius)
      when is_integer(radius) and radius >= 0 and radius <= cell do
    Grid.within(block, entity(e, :x), entity(e, :y), radius * radius, entity(e, :id))
  end

  def neighbours(%__MODULE__{grid: %Grid{cell: cell}}, _e, radius) do
    raise ArgumentError,
          "expected the neighbour radius to be an integer in 0..#{cell} (the zone's cell size " <>
            "in units), got: #{inspect(radius)}"
  end

  @doc """
  The candidate lists of the 3x3 block of cells around the entity's cell (previous tick): every
  entity within one cell size of the entity is in them, the entity itself included. For hot
  game code that filters and scans in one pass instead of calling `neighbours/3` and walking
  the result (the lists come in the same canonical order).
  """
  @spec candidates(t) :: [[Overworld.Entity.t()]]
  def candidates(%__MODULE__{block: block}), do: block
end

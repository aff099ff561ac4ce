defmodule Overworld.Test.Scenes do
  @moduledoc false
  # PropEr generators of small worlds with entities in them, shared by the spatial tests.
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1]

  @doc """
  A world `{w, h, cell}` (units) and `lists` lists of points inside it, plus `extra` generators
  built from the world (e.g. a query point).
  """
  def world(max_side, max_cell, lists, extra \\ fn _w, _h -> [] end) do
    :proper_types.bind(
      :proper_types.tuple([
        :proper_types.integer(1, max_side),
        :proper_types.integer(1, max_side),
        :proper_types.integer(1, max_cell)
      ]),
      fn {w, h, cell} ->
        point = :proper_types.tuple([:proper_types.integer(0, w), :proper_types.integer(0, h)])
        points = List.duplicate(:proper_types.list(point), lists)
        :proper_types.tuple([:proper_types.exactly({w, h, cell}) | points ++ extra.(w, h)])
      end,
      false
    )
  end

  @doc "Entities at the points, with ids from `first_id` on."
  def entities(points, first_id \\ 1) do
    points
    |> Enum.with_index(first_id)
    |> Enum.map(fn {{x, y}, id} -> entity(id: id, x: x, y: y) end)
  end
end

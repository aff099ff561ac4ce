defmodule Overworld.Zone.Context do
  @moduledoc """
  The tick context handed to `c:Overworld.Zone.handle_tick/2` and
  `c:Overworld.Zone.handle_entity/3`.

  * `zone` — the zone id
  * `tick` — the number of the tick being computed (1, 2, ...; tick 0 is the initial state)
  * `tick_rate` — ticks per second
  * `width`, `height` — the world size in units (`Overworld.Entity.unit/0` per metre); positions
    are kept within `0..width` and `0..height` (and within the zone's region when it owns
    one: zone option `:region`)
  * `cell_size` — the grid cell size in units, also the largest neighbour query radius
  * `seed` — the zone seed
  * `paths` — the answers to the path requests of the state the last tick left, by entity id
    (`path/2`)
  """
  @enforce_keys [:zone, :tick, :tick_rate, :width, :height, :cell_size, :seed]
  defstruct @enforce_keys ++ [paths: %{}]

  @type t :: %__MODULE__{
          zone: term,
          tick: non_neg_integer,
          tick_rate: pos_integer,
          width: non_neg_integer,
          height: non_neg_integer,
          cell_size: pos_integer,
          seed: integer,
          paths: %{optional(pos_integer) => Overworld.Zone.Paths.answer()}
        }

  @doc """
  The answer to the path request of entity `id` (`c:Overworld.Zone.path_to/1` of the state
  the last tick left), or nil when it asked for none:

  * `{:ok, waypoints}` — points in units, the centres of the navigation cells after the
    entity's own, the last one the point it asked for;
  * `{:error, :blocked}` (its cell or the goal's is blocked or off the grid),
    `{:error, :unreachable}`, `{:error, :too_far}` (the search gave up after the zone's
    `nav: [max_nodes: n]` cells);
  * `:queued` — not computed this tick (the zone's `nav: [per_tick: n]` bound): ask again;
  * `{:error, :busy}` — more requests wait than the zone queues (`nav: [queue: n]`): ask
    again later.

  See `Overworld.Zone.Paths` and docs/sidecar.md, "Paths in a zone".

      iex> ctx = %Overworld.Zone.Context{zone: :z, tick: 2, tick_rate: 30, width: 1, height: 1, cell_size: 1, seed: 0}
      iex> Overworld.Zone.Context.path(%{ctx | paths: %{7 => :queued}}, 7)
      :queued
      iex> Overworld.Zone.Context.path(ctx, 8)
      nil
  """
  @spec path(t, pos_integer) :: Overworld.Zone.Paths.answer() | nil
  def path(%__MODULE__{paths: paths}, id), do: Map.get(paths, id)
end

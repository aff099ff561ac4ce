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
  """
  @enforce_keys [:zone, :tick, :tick_rate, :width, :height, :cell_size, :seed]
  defstruct @enforce_keys

  @type t :: %__MODULE__{
          zone: term,
          tick: non_neg_integer,
          tick_rate: pos_integer,
          width: non_neg_integer,
          height: non_neg_integer,
          cell_size: pos_integer,
          seed: integer
        }
end

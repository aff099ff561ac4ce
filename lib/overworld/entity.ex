defmodule Overworld.Entity do
  @moduledoc """
  Entities are data: a record (a tagged tuple) inside a zone, never a process.

  NPCs, items and projectiles are only entities; a connected player is a process (its session)
  whose avatar is an entity with an `owner`. Entities live in the zone's bucket workers, grouped
  by grid cell, and are rebuilt every tick by the zone's `c:Overworld.Zone.handle_entity/3`.

  ## Fields

  | field     | meaning                                                                 |
  | --------- | ----------------------------------------------------------------------- |
  | `id`      | positive integer, unique in the zone, assigned at spawn                 |
  | `kind`    | a term naming the entity's kind (an atom of the game, e.g. `:goblin`)   |
  | `x`, `y`  | position in fixed-point units, `#{1024}` units per metre (see `unit/0`)   |
  | `vx`,`vy` | velocity in units per second                                            |
  | `heading` | direction in 1/65536 of a turn (0..65535)                               |
  | `state`   | a small game-defined term (for example a state-machine state)           |
  | `rng`     | the entity's own `Overworld.Random` state, seeded from zone seed and id |
  | `data`    | game fields: any term the game wants (a small tuple is fastest)         |
  | `owner`   | the player controlling this entity, or `nil` for NPCs                   |
  | `input`   | the latest input of the owner (kept until a newer one arrives), or nil  |

  Positions are integers: small integers are not boxed on the BEAM, arithmetic on them is exact
  and deterministic on every machine, and they are already quantized for the wire.

  Use the record macros in game code:

      require Overworld.Entity
      import Overworld.Entity, only: [entity: 1, entity: 2]

      def handle_entity(entity(x: x, vx: vx) = e, _view, ctx) do
        {:ok, entity(e, x: x + div(vx, ctx.tick_rate))}
      end
  """
  require Record

  @unit 1024

  Record.defrecord(:entity,
    id: 0,
    kind: nil,
    x: 0,
    y: 0,
    vx: 0,
    vy: 0,
    heading: 0,
    state: nil,
    rng: 1,
    data: nil,
    owner: nil,
    input: nil
  )

  @typedoc "An entity record."
  @type t ::
          record(:entity,
            id: pos_integer,
            kind: term,
            x: integer,
            y: integer,
            vx: integer,
            vy: integer,
            heading: 0..65535,
            state: term,
            rng: Overworld.Random.state(),
            data: term,
            owner: term,
            input: term
          )

  @doc """
  Fixed-point units per metre.

      iex> Overworld.Entity.unit()
      1024
  """
  @spec unit() :: pos_integer
  def unit, do: @unit

  @doc """
  Converts metres to units (truncating).

      iex> Overworld.Entity.meters(1.5)
      1536
      iex> Overworld.Entity.meters(12)
      12288
  """
  @spec meters(number) :: integer
  def meters(m) when is_integer(m), do: m * @unit
  def meters(m) when is_float(m), do: trunc(m * @unit)

  @doc """
  The entity as a map, for inspection and tests.

      iex> Overworld.Entity.to_map(Overworld.Entity.entity(id: 7, x: 10))
      %{id: 7, kind: nil, x: 10, y: 0, vx: 0, vy: 0, heading: 0, state: nil, rng: 1, data: nil, owner: nil, input: nil}
  """
  @spec to_map(t) :: map
  def to_map(entity() = e), do: Map.new(entity(e))

  @doc """
  True when `term` is an entity record.

      iex> Overworld.Entity.entity?(Overworld.Entity.entity(id: 1))
      true
      iex> Overworld.Entity.entity?({:entity, 1})
      false
  """
  @spec entity?(term) :: boolean
  def entity?(term), do: Record.is_record(term, :entity) and tuple_size(term) == 13
end

defmodule Overworld.World.Shadows do
  @moduledoc """
  The arithmetic of shadows: the read-only copies a zone holds of its neighbours' entities near
  their common border, so that entities on both sides see and react to each other.

  * **The margin** a zone shares of its border (`required_margin/1`, `check_margin/1`): what a
    neighbour may need — the largest neighbour radius (the cell size), the handoff's hysteresis
    margin (an entity of ours may stand that far inside the neighbour's region), and the
    farthest an entity moves in one shadow period.
  * **Who gets what** (`split/4`): each entity within the margin of a neighbour's region goes
    to that neighbour's list (an entity near a corner to two or three).
  * **The message** (`encode/2`, `decode/1`): one per neighbour per shadow period, tagged with
    the tick it describes, as one binary (compact, and copied between processes by reference).
  * **Between updates** (`reckon/3`, `fresh?/3`): a shadow's position is dead-reckoned from its
    velocity; a shadow whose update is late by more than a bound is dropped rather than drawn
    wrong.
  """
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Entity
  alias Overworld.World.Layout

  @doc """
  The margin in metres a zone must share of its border: the neighbour radius (`:radius`, the
  zones' cell size), the hysteresis margin (`:hysteresis`), and the farthest an entity moves in
  one shadow period (`:max_speed` in m/s times `:every` ticks at `:tick_rate`).

      iex> Overworld.World.Shadows.required_margin(radius: 12, hysteresis: 2, max_speed: 6, every: 1, tick_rate: 30)
      14.2
  """
  @spec required_margin(keyword) :: float
  def required_margin(opts) do
    radius = Keyword.fetch!(opts, :radius)
    hysteresis = Keyword.fetch!(opts, :hysteresis)

    move =
      Keyword.fetch!(opts, :max_speed) * Keyword.fetch!(opts, :every) /
        Keyword.fetch!(opts, :tick_rate)

    Float.round((radius + hysteresis + move) / 1, 6)
  end

  @doc """
  `:ok` when `opts[:margin]` covers `required_margin/1`, else `{:error, why}` naming what it
  must cover.

      iex> Overworld.World.Shadows.check_margin(margin: 16, radius: 12, hysteresis: 2, max_speed: 6, every: 1, tick_rate: 30)
      :ok
      iex> {:error, why} = Overworld.World.Shadows.check_margin(margin: 13, radius: 12, hysteresis: 2, max_speed: 6, every: 1, tick_rate: 30)
      iex> why
      "the shadow margin (13 m) must be at least 14.2 m: the neighbour radius (12 m), the hysteresis margin (2 m) and the farthest an entity moves in a shadow period (0.2 m)"
  """
  @spec check_margin(keyword) :: :ok | {:error, String.t()}
  def check_margin(opts) do
    need = required_margin(opts)
    margin = Keyword.fetch!(opts, :margin)

    if margin >= need do
      :ok
    else
      move = Float.round(need - opts[:radius] - opts[:hysteresis], 6)

      {:error,
       "the shadow margin (#{margin} m) must be at least #{need} m: the neighbour radius " <>
         "(#{opts[:radius]} m), the hysteresis margin (#{opts[:hysteresis]} m) and the farthest " <>
         "an entity moves in a shadow period (#{move} m)"}
    end
  end

  @doc """
  The entities of zone `id` that its neighbours must hold as shadows: neighbour => entities
  within `margin` metres of the neighbour's region (in the order given). Neighbours with none
  are left out.

      iex> require Overworld.Entity
      iex> l = Overworld.World.Layout.new!(size: {100, 100}, cell_size: 10, zones: {2, 2})
      iex> es = for {id, x, y} <- [{1, 10, 10}, {2, 55, 10}, {3, 55, 55}], do: Overworld.Entity.entity(id: id, x: x * 1024, y: y * 1024)
      iex> Overworld.World.Shadows.split(l, {0, 0}, es, 8) |> Map.new(fn {z, list} -> {z, Enum.map(list, &elem(&1, 1))} end)
      %{{0, 1} => [3], {1, 0} => [2, 3], {1, 1} => [3]}
  """
  @spec split(Layout.t(), term, [Entity.t()], number) :: %{optional(term) => [Entity.t()]}
  def split(%Layout{} = l, id, entities, margin) do
    unit = Entity.unit()

    entities
    |> Enum.reduce(%{}, fn e, acc ->
      x = entity(e, :x) / unit
      y = entity(e, :y) / unit

      Enum.reduce(Layout.near(l, id, x, y, margin), acc, fn n, acc ->
        Map.update(acc, n, [e], &[e | &1])
      end)
    end)
    |> Map.new(fn {n, list} -> {n, Enum.reverse(list)} end)
  end

  @doc """
  One shadow message's payload: the tick it describes and the entities, as a binary.

      iex> alias Overworld.World.Shadows
      iex> require Overworld.Entity
      iex> es = [Overworld.Entity.entity(id: 7, x: 1, y: 2)]
      iex> Shadows.decode(Shadows.encode(41, es))
      {:ok, 41, es}
      iex> Shadows.decode("junk")
      {:error, :bad_shadows}
  """
  @spec encode(non_neg_integer, [Entity.t()]) :: binary
  def encode(tick, entities), do: :erlang.term_to_binary({:shadows, tick, entities})

  @doc "The tick and entities of a payload of `encode/2`, or `{:error, :bad_shadows}`."
  @spec decode(binary) :: {:ok, non_neg_integer, [Entity.t()]} | {:error, :bad_shadows}
  def decode(bin) when is_binary(bin) do
    case :erlang.binary_to_term(bin, [:safe]) do
      {:shadows, tick, entities} when is_integer(tick) and tick >= 0 and is_list(entities) ->
        if Enum.all?(entities, &Entity.entity?/1),
          do: {:ok, tick, entities},
          else: {:error, :bad_shadows}

      _ ->
        {:error, :bad_shadows}
    end
  rescue
    ArgumentError -> {:error, :bad_shadows}
  end

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

  @doc """
  Whether shadows describing tick `described` may still be used at tick `now`: late by at most
  `max_late` ticks (past it they are dropped rather than drawn wrong).

      iex> Overworld.World.Shadows.fresh?(40, 41, 3)
      true
      iex> Overworld.World.Shadows.fresh?(40, 45, 3)
      false
  """
  @spec fresh?(non_neg_integer, non_neg_integer, non_neg_integer) :: boolean
  def fresh?(described, now, max_late), do: now - described <= max_late
end

defmodule Overworld.Zone.Ids do
  @moduledoc """
  A zone's entity ids: the ids `n >= 1` with `rem(n, count) == index` for its id space
  `{index, count}` (zone option `:id_space`; `{0, 1}`, every id, by default). Zones of a world
  get disjoint spaces (`Overworld.World.Layout.id_space/2`), so no two of them ever make the
  same id, also after restarts from disk: a zone allocates upwards from its `next_id`, which is
  always in its space.

      iex> alias Overworld.Zone.Ids
      iex> Ids.first({2, 3})
      2
      iex> Ids.take({2, 3}, 2, 3)
      {[2, 5, 8], 11}
      iex> Ids.from({2, 3}, 9)
      11
      iex> Ids.first({0, 4})
      4
      iex> Ids.take({0, 1}, 7, 2)
      {[7, 8], 9}
  """

  @type space :: {non_neg_integer, pos_integer}

  @doc "Whether `space` is a valid id space (`0 <= index < count`)."
  @spec valid?(term) :: boolean
  def valid?({i, c}) when is_integer(i) and is_integer(c), do: c >= 1 and i >= 0 and i < c
  def valid?(_), do: false

  @doc "The space's first id."
  @spec first(space) :: pos_integer
  def first(space), do: from(space, 1)

  @doc "The smallest id of the space that is `n` or more."
  @spec from(space, integer) :: pos_integer
  def from({i, c}, n) do
    n = max(n, 1)
    n + Integer.mod(i - n, c)
  end

  @doc "`k` ids from `next` (an id of the space) and the next id after them."
  @spec take(space, pos_integer, non_neg_integer) :: {[pos_integer], pos_integer}
  def take({_i, c}, next, k), do: {Enum.map(0..(k - 1)//1, &(next + &1 * c)), next + k * c}

  @doc "Whether `id` is in the space."
  @spec member?(space, integer) :: boolean
  def member?({i, c}, id), do: id >= 1 and Integer.mod(id, c) == i
end

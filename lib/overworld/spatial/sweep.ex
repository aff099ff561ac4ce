defmodule Overworld.Spatial.Sweep do
  @moduledoc """
  Cells as a list of `{key, entities}` pairs sorted by key (row-major), and a sweep that yields
  the 3x3 block of each cell without any lookup.

  The bucket workers keep their cells this way. Walking the cells in key order, three cursors
  (row above, same row, row below) only ever move forward, so the block of every cell costs a
  few comparisons instead of nine map lookups, and rebuilding the cells after a tick is a linear
  merge instead of a map rebuild. Entity lists inside a cell stay sorted by id, as in
  `Overworld.Spatial.Grid`.

      iex> alias Overworld.Spatial.{Grid, Sweep}
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> pairs = Sweep.from_entities(g, [entity(id: 2, x: 15, y: 5), entity(id: 1, x: 5, y: 5), entity(id: 3, x: 95, y: 95)])
      iex> Enum.map(pairs, fn {_k, l} -> Enum.map(l, &entity(&1, :id)) end)
      [[1], [2], [3]]
      iex> {block, _cursors} = Sweep.block(Sweep.cursors(pairs), Grid.key(g, 5, 5), g.stride)
      iex> block |> List.flatten() |> Enum.map(&entity(&1, :id)) |> Enum.sort()
      [1, 2]
  """
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Spatial.Grid

  @typedoc "Non-empty cells sorted by key; each cell's entities sorted by id."
  @type pairs :: [{integer, [Overworld.Entity.t(), ...]}]

  @typedoc "Sweep state: the suffixes of the view for the rows above, at and below the cell."
  @type cursors :: {pairs, pairs, pairs}

  @doc "Sorted pairs from a list of entities."
  @spec from_entities(Grid.t(), [Overworld.Entity.t()]) :: pairs
  def from_entities(grid, entities), do: insert([], grid, entities)

  @doc "Sweep cursors at the start of `view`."
  @spec cursors(pairs) :: cursors
  def cursors(view), do: {view, view, view}

  @doc """
  The entity lists of the existing cells of the 3x3 block around key `k` (`stride` is the
  grid's), and the advanced cursors. Keys must be asked for in increasing order.
  """
  @spec block(cursors, integer, pos_integer) :: {[[Overworld.Entity.t()]], cursors}
  def block({above, same, below}, k, stride) do
    {lists, above, same, below} = block(above, same, below, k, stride)
    {lists, {above, same, below}}
  end

  @doc "`block/3` with the three cursors as arguments (the hot path: no tuple per cell)."
  @spec block(pairs, pairs, pairs, integer, pos_integer) ::
          {[[Overworld.Entity.t()]], pairs, pairs, pairs}
  def block(above, same, below, k, stride) do
    above = skip(above, k - stride - 1)
    same = skip(same, k - 1)
    below = skip(below, k + stride - 1)
    lists = take(below, k + stride + 1, take(same, k + 1, take(above, k - stride + 1, [])))
    {lists, above, same, below}
  end

  defp skip([{key, _} | rest], min) when key < min, do: skip(rest, min)
  defp skip(pairs, _min), do: pairs

  defp take([{key, l} | rest], max, acc) when key <= max, do: take(rest, max, [l | acc])
  defp take(_pairs, _max, acc), do: acc

  @doc """
  Inserts entities into sorted pairs (each into the cell of its position, keeping cells sorted
  by id): one sort of the newcomers and one linear merge.

      iex> alias Overworld.Spatial.{Grid, Sweep}
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> pairs = Sweep.from_entities(g, [entity(id: 1, x: 1, y: 1), entity(id: 5, x: 2, y: 2)])
      iex> pairs = Sweep.insert(pairs, g, [entity(id: 3, x: 3, y: 3), entity(id: 9, x: 50, y: 50)])
      iex> Enum.map(pairs, fn {_k, l} -> Enum.map(l, &entity(&1, :id)) end)
      [[1, 3, 5], [9]]
  """
  @spec insert(pairs, Grid.t(), [Overworld.Entity.t()]) :: pairs
  def insert(pairs, _grid, []), do: pairs
  def insert(pairs, grid, entities), do: insert_desc(:lists.reverse(pairs), grid, entities, [])

  @doc """
  Like `insert/3`, for cells given in **descending** key order (as a pass produces them):
  returns the cells in ascending order followed by `tail`, in one walk (the reversal and the
  merge are the same pass, and `tail` is appended without a copy).

      iex> alias Overworld.Spatial.{Grid, Sweep}
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> desc = g |> Sweep.from_entities([entity(id: 1, x: 1, y: 1), entity(id: 5, x: 2, y: 2), entity(id: 7, x: 55, y: 1)]) |> Enum.reverse()
      iex> pairs = Sweep.insert_desc(desc, g, [entity(id: 3, x: 3, y: 3), entity(id: 9, x: 50, y: 50)], [:tail])
      iex> Enum.map(pairs, fn {_k, l} -> Enum.map(l, &entity(&1, :id)); t -> t end)
      [[1, 3, 5], [7], [9], :tail]
  """
  @spec insert_desc(pairs, Grid.t(), [Overworld.Entity.t()], list) :: list
  def insert_desc(desc, _grid, [], tail), do: :lists.reverse(desc, tail)

  def insert_desc(desc, grid, entities, tail) do
    incoming =
      entities
      |> Enum.map(fn e -> {Grid.key(grid, entity(e, :x), entity(e, :y)), entity(e, :id), e} end)
      |> :lists.sort()
      |> :lists.reverse()

    merge_desc(desc, incoming, tail)
  end

  defp merge_desc(desc, [], acc), do: :lists.reverse(desc, acc)

  defp merge_desc([{k, _} = pair | rest], [{k2, _, _} | _] = incoming, acc) when k > k2,
    do: merge_desc(rest, incoming, [pair | acc])

  defp merge_desc([{k, l} | rest], [{k, _, _} | _] = incoming, acc) do
    {mine, incoming} = split_desc(incoming, k, [])
    merge_desc(rest, incoming, [{k, :lists.merge(&by_id/2, l, mine)} | acc])
  end

  defp merge_desc(desc, [{k2, _, _} | _] = incoming, acc) do
    {mine, incoming} = split_desc(incoming, k2, [])
    merge_desc(desc, incoming, [{k2, mine} | acc])
  end

  # The leading incoming entities of key k (they come in descending id order): in id order.
  defp split_desc([{k, _, e} | rest], k, acc), do: split_desc(rest, k, [e | acc])
  defp split_desc(rest, _k, acc), do: {acc, rest}

  defp by_id(a, b), do: entity(a, :id) <= entity(b, :id)

  @doc """
  Merges sorted pairs that may share keys (parts of the same cell from different workers) into
  sorted pairs.
  """
  @spec union([pairs]) :: pairs
  def union(parts) do
    parts
    |> Enum.concat()
    |> Enum.reduce(%{}, fn {k, l}, acc ->
      Map.update(acc, k, l, &:lists.merge(fn a, b -> by_id(a, b) end, &1, l))
    end)
    |> :maps.to_list()
    |> :lists.sort()
  end

  @doc """
  Two sorted pair lists as one (cells of both; a cell in both gets both lists, merged by id),
  in one linear walk.

      iex> alias Overworld.Spatial.{Grid, Sweep}
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> a = Sweep.from_entities(g, [entity(id: 1, x: 1, y: 1), entity(id: 4, x: 50, y: 50)])
      iex> b = Sweep.from_entities(g, [entity(id: 2, x: 2, y: 2), entity(id: 3, x: 25, y: 5)])
      iex> Sweep.merge(a, b) |> Enum.map(fn {_k, l} -> Enum.map(l, &entity(&1, :id)) end)
      [[1, 2], [3], [4]]
  """
  @spec merge(pairs, pairs) :: pairs
  def merge(a, []), do: a
  def merge([], b), do: b
  def merge(a, b), do: merge(a, b, [])

  defp merge([{ka, _} = pa | ra], [{kb, _} | _] = b, acc) when ka < kb,
    do: merge(ra, b, [pa | acc])

  defp merge([{ka, _} | _] = a, [{kb, _} = pb | rb], acc) when kb < ka,
    do: merge(a, rb, [pb | acc])

  defp merge([{k, la} | ra], [{k, lb} | rb], acc),
    do: merge(ra, rb, [{k, :lists.merge(&by_id/2, la, lb)} | acc])

  defp merge(a, [], acc), do: :lists.reverse(acc, a)
  defp merge([], b, acc), do: :lists.reverse(acc, b)

  @doc """
  The pairs without the entities whose id is a key of `ids` (cells left empty go).

      iex> alias Overworld.Spatial.{Grid, Sweep}
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> pairs = Sweep.from_entities(g, [entity(id: 1, x: 1, y: 1), entity(id: 2, x: 2, y: 2), entity(id: 3, x: 50, y: 50)])
      iex> Sweep.without(pairs, %{2 => true, 3 => true}) |> Enum.map(fn {_k, l} -> Enum.map(l, &entity(&1, :id)) end)
      [[1]]
  """
  @spec without(pairs, map) :: pairs
  def without(pairs, ids) do
    for {k, l} <- pairs,
        kept = Enum.reject(l, &is_map_key(ids, entity(&1, :id))),
        kept != [],
        do: {k, kept}
  end

  @doc "All entities of the pairs."
  @spec entities(pairs) :: [Overworld.Entity.t()]
  def entities(pairs), do: Enum.flat_map(pairs, &elem(&1, 1))
end

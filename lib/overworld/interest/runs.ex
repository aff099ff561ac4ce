defmodule Overworld.Interest.Runs do
  @moduledoc """
  Runs of cells within one row of the grid, the arithmetic `Overworld.Interest` does on the
  view: a region's run is `{first col, last col}`; the cells a client holds are sorted,
  disjoint runs `{first col, last col, tick}` (the tick the client has them at); the cells a
  snapshot lists as held back are runs of cell keys `{first key, count}`.
  """

  @typedoc "Held cells of a row: `{first col, last col, tick}`, sorted, disjoint."
  @type held :: [{integer, integer, non_neg_integer}]

  @doc """
  The cells of run `{a, b}` outside run `new` (nil: none), as up to two runs.

      iex> Overworld.Interest.Runs.minus({2, 9}, {4, 6})
      [{2, 3}, {7, 9}]
      iex> Overworld.Interest.Runs.minus({2, 9}, {0, 5})
      [{6, 9}]
      iex> Overworld.Interest.Runs.minus({2, 9}, nil)
      [{2, 9}]
  """
  @spec minus({integer, integer}, {integer, integer} | nil) :: [{integer, integer}]
  def minus(run, nil), do: [run]

  def minus({a, b}, {c, d}),
    do: Enum.filter([{a, min(b, c - 1)}, {max(a, d + 1), b}], fn {x, y} -> x <= y end)

  @doc """
  Held runs cut to the region's run `{c, d}` of their row (nil: the row left the region).

      iex> Overworld.Interest.Runs.clip([{0, 3, 5}, {4, 9, 6}], {2, 5})
      [{2, 3, 5}, {4, 5, 6}]
      iex> Overworld.Interest.Runs.clip([{0, 3, 5}], nil)
      []
  """
  @spec clip(held, {integer, integer} | nil) :: held
  def clip(_runs, nil), do: []

  def clip(runs, {c, d}) do
    for {a, b, t} <- runs, a <= d and b >= c, do: {max(a, c), min(b, d), t}
  end

  @doc """
  Cells `a..b` are now held at tick `n`; neighbours at the same tick are joined.

      iex> Overworld.Interest.Runs.set([{0, 9, 5}], 3, 4, 6)
      [{0, 2, 5}, {3, 4, 6}, {5, 9, 5}]
      iex> Overworld.Interest.Runs.set([{0, 2, 6}, {3, 4, 5}, {5, 9, 6}], 3, 4, 6)
      [{0, 9, 6}]
      iex> Overworld.Interest.Runs.set([], 3, 3, 1)
      [{3, 3, 1}]
  """
  @spec set(held, integer, integer, non_neg_integer) :: held
  def set(runs, a, b, n), do: runs |> cut(a, b, {a, b, n}) |> join()

  @doc """
  Cells `a..b` are no longer held (their blocks are gone: they come back as keyframes).

      iex> Overworld.Interest.Runs.drop([{0, 9, 5}, {12, 14, 5}], 3, 12)
      [{0, 2, 5}, {13, 14, 5}]
  """
  @spec drop(held, integer, integer) :: held
  def drop(runs, a, b) do
    Enum.flat_map(runs, fn
      {c, d, t} when c <= b and d >= a ->
        Enum.filter([{c, a - 1, t}, {b + 1, d, t}], fn {x, y, _} -> x <= y end)

      run ->
        [run]
    end)
  end

  @doc """
  Runs of cell keys `{first key, count}`, sorted, with neighbours joined.

      iex> Overworld.Interest.Runs.join_keys([{10, 2}, {12, 1}, {20, 3}])
      [{10, 3}, {20, 3}]
  """
  @spec join_keys([{non_neg_integer, pos_integer}]) :: [{non_neg_integer, pos_integer}]
  def join_keys([{k, c}, {k2, c2} | rest]) when k + c == k2, do: join_keys([{k, c + c2} | rest])
  def join_keys([run | rest]), do: [run | join_keys(rest)]
  def join_keys([]), do: []

  defp cut([], _a, _b, new), do: [new]
  defp cut([{_, d, _} = run | rest], a, b, new) when d < a, do: [run | cut(rest, a, b, new)]
  defp cut([{c, _, _} | _] = runs, _a, b, new) when c > b, do: [new | runs]

  # Overlapping: keep what is left of it on either side.
  defp cut([{c, d, t} | rest], a, b, new) do
    after_ = if d > b, do: [{b + 1, d, t} | rest], else: rest
    before = if c < a, do: [{c, a - 1, t}], else: []
    before ++ cut_rest(after_, a, b, new)
  end

  defp cut_rest([{c, d, t} | rest], a, b, new) when c <= b do
    if d > b, do: [new, {b + 1, d, t} | rest], else: cut_rest(rest, a, b, new)
  end

  defp cut_rest(rest, _a, _b, new), do: [new | rest]

  defp join([{a, b, t}, {c, d, t} | rest]) when c == b + 1, do: join([{a, d, t} | rest])
  defp join([run | rest]), do: [run | join(rest)]
  defp join([]), do: []
end

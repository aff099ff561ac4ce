defmodule Overworld.Interest.Region do
  @moduledoc """
  The grid cells an observer at `(x, y)` sees, with hysteresis (pure functions).

  A region is a map `row => {first_col, last_col}`: in every row the visible cells are one run
  of columns (the trace of a disc on a row). Positions and radii are in world units
  (1/1024 m); cells are those of a `Overworld.Spatial.Grid`.

  * A cell **enters** when its nearest point is within the view radius `r`: every entity within
    `r` of the observer is in a visible cell.
  * A cell **stays** while its farthest point is within the leave radius `l`: no entity beyond
    `l` is ever in a visible cell. `l` must be at least `r` plus a cell diagonal, so that a cell
    that just entered is not dropped at once (`check_radii/3`).
  * `update/3`: the new region from the old one: in each row, the entering run joined with what
    of the old run still stays.

      iex> g = Overworld.Spatial.Grid.new(100 * 1024, 100 * 1024, 10 * 1024)
      iex> enter = Overworld.Interest.Region.enter(g, 55 * 1024, 55 * 1024, 12 * 1024)
      iex> Enum.sort(enter)
      [{4, {4, 6}}, {5, {4, 6}}, {6, {4, 6}}]
      iex> keep = Overworld.Interest.Region.keep(g, 55 * 1024, 55 * 1024, 30 * 1024)
      iex> Enum.sort(keep)
      [{3, {4, 6}}, {4, {3, 7}}, {5, {3, 7}}, {6, {3, 7}}, {7, {4, 6}}]
      iex> # The observer walks 15 m east: the cells it leaves behind stay (hysteresis).
      iex> old = Map.new(enter)
      iex> new_enter = Overworld.Interest.Region.enter(g, 70 * 1024, 55 * 1024, 12 * 1024)
      iex> new_keep = Overworld.Interest.Region.keep(g, 70 * 1024, 55 * 1024, 30 * 1024)
      iex> Overworld.Interest.Region.update(old, new_enter, new_keep) |> Enum.sort()
      [{4, {5, 8}}, {5, {5, 8}}, {6, {5, 8}}]
  """
  alias Overworld.Spatial.Grid

  @type run :: {non_neg_integer, non_neg_integer}
  @type t :: %{optional(non_neg_integer) => run}

  @doc """
  Checks a view radius and a leave radius (units) against the cell size: `:ok` or an error
  message.

      iex> Overworld.Interest.Region.check_radii(90, 120, 12)
      :ok
      iex> Overworld.Interest.Region.check_radii(90, 95, 12)
      {:error, "the leave radius (95) must be at least the view radius (90) plus a cell diagonal (17)"}
  """
  @spec check_radii(number, number, number) :: :ok | {:error, String.t()}
  def check_radii(r, l, cell) do
    diag = ceil(cell * :math.sqrt(2))

    if l >= r + diag,
      do: :ok,
      else:
        {:error,
         "the leave radius (#{l}) must be at least the view radius (#{r}) plus a cell diagonal (#{diag})"}
  end

  @doc "Cells whose nearest point is within `r` of `(x, y)`."
  @spec enter(Grid.t(), integer, integer, non_neg_integer) :: t
  def enter(%Grid{cell: s} = g, x, y, r) do
    # From the row whose bottom edge is at y - r (its nearest point exactly at r: within), as
    # the columns are counted, and as next/6 counts.
    first = max(0, ceil((y - r) / s) - 1)

    for row <- first..min(g.rows - 1, floor((y + r) / s))//1, into: %{} do
      dy = max(0, max(row * s - y, y - (row + 1) * s))
      w = :math.sqrt(max(0, r * r - dy * dy))
      # Nearest dx within w: col * s <= x + w and (col + 1) * s >= x - w.
      {row, clamp(g, ceil((x - w) / s) - 1, floor((x + w) / s))}
    end
    |> drop_empty()
  end

  @doc "Cells whose farthest point is within `l` of `(x, y)`."
  @spec keep(Grid.t(), integer, integer, non_neg_integer) :: t
  def keep(%Grid{cell: s} = g, x, y, l) do
    for row <- rows(g, y - l, y + l),
        dy = max(abs(y - row * s), abs(y - (row + 1) * s)),
        dy <= l,
        into: %{} do
      w = :math.sqrt(l * l - dy * dy)
      # Farthest dx within w: col * s >= x - w and (col + 1) * s <= x + w.
      {row, clamp(g, ceil((x - w) / s), floor((x + w) / s) - 1)}
    end
    |> drop_empty()
  end

  @doc "The region after a move: per row, the entering run joined with the old run's kept part."
  @spec update(t, t, t) :: t
  def update(old, enter, keep) do
    rows = Map.keys(old) ++ Map.keys(enter)

    for row <- Enum.uniq(rows),
        run = join(Map.get(enter, row), kept(Map.get(old, row), Map.get(keep, row))),
        run != nil,
        into: %{},
        do: {row, run}
  end

  @doc """
  `update(old, enter(g, x, y, r), keep(g, x, y, l))` in one pass, without the intermediate
  maps: what an observer computes every frame. Answers `old` itself when nothing changed.
  """
  @spec next(t, Grid.t(), integer, integer, non_neg_integer, non_neg_integer) :: t
  def next(old, %Grid{cell: s, rows: rows} = g, x, y, r, l) do
    {r0, r1} = {max(0, div(max(y - l, 0), s)), min(rows - 1, div(y + l, s))}
    {r0, r1} = Enum.reduce(old, {r0, r1}, fn {row, _}, {a, b} -> {min(a, row), max(b, row)} end)
    list = next_rows(r0, r1, old, g, x, y, r * r, l * l, [])

    case :maps.from_list(list) do
      ^old -> old
      new -> new
    end
  end

  defp next_rows(row, last, _old, _g, _x, _y, _r2, _l2, acc) when row > last, do: acc

  defp next_rows(row, last, old, %Grid{cell: s, cols: cols} = g, x, y, r2, l2, acc) do
    y0 = row * s
    y1 = y0 + s
    # Entering run: nearest point within r.
    dy = if y < y0, do: y0 - y, else: if(y > y1, do: y - y1, else: 0)

    enter =
      if dy * dy <= r2 do
        w = :math.sqrt(r2 - dy * dy)
        run(ceil((x - w) / s) - 1, floor((x + w) / s), cols)
      end

    # Kept run: farthest point within l.
    fy = max(abs(y - y0), abs(y - y1))

    keep =
      if fy * fy <= l2 do
        w = :math.sqrt(l2 - fy * fy)
        run(ceil((x - w) / s), floor((x + w) / s) - 1, cols)
      end

    acc =
      case join(enter, kept(Map.get(old, row), keep)) do
        nil -> acc
        run -> [{row, run} | acc]
      end

    next_rows(row + 1, last, old, g, x, y, r2, l2, acc)
  end

  defp run(a, b, cols) do
    {a, b} = {max(0, a), min(cols - 1, b)}
    if a <= b, do: {a, b}
  end

  @doc "The number of cells of a region."
  @spec size(t) :: non_neg_integer
  def size(region), do: Enum.reduce(region, 0, fn {_, {a, b}}, n -> n + b - a + 1 end)

  defp kept(nil, _), do: nil
  defp kept(_, nil), do: nil

  defp kept({a, b}, {c, d}) do
    {lo, hi} = {max(a, c), min(b, d)}
    if lo <= hi, do: {lo, hi}, else: nil
  end

  # The entering run is inside the kept run of its row (the leave radius exceeds the view
  # radius by a cell diagonal), so their hull is too.
  defp join(nil, run), do: run
  defp join(run, nil), do: run
  defp join({a, b}, {c, d}), do: {min(a, c), max(b, d)}

  defp rows(%Grid{cell: s, rows: rows}, y0, y1),
    do: max(0, floor(y0 / s))..min(rows - 1, floor(y1 / s))//1

  defp clamp(%Grid{cols: cols}, a, b), do: {max(0, a), min(cols - 1, b)}

  defp drop_empty(region), do: for({row, {a, b}} <- region, a <= b, into: %{}, do: {row, {a, b}})
end

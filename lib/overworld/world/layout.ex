defmodule Overworld.World.Layout do
  @moduledoc """
  The map of a world split into zones: which zone's **region** each cell of the world belongs
  to. A pure value, built once and shared by the world's zones (who owns a position, who
  borders whom, each zone's id space and tick offset).

  The world is the grid of `Overworld.Spatial.Grid` over `size` metres with square cells of
  `cell_size` metres (`cols × rows` cells, the last column and row holding the far edges).
  Regions are rectangles of whole cells, so **every region border lies on a cell border**, and
  together they cover every cell exactly once. Two ways to give them:

  * `zones: {zc, zr}`: a grid of `zc × zr` regions, ids `{col, row}` (0-based), the world's
    cell columns and rows shared out as evenly as can be (sizes differ by at most a cell);
  * `regions: [{id, {x0, y0, x1, y1}}]`: rectangles in metres, each coordinate on a cell
    border (a multiple of `cell_size`, or the world's far edge, which includes the last
    column or row).

      iex> alias Overworld.World.Layout
      iex> {:ok, l} = Layout.new(size: {100, 100}, cell_size: 10, zones: {2, 2})
      iex> {l.cols, l.rows, length(l.regions)}
      {11, 11, 4}
      iex> Layout.zone_at(l, 4.0, 71.5)
      {0, 1}
      iex> Layout.neighbours(l, {0, 0})
      [{1, 0}, {0, 1}, {1, 1}]

  Invalid layouts are refused with a message that says what is wrong:

      iex> Overworld.World.Layout.new(size: {100, 100}, cell_size: 10, regions: [{:a, {0, 0, 55, 100}}])
      {:error, "region :a: 55 is not on a cell border (a multiple of 10 m, or the world's edge)"}
  """

  alias Overworld.Entity

  @enforce_keys [:width, :height, :cell_size, :cols, :rows, :regions]
  defstruct @enforce_keys

  @typedoc """
  A region: its zone's `id`, its `index` (0-based, in the order given; `{col, row}` grids by
  row then column), and its cells `c0..c1` × `r0..r1` (inclusive).
  """
  @type region :: %{
          id: term,
          index: non_neg_integer,
          cells: {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer}
        }

  @type t :: %__MODULE__{
          width: number,
          height: number,
          cell_size: number,
          cols: pos_integer,
          rows: pos_integer,
          regions: [region]
        }

  @doc "A layout, or `{:error, why}` (see the module doc)."
  @spec new(keyword) :: {:ok, t} | {:error, String.t()}
  def new(opts) do
    with {:ok, {w, h}} <- size(opts[:size]),
         {:ok, c} <- cell_size(opts[:cell_size]),
         grid = Overworld.Spatial.Grid.new(Entity.meters(w), Entity.meters(h), Entity.meters(c)),
         base = %__MODULE__{
           width: w,
           height: h,
           cell_size: c,
           cols: grid.cols,
           rows: grid.rows,
           regions: []
         },
         {:ok, regions} <- regions(base, opts[:zones], opts[:regions]),
         :ok <- unique_ids(regions),
         :ok <- covers(base, regions) do
      {:ok, %{base | regions: regions}}
    end
  end

  @doc "A layout; raises `ArgumentError` with the reason when invalid."
  @spec new!(keyword) :: t
  def new!(opts) do
    case new(opts) do
      {:ok, l} -> l
      {:error, why} -> raise ArgumentError, "invalid world layout: " <> why
    end
  end

  defp size({w, h}) when is_number(w) and w > 0 and is_number(h) and h > 0, do: {:ok, {w, h}}
  defp size(other), do: {:error, "size must be {width, height} in metres, got: #{inspect(other)}"}

  defp cell_size(c) when is_number(c) and c > 0, do: {:ok, c}

  defp cell_size(other),
    do: {:error, "cell_size must be a positive number, got: #{inspect(other)}"}

  defp regions(l, {zc, zr}, nil)
       when is_integer(zc) and zc > 0 and is_integer(zr) and zr > 0 do
    if zc > l.cols or zr > l.rows do
      {:error,
       "#{zc} x #{zr} zones do not fit #{l.cols} x #{l.rows} cells (a region is at least a cell)"}
    else
      cols = split(l.cols, zc)
      rows = split(l.rows, zr)

      regions =
        for {{r0, r1}, zrow} <- Enum.with_index(rows),
            {{c0, c1}, zcol} <- Enum.with_index(cols),
            do: {{zcol, zrow}, {c0, r0, c1, r1}}

      {:ok,
       regions
       |> Enum.with_index()
       |> Enum.map(fn {{id, cells}, i} -> %{id: id, index: i, cells: cells} end)}
    end
  end

  defp regions(l, nil, [_ | _] = rects) do
    rects
    |> Enum.with_index()
    |> Enum.reduce_while({:ok, []}, fn {rect, i}, {:ok, acc} ->
      case rect_cells(l, rect) do
        {:ok, id, cells} -> {:cont, {:ok, [%{id: id, index: i, cells: cells} | acc]}}
        {:error, _} = e -> {:halt, e}
      end
    end)
    |> then(fn
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      e -> e
    end)
  end

  defp regions(_l, nil, nil), do: {:error, "give zones: {cols, rows} or regions: [{id, rect}]"}

  defp regions(_l, zones, nil),
    do: {:error, "zones must be {cols, rows} of positive integers, got: #{inspect(zones)}"}

  defp regions(_l, nil, other),
    do:
      {:error,
       "regions must be a non-empty list of {id, {x0, y0, x1, y1}}, got: #{inspect(other)}"}

  defp regions(_l, _zones, _regions), do: {:error, "give zones: or regions:, not both"}

  @doc """
  `n` cells shared out in `k` runs as even as can be (the first ones a cell longer), as
  inclusive `{first, last}`.

      iex> Overworld.World.Layout.split(11, 2)
      [{0, 5}, {6, 10}]
      iex> Overworld.World.Layout.split(10, 3)
      [{0, 3}, {4, 6}, {7, 9}]
  """
  @spec split(pos_integer, pos_integer) :: [{non_neg_integer, non_neg_integer}]
  def split(n, k) do
    {runs, _} =
      Enum.map_reduce(0..(k - 1), 0, fn i, first ->
        len = div(n, k) + if(i < rem(n, k), do: 1, else: 0)
        {{first, first + len - 1}, first + len}
      end)

    runs
  end

  defp rect_cells(l, {id, {x0, y0, x1, y1}})
       when is_number(x0) and is_number(y0) and is_number(x1) and is_number(y1) do
    with {:ok, c0} <- border(l, id, x0, l.width, l.cols),
         {:ok, r0} <- border(l, id, y0, l.height, l.rows),
         {:ok, c1} <- border(l, id, x1, l.width, l.cols),
         {:ok, r1} <- border(l, id, y1, l.height, l.rows) do
      if c1 > c0 and r1 > r0,
        do: {:ok, id, {c0, r0, c1 - 1, r1 - 1}},
        else:
          {:error, "region #{inspect(id)} is empty or inside out: #{inspect({x0, y0, x1, y1})}"}
    end
  end

  defp rect_cells(_l, other),
    do: {:error, "a region is {id, {x0, y0, x1, y1}} in metres, got: #{inspect(other)}"}

  # A coordinate on a cell border, as the index of the first cell past it: the world's far edge
  # is past its last cell.
  defp border(l, id, v, edge, count) do
    cond do
      v == edge ->
        {:ok, count}

      v < 0 or v > edge ->
        {:error, "region #{inspect(id)}: #{v} is outside the world (0..#{edge} m)"}

      true ->
        k = v / l.cell_size

        if k == Float.round(k),
          do: {:ok, trunc(k)},
          else:
            {:error,
             "region #{inspect(id)}: #{v} is not on a cell border (a multiple of #{l.cell_size} m, or the world's edge)"}
    end
  end

  defp unique_ids(regions) do
    case regions |> Enum.frequencies_by(& &1.id) |> Enum.find(fn {_, n} -> n > 1 end) do
      nil -> :ok
      {id, _} -> {:error, "two regions have the id #{inspect(id)}"}
    end
  end

  # Regions cover every cell exactly once: none overlap, and their cells add up to the world's.
  defp covers(l, regions) do
    overlap =
      for a <- regions, b <- regions, a.index < b.index, overlap?(a.cells, b.cells), do: {a, b}

    area = regions |> Enum.map(&area(&1.cells)) |> Enum.sum()

    cond do
      overlap != [] ->
        [{a, b} | _] = overlap
        {:error, "regions #{inspect(a.id)} and #{inspect(b.id)} overlap"}

      area != l.cols * l.rows ->
        {:error,
         "the regions cover #{area} of the world's #{l.cols * l.rows} cells: every cell must belong to one"}

      true ->
        :ok
    end
  end

  defp overlap?({a0, b0, a1, b1}, {c0, d0, c1, d1}),
    do: a0 <= c1 and c0 <= a1 and b0 <= d1 and d0 <= b1

  defp area({c0, r0, c1, r1}), do: (c1 - c0 + 1) * (r1 - r0 + 1)

  @doc "The region of the zone `id` (nil when there is none)."
  @spec region(t, term) :: region | nil
  def region(%__MODULE__{regions: regions}, id), do: Enum.find(regions, &(&1.id == id))

  @doc "The zone whose region holds the cell at column `col`, row `row`."
  @spec zone_of_cell(t, non_neg_integer, non_neg_integer) :: term
  def zone_of_cell(%__MODULE__{regions: regions}, col, row) do
    Enum.find_value(regions, fn %{id: id, cells: {c0, r0, c1, r1}} ->
      if col >= c0 and col <= c1 and row >= r0 and row <= r1, do: id
    end)
  end

  @doc "The zone whose region holds the point `(x, y)` in metres (clamped to the world)."
  @spec zone_at(t, number, number) :: term
  def zone_at(%__MODULE__{} = l, x, y) do
    x = x |> max(0) |> min(l.width)
    y = y |> max(0) |> min(l.height)
    col = min(floor(x / l.cell_size), l.cols - 1)
    row = min(floor(y / l.cell_size), l.rows - 1)
    zone_of_cell(l, col, row)
  end

  @doc """
  The zones whose regions touch `id`'s (a side or a corner: an entity near a corner is near
  the diagonal region too), in the layout's order.
  """
  @spec neighbours(t, term) :: [term]
  def neighbours(%__MODULE__{regions: regions} = l, id) do
    case region(l, id) do
      nil ->
        []

      %{cells: {c0, r0, c1, r1}} ->
        for %{id: other, cells: cells} <- regions,
            other != id,
            overlap?({c0 - 1, r0 - 1, c1 + 1, r1 + 1}, cells),
            do: other
    end
  end

  @doc """
  The zone's id space: `{index, count}`. Its entities' ids are the ids `n` with
  `rem(n, count) == index` (none collides with another zone's, also after a restart from
  disk, as long as each zone allocates only in its own).

      iex> l = Overworld.World.Layout.new!(size: {100, 100}, cell_size: 10, zones: {3, 1})
      iex> Overworld.World.Layout.id_space(l, {2, 0})
      {2, 3}
  """
  @spec id_space(t, term) :: {non_neg_integer, pos_integer}
  def id_space(%__MODULE__{regions: regions} = l, id),
    do: {region!(l, id).index, length(regions)}

  @doc """
  Where in the tick period the zone's deadlines fall, as a fraction of the period: the zones'
  ticks are staggered evenly so that N zones on a node share its cores instead of all starting
  at once.

      iex> l = Overworld.World.Layout.new!(size: {100, 100}, cell_size: 10, zones: {2, 2})
      iex> for r <- l.regions, do: Overworld.World.Layout.tick_offset(l, r.id)
      [0.0, 0.25, 0.5, 0.75]
  """
  @spec tick_offset(t, term) :: float
  def tick_offset(%__MODULE__{regions: regions} = l, id),
    do: region!(l, id).index / length(regions)

  defp region!(l, id) do
    region(l, id) || raise ArgumentError, "no zone #{inspect(id)} in this world layout"
  end
end

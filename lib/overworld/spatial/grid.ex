defmodule Overworld.Spatial.Grid do
  @moduledoc """
  A uniform spatial grid: O(1) cell lookup and radius queries over entity records.

  The grid is a pure description (`t:t/0`: cell size, columns, rows) plus a `t:cells/0` map from
  cell key to the list of entities in that cell, **sorted by id**. Keeping cells sorted makes
  neighbour lists come out in one canonical order (cell by cell in a fixed pattern, then by id),
  whichever worker built them, which is what makes a zone deterministic across worker counts.

  Keys are integers `(row + 1) * stride + (col + 1)` with `stride = cols + 2`: the padding
  column and row mean the 3x3 block around any cell is plain key arithmetic and never wraps
  around an edge. The bucket workers keep their cells as sorted lists instead
  (`Overworld.Spatial.Sweep`, same keys); the map form serves radius queries from outside the
  tick and is the reference the sweep is tested against.

      iex> alias Overworld.Spatial.Grid
      iex> import Overworld.Entity
      iex> g = Grid.new(100, 100, 10)
      iex> cells = Grid.from_entities(g, [entity(id: 1, x: 5, y: 5), entity(id: 2, x: 12, y: 5), entity(id: 3, x: 95, y: 95)])
      iex> Grid.query(cells, g, 6, 6, 10) |> Enum.map(&entity(&1, :id)) |> Enum.sort()
      [1, 2]
  """
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  @enforce_keys [:cell, :cols, :rows, :stride, :width, :height]
  defstruct @enforce_keys

  @typedoc "Grid geometry: cell size and world size in units."
  @type t :: %__MODULE__{
          cell: pos_integer,
          cols: pos_integer,
          rows: pos_integer,
          stride: pos_integer,
          width: non_neg_integer,
          height: non_neg_integer
        }

  @typedoc "Cell key → entities of that cell, sorted by id."
  @type cells :: %{optional(integer) => [Overworld.Entity.t()]}

  @doc """
  A grid covering `[0, width] x [0, height]` units with square cells of `cell` units.

      iex> g = Overworld.Spatial.Grid.new(1000, 500, 100)
      iex> {g.cols, g.rows, g.stride}
      {11, 6, 13}
  """
  @spec new(non_neg_integer, non_neg_integer, pos_integer) :: t
  def new(width, height, cell)
      when is_integer(width) and width >= 0 and is_integer(height) and height >= 0 and
             is_integer(cell) and cell > 0 do
    cols = div(width, cell) + 1
    rows = div(height, cell) + 1

    %__MODULE__{
      cell: cell,
      cols: cols,
      rows: rows,
      stride: cols + 2,
      width: width,
      height: height
    }
  end

  @doc """
  The key of the cell holding `(x, y)`. Positions must be inside the world.

      iex> g = Overworld.Spatial.Grid.new(1000, 1000, 100)
      iex> Overworld.Spatial.Grid.key(g, 0, 0)
      14
      iex> Overworld.Spatial.Grid.key(g, 150, 250)
      (2 + 1) * 13 + 1 + 1
  """
  @spec key(t, integer, integer) :: integer
  def key(%__MODULE__{cell: cell, stride: stride}, x, y) do
    (div(y, cell) + 1) * stride + div(x, cell) + 1
  end

  @doc """
  The row (0-based) of a cell key.

      iex> g = Overworld.Spatial.Grid.new(1000, 1000, 100)
      iex> Overworld.Spatial.Grid.row(g, Overworld.Spatial.Grid.key(g, 150, 250))
      2
  """
  @spec row(t, integer) :: integer
  def row(%__MODULE__{stride: stride}, key), do: div(key, stride) - 1

  @doc """
  The column (0-based) of a cell key.

      iex> g = Overworld.Spatial.Grid.new(1000, 1000, 100)
      iex> Overworld.Spatial.Grid.col(g, Overworld.Spatial.Grid.key(g, 150, 250))
      1
  """
  @spec col(t, integer) :: integer
  def col(%__MODULE__{stride: stride}, key), do: rem(key, stride) - 1

  @doc """
  The key of the cell at column `col` and row `row`.

      iex> g = Overworld.Spatial.Grid.new(1000, 1000, 100)
      iex> Overworld.Spatial.Grid.key_at(g, 1, 2) == Overworld.Spatial.Grid.key(g, 150, 250)
      true
  """
  @spec key_at(t, integer, integer) :: integer
  def key_at(%__MODULE__{stride: stride}, col, row), do: (row + 1) * stride + col + 1

  @doc """
  The entity lists of the 3x3 block of cells around `key` (empty lists where a cell is empty),
  in a fixed order. Every entity within one cell size of any point of the cell is in them.
  """
  @spec block(cells, t, integer) :: [[Overworld.Entity.t()]]
  def block(cells, %__MODULE__{stride: s}, k) do
    [
      get(cells, k - s - 1),
      get(cells, k - s),
      get(cells, k - s + 1),
      get(cells, k - 1),
      get(cells, k),
      get(cells, k + 1),
      get(cells, k + s - 1),
      get(cells, k + s),
      get(cells, k + s + 1)
    ]
  end

  @compile {:inline, get: 2}
  defp get(cells, k) do
    case cells do
      %{^k => list} -> list
      _ -> []
    end
  end

  @doc """
  Filters lists of entities (as returned by `block/3`) to those within `sqrt(r2)` units of
  `(x, y)`, leaving out the entity with id `self`. The result order is a function of the input
  order only (the lists are walked in turn and matches prepended), so canonical input gives
  canonical output.
  """
  @spec within([[Overworld.Entity.t()]], integer, integer, non_neg_integer, term) ::
          [Overworld.Entity.t()]
  def within(lists, x, y, r2, self), do: within_lists(lists, x, y, r2, self, [])

  defp within_lists([], _x, _y, _r2, _self, acc), do: acc

  defp within_lists([l | ls], x, y, r2, self, acc),
    do: within_lists(ls, x, y, r2, self, within_list(l, x, y, r2, self, acc))

  defp within_list([], _x, _y, _r2, _self, acc), do: acc

  defp within_list([e | rest], x, y, r2, self, acc) when tuple_size(e) == 13 do
    dx = entity(e, :x) - x
    dy = entity(e, :y) - y

    if dx * dx + dy * dy <= r2 and entity(e, :id) !== self do
      within_list(rest, x, y, r2, self, [e | acc])
    else
      within_list(rest, x, y, r2, self, acc)
    end
  end

  @doc """
  Every entity within `r` units of `(x, y)` (distance `<= r`), for any radius: scans the cells
  that the query square covers.
  """
  @spec query(cells, t, integer, integer, non_neg_integer) :: [Overworld.Entity.t()]
  def query(cells, %__MODULE__{cell: cell} = g, x, y, r) when is_integer(r) and r >= 0 do
    c0 = max(div(max(x - r, 0), cell), 0)
    c1 = min(div(max(x + r, 0), cell), g.cols - 1)
    r0 = max(div(max(y - r, 0), cell), 0)
    r1 = min(div(max(y + r, 0), cell), g.rows - 1)

    lists =
      if c0 > c1 or r0 > r1 do
        []
      else
        for row <- r0..r1, col <- c0..c1, do: get(cells, key_at(g, col, row))
      end

    within(lists, x, y, r * r, nil)
  end

  @doc """
  Builds cells from a list of entities (each cell sorted by id).
  """
  @spec from_entities(t, [Overworld.Entity.t()]) :: cells
  def from_entities(g, entities) do
    entities
    |> Enum.sort_by(&entity(&1, :id), :desc)
    |> Enum.reduce(%{}, fn e, acc ->
      k = key(g, entity(e, :x), entity(e, :y))

      case acc do
        %{^k => l} -> %{acc | k => [e | l]}
        _ -> Map.put(acc, k, [e])
      end
    end)
  end
end

defmodule Overworld.Physics.Nav do
  @moduledoc """
  Pathfinding on a navigation grid built from a world's obstacles (docs/sidecar.md,
  "Pathfinding"): A* over 8-connected cells, integer costs (10 straight, 14 diagonal, no corner
  cutting), the octile heuristic and a total order on the open set, so that this Elixir
  implementation and the sidecar's find the same path, cell for cell.

      iex> world = Overworld.Physics.world(8 * 1024, 8 * 1024, boxes: [{3 * 1024, 0, 4 * 1024, 6 * 1024}])
      iex> nav = Overworld.Physics.Nav.new(world, cell: 1024, agent: 0)
      iex> {:ok, path} = Overworld.Physics.Nav.path(nav, {512, 512}, {7 * 1024 + 512, 512})
      iex> List.last(path)
      {7_680, 512}
      iex> Enum.any?(path, fn {_x, y} -> y > 6 * 1024 end)
      true
  """

  import Bitwise

  defstruct [:cell, :cols, :rows, :blocked, :max_nodes]

  @typedoc "A navigation grid: its cell size (units), columns, rows and blocked cells."
  @type t :: %__MODULE__{
          cell: pos_integer,
          cols: pos_integer,
          rows: pos_integer,
          blocked: binary,
          max_nodes: pos_integer
        }

  # E, W, S, N, SE, SW, NE, NW.
  @dirs [{1, 0}, {-1, 0}, {0, 1}, {0, -1}, {1, 1}, {-1, 1}, {1, -1}, {-1, -1}]

  @doc """
  The navigation grid of a world (`Overworld.Physics.world/3`). Options: `:cell` the cell size
  in units (default 1,024: 1 m), `:agent` the agents' radius in units (default 512), obstacles
  growing by it; `:max_nodes` cells popped before giving up (default 20,000).
  """
  @spec new(Overworld.Physics.world(), keyword) :: t
  def new(world, opts \\ []) do
    c = Keyword.get(opts, :cell, 1024)
    a = Keyword.get(opts, :agent, 512)
    max_nodes = Keyword.get(opts, :max_nodes, 20_000)

    unless is_integer(c) and c > 0 and c <= 1 <<< 20,
      do: raise(ArgumentError, "the navigation cell must be 1..2^20 units, got: #{inspect(c)}")

    unless is_integer(a) and a >= 0 and a <= 1 <<< 20,
      do: raise(ArgumentError, "the agent radius must be 0..2^20 units, got: #{inspect(a)}")

    unless is_integer(max_nodes) and max_nodes > 0,
      do: raise(ArgumentError, "max_nodes must be a positive integer, got: #{inspect(max_nodes)}")

    cols = div(world.width + c - 1, c)
    rows = div(world.height + c - 1, c)

    box_keys =
      Enum.flat_map(Tuple.to_list(world.boxes), fn {x0, y0, x1, y1} ->
        cells(cols, rows, c, {x0 - a, y0 - a, x1 + a, y1 + a}, fn _col, _row -> true end)
      end)

    circle_keys =
      Enum.flat_map(Tuple.to_list(world.circles), fn {cx, cy, ro} ->
        reach = ro + a

        cells(cols, rows, c, {cx - reach, cy - reach, cx + reach, cy + reach}, fn col, row ->
          # The square's nearest point to the centre.
          nx = cx |> max(col * c) |> min((col + 1) * c)
          ny = cy |> max(row * c) |> min((row + 1) * c)
          (cx - nx) * (cx - nx) + (cy - ny) * (cy - ny) <= reach * reach
        end)
      end)

    blocked = bitmap(Enum.sort(Enum.uniq(box_keys ++ circle_keys)), 0, cols * rows, [])
    %__MODULE__{cell: c, cols: cols, rows: rows, blocked: blocked, max_nodes: max_nodes}
  end

  # The keys of the cells whose closed square meets the box `{x0, y0, x1, y1}` (and `keep?`).
  defp cells(cols, rows, c, {x0, y0, x1, y1}, keep?) do
    c0 = max(0, floor_div(x0, c) - 1)
    c1 = min(cols - 1, floor_div(x1, c))
    r0 = max(0, floor_div(y0, c) - 1)
    r1 = min(rows - 1, floor_div(y1, c))

    if c0 > c1 or r0 > r1,
      do: [],
      else:
        for(
          row <- r0..r1,
          col <- c0..c1,
          col * c <= x1 and (col + 1) * c >= x0 and row * c <= y1 and (row + 1) * c >= y0,
          keep?.(col, row),
          do: row * cols + col
        )
  end

  # A byte per cell, 1 for the (sorted) blocked keys.
  defp bitmap(_keys, n, n, acc), do: acc |> Enum.reverse() |> IO.iodata_to_binary()

  defp bitmap([k | rest], k, n, acc), do: bitmap(rest, k + 1, n, [1 | acc])

  defp bitmap(keys, i, n, acc) do
    # Free cells up to the next blocked one, as one binary.
    next =
      case keys do
        [k | _] -> k
        [] -> n
      end

    bitmap(keys, next, n, [:binary.copy(<<0>>, next - i) | acc])
  end

  defp floor_div(a, b) when a >= 0, do: div(a, b)
  defp floor_div(a, b), do: -div(-a + b - 1, b)

  @doc "Whether the cell `(col, row)` is blocked (or outside the grid)."
  @spec blocked?(t, integer, integer) :: boolean
  def blocked?(%__MODULE__{cols: cols, rows: rows}, col, row)
      when col < 0 or row < 0 or col >= cols or row >= rows,
      do: true

  def blocked?(%__MODULE__{cols: cols, blocked: b}, col, row),
    do: :binary.at(b, row * cols + col) == 1

  @doc """
  A path from `from` to `to` (points in units): `{:ok, waypoints}` (the centres of the cells
  after the start's, the last one `to` itself), or `{:error, :blocked | :unreachable |
  :too_far}`.
  """
  @spec path(t, {integer, integer}, {integer, integer}) ::
          {:ok, [{integer, integer}]} | {:error, :blocked | :unreachable | :too_far}
  def path(%__MODULE__{cell: c} = nav, {fx, fy}, {tx, ty} = to) do
    start = {floor_div(fx, c), floor_div(fy, c)}
    goal = {floor_div(tx, c), floor_div(ty, c)}

    cond do
      blocked?(nav, elem(start, 0), elem(start, 1)) or blocked?(nav, elem(goal, 0), elem(goal, 1)) ->
        {:error, :blocked}

      start == goal ->
        {:ok, [to]}

      true ->
        h0 = h(start, goal)
        k0 = key(nav, start)
        open = :gb_sets.singleton({h0, h0, k0})

        with {:ok, centres} <- search(nav, goal, open, %{k0 => {0, nil}}, 0),
             do: {:ok, List.replace_at(centres, -1, to)}
    end
  end

  defp key(%__MODULE__{cols: cols}, {col, row}), do: row * cols + col
  defp cell_of(%__MODULE__{cols: cols}, k), do: {rem(k, cols), div(k, cols)}

  defp h({c1, r1}, {c2, r2}) do
    dx = abs(c1 - c2)
    dy = abs(r1 - r2)
    10 * (dx + dy) - 6 * min(dx, dy)
  end

  defp search(nav, goal, open, best, pops) do
    cond do
      :gb_sets.is_empty(open) ->
        {:error, :unreachable}

      pops >= nav.max_nodes ->
        {:error, :too_far}

      true ->
        {{f, _h, k}, open} = :gb_sets.take_smallest(open)
        {g, _parent} = Map.fetch!(best, k)
        here = cell_of(nav, k)

        cond do
          # A stale entry: this cell was reached more cheaply since it was pushed.
          f - h(here, goal) > g ->
            search(nav, goal, open, best, pops)

          here == goal ->
            {:ok, waypoints(nav, best, k)}

          true ->
            {open, best} = expand(nav, goal, here, g, k, open, best)
            search(nav, goal, open, best, pops + 1)
        end
    end
  end

  defp expand(nav, goal, {col, row}, g, k, open, best) do
    Enum.reduce(@dirs, {open, best}, fn {dx, dy}, {open, best} = acc ->
      ncol = col + dx
      nrow = row + dy

      cond do
        blocked?(nav, ncol, nrow) ->
          acc

        dx != 0 and dy != 0 and (blocked?(nav, col + dx, row) or blocked?(nav, col, row + dy)) ->
          acc

        true ->
          ng = g + if(dx != 0 and dy != 0, do: 14, else: 10)
          nk = key(nav, {ncol, nrow})

          case best do
            %{^nk => {old, _}} when old <= ng ->
              acc

            _ ->
              nh = h({ncol, nrow}, goal)
              {:gb_sets.add({ng + nh, nh, nk}, open), Map.put(best, nk, {ng, k})}
          end
      end
    end)
  end

  defp waypoints(%__MODULE__{cell: c} = nav, best, goal_key) do
    keys = trace(best, goal_key, [])
    # The start cell left out (path/3 puts the goal point itself in place of the last).
    [_start | rest] = keys

    centres =
      for k <- rest do
        {col, row} = cell_of(nav, k)
        {col * c + div(c, 2), row * c + div(c, 2)}
      end

    centres
  end

  defp trace(best, k, acc) do
    case Map.fetch!(best, k) do
      {_, nil} -> [k | acc]
      {_, parent} -> trace(best, parent, [k | acc])
    end
  end
end

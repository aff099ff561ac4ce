defmodule Overworld.Physics do
  @moduledoc """
  A physics step in fixed-point integers: bodies (circles with a radius and a mass) move by
  their velocities, push each other apart and are pushed out of static obstacles (boxes and
  circles) and kept inside the world. The specification is docs/sidecar.md: this module is its
  Elixir implementation (the sidecar's fallback, and the reference its tests compare the Rust
  one with, bit for bit).

  The contacts are resolved as one Jacobi step: each body's correction is the sum of terms
  computed from the integrated positions only, so the result does not depend on the order the
  pairs are visited in, nor on how the bodies are split between workers.

      iex> world = Overworld.Physics.world(10_240, 10_240)
      iex> bodies = [{1, 5_000, 5_000, 0, 0, 512, 1}, {2, 5_600, 5_000, 0, 0, 512, 1}]
      iex> Overworld.Physics.step(bodies, world, 30)
      [{1, 4_788, 5_000}, {2, 5_812, 5_000}]
  """

  import Bitwise

  @max_coord 1 <<< 40
  @max_radius 1 <<< 20
  @max_mass 65_535

  @typedoc "A body: `{id, x, y, vx, vy, radius, mass}` (units, units per second)."
  @type body ::
          {pos_integer, integer, integer, integer, integer, pos_integer, pos_integer}

  @typedoc "An axis-aligned box `{x0, y0, x1, y1}` (units)."
  @type box :: {integer, integer, integer, integer}

  @typedoc "A circle `{cx, cy, radius}` (units)."
  @type circle :: {integer, integer, pos_integer}

  @typedoc "The world: its size and its static obstacles (`world/3`)."
  @type world :: %{
          width: pos_integer,
          height: pos_integer,
          boxes: tuple,
          circles: tuple,
          index: map,
          index_cell: pos_integer
        }

  @doc """
  A world of `width` × `height` units with static obstacles (`boxes:` and `circles:` lists),
  checked against the ranges of docs/sidecar.md, and indexed for the steps. Raises
  `ArgumentError` for a value out of range.
  """
  @spec world(pos_integer, pos_integer, keyword) :: world
  def world(width, height, obstacles \\ []) do
    boxes = Keyword.get(obstacles, :boxes, [])
    circles = Keyword.get(obstacles, :circles, [])

    unless coord?(width) and width > 0 and coord?(height) and height > 0,
      do: raise(ArgumentError, "the world's size must be in 1..2^40 units")

    for {x0, y0, x1, y1} = b <- boxes do
      unless coord?(x0) and coord?(y0) and coord?(x1) and coord?(y1) and x0 <= x1 and y0 <= y1,
        do:
          raise(
            ArgumentError,
            "invalid box #{inspect(b)}: coordinates in 0..2^40, x0 <= x1, y0 <= y1"
          )
    end

    for {cx, cy, r} = c <- circles do
      unless coord?(cx) and coord?(cy) and radius?(r),
        do:
          raise(
            ArgumentError,
            "invalid circle #{inspect(c)}: centre in 0..2^40, radius in 1..2^20"
          )
    end

    # Obstacles indexed on a coarse grid (by their bounding boxes) to find those near a body.
    cell = index_cell(boxes, circles)

    bounds =
      Enum.map(boxes, fn {x0, y0, x1, y1} -> {x0, y0, x1, y1} end) ++
        Enum.map(circles, fn {cx, cy, r} -> {cx - r, cy - r, cx + r, cy + r} end)

    index =
      bounds
      |> Enum.with_index()
      |> Enum.reduce(%{}, fn {{x0, y0, x1, y1}, i}, acc ->
        # Floor division, as near/4's: a circle's bounding box may reach below 0.
        for cx <- Integer.floor_div(x0, cell)..Integer.floor_div(x1, cell),
            cy <- Integer.floor_div(y0, cell)..Integer.floor_div(y1, cell),
            reduce: acc,
            do: (acc -> Map.update(acc, {cx, cy}, [i], &[i | &1]))
      end)
      # Each cell's obstacles in ascending order (near/4 takes a single cell's as it is).
      |> Map.new(fn {k, l} -> {k, :lists.reverse(l)} end)

    %{
      width: width,
      height: height,
      boxes: List.to_tuple(boxes),
      circles: List.to_tuple(circles),
      index: index,
      index_cell: cell
    }
  end

  # About the size of the obstacles (at least 4 m), so each sits in a few cells.
  defp index_cell([], []), do: 4096

  defp index_cell(boxes, circles) do
    sizes =
      Enum.map(boxes, fn {x0, y0, x1, y1} -> max(x1 - x0, y1 - y0) end) ++
        Enum.map(circles, fn {_, _, r} -> 2 * r end)

    max(4096, div(Enum.sum(sizes), length(sizes)) + 1)
  end

  @doc """
  Checks bodies and a tick rate against the ranges of docs/sidecar.md: `:ok` or
  `{:error, why}` (ids must be distinct and positive).

      iex> Overworld.Physics.check([{1, 0, 0, 0, 0, 512, 1}], 30)
      :ok
      iex> Overworld.Physics.check([{1, 0, 0, 0, 0, 0, 1}], 30)
      {:error, "body 1: radius 0 outside 1..1048576"}
  """
  @spec check([body], pos_integer) :: :ok | {:error, String.t()}
  def check(bodies, tick_rate) do
    cond do
      not (is_integer(tick_rate) and tick_rate in 1..1000) ->
        {:error, "tick rate #{inspect(tick_rate)} outside 1..1000"}

      bad = Enum.find_value(bodies, &bad_body/1) ->
        {:error, bad}

      length(Enum.uniq_by(bodies, &elem(&1, 0))) != length(bodies) ->
        {:error, "two bodies have the same id"}

      true ->
        :ok
    end
  end

  defp bad_body({id, x, y, vx, vy, r, m}) do
    cond do
      not (is_integer(id) and id > 0) ->
        "body #{inspect(id)}: the id must be a positive integer"

      not (coord?(x) and coord?(y)) ->
        "body #{id}: position outside 0..2^40"

      not (speed?(vx) and speed?(vy)) ->
        "body #{id}: velocity outside -2^40..2^40"

      not radius?(r) ->
        "body #{id}: radius #{inspect(r)} outside 1..#{@max_radius}"

      not (is_integer(m) and m in 1..@max_mass) ->
        "body #{id}: mass #{inspect(m)} outside 1..#{@max_mass}"

      true ->
        nil
    end
  end

  defp bad_body(other), do: "not a body: #{inspect(other)}"

  defp coord?(v), do: is_integer(v) and v >= 0 and v <= @max_coord
  defp speed?(v), do: is_integer(v) and v >= -@max_coord and v <= @max_coord
  defp radius?(r), do: is_integer(r) and r >= 1 and r <= @max_radius

  @doc """
  One step (docs/sidecar.md, "A physics step"): the bodies' new positions `{id, x, y}`, in the
  order of `bodies`. The bodies are not checked here (`check/2`).
  """
  @spec step([body], world, pos_integer) :: [{pos_integer, integer, integer}]
  def step([], _world, _tick_rate), do: []

  def step(bodies, world, tick_rate) do
    moved =
      for {id, x, y, vx, vy, r, m} <- bodies,
          do: {id, x + div(vx, tick_rate), y + div(vy, tick_rate), r, m}

    # Cells twice the largest radius: two bodies that touch are in the same or adjacent cells.
    cell = 2 * Enum.reduce(moved, 1, fn {_, _, _, r, _}, acc -> max(r, acc) end)
    grid = group(moved, cell, %{})

    for {id, px, py, r, _m} = b <- moved do
      {cx, cy} = correction(b, grid, cell)
      {qx, qy} = obstacles(px + cx, py + cy, r, world)
      {id, edge(qx, r, world.width), edge(qy, r, world.height)}
    end
  end

  # The bodies by grid cell (the order within a cell does not matter: the terms are summed).
  defp group([], _cell, grid), do: grid

  defp group([{_, px, py, _, _} = b | rest], cell, grid) do
    key = {Integer.floor_div(px, cell), Integer.floor_div(py, cell)}

    case grid do
      %{^key => list} -> group(rest, cell, %{grid | key => [b | list]})
      _ -> group(rest, cell, Map.put(grid, key, [b]))
    end
  end

  # The sum of a body's contact terms (step 2), from the integrated positions: the bodies of
  # its cell and the 8 around it.
  defp correction({_, px, py, _, _} = b, grid, cell) do
    gx = Integer.floor_div(px, cell)
    gy = Integer.floor_div(py, cell)
    acc = terms(grid, {gx - 1, gy - 1}, b, {0, 0})
    acc = terms(grid, {gx - 1, gy}, b, acc)
    acc = terms(grid, {gx - 1, gy + 1}, b, acc)
    acc = terms(grid, {gx, gy - 1}, b, acc)
    acc = terms(grid, {gx, gy}, b, acc)
    acc = terms(grid, {gx, gy + 1}, b, acc)
    acc = terms(grid, {gx + 1, gy - 1}, b, acc)
    acc = terms(grid, {gx + 1, gy}, b, acc)
    terms(grid, {gx + 1, gy + 1}, b, acc)
  end

  defp terms(grid, key, b, acc) do
    case grid do
      %{^key => others} -> each_term(others, b, acc)
      _ -> acc
    end
  end

  defp each_term([], _b, acc), do: acc
  defp each_term([o | rest], b, acc), do: each_term(rest, b, term(b, o, acc))

  defp term({id, _, _, _, _}, {id, _, _, _, _}, acc), do: acc

  defp term({i, px, py, ri, mi}, {j, qx, qy, rj, mj}, {cx, cy} = acc) do
    dx = px - qx
    dy = py - qy
    s = ri + rj

    if abs(dx) < s and abs(dy) < s do
      d2 = dx * dx + dy * dy

      if d2 < s * s do
        d = isqrt(d2)
        overlap = s - d

        if d > 0 do
          den = d * (mi + mj)
          {cx + div(dx * overlap * mj, den), cy + div(dy * overlap * mj, den)}
        else
          push = div(overlap * mj, mi + mj)
          {if(i < j, do: cx + push, else: cx - push), cy}
        end
      else
        acc
      end
    else
      acc
    end
  end

  # Step 4: the obstacles near the body, in the order of the list, boxes first.
  defp obstacles(qx, qy, _r, %{index: index}) when map_size(index) == 0, do: {qx, qy}

  defp obstacles(qx, qy, r, world) do
    near = near(qx, qy, r, world)
    nb = tuple_size(world.boxes)

    Enum.reduce(near, {qx, qy}, fn i, q ->
      if i < nb,
        do: box(q, r, elem(world.boxes, i)),
        else: circle(q, r, elem(world.circles, i - nb))
    end)
  end

  # The obstacles whose bounding box meets [qx - 2r, qx + 2r] x [qy - 2r, qy + 2r], in order.
  defp near(qx, qy, r, %{index: index, index_cell: cell} = world) do
    x0 = qx - 2 * r
    y0 = qy - 2 * r
    x1 = qx + 2 * r
    y1 = qy + 2 * r

    gx0 = Integer.floor_div(x0, cell)
    gx1 = Integer.floor_div(x1, cell)
    gy0 = Integer.floor_div(y0, cell)
    gy1 = Integer.floor_div(y1, cell)
    all = tuple_size(world.boxes) + tuple_size(world.circles)

    # (A body's square over more index cells than there are obstacles: every obstacle, once.)
    cond do
      # (Most bodies: their square within one index cell, whose list is in order.)
      gx0 == gx1 and gy0 == gy1 ->
        meeting(Map.get(index, {gx0, gy0}, []), world, {x0, y0, x1, y1})

      (gx1 - gx0 + 1) * (gy1 - gy0 + 1) > all ->
        meeting(Enum.to_list(0..(all - 1)), world, {x0, y0, x1, y1})

      true ->
        for(gx <- gx0..gx1, gy <- gy0..gy1, i <- Map.get(index, {gx, gy}, []), do: i)
        |> Enum.uniq()
        |> Enum.sort()
        |> meeting(world, {x0, y0, x1, y1})
    end
  end

  # Those of the obstacles `is` (in order) whose bounding box meets the square.
  defp meeting([], _world, _square), do: []

  defp meeting(is, world, {x0, y0, x1, y1}) do
    Enum.filter(is, fn i ->
      {bx0, by0, bx1, by1} = bounds(world, i)
      bx0 <= x1 and bx1 >= x0 and by0 <= y1 and by1 >= y0
    end)
  end

  defp bounds(world, i) do
    nb = tuple_size(world.boxes)

    if i < nb do
      elem(world.boxes, i)
    else
      {cx, cy, r} = elem(world.circles, i - nb)
      {cx - r, cy - r, cx + r, cy + r}
    end
  end

  defp box({qx, qy} = q, r, {x0, y0, x1, y1}) do
    nx = qx |> max(x0) |> min(x1)
    ny = qy |> max(y0) |> min(y1)
    dx = qx - nx
    dy = qy - ny
    d2 = dx * dx + dy * dy

    cond do
      d2 >= r * r ->
        q

      d2 == 0 ->
        # The centre inside: out through the nearest side (ties: left, right, bottom, top).
        sides = [{qx - x0, :left}, {x1 - qx, :right}, {qy - y0, :bottom}, {y1 - qy, :top}]
        {_, side} = Enum.min_by(sides, &elem(&1, 0))

        case side do
          :left -> {x0 - r, qy}
          :right -> {x1 + r, qy}
          :bottom -> {qx, y0 - r}
          :top -> {qx, y1 + r}
        end

      true ->
        push_out(q, dx, dy, d2, r)
    end
  end

  defp circle({qx, qy} = q, r, {cx, cy, ro}) do
    dx = qx - cx
    dy = qy - cy
    s = r + ro

    if abs(dx) >= s or abs(dy) >= s do
      q
    else
      d2 = dx * dx + dy * dy

      cond do
        d2 >= s * s ->
          q

        d2 == 0 ->
          {cx + s, qy}

        true ->
          push_out(q, dx, dy, d2, s)
      end
    end
  end

  # Pushed along (dx, dy) (d2 = dx² + dy² > 0) until `reach` from what it met.
  defp push_out({qx, qy}, dx, dy, d2, reach) do
    d = isqrt(d2)
    push = reach - d
    {qx + div(dx * push, d), qy + div(dy * push, d)}
  end

  # Step 5.
  defp edge(_q, r, size) when 2 * r > size, do: div(size, 2)
  defp edge(q, r, size), do: q |> max(r) |> min(size - r)

  @doc """
  The floor of the square root of a non-negative integer.

      iex> Overworld.Physics.isqrt(0)
      0
      iex> Overworld.Physics.isqrt(99)
      9
      iex> Overworld.Physics.isqrt(4_611_686_018_427_387_904)
      2147483648
  """
  @spec isqrt(non_neg_integer) :: non_neg_integer
  def isqrt(n) when is_integer(n) and n >= 0 do
    s = trunc(:math.sqrt(n))
    fix(s, n)
  end

  defp fix(s, n) do
    cond do
      s * s > n -> fix(s - 1, n)
      (s + 1) * (s + 1) <= n -> fix(s + 1, n)
      true -> s
    end
  end
end

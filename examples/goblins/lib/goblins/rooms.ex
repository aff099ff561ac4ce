defmodule Goblins.Rooms do
  @moduledoc """
  The goblin world with walls: a maze of square rooms (walls with a door to each neighbouring
  room, a pillar in some rooms), where goblins walk from room to room along the paths the zone
  finds for them (`c:Overworld.Zone.path_to/1`, docs/sidecar.md "Paths in a zone") and the
  zone's physics pushes them apart and keeps them out of the walls (`physics: :elixir` or
  `:sidecar`, the native sidecar). `mix goblins.server --map rooms --physics sidecar` serves
  it; the visualizer draws the walls.

  Each goblin idles for a second or two, picks a point in its own room or a neighbouring one,
  asks for a path there and follows it at 3 m/s (warlords, every 20th goblin, at 4 m/s),
  waypoint by waypoint; game code only sets velocities, the physics moves the bodies (one tick
  later). A goblin shoved off its path for 15 s asks for a new one. Players walk with their
  input (as in `Goblins`), as bodies too.

      {:ok, _} = Overworld.start_zone(Goblins.Rooms, Goblins.Rooms.zone_options(2_000, id: :rooms))
  """
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.Random

  # A room's side (metres, about), a wall's thickness, a door's width.
  @room 24
  @wall 0.6
  @door 4
  @speed 3 * 1024
  @warlord_speed 4 * 1024
  @arrive 700
  @repath_s 15

  @doc """
  Zone options for `n` goblins (one per 50 m², as `Goblins`) in a maze of rooms: the size, a
  12 m grid, the map, bodies of 0.4 m, the navigation grid (1 m cells, agents of 0.5 m).
  `extra` (`:id` at least; `:physics`, default `:elixir`) is merged in.

      iex> opts = Goblins.Rooms.zone_options(2_000, id: :r)
      iex> {opts[:physics], length(opts[:map][:boxes]) > 0}
      {:elixir, true}
  """
  @spec zone_options(pos_integer, keyword) :: keyword
  def zone_options(n, extra) when is_integer(n) and n > 0 do
    side = :math.sqrt(n * 50)
    seed = Keyword.get(extra, :seed, 0)

    [
      size: {side, side},
      cell_size: 12,
      physics: :elixir,
      map: map(side, seed),
      body: [radius: 0.4],
      nav: [cell: 1, agent: 0.5, per_tick: 12, queue: 512, max_nodes: 6_000],
      args: [goblins: n, seed: seed]
    ]
    |> Keyword.merge(extra)
  end

  @doc """
  The maze of a world `side` metres wide: `[boxes: [...], circles: [...]]` in metres, for the
  zone option `:map`. The rooms are `side / k` metres (k rooms a side, about 24 m each); each
  wall between two rooms has a door, at a place taken from `seed`.

      iex> [boxes: boxes, circles: circles] = Goblins.Rooms.map(100, 0)
      iex> {length(boxes), length(circles) <= 16}
      {48, true}
  """
  @spec map(number, integer) :: keyword
  def map(side, _seed) when side < @room,
    do: raise(ArgumentError, "a maze of rooms needs a world of #{@room} m or more, got #{side} m")

  def map(side, seed) do
    k = max(2, trunc(side / @room))
    rs = side / k
    half = @wall / 2

    # The wall on the line between rooms (i - 1, j) and (i, j) (vertical) and between
    # (j, i - 1) and (j, i) (horizontal), cut by its door.
    walls =
      for i <- 1..(k - 1), j <- 0..(k - 1), dir <- [:v, :h] do
        line = i * rs
        {from, to} = {j * rs, (j + 1) * rs}
        door = from + rs / 4 + rem(hash(seed, {dir, i, j}), trunc(rs / 2) - @door)

        for {a, b} <- [{from, door}, {door + @door, to}] do
          case dir do
            :v -> {line - half, a, line + half, b}
            :h -> {a, line - half, b, line + half}
          end
        end
      end

    pillars =
      for i <- 0..(k - 1), j <- 0..(k - 1), rem(hash(seed, {:pillar, i, j}), 3) == 0 do
        {(i + 0.5) * rs, (j + 0.5) * rs, 1.5}
      end

    [boxes: List.flatten(walls), circles: pillars]
  end

  defp hash(seed, term), do: :erlang.phash2({seed, term}, 1_073_741_824)

  @impl true
  def init(args) do
    n = Keyword.fetch!(args, :goblins)
    seed = Keyword.get(args, :seed, 0)
    side = trunc(:math.sqrt(n * 50) * 1024)
    {k, rs} = rooms(side)

    goblins =
      for id <- 1..n do
        r = Random.next(Random.seed_for(seed, id))
        {x, y, r} = spot(r, rs, k)
        kind = if rem(id, 20) == 0, do: :warlord, else: :goblin
        data = %{goal: nil, path: nil, since: 0, wait: rem(r, 60)}
        [kind: kind, x: x, y: y, state: :idle, rng: r, data: data]
      end

    {:ok, %{rs: rs, k: k}, [{:spawn, goblins}]}
  end

  @doc """
  The rooms of a world `side` units wide (`Overworld.Zone.Context`'s `width`): how many a
  side, and their side in units (the maze of `map/2`, to the unit).

      iex> Goblins.Rooms.rooms(100 * 1024)
      {4, 25_600}
  """
  @spec rooms(pos_integer) :: {pos_integer, pos_integer}
  def rooms(side) do
    k = max(2, trunc(side / 1024 / @room))
    {k, div(side, k)}
  end

  # A point inside a room taken from the generator: 2 m from its walls, off its centre (where
  # a pillar may stand).
  defp spot(r, rs, k) do
    r = Random.next(r)
    room_x = rem(r, k)
    r = Random.next(r)
    room_y = rem(r, k)
    spot_in(r, rs, room_x, room_y)
  end

  defp spot_in(r, rs, room_x, room_y) do
    inner = rs - 4 * 1024
    r = Random.next(r)
    dx = rem(r, inner)
    r = Random.next(r)
    dy = rem(r, inner)
    {x, y} = {room_x * rs + 2 * 1024 + dx, room_y * rs + 2 * 1024 + dy}
    {cx, cy} = {room_x * rs + div(rs, 2), room_y * rs + div(rs, 2)}

    if abs(x - cx) < 3 * 1024 and abs(y - cy) < 3 * 1024,
      do: spot_in(r, rs, room_x, room_y),
      else: {x, y, r}
  end

  @impl true
  def handle_join(player, _meta, %{rs: rs, k: k} = state) do
    {x, y, _} = spot(:erlang.phash2(player, 1_073_741_824) + 1, rs, k)
    {:ok, [kind: :player, x: x, y: y, data: 0], state}
  end

  @impl true
  def path_to(entity(data: %{goal: goal, path: nil})) when goal != nil, do: goal
  def path_to(_entity), do: nil

  @impl true
  def handle_entity(entity(kind: :player) = e, _view, _ctx) do
    {vx, vy} = Goblins.input_velocity(e)
    {:ok, e |> entity(vx: vx, vy: vy) |> heading()}
  end

  def handle_entity(entity(data: %{} = data) = e, _view, ctx) do
    data =
      case Overworld.Zone.Context.path(ctx, entity(e, :id)) do
        {:ok, waypoints} -> %{data | path: waypoints, since: ctx.tick}
        # Refused for now: it asks again.
        {:error, :busy} -> data
        # No way there: rest, then another goal.
        {:error, _} -> %{data | goal: nil, wait: ctx.tick_rate}
        _ -> data
      end

    {:ok, e |> entity(data: data) |> walk(ctx) |> heading()}
  end

  def handle_entity(e, _view, _ctx), do: {:ok, e}

  # Idle: count down, then pick a goal (and ask for a path to it).
  defp walk(entity(data: %{goal: nil, wait: w} = data) = e, _ctx) when w > 0,
    do: entity(e, data: %{data | wait: w - 1}, vx: 0, vy: 0, state: :idle)

  defp walk(entity(data: %{goal: nil} = data, rng: r, x: x, y: y) = e, ctx) do
    {k, rs} = rooms(ctx.width)
    r = Random.next(r)
    # Its own room or a neighbour (within the maze).
    room_x = (div(x, rs) + rem(r, 3) - 1) |> max(0) |> min(k - 1)
    r = Random.next(r)
    room_y = (div(y, rs) + rem(r, 3) - 1) |> max(0) |> min(k - 1)
    {gx, gy, r} = spot_in(r, rs, room_x, room_y)
    entity(e, rng: r, data: %{data | goal: {gx, gy}, path: nil}, vx: 0, vy: 0, state: :wander)
  end

  # Waiting for its path.
  defp walk(entity(data: %{path: nil}) = e, _ctx), do: entity(e, vx: 0, vy: 0)

  # At the end of its path: rest for one to three seconds.
  defp walk(entity(data: %{path: []} = data, rng: r) = e, ctx) do
    r = Random.next(r)
    wait = ctx.tick_rate + rem(r, 2 * ctx.tick_rate)
    data = %{data | goal: nil, path: nil, wait: wait}
    entity(e, rng: r, data: data, vx: 0, vy: 0, state: :idle)
  end

  # Shoved off its path for too long: a new path to the same goal.
  defp walk(entity(data: %{since: since} = data) = e, ctx)
       when ctx.tick - since > @repath_s * ctx.tick_rate,
       do: entity(e, data: %{data | path: nil}, vx: 0, vy: 0)

  defp walk(entity(x: x, y: y, data: %{path: [{wx, wy} | rest]} = data) = e, ctx) do
    {dx, dy} = {wx - x, wy - y}

    if abs(dx) < @arrive and abs(dy) < @arrive do
      walk(entity(e, data: %{data | path: rest}), ctx)
    else
      speed = if entity(e, :kind) == :warlord, do: @warlord_speed, else: @speed
      d = :math.sqrt(dx * dx + dy * dy)
      entity(e, vx: trunc(dx * speed / d), vy: trunc(dy * speed / d), state: :wander)
    end
  end

  # (No old velocity: the heading follows the velocity unless the goblin stands still.)
  defp heading(entity(vx: vx, vy: vy, heading: h) = e),
    do: entity(e, heading: Goblins.heading(vx, vy, nil, nil, h))
end

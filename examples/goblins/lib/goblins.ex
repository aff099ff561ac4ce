defmodule Goblins do
  @moduledoc """
  The goblin world: the demo zone of `make run` and the workload of the benchmarks.

  N goblins at one per 50 m²; every tick each goblin looks at its neighbours within 12 m, runs a
  small state machine (idle ↔ wander on random timers, flee from aggressive goblins, aggressive
  goblins chase the nearest one), steers at up to 3 m/s with separation, stays in the world and
  resolves overlaps. The exact rules, shared with the native reference in `reference/`, are
  in `docs/goblins-scenario.md`; `checksum/1` lets both sides compare states bit for bit.

  Aggressive goblins (id divisible by 20, 5 %) have kind `:warlord`, the others `:goblin`.
  Players (kind `:player`) walk with their input: the axes `mx` and `my` in -127..127 (the
  walking direction and speed scaled by 127: 127 is full speed, 5 m/s; diagonals are capped at
  it), typed values of the input layout `Goblins.Wire` declares (so the client sends
  `%{mx: 100, my: 0}`, and the player's entity holds that map as its `:input`).

  ## Loot (durable events)

  Every goblin carries a little loot (1 to 10 coins, from its id). A player who touches a goblin
  (closer than 1 m) picks its loot up: the goblin's loot drops to 0 and the player's total (the
  player entity's `data`) grows. When several players touch the same goblin, the nearest (then
  the lowest entity id) gets it; both sides decide from the previous tick's positions, so the
  loot is never duplicated nor lost. Each pickup is a durable event
  `{:loot, player, player_entity, goblin_id, amount, new_total}`: the zone journals it, and
  only once it is on disk (`c:Overworld.Zone.handle_durable/2`) the player's session gets a
  reliable message `<<"L", goblin_id::32, amount::16, total::32>>`. Recovery replays it onto the
  last snapshot (`c:Overworld.Zone.replay_durable/2`). Loot does not change how goblins move:
  the world still matches the native reference bit for bit.

      {:ok, _} = Overworld.start_zone(Goblins, Goblins.zone_options(10_000, id: :goblins))
  """
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.Random
  alias Overworld.Spatial.View

  @r_view 12 * 1024
  @r_view2 @r_view * @r_view
  @r_sep 1536
  @r_sep2 @r_sep * @r_sep
  @contact 1024
  @contact2 @contact * @contact
  @speed 3072
  @arrive2 512 * 512
  @player_speed 5 * 1024
  @rider_speed 20 * 1024
  @half_turn 32768.0

  @doc """
  Zone options for a goblin world of `n` goblins: the world size for one goblin per 50 m², a
  12 m grid, and `args` for `init/1`. `extra` options (`:id` at least) are merged in.

      iex> opts = Goblins.zone_options(10_000, id: :g)
      iex> {opts[:size], opts[:cell_size]}
      {{707.1067811865476, 707.1067811865476}, 12}
  """
  @spec zone_options(pos_integer, keyword) :: keyword
  def zone_options(n, extra) when is_integer(n) and n > 0 do
    side = :math.sqrt(n * 50)
    seed = Keyword.get(extra, :seed, 0)
    rate = Keyword.get(extra, :tick_rate, 30)

    [size: {side, side}, cell_size: 12, args: [goblins: n, seed: seed, tick_rate: rate]]
    |> Keyword.merge(extra)
  end

  @doc "The world side in units for `n` goblins."
  @spec side(pos_integer) :: non_neg_integer
  def side(n), do: trunc(:math.sqrt(n * 50) * 1024)

  @impl true
  def init(args) do
    n = Keyword.fetch!(args, :goblins)
    seed = Keyword.get(args, :seed, 0)
    rate = Keyword.get(args, :tick_rate, 30)
    migrate = Keyword.get(args, :migrate, 0)
    goblins = placement(n, seed, rate)
    goblins = if migrate > 0, do: migrants(goblins, migrate), else: goblins

    {:ok, %{goblins: n, players: players!(Keyword.get(args, :players, :anywhere))},
     [{:spawn, goblins}]}
  end

  # The benchmarks' migration load (`migrate: fraction`): that fraction of the goblins (picked
  # by id) are riders that cross the world on long straight paths at 20 m/s, bouncing off its
  # edges, and see nobody.
  defp migrants(goblins, fraction) do
    for {spec, id} <- Enum.with_index(goblins, 1) do
      if rem(id * 7919, 10_000) < fraction * 10_000 do
        angle = rem(spec[:rng], 3600) * :math.pi() / 1800
        vx = round(@rider_speed * :math.cos(angle))
        vy = round(@rider_speed * :math.sin(angle))
        Keyword.merge(spec, kind: :migrant, vx: vx, vy: vy, state: :wander)
      else
        spec
      end
    end
  end

  @doc "The spawn specs of the initial goblins (ids 1..n in order)."
  @spec placement(pos_integer, integer, pos_integer) :: [keyword]
  def placement(n, seed, rate) do
    s = side(n)

    for id <- 1..n do
      r = Random.next(Random.seed_for(seed, id))
      x = rem(r, s)
      r = Random.next(r)
      y = rem(r, s)
      r = Random.next(r)
      timer = rate + rem(r, 2 * rate)
      kind = if rem(id, 20) == 0, do: :warlord, else: :goblin
      [kind: kind, x: x, y: y, state: :idle, rng: r, data: {timer, x, y, loot(id)}]
    end
  end

  @doc """
  The loot a goblin starts with: 1 to 10 coins, from its id.

      iex> Enum.map(1..4, &Goblins.loot/1)
      [8, 5, 2, 9]
  """
  @spec loot(pos_integer) :: 1..10
  def loot(id), do: 1 + rem(id * 7, 10)

  @impl true
  def handle_join(player, _meta, %{goblins: n} = state) do
    # Players appear at a spot of the world picked from their id (the same spot every time);
    # with `players: :border` (a benchmark's), within 5 m of the world's vertical centre line
    # (the border of a world of 2 x 2 zones).
    s = side(n)
    y = :erlang.phash2({player, :y}, s)

    x =
      case Map.get(state, :players, :anywhere) do
        :border -> div(s, 2) - 5 * 1024 + :erlang.phash2({player, :x}, 10 * 1024)
        :anywhere -> :erlang.phash2({player, :x}, s)
      end

    {:ok, [kind: :player, x: x, y: y, data: 0], state}
  end

  defp players!(where) when where in [:anywhere, :border], do: where
  defp players!("border"), do: :border
  defp players!("anywhere"), do: :anywhere

  defp players!(other),
    do: raise(ArgumentError, "players: must be :anywhere or :border, got: #{inspect(other)}")

  @impl true
  def handle_entity({:entity, _, kind, _, _, _, _, _, _, _, _, _, _} = e, view, ctx)
      when kind == :goblin or kind == :warlord do
    {:ok, goblin(e, view, ctx.tick_rate, ctx.width)}
  end

  def handle_entity(entity(kind: :player) = e, view, ctx) do
    # The neighbours within contact at the previous tick: for the overlap and, as the goblins
    # decide, for the pickups.
    near = View.neighbours(view, e, @contact)

    case pickups(e, near, view) do
      [] -> {:ok, player(e, near, ctx)}
      found -> loot_up(player(e, near, ctx), found)
    end
  end

  def handle_entity(entity(kind: :migrant) = e, _view, ctx) do
    {x, vx} = ride(entity(e, :x) + div(entity(e, :vx), ctx.tick_rate), entity(e, :vx), ctx.width)
    {y, vy} = ride(entity(e, :y) + div(entity(e, :vy), ctx.tick_rate), entity(e, :vy), ctx.height)
    {:ok, entity(e, x: x, y: y, vx: vx, vy: vy)}
  end

  def handle_entity(e, _view, _ctx), do: {:ok, e}

  defp ride(p, v, _max) when p < 0, do: {-p, -v}
  defp ride(p, v, max) when p > max, do: {2 * max - p, -v}
  defp ride(p, v, _max), do: {p, v}

  # A durable pickup is acknowledged to the player once journaled.
  @impl true
  def handle_durable({:loot, player, _pid, gid, amount, total}, state),
    do: {:ok, state, [{:send, player, <<"L", gid::32, amount::16, total::32>>}]}

  def handle_durable(_event, state), do: {:ok, state}

  # Replayed onto a snapshot after a crash: the goblin is empty, the player has the total
  # (absolute values, so replaying a record twice changes nothing).
  @impl true
  def replay_durable({:loot, _player, pid, gid, _amount, total}, entities) do
    entities
    |> update_entity(gid, fn g ->
      {t, qx, qy, _} = entity(g, :data)
      entity(g, data: {t, qx, qy, 0})
    end)
    |> update_entity(pid, &entity(&1, data: total))
  end

  def replay_durable(_event, entities), do: entities

  defp update_entity(entities, id, fun) do
    case entities do
      %{^id => e} -> Map.put(entities, id, fun.(e))
      _ -> entities
    end
  end

  ## Goblins (docs/goblins-scenario.md, step by step)

  # Step 1 walks the 3x3 block of candidate cells once: it filters the neighbours (within 12 m,
  # not the goblin itself), picks the threat or prey, sums the separation, and keeps the few
  # neighbours close enough to overlap after this tick's move (within 1 m plus the longest
  # possible step) for step 5. The result is the same as walking `View.neighbours/3` twice.
  defp goblin(e, view, rate, side) do
    {:entity, id, kind, x, y, _, _, _, st, r, {timer, qx, qy, loot}, _, _} = e
    agg = kind === :warlord
    near = @contact + div(@speed, rate) + 2

    {bid, bx, by, sx, sy, close} =
      scan([], View.candidates(view), agg, id, x, y, @r_view2 + 1, 0, 0, 0, 0, 0, near * near, [])

    # Touched by a player: the loot is gone (the player's side takes it, see pickups/2).
    e =
      if loot > 0 and close != [] and touched?(close, x, y),
        do: entity(e, data: {timer, qx, qy, 0}),
        else: e

    # Step 2, the state machine, each branch handing the desired velocity on to steering.
    cond do
      bid !== 0 and not agg ->
        if bx === x and by === y,
          do: steer(e, :flee, timer, qx, qy, r, @speed, 0, sx, sy, close, rate, side),
          else: toward(e, :flee, timer, qx, qy, r, x - bx, y - by, sx, sy, close, rate, side)

      bid !== 0 ->
        toward(e, :chase, timer, qx, qy, r, bx - x, by - y, sx, sy, close, rate, side)

      st === :flee or st === :chase ->
        r = Random.next(r)
        steer(e, :idle, div(rate, 2) + rem(r, rate), qx, qy, r, 0, 0, sx, sy, close, rate, side)

      st === :wander ->
        dqx = qx - x
        dqy = qy - y
        timer = if dqx * dqx + dqy * dqy <= @arrive2, do: 0, else: timer - 1

        if timer > 0 do
          toward(e, :wander, timer, qx, qy, r, dqx, dqy, sx, sy, close, rate, side)
        else
          r = Random.next(r)
          steer(e, :idle, rate + rem(r, 2 * rate), qx, qy, r, 0, 0, sx, sy, close, rate, side)
        end

      timer > 1 ->
        steer(e, :idle, timer - 1, qx, qy, r, 0, 0, sx, sy, close, rate, side)

      true ->
        r = Random.next(r)
        qx = clamp(x + rem(r, 40960) - 20480, side)
        r = Random.next(r)
        qy = clamp(y + rem(r, 40960) - 20480, side)
        r = Random.next(r)
        timer = 2 * rate + rem(r, 4 * rate)
        toward(e, :wander, timer, qx, qy, r, qx - x, qy - y, sx, sy, close, rate, side)
    end
  end

  # The desired velocity: full speed toward (dx, dy), or nothing for a zero vector.
  defp toward(e, st, timer, qx, qy, r, 0, 0, sx, sy, close, rate, side),
    do: steer(e, st, timer, qx, qy, r, 0, 0, sx, sy, close, rate, side)

  defp toward(e, st, timer, qx, qy, r, dx, dy, sx, sy, close, rate, side) do
    d = :math.sqrt(dx * dx + dy * dy)
    wx = trunc(dx * @speed / d)
    wy = trunc(dy * @speed / d)
    steer(e, st, timer, qx, qy, r, wx, wy, sx, sy, close, rate, side)
  end

  # Steps 3 to 6: steer (capped at 3 m/s), move and clamp, resolve overlaps, heading.
  # Standing still with nothing pushing (most idle goblins): v = 0, no move, heading kept.
  defp steer(e, st, timer, qx, qy, r, 0, 0, 0, 0, [], _rate, _side) do
    {:entity, id, kind, x, y, _, _, heading, _, _, {_, _, _, loot}, owner, input} = e
    {:entity, id, kind, x, y, 0, 0, heading, st, r, {timer, qx, qy, loot}, owner, input}
  end

  defp steer(e, st, timer, qx, qy, r, wx, wy, sx, sy, close, rate, side) do
    {:entity, id, kind, x, y, vx0, vy0, heading, _, _, {_, _, _, loot}, owner, input} = e
    {vx, vy} = cap_to(wx + sx, wy + sy, @speed)

    px = clamp(x + div(vx, rate), side)
    py = clamp(y + div(vy, rate), side)
    heading = heading(vx, vy, vx0, vy0, heading)

    case close do
      [] ->
        {:entity, id, kind, px, py, vx, vy, heading, st, r, {timer, qx, qy, loot}, owner, input}

      _ ->
        {ox, oy} = overlap(close, id, px, py, 0, 0)

        {:entity, id, kind, clamp(px + ox, side), clamp(py + oy, side), vx, vy, heading, st, r,
         {timer, qx, qy, loot}, owner, input}
    end
  end

  # The walk over the candidate lists (one list at a time, no tuples built per candidate).
  defp scan([], [l | ls], agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close),
    do: scan(l, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close)

  defp scan([], [], _agg, _id, _x, _y, _bd2, bid, bx, by, sx, sy, _near2, close),
    do: {bid, bx, by, sx, sy, close}

  # (The tuple_size guard lets the compiler drop the tuple checks of every field access.)
  defp scan([n | rest], ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close)
       when tuple_size(n) == 13 do
    dx = x - entity(n, :x)
    dy = y - entity(n, :y)
    d2 = dx * dx + dy * dy

    cond do
      # Out of range (two candidates in three), or in range but neither close enough to push
      # nor a possible threat or prey: nothing to do.
      d2 > @r_view2 or (d2 >= @r_sep2 and not agg and entity(n, :kind) != :warlord) ->
        scan(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close)

      entity(n, :id) === id ->
        scan(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close)

      true ->
        close = if d2 < near2, do: [n | close], else: close

        if (agg or entity(n, :kind) == :warlord) and
             (d2 < bd2 or (d2 === bd2 and entity(n, :id) < bid)) do
          separate(
            rest,
            ls,
            agg,
            id,
            x,
            y,
            d2,
            entity(n, :id),
            entity(n, :x),
            entity(n, :y),
            sx,
            sy,
            near2,
            close,
            n,
            dx,
            dy,
            d2
          )
        else
          separate(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close, n, dx, dy, d2)
        end
    end
  end

  # Separation from a neighbour closer than 1.5 m, then on with the walk.
  defp separate(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close, n, dx, dy, d2) do
    cond do
      d2 >= @r_sep2 ->
        scan(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx, sy, near2, close)

      d2 === 0 ->
        push = if id < entity(n, :id), do: -@speed, else: @speed
        scan(rest, ls, agg, id, x, y, bd2, bid, bx, by, sx + push, sy, near2, close)

      true ->
        d = :math.sqrt(d2)
        f = @speed * (@r_sep - d) / @r_sep

        scan(
          rest,
          ls,
          agg,
          id,
          x,
          y,
          bd2,
          bid,
          bx,
          by,
          sx + trunc(dx * f / d),
          sy + trunc(dy * f / d),
          near2,
          close
        )
    end
  end

  defp touched?(close, x, y) do
    Enum.any?(close, fn n ->
      dx = x - entity(n, :x)
      dy = y - entity(n, :y)
      entity(n, :kind) == :player and dx * dx + dy * dy < @contact2
    end)
  end

  defp overlap([], _id, _x, _y, ox, oy), do: {ox, oy}

  defp overlap([n | rest], id, x, y, ox, oy) do
    dx = x - entity(n, :x)
    dy = y - entity(n, :y)
    d2 = dx * dx + dy * dy

    cond do
      d2 >= @contact2 ->
        overlap(rest, id, x, y, ox, oy)

      d2 === 0 ->
        push = if id < entity(n, :id), do: -512, else: 512
        overlap(rest, id, x, y, ox + push, oy)

      true ->
        d = :math.sqrt(d2)
        k = (@contact - d) / 2 / d
        overlap(rest, id, x, y, ox + trunc(dx * k), oy + trunc(dy * k))
    end
  end

  @doc """
  The heading (0..65535, a turn) of a goblin moving at `(vx, vy)`, whose velocity was
  `(vx0, vy0)` and heading `heading`: kept when it stands still or its velocity did not
  change, else the direction of its velocity.

      iex> Goblins.heading(0, 5, 1, 1, 7)
      16384
      iex> Goblins.heading(0, 0, 1, 1, 7)
      7
  """
  @spec heading(integer, integer, integer | nil, integer | nil, 0..65535) :: 0..65535
  def heading(0, 0, _vx0, _vy0, heading), do: heading
  def heading(vx, vy, vx, vy, heading), do: heading

  def heading(vx, vy, _vx0, _vy0, _heading),
    do: Integer.mod(trunc(:math.atan2(vy, vx) * @half_turn / :math.pi()), 65536)

  defp clamp(v, _side) when v < 0, do: 0
  defp clamp(v, side) when v > side, do: side
  defp clamp(v, _side), do: v

  ## Players

  @doc """
  A player's velocity from its input (units per second): the axes scaled to 5 m/s, diagonals
  capped at it; standing still without an input.
  """
  @spec input_velocity(Overworld.Entity.t()) :: {integer, integer}
  def input_velocity(e) do
    {mx, my} =
      case entity(e, :input) do
        %{mx: mx, my: my} -> {mx, my}
        _ -> {0, 0}
      end

    cap_to(div(mx * @player_speed, 127), div(my * @player_speed, 127), @player_speed)
  end

  defp player(e, near, ctx) do
    {vx, vy} = input_velocity(e)
    x = clamp(entity(e, :x) + div(vx, ctx.tick_rate), ctx.width)
    y = clamp(entity(e, :y) + div(vy, ctx.tick_rate), ctx.height)
    {ox, oy} = overlap(near, entity(e, :id), x, y, 0, 0)

    entity(e,
      x: clamp(x + ox, ctx.width),
      y: clamp(y + oy, ctx.height),
      vx: vx,
      vy: vy,
      heading: heading(vx, vy, entity(e, :vx), entity(e, :vy), entity(e, :heading))
    )
  end

  # The goblins with loot this player touches (previous tick's positions) and gets: for each,
  # the player is the nearest of the players touching it (then the lowest id). The goblin's
  # side (touched?/3) empties it from the same positions.
  defp pickups(e, near, view) do
    for g <- near,
        entity(g, :kind) in [:goblin, :warlord],
        elem(entity(g, :data), 3) > 0,
        d2(g, e) < @contact2,
        mine?(view, g, e),
        do: g
  end

  defp mine?(view, g, me) do
    mine = {d2(g, me), entity(me, :id)}

    view
    |> View.neighbours(g, @contact)
    |> Enum.all?(fn p ->
      entity(p, :kind) != :player or entity(p, :id) == entity(me, :id) or
        d2(g, p) >= @contact2 or {d2(g, p), entity(p, :id)} > mine
    end)
  end

  defp d2(a, b) do
    dx = entity(a, :x) - entity(b, :x)
    dy = entity(a, :y) - entity(b, :y)
    dx * dx + dy * dy
  end

  defp loot_up(e, goblins) do
    {total, events} =
      Enum.reduce(Enum.sort_by(goblins, &entity(&1, :id)), {entity(e, :data) || 0, []}, fn g,
                                                                                           {t,
                                                                                            evs} ->
        amount = elem(entity(g, :data), 3)
        t = t + amount
        {t, [{:loot, entity(e, :owner), entity(e, :id), entity(g, :id), amount, t} | evs]}
      end)

    {:ok, entity(e, data: total), Enum.reverse(events)}
  end

  defp cap_to(vx, vy, max) do
    if vx * vx + vy * vy > max * max do
      d = :math.sqrt(vx * vx + vy * vy)
      {trunc(vx * max / d), trunc(vy * max / d)}
    else
      {vx, vy}
    end
  end

  ## Checksum (docs/goblins-scenario.md)

  @doc """
  The FNV-1a checksum of the goblins of a list of entities (in id order), as the native
  reference computes it.
  """
  @spec checksum([Overworld.Entity.t()]) :: non_neg_integer
  def checksum(entities) do
    entities
    |> Enum.filter(&(entity(&1, :kind) in [:goblin, :warlord]))
    |> Enum.sort_by(&entity(&1, :id))
    |> Enum.reduce(0xCBF29CE484222325, fn e, h ->
      {timer, qx, qy, _loot} = entity(e, :data)

      [
        entity(e, :id),
        entity(e, :x),
        entity(e, :y),
        entity(e, :vx),
        entity(e, :vy),
        entity(e, :heading),
        state_code(entity(e, :state)),
        timer,
        qx,
        qy,
        entity(e, :rng)
      ]
      |> Enum.reduce(h, fn v, h ->
        Bitwise.band(
          Bitwise.bxor(h, Bitwise.band(v, 0xFFFFFFFFFFFFFFFF)) * 0x100000001B3,
          0xFFFFFFFFFFFFFFFF
        )
      end)
    end)
  end

  defp state_code(:idle), do: 0
  defp state_code(:wander), do: 1
  defp state_code(:flee), do: 2
  defp state_code(:chase), do: 3
end

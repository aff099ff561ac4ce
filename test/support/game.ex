defmodule Overworld.Test.Game do
  @moduledoc false
  # The game of the framework's tests: critters wandering at random, and players picking up
  # the coins they carry.
  #
  # * Critters (ids 1..n, one per 50 m², kind `:beetle`, every fourth a `:mouse`) walk at
  #   random: every tick each turns by up to 1/32 of a turn either way, drawn from its own
  #   generator, and steps at 1 m/s (mice 3 m/s), turning back at the world's edges. Each
  #   carries `loot/1` coins (1..10, its `data`).
  # * Players (kind `:player`, `data` = the coins they picked up) walk with their input
  #   `{mx, my}` (-127..127 each; 127 is 5 m/s, never faster diagonally).
  # * A player closer than 1 m to a critter with coins picks them all up; when several are,
  #   the nearest (then the lowest entity id). Both sides decide from the previous tick's
  #   positions (the critter empties itself, the player adds its coins), so no coin is ever
  #   duplicated or lost, whichever workers simulate the two. Each pickup is a durable event
  #   `{:loot, player, player_entity_id, critter_id, amount, total}`, acknowledged to the player
  #   once journaled as `<<"L", critter_id::32, amount::16, total::32>>`.
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.Random
  alias Overworld.Spatial.View

  @critters [:beetle, :mouse]
  # 1 m, in units, squared.
  @contact 1024
  @contact2 @contact * @contact
  @player_speed 5 * 1024
  @radians_per_step :math.pi() / 32_768

  @doc """
  Zone options for `n` critters: a square world of 50 m² per critter, 12 m cells. `extra`
  (`:id` at least) is merged in; `coins: false` in it makes critters that carry no coins
  (nothing to pick up, no EVENTs: for tests that expect none).
  """
  def zone_options(n, extra) do
    side = :math.sqrt(n * 50)
    {coins, extra} = Keyword.pop(extra, :coins, true)
    Keyword.merge([size: {side, side}, cell_size: 12, args: [critters: n, coins: coins]], extra)
  end

  @doc "The side of the world of `n` critters, in units."
  def side(n), do: trunc(:math.sqrt(n * 50) * 1024)

  @doc "The coins critter `id` starts with (1..10)."
  def loot(id), do: 1 + rem(id * 7, 10)

  @impl true
  def init(args) do
    n = Keyword.fetch!(args, :critters)
    coins? = Keyword.get(args, :coins, true)
    side = side(n)

    critters =
      for id <- 1..n//1 do
        kind = if rem(id, 4) == 0, do: :mouse, else: :beetle
        x = :erlang.phash2({:x, id}, side + 1)
        y = :erlang.phash2({:y, id}, side + 1)
        heading = :erlang.phash2({:heading, id}, 65_536)
        [kind: kind, x: x, y: y, heading: heading, data: if(coins?, do: loot(id), else: 0)]
      end

    {:ok, %{side: side}, [{:spawn, critters}]}
  end

  # A player appears at the meta's `x`, `y` (units) if given, else at a spot of the middle of
  # the world picked from its name (the same every time; away from the edges, where it could
  # not walk on).
  @impl true
  def handle_join(player, meta, %{side: side} = state) do
    {x, y} =
      case meta do
        %{x: x, y: y} ->
          {x, y}

        _ ->
          half = div(side, 2)

          {div(side, 4) + :erlang.phash2({:x, player}, half + 1),
           div(side, 4) + :erlang.phash2({:y, player}, half + 1)}
      end

    {:ok, [kind: :player, x: x, y: y, data: 0], state}
  end

  @doc "An INPUT payload: two signed bytes `mx`, `my` in -127..127."
  @impl true
  def decode_input(<<mx::signed-8, my::signed-8>>) when mx > -128 and my > -128,
    do: {:ok, {mx, my}}

  def decode_input(_payload), do: {:error, :bad_payload}

  @impl true
  def handle_entity(entity(kind: kind) = e, view, ctx) when kind in @critters do
    e =
      if entity(e, :data) > 0 and Enum.any?(touching(view, e), &player?/1),
        do: entity(e, data: 0),
        else: e

    {:ok, wander(e, ctx)}
  end

  def handle_entity(entity(kind: :player) = e, view, ctx) do
    case Enum.filter(touching(view, e), &mine?(view, &1, e)) do
      [] -> {:ok, walk(e, ctx)}
      critters -> pick_up(walk(e, ctx), critters)
    end
  end

  def handle_entity(e, _view, _ctx), do: {:ok, e}

  # A client's reliable messages, newest first, in the game state (the tests read them).
  @impl true
  def handle_event(player, payload, state),
    do: {:ok, Map.update(state, :events, [{player, payload}], &[{player, payload} | &1])}

  # A test asks the zone to send a player a reliable message (`{:send, player, payload}`).
  @impl true
  def handle_info({:send_to, player, payload}, state),
    do: {:ok, state, [{:send, player, payload}]}

  def handle_info(_msg, state), do: {:ok, state}

  @impl true
  def handle_durable({:loot, player, _entity_id, critter, amount, total}, state),
    do: {:ok, state, [{:send, player, <<"L", critter::32, amount::16, total::32>>}]}

  def handle_durable(_event, state), do: {:ok, state}

  # Absolute values: replaying a pickup twice changes nothing more.
  @impl true
  def replay_durable({:loot, _player, entity_id, critter, _amount, total}, entities) do
    entities
    |> update(critter, &entity(&1, data: 0))
    |> update(entity_id, &entity(&1, data: total))
  end

  def replay_durable(_event, entities), do: entities

  defp update(entities, id, fun) do
    case entities do
      %{^id => e} -> %{entities | id => fun.(e)}
      _ -> entities
    end
  end

  ## Critters

  defp wander(e, ctx) do
    {turn, rng} = Random.uniform(entity(e, :rng), 4097)
    heading = Integer.mod(entity(e, :heading) + turn - 2048, 65_536)
    speed = if entity(e, :kind) == :mouse, do: 3 * 1024, else: 1024
    vx = trunc(speed * :math.cos(heading * @radians_per_step))
    vy = trunc(speed * :math.sin(heading * @radians_per_step))
    x = entity(e, :x) + div(vx, ctx.tick_rate)
    y = entity(e, :y) + div(vy, ctx.tick_rate)

    if x in 0..ctx.width and y in 0..ctx.height,
      do: entity(e, x: x, y: y, vx: vx, vy: vy, heading: heading, rng: rng),
      else: entity(e, vx: 0, vy: 0, heading: Integer.mod(heading + 32_768, 65_536), rng: rng)
  end

  ## Players

  defp walk(e, ctx) do
    {mx, my} =
      case entity(e, :input) do
        {mx, my} when is_integer(mx) and is_integer(my) ->
          {clamp(mx, -127, 127), clamp(my, -127, 127)}

        _ ->
          {0, 0}
      end

    {vx, vy} = {div(mx * @player_speed, 127), div(my * @player_speed, 127)}

    {vx, vy} =
      if vx * vx + vy * vy > @player_speed * @player_speed do
        d = :math.sqrt(vx * vx + vy * vy)
        {trunc(vx * @player_speed / d), trunc(vy * @player_speed / d)}
      else
        {vx, vy}
      end

    entity(e,
      x: clamp(entity(e, :x) + div(vx, ctx.tick_rate), 0, ctx.width),
      y: clamp(entity(e, :y) + div(vy, ctx.tick_rate), 0, ctx.height),
      vx: vx,
      vy: vy,
      heading: heading(vx, vy, entity(e, :heading))
    )
  end

  defp heading(0, 0, heading), do: heading
  defp heading(vx, vy, _), do: Integer.mod(round(:math.atan2(vy, vx) / @radians_per_step), 65_536)

  # The critter `c` (in the player's reach) has coins and `me` is the nearest player touching
  # it, then the lowest id: what the critter's side sees too (see handle_entity/3).
  defp mine?(view, c, me) do
    critter?(c) and entity(c, :data) > 0 and
      Enum.all?(touching(view, c), fn p ->
        not player?(p) or entity(p, :id) == entity(me, :id) or
          {d2(c, p), entity(p, :id)} > {d2(c, me), entity(me, :id)}
      end)
  end

  defp pick_up(e, critters) do
    {events, total} =
      critters
      |> Enum.sort_by(&entity(&1, :id))
      |> Enum.map_reduce(entity(e, :data), fn c, total ->
        amount = entity(c, :data)

        {{:loot, entity(e, :owner), entity(e, :id), entity(c, :id), amount, total + amount},
         total + amount}
      end)

    {:ok, entity(e, data: total), events}
  end

  ## Contact

  # The entities closer than 1 m to `e` at the previous tick.
  defp touching(view, e),
    do: view |> View.neighbours(e, @contact) |> Enum.filter(&(d2(&1, e) < @contact2))

  defp player?(e), do: entity(e, :kind) == :player
  defp critter?(e), do: entity(e, :kind) in @critters

  defp d2(a, b) do
    dx = entity(a, :x) - entity(b, :x)
    dy = entity(a, :y) - entity(b, :y)
    dx * dx + dy * dy
  end

  defp clamp(v, lo, hi), do: v |> max(lo) |> min(hi)
end

defmodule Overworld.Test.Game.Wire do
  @moduledoc false
  # What clients see of the test game: positions at 1/64 m over up to 16 km, heading to 1/256
  # of a turn, and for critters their kind.
  use Overworld.Template

  template :critter, id: 1, kinds: [:beetle, :mouse] do
    field(:x, :fixed, max: 16384, precision: 1 / 64)
    field(:y, :fixed, max: 16384, precision: 1 / 64)
    field(:heading, :angle, bits: 8)
    field(:kind, :enum, values: [:beetle, :mouse])
  end

  template :player, id: 2, kinds: [:player] do
    field(:x, :fixed, max: 16384, precision: 1 / 64)
    field(:y, :fixed, max: 16384, precision: 1 / 64)
    field(:heading, :angle, bits: 8)
  end
end

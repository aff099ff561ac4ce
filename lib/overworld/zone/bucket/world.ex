defmodule Overworld.Zone.Bucket.World do
  @moduledoc false
  # A bucket worker of a zone of a world (see Overworld.World and Overworld.World.Place): at
  # the start of a tick, what its neighbours sent (shadows, adopted entities) joins its cells
  # and view; at the end, its share of the shadows and handoffs for them. The state is the
  # worker's (`Overworld.Zone.Bucket`); these are its world steps.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.World.Place

  @doc false
  # The entities we handed away at the end of our last tick that come straight back with this
  # one (`world`), whichever worker adopts them: their old copies leave our cells as the tick
  # starts (world_in/2).
  @spec back(map, nil | tuple) :: map
  def back(%{place: nil}, _world), do: %{}
  def back(_st, nil), do: %{}

  def back(st, {_shadows, _adopt, {adopted, _handed}}) do
    for {id, _} <- adopted, is_map_key(st.departed, id), into: %{}, do: {id, true}
  end

  # At the start of a tick: the entities a neighbour handed to us (`adopt`, computed by us
  # from this tick on) join our cells, and the neighbours' shadows of their last tick join the
  # view (read-only, with those we handed away at the end of ours). Answers the Pass's world.
  #
  # Every worker sees what one worker over the whole zone would (`Overworld.Zone.History`
  # replays the zone so): an entity adopted this tick, by whichever worker, at the state it
  # was handed over with. The other workers' adoptions in our halo rows join our view (the
  # halo of our last tick has not got them), and their old zone's copies leave the shadows:
  # with the realtime clock those may be of another tick than the transfer (a tick older,
  # reckoned; or newer, without it).
  # `back`: back/2 of `world`, computed by the caller (the physics needs it first).
  @doc false
  @spec world_in(map, tuple | nil) :: {map, tuple | nil}
  def world_in(st, world), do: world_in(st, world, back(st, world))

  @doc false
  @spec world_in(map, tuple | nil, map) :: {map, tuple | nil}
  def world_in(%{place: nil} = st, _world, _back), do: {st, nil}
  def world_in(st, nil, back), do: world_in(st, {[], [], {%{}, %{}}}, back)

  def world_in(st, {shadows, adopt, {adopted, handed} = marks}, back) do
    grid = st.config.grid
    # An entity handed to us is in its old zone's shadows too: ours now, whoever adopts it.
    shadows = if map_size(adopted) == 0, do: shadows, else: Sweep.without(shadows, adopted)

    # (An entity handed away at the end of our last tick that comes straight back: its old
    # copy goes first, from our cells, and one another worker handed from our halo.)
    old = Map.merge(back, Map.take(handed, Map.keys(adopted)))

    {own, view} =
      if map_size(old) == 0,
        do: {st.own, st.view},
        else: {Sweep.without(st.own, old), Sweep.without(st.view, old)}

    departed = Map.drop(st.departed, Map.keys(back))
    # (Sweep.insert/3 of nothing is nothing.)
    {own, view} =
      {Sweep.insert(own, grid, adopt), Sweep.insert(view, grid, adopt ++ in_halo(st, adopted))}

    # Avatars adopted: ours to take the inputs of (the server routed them here).
    came = for e <- adopt, entity(e, :owner) != nil, do: {entity(e, :id), true}

    ids = flagged(shadows, departed, marks)

    st = %{
      st
      | own: own,
        view: Sweep.merge(view, shadows),
        # (One that came straight back is still counted: it left at the end of our last tick.)
        count: st.count + length(adopt) - map_size(back),
        avatars: Map.merge(st.avatars, Map.new(came)),
        departed: departed
    }

    # (The Pass's adopted: ours, new to our observers.)
    {st, {ids, Map.new(adopt, &{entity(&1, :id), true}), departed}}
  end

  # The entities adopted this tick (by the other workers) in our halo rows: the row before
  # our stripe and the row after it.
  defp in_halo(_st, adopted) when map_size(adopted) == 0, do: []

  defp in_halo(%{config: %{grid: grid, stripes: stripes}, index: me}, adopted) do
    {r0, r1} = elem(stripes, me)
    {a, b} = {Grid.key_at(grid, 0, r0 - 1), Grid.key_at(grid, 0, r0)}
    {c, d} = {Grid.key_at(grid, 0, r1), Grid.key_at(grid, 0, r1 + 1)}

    for {_id, e} <- adopted,
        k = Grid.key(grid, entity(e, :x), entity(e, :y)),
        (k >= a and k < b) or (k >= c and k < d),
        do: e
  end

  @doc false
  # The ids game code sees as shadows (`Overworld.Spatial.View.shadow?/2`): the neighbours'
  # shadows and what the zone handed away at the end of its last tick (`departed`, ours; the
  # other workers' in `marks`, in our halo), but what any worker adopted this tick (another's
  # adoption may be in our shadows). The same for every worker, and for the replay of the
  # zone's history by one (`Overworld.Zone.History`).
  @spec flagged(Sweep.pairs(), map, {map, map}) :: map
  def flagged(shadows, departed, {adopted, handed}) do
    marked = if map_size(handed) == 0, do: departed, else: Map.merge(handed, departed)

    marked = if map_size(adopted) == 0, do: marked, else: Map.drop(marked, Map.keys(adopted))

    for {_k, l} <- shadows,
        e <- l,
        not is_map_key(adopted, entity(e, :id)),
        into: marked,
        do: {entity(e, :id), true}
  end

  # At the end of a tick: our cells that each neighbour needs as shadows (neighbour => cells,
  # sorted), and the entities that now belong to a neighbour (standing past the hysteresis
  # margin outside our region), players' avatars too. Answers
  # `{nil | {shadows, handoffs}, departed}`.
  @doc false
  @spec world_out(map, Sweep.pairs(), boolean, boolean) :: {tuple | nil, map}
  def world_out(%{place: nil}, _own, _simulate?, _shadows?), do: {nil, %{}}

  # (`shadows?` false: not a tick the zone sends shadows on, a lower shadow rate.)
  def world_out(st, own, simulate?, shadows?) do
    %{place: place} = st
    rows = if shadows?, do: st.shadow_rows, else: nil
    grid = st.config.grid
    {stop, _, _} = st.bounds

    # (Our cells, up to the end of our stripe: the halo after it is not ours.)
    {shadows, handoffs} =
      Enum.reduce_while(own, {%{}, []}, fn
        {k, _}, acc when k >= stop ->
          {:halt, acc}

        {k, l} = pair, {shadows, handoffs} ->
          row = Grid.row(grid, k)
          col = Grid.col(grid, k)

          shadows =
            if rows,
              do:
                Enum.reduce(elem(rows, row), shadows, fn {n, c0, c1}, acc ->
                  if col >= c0 and col <= c1,
                    do: Map.update(acc, n, [pair], &[pair | &1]),
                    else: acc
                end),
              else: shadows

          if simulate? and not Place.inside?(place, col, row),
            do: {:cont, {shadows, leaving(place, l, handoffs)}},
            else: {:cont, {shadows, handoffs}}
      end)

    shadows = Map.new(shadows, fn {n, pairs} -> {n, :lists.reverse(pairs)} end)
    departed = Map.new(handoffs, fn {_n, e} -> {entity(e, :id), true} end)
    {{shadows, handoffs}, departed}
  end

  defp leaving(place, l, handoffs) do
    Enum.reduce(l, handoffs, fn e, acc ->
      case Place.owner(place, entity(e, :x), entity(e, :y)) do
        n when n != place.id -> [{n, e} | acc]
        _ -> acc
      end
    end)
  end
end

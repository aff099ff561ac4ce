defmodule Overworld.Zone.Pass do
  @moduledoc false
  # The simulation pass of one bucket worker over its cells, as a pure function.
  #
  # Cells are walked in key order with a sweep (`Overworld.Spatial.Sweep`) over the previous
  # tick's view (own cells + halo), which hands each cell its 3x3 block. For every entity the
  # zone's `handle_entity/3` computes the next state; the result goes back into its cell (most
  # entities, kept in id order), to another cell of the stripe (`movers`), to another worker
  # (`out`), nowhere (despawned: `gone`), or — when game code fails, or returns an entity that
  # the zone's wire cannot encode — the entity keeps its previous state and the failure is
  # counted.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Spatial.{Grid, Sweep, View}
  alias Overworld.Zone.{Config, Wire}

  @type result :: %{
          desc: Sweep.pairs(),
          border: Sweep.pairs(),
          wire: [{integer, [bitstring], boolean, [Overworld.Protocol.Snapshot.entry()]}] | nil,
          movers: [Overworld.Entity.t()],
          out: [{non_neg_integer, Overworld.Entity.t()}],
          moves: [{pos_integer, non_neg_integer}],
          gone: [Overworld.Entity.t()],
          errors: {non_neg_integer, nil | {pos_integer, term}},
          events: [term]
        }

  @doc false
  # `own` is the view from our first cell on; the walk stops at key `stop` (the first key past
  # our stripe). `phys`: the physics step's results of our bodies, in the walk's order
  # (`Overworld.Zone.Physics`): each body is moved to its result before game code sees it. Cells with a key below `lo` or from `hi` on are our border rows, which the
  # other workers need: they are returned apart too. The new cells come in descending order.
  @spec run(
          Sweep.pairs(),
          Sweep.pairs(),
          {integer, integer, integer},
          Config.t(),
          non_neg_integer,
          Overworld.Zone.Context.t(),
          map,
          map,
          nil | {map, map},
          [Overworld.Zone.Physics.result()]
        ) ::
          result
  def run(
        own,
        view,
        {stop, lo, hi},
        %Config{} = config,
        me,
        ctx,
        inputs,
        despawns,
        world \\ nil,
        phys \\ []
      ) do
    # In a world of zones (`world`): the ids of the shadows in the view (the neighbours'
    # entities, read-only), of the entities adopted from a neighbour this tick, and of those
    # handed to a neighbour at the end of the last (still in our cells, not computed: the
    # wire says they left).
    {shadows, adopted, departed} = world || {nil, %{}, %{}}

    %Config{grid: grid, module: module, owners: owners, bounds: bounds, wire: wire} = config
    # An external fun is called through its export entry directly; `module.handle_entity(...)`
    # with a variable module would look the export up on every call.
    mod = Function.capture(module, :handle_entity, 3)

    env =
      {mod, grid, owners, me, bounds, ctx, inputs, despawns, wire && Wire.funs(wire), shadows,
       adopted, departed, veto(config)}

    plain? = map_size(inputs) == 0 and map_size(despawns) == 0 and map_size(departed) == 0
    # Entities despawned this tick are not seen by their neighbours either: whatever an entity
    # decides from a neighbour (a pickup, a hit) the neighbour decides too, and one that is
    # gone cannot.
    view = if map_size(despawns) == 0, do: view, else: Sweep.without(view, despawns)

    {desc, border, wired, {movers, out, moves, gone, errors, events}} =
      cells(
        own,
        view,
        view,
        view,
        {stop, lo, hi},
        env,
        plain?,
        {[], [], if(wire, do: [], else: nil)},
        {[], [], [], [], {0, nil}, []},
        phys
      )

    %{
      desc: desc,
      border: border,
      wire: wired,
      movers: movers,
      out: out,
      moves: moves,
      gone: gone,
      errors: errors,
      # Per entity, newest first (see settle/7): flattened in that order.
      events: for({_id, evs} <- events, ev <- evs, do: ev)
    }
  end

  # The cursors `above`, `same` and `below` sweep the view for the 3x3 block of each cell.
  # `out` holds the new cells (descending), our border cells, and with a wire the cells' ops.
  defp cells([{k, _} | _], _above, _same, _below, {stop, _, _}, _env, _plain?, out, acc, _phys)
       when k >= stop,
       do: done(out, acc)

  defp cells([], _above, _same, _below, _bounds, _env, _plain?, out, acc, _phys),
    do: done(out, acc)

  defp cells([{k, list} | rest], above, same, below, bounds, env, plain?, out, acc, phys) do
    {mod, %Grid{cell: cell, stride: stride} = grid, _, _, {_, _, bx1, by1}, ctx, _, _, wire,
     shadows, adopted, _, veto} = env

    {block, above, same, below} = Sweep.block(above, same, below, k, stride)
    view = %View{grid: grid, block: block, shadows: shadows}

    # The cell's bounds, within the zone's (the world, or its region): an entity whose new
    # position is inside stays (no division, no clamping needed).
    x0 = (rem(k, stride) - 1) * cell
    y0 = (div(k, stride) - 1) * cell
    x1 = if x0 + cell > bx1, do: bx1 + 1, else: x0 + cell
    y1 = if y0 + cell > by1, do: by1 + 1, else: y0 + cell
    {x0, x1, y0, y1} = band(veto, k, stride, {x0, x1, y0, y1})
    {stays, acc, phys} = walk(list, k, x0, x1, y0, y1, view, mod, ctx, [], acc, env, plain?, phys)

    {desc, border, wired} = out
    {list, stays, acc} = adopted(wire, adopted, list, reverse(stays), acc)
    {stays, wired, acc} = wire_cell(wire, k, list, stays, wired, acc, env)

    case stays do
      [] ->
        cells(rest, above, same, below, bounds, env, plain?, {desc, border, wired}, acc, phys)

      _ ->
        pair = {k, stays}
        {_, lo, hi} = bounds
        border = if k < lo or k >= hi, do: [pair | border], else: border

        cells(
          rest,
          above,
          same,
          below,
          bounds,
          env,
          plain?,
          {[pair | desc], border, wired},
          acc,
          phys
        )
    end
  end

  defp done({desc, border, wired}, acc), do: {desc, :lists.reverse(border), wired, acc}

  # Entities adopted from a neighbour zone this tick are new to our observers: for the wire
  # they are not in their cell's old list, and those that stay in it arrive there (movers: the
  # grid phase encodes them as arrivals).
  defp adopted(nil, _adopted, list, stays, acc), do: {list, stays, acc}

  defp adopted(_wire, adopted, list, stays, acc) when map_size(adopted) == 0,
    do: {list, stays, acc}

  defp adopted(_wire, adopted, list, stays, acc) do
    if Enum.any?(list, &is_map_key(adopted, entity(&1, :id))) do
      {new, stays} = Enum.split_with(stays, &is_map_key(adopted, entity(&1, :id)))
      {movers, out, moves, gone, errors, evs} = acc
      list = Enum.reject(list, &is_map_key(adopted, entity(&1, :id)))
      {list, stays, {Enum.reverse(new, movers), out, moves, gone, errors, evs}}
    else
      {list, stays, acc}
    end
  end

  # The cell's ops, with a wire. Game code may return an entity that the wire cannot encode (a
  # value its template cannot quantize): rare, so it is not checked entity by entity but when
  # encoding the cell raises. Then the cell is redone: every entity that cannot be encoded
  # keeps its previous state (same id in the cell's old list, which was encoded last tick), a
  # failure like any invalid return, and the cell is encoded again. (Entities that left the
  # cell were checked when they moved: see move/6.)
  defp wire_cell(nil, _k, _list, stays, nil, acc, _env), do: {stays, nil, acc}

  # (Entities handed to a neighbour zone leave with op 11.)
  defp wire_cell(wire, k, list, stays, wired, acc, env) do
    {stays, [Wire.cell(wire, k, list, stays, elem(env, 11)) | wired], acc}
  catch
    _, _ ->
      {stays, acc} = encodable(stays, list, wire, [], acc, env)
      {stays, [Wire.cell(wire, k, list, stays, elem(env, 11)) | wired], acc}
  end

  defp encodable([], _list, _wire, kept, acc, _env), do: {:lists.reverse(kept), acc}

  defp encodable([e | rest], list, wire, kept, acc, env) do
    case unencodable(wire, e) do
      nil ->
        encodable(rest, list, wire, [e | kept], acc, env)

      failure ->
        inputs = elem(env, 6)
        old = with_input(List.keyfind(list, entity(e, :id), 1), inputs)
        encodable(rest, list, wire, [old | kept], failed_encoding(acc, e, failure), env)
    end
  end

  # nil, or why the wire cannot encode the entity (a failure to report, see Bucket).
  defp unencodable(nil, _e), do: nil

  defp unencodable(wire, e) do
    case Wire.check(wire, e) do
      :ok -> nil
      {:error, kind, reason, stack} -> {:__unencodable__, kind, reason, stack}
    end
  end

  # Most cells hold a handful of entities: reversing them inline beats the BIF call.
  defp reverse([_] = l), do: l
  defp reverse([a, b]), do: [b, a]
  defp reverse([a, b, c]), do: [c, b, a]
  defp reverse([a, b, c, d]), do: [d, c, b, a]
  defp reverse(l), do: :lists.reverse(l)

  # Every entity of a cell. `plain?`: no inputs, despawns or departures this tick for this
  # worker (the tightest loop); otherwise an entity despawned goes, one handed to a neighbour
  # zone is not computed, and a player's entity gets its input (the others, most of them, cost
  # a few more checks).
  defp walk([], _k, _x0, _x1, _y0, _y1, _view, _mod, _ctx, stays, acc, _env, _plain?, phys),
    do: {stays, acc, phys}

  defp walk([e | rest], k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, false = plain?, phys) do
    inputs = elem(env, 6)
    despawns = elem(env, 7)
    departed = elem(env, 11)

    cond do
      # (Handed to a neighbour: not ours to compute, nor to despawn.)
      is_map_key(departed, entity(e, :id)) ->
        walk(rest, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, skip(phys, e))

      is_map_key(despawns, entity(e, :id)) ->
        acc = gone(acc, e)
        walk(rest, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, skip(phys, e))

      true ->
        e_in = with_input(e, inputs)
        {moved, phys} = stepped(e, phys)
        # (The input on the moved entity too: one the sidecar moved is the entity without it.)
        stepped = with_input(moved, inputs)
        {stays, acc} = one(e_in, stepped, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env)
        walk(rest, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, phys)
    end
  end

  defp walk([e | rest], k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, []) do
    {stays, acc} = one(e, e, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env)
    walk(rest, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, [])
  end

  defp walk([e | rest], k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, phys) do
    {stepped, phys} = stepped(e, phys)
    {stays, acc} = one(e, stepped, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env)
    walk(rest, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env, plain?, phys)
  end

  # Whether a result is entity `e` already moved (the sidecar's over the shared segment).
  defguardp is_moved(result, e) when tuple_size(result) > 3 and elem(result, 1) == elem(e, 1)

  # The entity moved by the physics step, when it is the next body of the results (bodies
  # are a subsequence of the walk); game code computes from it. A failure of game code keeps
  # the entity as it was (before the step too). A result is `{id, x, y}`, or the entity
  # already moved (Overworld.Zone.Physics.result/0).
  defp stepped(e, [{id, x, y} | rest]) when elem(e, 1) == id, do: {entity(e, x: x, y: y), rest}
  defp stepped(e, [moved | rest]) when is_moved(moved, e), do: {moved, rest}
  defp stepped(e, phys), do: {e, phys}

  defp skip([{id, _, _} | rest], e) when elem(e, 1) == id, do: rest
  defp skip([moved | rest], e) when is_moved(moved, e), do: rest
  defp skip(phys, _e), do: phys

  defp one(e, stepped, k, x0, x1, y0, y1, view, mod, ctx, stays, acc, env) do
    id = entity(e, :id)

    case call(mod, stepped, view, ctx) do
      {:ok, {:entity, ^id, _, x, y, _, _, _, _, _, _, _, _} = e2}
      when is_integer(x) and x >= x0 and x < x1 and is_integer(y) and y >= y0 and y < y1 ->
        {[e2 | stays], acc}

      result ->
        settle(result, e, id, k, stays, acc, env)
    end
  end

  @doc false
  # The newest input of an owned entity, if one arrived this tick.
  @spec with_input(Overworld.Entity.t(), map) :: Overworld.Entity.t()
  def with_input(e, inputs) when map_size(inputs) == 0, do: e

  def with_input(e, inputs) do
    if entity(e, :owner) == nil do
      e
    else
      id = entity(e, :id)

      case inputs do
        %{^id => input} -> entity(e, input: input)
        _ -> e
      end
    end
  end

  defp call(handle_entity, e, view, ctx) do
    handle_entity.(e, view, ctx)
  catch
    kind, reason -> {:__failed__, kind, reason, __STACKTRACE__}
  end

  # Where a result goes: back into its cell, to another cell, to another worker, nowhere
  # (despawned), or (a failure) the entity keeps its previous state.
  defp settle(result, e, id, k, stays, acc, env) do
    grid = elem(env, 1)
    bounds = elem(env, 4)

    case result do
      {:ok, {:entity, ^id, _, x, y, _, _, _, _, _, _, _, _} = e2}
      when is_integer(x) and is_integer(y) ->
        e2 = e2 |> clamp(x, y, bounds) |> cross(elem(env, 12))
        k2 = Grid.key(grid, entity(e2, :x), entity(e2, :y))
        if k2 === k, do: {[e2 | stays], acc}, else: move(e, e2, k2, stays, acc, env)

      # Durable events of game code (`c:Overworld.Zone.handle_entity/3`): journaled by the zone.
      # Kept with the entity's id: an entity that the wire then cannot encode is a failure,
      # and its events go (see failed_encoding/3).
      {:ok, {:entity, ^id, _, x, y, _, _, _, _, _, _, _, _} = e2, events}
      when is_integer(x) and is_integer(y) and is_list(events) ->
        {movers, out, moves, gone, errors, evs} = acc
        acc = {movers, out, moves, gone, errors, [{id, events} | evs]}
        settle({:ok, e2}, e, id, k, stays, acc, env)

      :despawn ->
        {stays, gone(acc, e)}

      other ->
        {[e | stays], failed(acc, e, other)}
    end
  end

  ## Crossings game code may veto (`c:Overworld.Zone.handle_crossing/3`, a zone of a world)

  # `{handle_crossing, place, band}`: `band` the region's rectangle grown by the hysteresis
  # margin over the square root of 2 (within it, sides and corners alike, the entity stays
  # ours); nil without the callback.
  defp veto(%Config{world: nil}), do: nil

  defp veto(%Config{world: place, module: module}) do
    if function_exported?(module, :handle_crossing, 3) do
      {x0, y0, x1, y1} = place.box
      h = trunc(place.hysteresis / :math.sqrt(2))
      {Function.capture(module, :handle_crossing, 3), place, {x0 - h, y0 - h, x1 + h, y1 + h}}
    end
  end

  # In a ring cell (outside the region), an entity stays in its cell only within the band:
  # one going past it takes the slow path (settle/7), where the crossing may be vetoed.
  defp band(nil, _k, _stride, bounds), do: bounds

  defp band({_, place, {bx0, by0, bx1, by1}}, k, stride, {x0, x1, y0, y1} = bounds) do
    if Overworld.World.Place.inside?(place, rem(k, stride) - 1, div(k, stride) - 1),
      do: bounds,
      else: {max(x0, bx0), min(x1, bx1 + 1), max(y0, by0), min(y1, by1 + 1)}
  end

  # An entity past the band, going to another zone: game code may keep it (`:veto`), and it
  # stops at the band's edge.
  defp cross(e, nil), do: e

  defp cross(e, {fun, place, {bx0, by0, bx1, by1}}) do
    {x, y} = {entity(e, :x), entity(e, :y)}

    with false <- x >= bx0 and x <= bx1 and y >= by0 and y <= by1,
         to when to != place.id <- Overworld.World.Place.owner(place, x, y),
         :veto <- vetoed(fun, e, place.id, to) do
      entity(e, x: x |> max(bx0) |> min(bx1), y: y |> max(by0) |> min(by1))
    else
      _ -> e
    end
  end

  defp vetoed(fun, e, from, to) do
    fun.(e, from, to)
  catch
    _, _ -> :ok
  end

  defp clamp(e, x, y, {x0, y0, x1, y1}) when x >= x0 and x <= x1 and y >= y0 and y <= y1, do: e

  defp clamp(e, x, y, {x0, y0, x1, y1}),
    do: entity(e, x: x |> max(x0) |> min(x1), y: y |> max(y0) |> min(y1))

  # An entity that changes cell is encoded after the grid phase, as an arrival in its new cell
  # (maybe on another worker): with a wire it is checked now (movers are few per tick), so that
  # one the wire cannot encode keeps its previous state like any invalid return.
  defp move(e, e2, k2, stays, acc, env) do
    case unencodable(elem(env, 8), e2) do
      nil -> {stays, moved(acc, e2, k2, env)}
      failure -> {[e | stays], failed_encoding(acc, e, failure)}
    end
  end

  defp moved({movers, out, moves, gone, errors, evs}, e, k2, env) do
    grid = elem(env, 1)
    owners = elem(env, 2)
    me = elem(env, 3)
    owner = elem(owners, Grid.row(grid, k2))

    cond do
      owner === me ->
        {[e | movers], out, moves, gone, errors, evs}

      entity(e, :owner) == nil ->
        {movers, [{owner, e} | out], moves, gone, errors, evs}

      true ->
        {movers, [{owner, e} | out], [{entity(e, :id), owner} | moves], gone, errors, evs}
    end
  end

  defp gone({movers, out, moves, gone, errors, evs}, e),
    do: {movers, out, moves, [e | gone], errors, evs}

  # An entity that the wire cannot encode: a failure like any invalid return, so the events it
  # returned go too.
  defp failed_encoding({movers, out, moves, gone, errors, evs}, e, failure) do
    evs = List.keydelete(evs, entity(e, :id), 0)
    failed({movers, out, moves, gone, errors, evs}, e, failure)
  end

  defp failed({movers, out, moves, gone, {count, first}, evs}, e, result) do
    first = first || {entity(e, :id), result}
    {movers, out, moves, gone, {count + 1, first}, evs}
  end
end

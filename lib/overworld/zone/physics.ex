defmodule Overworld.Zone.Physics do
  @moduledoc """
  A zone's physics (zone option `:physics`, docs/sidecar.md): every tick starts by moving the
  zone's bodies by their velocities and pushing them apart and out of the obstacles
  (`Overworld.Physics.step/3`), computed from the state the previous tick left; then game code
  runs on the moved entities (`c:Overworld.Zone.handle_entity/3`).

  So the velocity an entity is given in tick N moves it at the start of tick N+1: physics lags
  game logic by one tick. That is what lets the sidecar compute the physics of tick N+1 while
  the node is still busy with tick N's frames (the N−1 pipeline), and it makes the physics a
  function of the zone's state alone: a snapshot, a replay or a recovery computes it again and
  gets the same bits, whichever of the sidecar and the Elixir fallback computed it first.

  Which entities are bodies: those for which the zone module's optional `c:body/1` answers
  `{radius, mass}` (units, 1..65,535), or, without that callback, every entity, with the
  zone's `body: [radius: metres, mass: m]` (default 0.5 m, 1). A body's radius must not exceed
  the option `max_radius` (metres, default 1): larger, it is not a body. Its velocity is
  limited, per axis, to what keeps contacts within a grid cell of a worker's stripe (half of
  the cell less two largest radii, per tick; 150 m/s with the default 12 m cells at 30 Hz), so
  that each worker can compute its own bodies' step from its stripe and its halo when the
  sidecar is not there, with the same result as a step over the whole zone.

  Not simulated: physics between the zones of a world (a zone's bodies meet its own bodies and
  obstacles only; its neighbours' shadows are not bodies).
  """

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  import Bitwise

  alias Overworld.Physics

  @enforce_keys [:mode, :world, :radius, :mass, :max_radius, :max_speed, :tick_rate]
  defstruct [
    :mode,
    :world,
    :radius,
    :mass,
    :max_radius,
    :max_speed,
    :body,
    :paths,
    :tick_rate,
    :sidecar,
    # Set by the zone's supervisor: the zone's id, the sidecar's socket path and its state (an
    # atomics array, Overworld.Sidecar.new_ref/0).
    :zone,
    :socket,
    :ref,
    transport: :socket,
    stripes: 1
  ]

  @typedoc "A zone's physics configuration (`Overworld.Zone.Config`'s `physics`)."
  @type t :: %__MODULE__{
          mode: :elixir | :sidecar,
          world: Physics.world(),
          radius: pos_integer,
          mass: pos_integer,
          max_radius: pos_integer,
          max_speed: pos_integer,
          body: nil | (Overworld.Entity.t() -> {pos_integer, pos_integer} | nil),
          paths: Overworld.Zone.Paths.t() | nil,
          tick_rate: pos_integer,
          sidecar: map,
          transport: :socket | :shm,
          zone: term,
          socket: Path.t() | nil,
          ref: :atomics.atomics_ref() | nil,
          stripes: pos_integer
        }

  @typedoc """
  A result of a step: a body's id and new position, or (the sidecar over the shared segment,
  which merges them as it reads them) the body's entity already moved there.
  """
  @type result :: {pos_integer, integer, integer} | Overworld.Entity.t()

  @doc false
  # Options of the `sidecar:` zone option, with their defaults.
  @spec sidecar_schema() :: Overworld.Options.schema()
  def sidecar_schema do
    [
      executable: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a path"}, nil},
      threads: {{:custom, &(is_nil(&1) or (is_integer(&1) and &1 in 1..1024)), "1..1024"}, nil},
      deadline_ms: {:pos_integer, 10},
      pipeline: {:boolean, true},
      restart_ms: {:pos_integer, 50},
      fault: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a fault (docs/sidecar.md)"}, nil},
      max_bodies:
        {{:custom, &(is_integer(&1) and &1 in 1..1_000_000), "an integer in 1..1000000"}, 32_768}
    ]
  end

  @doc false
  # The physics of a zone from its validated options, its grid and its workers' stripes (key
  # ranges `{first, stop}`); nil without `physics:`.
  @spec new(map, module, Overworld.Spatial.Grid.t(), [{integer, integer}]) :: t | nil
  def new(%{physics: nil}, _module, _grid, _stripes), do: nil

  def new(o, module, grid, stripes) do
    obstacles =
      case o.map do
        nil -> {:ok, []}
        path when is_binary(path) -> Physics.Map.load(path)
        list -> Physics.Map.from_meters(list)
      end

    obstacles =
      case obstacles do
        {:ok, obstacles} -> obstacles
        {:error, message} -> raise ArgumentError, "Overworld.Zone: :map: #{message}"
      end

    body = Overworld.Options.validate!(o.body, body_schema(), "Overworld.Zone :body")
    sidecar = Overworld.Options.validate!(o.sidecar, sidecar_schema(), "Overworld.Zone :sidecar")
    max_radius = Overworld.Entity.meters(o.max_radius)
    radius = Overworld.Entity.meters(body.radius)

    # Contacts within a row of cells: a body's neighbours in the contact sense are in its own
    # or the adjacent rows of the grid, so a worker's stripe plus its halo holds them.
    max_speed = div((grid.cell - 2 * max_radius) * o.tick_rate, 2)

    nif = if o.physics == :sidecar and o.transport == :shm, do: Overworld.Sidecar.Shm.load()

    cond do
      match?({:error, _}, nif) ->
        {:error, reason} = nif

        raise ArgumentError,
              "Overworld.Zone: transport: :shm needs the shared-memory NIF " <>
                "(priv/native/overworld_shm.so, built by mix compile with a C compiler): " <>
                inspect(reason)

      max_radius < 1 or max_radius > 1 <<< 20 ->
        raise ArgumentError, "Overworld.Zone: :max_radius must be in (0, 1024] metres"

      max_speed < 1 ->
        raise ArgumentError,
              "Overworld.Zone: :cell_size (#{o.cell_size} m) must exceed twice :max_radius " <>
                "(#{o.max_radius} m) for physics"

      radius < 1 or radius > max_radius ->
        raise ArgumentError,
              "Overworld.Zone: body: [radius: #{body.radius}] must be in (0, max_radius]"

      true ->
        :ok
    end

    world = Physics.world(grid.width, grid.height, obstacles)

    %__MODULE__{
      mode: o.physics,
      world: world,
      radius: radius,
      mass: body.mass,
      max_radius: max_radius,
      max_speed: max_speed,
      body: if(function_exported?(module, :body, 1), do: Function.capture(module, :body, 1)),
      paths: Overworld.Zone.Paths.new(o.nav, module, world, stripes),
      tick_rate: o.tick_rate,
      sidecar: sidecar,
      transport: o.transport,
      stripes: o.workers
    }
  end

  defp body_schema do
    [
      radius: {:pos_number, 0.5},
      mass: {{:custom, &(is_integer(&1) and &1 in 1..65_535), "an integer in 1..65535"}, 1}
    ]
  end

  @doc """
  The bodies among the entities of `pairs` (cells, in order), in that order:
  `{id, x, y, vx, vy, radius, mass}` with the velocity limited to the zone's `max_speed`.
  """
  @spec bodies([{integer, [Overworld.Entity.t()]}], t) :: [Physics.body()]
  def bodies(pairs, %__MODULE__{} = p), do: cells(pairs, p, [])

  defp cells([], _p, acc), do: :lists.reverse(acc)
  defp cells([{_k, list} | rest], p, acc), do: cells(rest, p, entities(list, p, acc))

  defp entities([], _p, acc), do: acc

  defp entities([e | rest], %__MODULE__{body: nil, radius: r, mass: m, max_speed: s} = p, acc) do
    entities(rest, p, [
      {entity(e, :id), entity(e, :x), entity(e, :y), limit(entity(e, :vx), s),
       limit(entity(e, :vy), s), r, m}
      | acc
    ])
  end

  defp entities([e | rest], %__MODULE__{body: fun, max_radius: max_r, max_speed: s} = p, acc) do
    case body_of(fun, e) do
      {r, m}
      when is_integer(r) and r >= 1 and r <= max_r and is_integer(m) and m >= 1 and
             m <= 65_535 ->
        entities(rest, p, [
          {entity(e, :id), entity(e, :x), entity(e, :y), limit(entity(e, :vx), s),
           limit(entity(e, :vy), s), r, m}
          | acc
        ])

      _ ->
        entities(rest, p, acc)
    end
  end

  # A failing body/1 makes no body (the entity is not simulated this tick).
  defp body_of(fun, e) do
    fun.(e)
  catch
    _, _ -> nil
  end

  defp limit(v, s) when v > s, do: s
  defp limit(v, s) when v < -s, do: -s
  defp limit(v, _s), do: v

  @doc """
  The Elixir step of one worker: the results of `own` (its stripe's bodies, in order) computed
  with the bodies of its halo (`halo`: the rows around its stripe), which are all the bodies
  the contacts of its own can involve. Equal to the same bodies' results in a step of the
  whole zone.
  """
  @spec step([Physics.body()], [Physics.body()], t) :: [result]
  def step([], _halo, _p), do: []
  def step(own, [], p), do: Physics.step(own, p.world, p.tick_rate)

  def step(own, halo, p),
    do: own |> Kernel.++(halo) |> Physics.step(p.world, p.tick_rate) |> Enum.take(length(own))

  @doc """
  The physics of a whole zone held in one process (a replay, `Overworld.Zone.History`): every
  body of `pairs` stepped, as `{id, x, y}` in the cells' order.
  """
  @spec step_all([{integer, [Overworld.Entity.t()]}], t | nil) :: [result]
  def step_all(_pairs, nil), do: []
  def step_all(pairs, p), do: step(bodies(pairs, p), [], p)

  @doc false
  # A tick's results and path answers (Overworld.Zone.Paths) without those of the entities in
  # `ids` (a map: entities a world's zone takes out of its cells as the tick starts).
  @spec without({[result], map}, map) :: {[result], map}
  def without(computed, ids) when map_size(ids) == 0, do: computed

  def without({results, paths}, ids),
    do: {Enum.reject(results, &is_map_key(ids, result_id(&1))), Map.drop(paths, Map.keys(ids))}

  @spec result_id(result) :: pos_integer
  defp result_id({id, _x, _y}), do: id
  defp result_id(entity), do: entity(entity, :id)

  ## The sidecar's frames (docs/sidecar.md, "The zone's protocol")

  @doc false
  @spec hello(t, non_neg_integer, 0 | 1) :: iodata
  def hello(%__MODULE__{world: w} = p, stripe, transport) do
    boxes = Tuple.to_list(w.boxes)
    circles = Tuple.to_list(w.circles)

    [
      "OWSH",
      i64s([1, stripe, p.stripes, transport, p.tick_rate, w.width, w.height]),
      # The navigation grid's cell, agent radius and max_nodes.
      i64s(Overworld.Zone.Paths.hello_params(p.paths)),
      i64s([length(boxes), length(circles)]),
      for({x0, y0, x1, y1} <- boxes, do: i64s([x0, y0, x1, y1])),
      for({cx, cy, r} <- circles, do: i64s([cx, cy, r]))
    ]
  end

  defp i64s(list), do: for(v <- list, into: <<>>, do: <<v::little-signed-64>>)

  @doc false
  # A request over the socket: the tick, the bodies as 64-byte records, then the path queries
  # (`q` records already built: Overworld.Zone.Paths.queries/1).
  @spec request(non_neg_integer, [Physics.body()], non_neg_integer, binary, non_neg_integer) ::
          iodata
  def request(tick, bodies, n, queries \\ <<>>, q \\ 0) do
    [
      <<"OWSQ", tick::little-64, n::little-64, q::little-64>>,
      records(bodies, <<>>)
      | queries
    ]
  end

  defp records([], acc), do: acc

  defp records([{id, x, y, vx, vy, r, m} | rest], acc) do
    records(
      rest,
      <<acc::binary, id::little-64, x::little-signed-64, y::little-signed-64,
        vx::little-signed-64, vy::little-signed-64, r::little-64, m::little-64, 0::64>>
    )
  end

  @doc false
  # An answer over the socket: `{:ok, results, paths}` for tick `tick`, `n` bodies and `q` path
  # queries (`paths`: the path answers' bytes, Overworld.Zone.Paths.decode/2), or why not.
  @spec answer(binary, non_neg_integer, non_neg_integer, non_neg_integer) ::
          {:ok, [result], binary} | {:error, term} | :stale
  def answer(frame, tick, n, q \\ 0)

  def answer(<<"OWSR", t::little-64, n::little-64, q::little-64, rest::binary>>, tick, n, q)
      when t == tick and byte_size(rest) >= 32 * n and (q > 0 or byte_size(rest) == 32 * n) do
    <<records::binary-size(32 * n), paths::binary>> = rest
    {:ok, results(records), paths}
  end

  def answer(<<"OWSR", t::little-64, _::binary>>, tick, _n, _q) when t < tick, do: :stale
  def answer(<<"OWSE", t::little-64, _::binary>>, tick, _n, _q) when t < tick, do: :stale

  def answer(<<"OWSE", t::little-64, message::binary>>, tick, _n, _q) when t == tick,
    do: {:error, {:refused, message}}

  def answer(<<"OWSR", t::little-64, _::binary>>, tick, _n, _q) when t != tick,
    do: {:error, {:wrong_tick, t}}

  def answer(_frame, _tick, _n, _q), do: {:error, :garbled}

  defp results(bin),
    do:
      for(
        <<id::little-64, x::little-signed-64, y::little-signed-64, _::64 <- bin>>,
        do: {id, x, y}
      )

  @doc false
  # Whether the results are those of the bodies asked for (same ids, same order).
  @spec same_ids?([result], [Physics.body()]) :: boolean
  def same_ids?([], []), do: true

  def same_ids?([{id, _, _} | r], [b | bs]) when elem(b, 0) == id, do: same_ids?(r, bs)
  def same_ids?(_, _), do: false
end

defmodule Overworld.Zone.Config do
  @moduledoc """
  A zone's configuration, as `Overworld.Zone.config/1` answers it: the options the zone was
  started with, validated (the keys and defaults of `Overworld.Zone`'s options: `id`,
  `module`, `args`, `tick_rate`, `clock`, `workers`, `size`, `cell_size`, `seed`,
  `max_entities`, `wire`, `data_dir`, ...), and what follows from them:

  * `width`, `height` — the world's size in units (1/1024 m; `size` is in metres);
  * `grid` — the spatial grid (`Overworld.Spatial.Grid`: cell size in units, rows, columns);
  * `stripes`, `owners` — the rows each bucket worker owns;
  * `wire_kinds` — entity kind => the index of its template in the wire module's list;
  * `shared` — the zone's counters and tables (internal: read them through the functions of
    `Overworld.Zone`);
  * `owner` — for a zone of a world over a cluster, `{generation, epoch}`: the ownership
    generation of its node when its placer started it (`Overworld.Cluster.owner?/1`) and the
    zone's ownership epoch (docs/cluster.md, "Ownership"); nil otherwise.

  Read it, never build it: zones make their own from their options.
  """

  alias Overworld.Entity
  alias Overworld.Spatial.Grid

  # `shared`: the zone's registry value (`Overworld.Zone.Metrics`: metrics, the wire table and
  # the memory table),
  # made by the zone's supervisor when it starts, so that it outlives a server restart.
  @enforce_keys [:id, :module, :grid]
  defstruct [
    :shared,
    :owner
    | [
        :id,
        :module,
        :args,
        :tick_rate,
        :tick_offset,
        :id_space,
        :clock,
        :workers,
        :size,
        :cell_size,
        :seed,
        :max_entities,
        :stall_timeout,
        :data_dir,
        :snapshot_ticks,
        :snapshot_ms,
        :commit_ms,
        :durability,
        :replica_timeout,
        :history,
        :keyframe_ticks,
        :debug,
        :rejoin_ms,
        :max_restarts,
        :max_seconds,
        :wire,
        :wire_kinds,
        :width,
        :height,
        :region,
        :world,
        :bounds,
        :grid,
        :stripes,
        :owners,
        :physics,
        :transport,
        :map,
        :body,
        :max_radius,
        :sidecar,
        :nav
      ]
  ]

  @type t :: %__MODULE__{
          id: term,
          module: module,
          args: term,
          tick_rate: pos_integer,
          tick_offset: float | nil,
          id_space: Overworld.Zone.Ids.space(),
          clock: :realtime | :manual,
          workers: pos_integer,
          size: {number, number},
          cell_size: number,
          seed: integer,
          max_entities: pos_integer,
          stall_timeout: pos_integer,
          data_dir: Path.t() | nil,
          snapshot_ticks: pos_integer,
          snapshot_ms: pos_integer | nil,
          commit_ms: non_neg_integer,
          durability: :local | :replicated,
          replica_timeout: pos_integer,
          history: non_neg_integer,
          keyframe_ticks: pos_integer,
          debug: boolean,
          rejoin_ms: pos_integer,
          max_restarts: non_neg_integer,
          max_seconds: pos_integer,
          wire: module | nil,
          wire_kinds: %{optional(term) => non_neg_integer},
          shared: Overworld.Zone.Metrics.t() | nil,
          owner: {integer, non_neg_integer} | nil,
          width: non_neg_integer,
          height: non_neg_integer,
          region: {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer} | nil,
          world: Overworld.World.Place.t() | nil,
          bounds: {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer},
          grid: Grid.t(),
          stripes: tuple,
          owners: tuple,
          physics: Overworld.Zone.Physics.t() | nil,
          transport: :socket | :shm,
          map: nil | Path.t() | keyword,
          body: keyword,
          max_radius: number,
          sidecar: keyword,
          nav: keyword
        }

  @doc false
  @spec schema() :: Overworld.Options.schema()
  def schema do
    [
      id: {:any, :required},
      args: {:any, []},
      tick_rate: {{:custom, &(is_integer(&1) and &1 in 1..1000), "an integer in 1..1000"}, 30},
      tick_offset:
        {{:custom, &(is_nil(&1) or (is_number(&1) and &1 >= 0 and &1 < 1)),
          "nil or a number in [0, 1)"}, nil},
      id_space:
        {{:custom, &Overworld.Zone.Ids.valid?/1, "{index, count} with 0 <= index < count"},
         {0, 1}},
      region:
        {{:custom, &region?/1, "nil or {first col, first row, last col, last row} of cells"}, nil},
      world:
        {{:custom, &(is_nil(&1) or is_struct(&1, Overworld.World.Place)),
          "nil or the zone's place in a world (Overworld.World)"}, nil},
      clock: {{:in, [:realtime, :manual]}, :realtime},
      workers: {:pos_integer, System.schedulers_online()},
      size: {{:tuple_of, [:pos_number, :pos_number]}, {1000, 1000}},
      cell_size: {:pos_number, 12},
      seed: {:integer, 0},
      max_entities: {:pos_integer, 1_000_000},
      stall_timeout: {:pos_integer, 5_000},
      data_dir: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a directory path"}, nil},
      snapshot_ticks: {:pos_integer, 300},
      snapshot_ms:
        {{:custom, &(is_nil(&1) or (is_integer(&1) and &1 > 0)), "nil or ms > 0"}, nil},
      commit_ms: {:non_neg_integer, 2},
      durability: {{:in, [:local, :replicated]}, :local},
      replica_timeout: {:pos_integer, 5_000},
      history: {:non_neg_integer, 300},
      keyframe_ticks: {:pos_integer, 30},
      debug: {:boolean, false},
      rejoin_ms: {:pos_integer, 15_000},
      max_restarts: {:non_neg_integer, 20},
      max_seconds: {:pos_integer, 5},
      wire: {{:custom, &wire?/1, "nil or a module using Overworld.Template"}, nil},
      physics: {{:in, [nil, :elixir, :sidecar]}, nil},
      transport: {{:in, [:socket, :shm]}, :socket},
      map:
        {{:custom, &(is_nil(&1) or is_binary(&1) or is_list(&1)),
          "nil, an obstacle map's path or [boxes: ..., circles: ...]"}, nil},
      body: {{:custom, &Keyword.keyword?/1, "a keyword list [radius: m, mass: m]"}, []},
      max_radius: {:pos_number, 1},
      sidecar: {{:custom, &Keyword.keyword?/1, "a keyword list (Overworld.Sidecar)"}, []},
      nav: {{:custom, &Keyword.keyword?/1, "a keyword list (Overworld.Zone.Paths)"}, []}
    ]
  end

  defp wire?(nil), do: true

  defp wire?(m),
    do: is_atom(m) and Code.ensure_loaded?(m) and function_exported?(m, :__templates__, 0)

  @doc false
  @spec new!(module, keyword) :: t
  def new!(module, opts) do
    unless is_atom(module) and Code.ensure_loaded?(module) and
             function_exported?(module, :init, 1) do
      raise ArgumentError,
            "expected a module implementing the Overworld.Zone behaviour, got: #{inspect(module)}"
    end

    o = opts |> Overworld.Options.validate!(schema(), "Overworld.Zone") |> in_world()

    if o.durability == :replicated and (o.data_dir == nil or o.world == nil) do
      raise ArgumentError,
            "Overworld.Zone: durability: :replicated is for the zones of a world spread over a " <>
              "cluster (Overworld.World, cluster: true), with a :data_dir"
    end

    if o.physics == nil and o.nav != [] do
      raise ArgumentError, "Overworld.Zone: :nav (paths) needs :physics (:elixir or :sidecar)"
    end

    if o.history > 0 and o.keyframe_ticks > o.history do
      raise ArgumentError,
            "Overworld.Zone: :keyframe_ticks (#{o.keyframe_ticks}) must be at most :history " <>
              "(#{o.history}): the history must hold a keyframe"
    end

    {w_m, h_m} = o.size
    width = Entity.meters(w_m)
    height = Entity.meters(h_m)
    cell = Entity.meters(o.cell_size)

    grid = Grid.new(width, height, cell)
    region = check_region!(o.region, grid)
    # A zone of a world also holds its entities standing in the ring of cells around its
    # region (within the hysteresis margin, see Overworld.World.Place).
    held = if o.world, do: o.world.ring, else: region
    stripes = region_stripes(held, grid, o.workers)
    bounds = bounds(held, grid)

    struct!(
      __MODULE__,
      Map.merge(o, %{
        module: module,
        width: width,
        height: height,
        bounds: bounds,
        grid: grid,
        stripes: List.to_tuple(stripes),
        owners: owners(stripes, grid.rows),
        wire_kinds: wire_kinds(o.wire),
        physics: Overworld.Zone.Physics.new(o, module, grid, key_ranges(stripes, grid))
      })
    )
  end

  # A zone of a world: its region, size, cell size, id space and tick offset are the world's.
  defp in_world(%{world: nil} = o), do: o

  defp in_world(%{world: %Overworld.World.Place{layout: l} = p} = o) do
    if o.region not in [nil, p.region] do
      raise ArgumentError,
            "Overworld.Zone: :region #{inspect(o.region)} is not the zone's region in its world " <>
              "(#{inspect(p.region)}); leave it out"
    end

    %{
      o
      | region: p.region,
        size: {l.width, l.height},
        cell_size: l.cell_size,
        id_space: Overworld.World.Layout.id_space(l, p.id),
        tick_offset: o.tick_offset || Overworld.World.Layout.tick_offset(l, p.id)
    }
  end

  # Each stripe's cells as a range of keys `{first, stop}` (empty for an empty stripe).
  defp key_ranges(stripes, grid) do
    for {r0, r1} <- stripes do
      if r1 > r0, do: {Grid.key_at(grid, 0, r0), Grid.key_at(grid, 0, r1)}, else: {0, 0}
    end
  end

  # Entity kind => index of its template in the wire module's list.
  defp wire_kinds(nil), do: %{}

  defp wire_kinds(module) do
    for {t, i} <- Enum.with_index(module.__templates__()),
        kind <- t.kinds,
        into: %{},
        do: {kind, i}
  end

  @doc """
  Splits `rows` rows into `n` contiguous stripes `{first, last_exclusive}` of nearly equal size.

      iex> Overworld.Zone.Config.stripes(10, 3)
      [{0, 3}, {3, 6}, {6, 10}]
      iex> Overworld.Zone.Config.stripes(2, 3)
      [{0, 0}, {0, 1}, {1, 2}]
  """
  @spec stripes(pos_integer, pos_integer) :: [{non_neg_integer, non_neg_integer}]
  def stripes(rows, n), do: for(i <- 0..(n - 1), do: {div(i * rows, n), div((i + 1) * rows, n)})

  defp region?(nil), do: true

  defp region?({c0, r0, c1, r1} = r),
    do: Enum.all?(Tuple.to_list(r), &(is_integer(&1) and &1 >= 0)) and c0 <= c1 and r0 <= r1

  defp region?(_), do: false

  defp check_region!(nil, _grid), do: nil

  defp check_region!({_, _, c1, r1} = region, grid) do
    if c1 >= grid.cols or r1 >= grid.rows do
      raise ArgumentError,
            "Overworld.Zone: :region #{inspect(region)} goes past the grid's " <>
              "#{grid.cols} x #{grid.rows} cells"
    end

    region
  end

  # The positions the zone's entities may take (units): the world, or its region's cells.
  defp bounds(nil, grid), do: {0, 0, grid.width, grid.height}

  defp bounds({c0, r0, c1, r1}, grid) do
    x1 = if c1 == grid.cols - 1, do: grid.width, else: (c1 + 1) * grid.cell - 1
    y1 = if r1 == grid.rows - 1, do: grid.height, else: (r1 + 1) * grid.cell - 1
    {c0 * grid.cell, r0 * grid.cell, x1, y1}
  end

  @doc """
  The workers' stripes of a zone owning `region` of the grid (nil: all of it): the region's
  rows shared out. Rows outside it are nobody's stripe: they hold nothing.

      iex> g = Overworld.Spatial.Grid.new(100 * 1024, 100 * 1024, 10 * 1024)
      iex> Overworld.Zone.Config.region_stripes({0, 4, 10, 9}, g, 2)
      [{4, 7}, {7, 10}]
      iex> Overworld.Zone.Config.region_stripes(nil, g, 2)
      [{0, 5}, {5, 11}]
  """
  @spec region_stripes(tuple | nil, Grid.t(), pos_integer) :: [{non_neg_integer, non_neg_integer}]
  def region_stripes(nil, grid, n), do: stripes(grid.rows, n)

  def region_stripes({_, r0, _, r1}, _grid, n),
    do: for({a, b} <- stripes(r1 - r0 + 1, n), do: {a + r0, b + r0})

  @doc """
  The owner (worker index) of every row of `rows` (default: up to the last stripe's end), as a
  tuple indexed by row; rows before the first stripe and after the last (outside a zone's
  region) go to the first and last worker.

      iex> Overworld.Zone.Config.owners([{0, 1}, {1, 3}])
      {0, 1, 1}
      iex> Overworld.Zone.Config.owners([{2, 3}, {3, 4}], 6)
      {0, 0, 0, 1, 1, 1}
  """
  @spec owners([{non_neg_integer, non_neg_integer}], non_neg_integer | nil) :: tuple
  def owners(stripes, rows \\ nil) do
    {first, _} = hd(stripes)
    {_, last} = List.last(stripes)
    n = length(stripes)

    List.duplicate(0, first)
    |> Kernel.++(
      stripes
      |> Enum.with_index()
      |> Enum.flat_map(fn {{r0, r1}, i} -> List.duplicate(i, r1 - r0) end)
    )
    |> Kernel.++(List.duplicate(n - 1, max((rows || last) - last, 0)))
    |> List.to_tuple()
  end

  @doc "A position clamped into the zone's bounds (the world, or its region's cells), in units."
  @spec clamp(t, integer, integer) :: {integer, integer}
  def clamp(%__MODULE__{bounds: {x0, y0, x1, y1}}, x, y),
    do: {x |> max(x0) |> min(x1), y |> max(y0) |> min(y1)}

  @doc "The worker owning the cell of `(x, y)`; positions are clamped into the zone first."
  @spec owner_of(t, integer, integer) :: non_neg_integer
  def owner_of(%__MODULE__{grid: g, owners: owners} = config, x, y) do
    {_x, y} = clamp(config, x, y)
    elem(owners, div(y, g.cell))
  end
end

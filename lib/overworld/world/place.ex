defmodule Overworld.World.Place do
  @moduledoc """
  The place of one zone in a world of zones (zone option `:world`, made by `Overworld.World`):
  the world's layout, which region is the zone's, and what follows from it for the zone's
  workers, in grid units and cells:

  * **What the zone holds**: its region's cells plus a **ring** of one cell around them (the
    neighbours' cells next to the border): an entity of the zone may stand in the ring while it
    is within the hysteresis margin of the region (`hysteresis`, less than a cell).
  * **Who owns an entity after a tick** (`owner/3`): the zone while the entity stands within
    the hysteresis margin of its region, else the zone whose region holds the entity.
  * **Which entities each neighbour needs as shadows** (`shadow_rows/1`): those in the cells
    within two cells of the neighbour's region. The neighbour simulates its region and ring;
    the 3x3 blocks of those cells reach one cell further: with these shadows every entity of
    the neighbour sees exactly the cells it would see in one zone covering the whole map.
    With shadows sent every `every` ticks (a lower shadow rate), the margin grows by what an
    entity may move in that time at `max_speed` (`margin`, in cells): the neighbour
    dead-reckons them between updates, and an entity that walks into its reach meanwhile
    was already sent.

      iex> l = Overworld.World.Layout.new!(size: {120, 120}, cell_size: 12, zones: {2, 2})
      iex> p = Overworld.World.Place.new!(:w, l, {0, 0}, hysteresis: 2)
      iex> {p.region, p.ring}
      {{0, 0, 5, 5}, {0, 0, 6, 6}}
      iex> p.zones[{1, 1}]
      {:w, {1, 1}}
      iex> Overworld.World.Place.owner(p, 6 * 12 * 1024 + 1024, 1024)
      {0, 0}
      iex> Overworld.World.Place.owner(p, 6 * 12 * 1024 + 3 * 1024, 1024)
      {1, 0}
  """

  alias Overworld.Entity
  alias Overworld.World.Layout

  @enforce_keys [:name, :id, :layout, :region, :ring, :box, :hysteresis, :late, :zones, :band]
  defstruct @enforce_keys ++ [every: 1, margin: 2]

  @typedoc """
  * `name` — the world's name; `id` — the zone's region id; the zone's own id is
    `{name, id}`, as are its neighbours' (`zones`: region id => zone id)
  * `region`, `ring` — cells `{c0, r0, c1, r1}`: the region, and the region with the ring
  * `box` — the region's rectangle in units `{x0, y0, x1, y1}` (inclusive)
  * `hysteresis` — units; `late` — ticks a neighbour's shadows may be late before they are
    dropped
  * `band` — what the zone adds to the key of a cell of its ring outside its region when it
    publishes the cell (`wire_key/2`)
  * `every` — shadows are sent on the ticks that are multiples of it (1: every tick);
    `margin` — cells around a neighbour's region whose entities it gets as shadows
  """
  @type t :: %__MODULE__{
          name: term,
          id: term,
          layout: Layout.t(),
          region: {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer},
          ring: {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer},
          box: {integer, integer, integer, integer},
          hysteresis: non_neg_integer,
          late: non_neg_integer,
          zones: %{optional(term) => term},
          band: pos_integer,
          every: pos_integer,
          margin: pos_integer
        }

  @doc """
  The place of region `id` of `layout` in world `name`. Options: `:hysteresis` (metres,
  default 2, less than a cell), `:every` (shadows every that many ticks, default 1), `:late`
  (ticks, default `default_late/1`, at least `:every` - 1), `:max_speed` (metres per second, the fastest an
  entity moves; needed with `:every` above 1) and `:tick_rate` (default 30).

      iex> l = Overworld.World.Layout.new!(size: {240, 240}, cell_size: 12, zones: {2, 2})
      iex> Overworld.World.Place.new!(:w, l, {0, 0}).margin
      2
      iex> # 4 ticks at 30 Hz and 20 m/s: 2.7 m, one cell more
      iex> p = Overworld.World.Place.new!(:w, l, {0, 0}, every: 4, late: 4, max_speed: 20)
      iex> {p.every, p.margin}
      {4, 3}
  """
  @spec new!(term, Layout.t(), term, keyword) :: t
  def new!(name, %Layout{} = layout, id, opts \\ []) do
    h = Keyword.get(opts, :hysteresis, 2)
    every = Keyword.get(opts, :every, 1)
    late = Keyword.get(opts, :late, default_late(every))
    margin = margin!(layout, every, opts)

    # (Between two updates shadows are up to every - 1 ticks old: that much is not late.)
    unless is_integer(late) and late >= every - 1 do
      raise ArgumentError,
            "the shadows' lateness bound must be a number of ticks, at least #{every - 1} " <>
              "(shadows are sent every #{every} ticks), got: #{inspect(late)}"
    end

    unless is_number(h) and h >= 0 and h < layout.cell_size do
      raise ArgumentError,
            "the hysteresis margin must be a number of metres in [0, #{layout.cell_size}) (less " <>
              "than a cell: an entity of a zone stands at most one cell outside its region), " <>
              "got: #{inspect(h)}"
    end

    %{cells: {c0, r0, c1, r1} = region, index: index} =
      Layout.region(layout, id) ||
        raise ArgumentError, "no region #{inspect(id)} in the world's layout"

    cell = Entity.meters(layout.cell_size)
    {w, hh} = {Entity.meters(layout.width), Entity.meters(layout.height)}
    x1 = if c1 == layout.cols - 1, do: w, else: (c1 + 1) * cell - 1
    y1 = if r1 == layout.rows - 1, do: hh, else: (r1 + 1) * cell - 1

    %__MODULE__{
      name: name,
      id: id,
      layout: layout,
      region: region,
      ring: grow(layout, region, 1),
      box: {c0 * cell, r0 * cell, x1, y1},
      hysteresis: Entity.meters(h),
      late: late,
      zones: Map.new(layout.regions, &{&1.id, {name, &1.id}}),
      # The keys of a grid of cols x rows cells are below (cols + 2) * (rows + 2), the key
      # space; the k-th region's band cells are keyed in the (k + 1)-th copy of it.
      band: (layout.cols + 2) * (layout.rows + 2) * (1 + index),
      every: every,
      margin: margin
    }
  end

  @doc """
  The default lateness bound (ticks) of shadows sent every `every` ticks: 3, or the period
  plus 2 (the same slack as every tick's).

      iex> {Overworld.World.Place.default_late(1), Overworld.World.Place.default_late(10)}
      {3, 12}
  """
  @spec default_late(term) :: term
  def default_late(every) when is_integer(every) and every > 1, do: every + 2
  def default_late(_every), do: 3

  # Two cells (the neighbour's ring and the reach of its 3x3 blocks), and, with shadows every
  # `every` ticks, the cells an entity at `max_speed` crosses in that time.
  defp margin!(_layout, 1, opts) do
    speed = opts[:max_speed]

    unless speed == nil or (is_number(speed) and speed > 0) do
      raise ArgumentError,
            ":max_speed must be a positive number of metres per second, got: #{inspect(speed)}"
    end

    2
  end

  defp margin!(layout, every, opts) when is_integer(every) and every > 1 do
    speed = opts[:max_speed]
    rate = Keyword.get(opts, :tick_rate, 30)

    unless is_integer(rate) and rate > 0 do
      raise ArgumentError, "the tick rate must be a positive integer, got: #{inspect(rate)}"
    end

    unless is_number(speed) and speed > 0 do
      raise ArgumentError,
            "shadows every #{every} ticks need :max_speed, the fastest an entity moves in " <>
              "metres per second (the shadows' margin covers where it may go between two " <>
              "updates), got: #{inspect(speed)}"
    end

    margin = 2 + ceil(speed * every / rate / layout.cell_size)

    thinnest =
      Enum.min(for %{cells: {c0, r0, c1, r1}} <- layout.regions, do: min(c1 - c0, r1 - r0) + 1)

    if margin > thinnest do
      raise ArgumentError,
            "shadows every #{every} ticks at #{speed} m/s need a margin of #{margin} cells, " <>
              "more than the thinnest region (#{thinnest} cells): a zone would need the " <>
              "shadows of zones that are not its neighbours; send them more often"
    end

    margin
  end

  defp margin!(_layout, every, _opts) do
    raise ArgumentError,
          "the shadow period must be a positive number of ticks, got: #{inspect(every)}"
  end

  @doc """
  The key under which the zone publishes a cell (nil, not a world's zone: its key) (docs/protocol.md, "A world of zones"): its
  region's cells under their key; the cells of its ring outside its region, where its
  entities in the hysteresis band stand (the neighbour's region publishes its own entities
  there), under a **band key**: the key plus the zone's band offset, so every cell a client
  receives has one publisher. The key space of a grid is `(cols + 2) * (rows + 2)`; a band key
  modulo it is the cell's key.

      iex> l = Overworld.World.Layout.new!(size: {120, 120}, cell_size: 12, zones: {2, 2})
      iex> p = Overworld.World.Place.new!(:w, l, {1, 0})
      iex> space = (l.cols + 2) * (l.rows + 2)
      iex> p.band == 2 * space
      true
      iex> g = Overworld.Spatial.Grid.new(120 * 1024, 120 * 1024, 12 * 1024)
      iex> k = Overworld.Spatial.Grid.key_at(g, 6, 2)
      iex> Overworld.World.Place.wire_key(p, k) == k
      true
      iex> k = Overworld.Spatial.Grid.key_at(g, 5, 2)
      iex> Overworld.World.Place.wire_key(p, k) == k + 2 * space
      true
  """
  @spec wire_key(t | nil, integer) :: integer
  def wire_key(nil, key), do: key

  def wire_key(%__MODULE__{band: band, layout: l} = p, key) do
    stride = l.cols + 2
    if inside?(p, rem(key, stride) - 1, div(key, stride) - 1), do: key, else: key + band
  end

  @doc "The zone ids of the zone's neighbours (sides and corners), region id => zone id."
  @spec neighbours(t) :: [{term, term}]
  def neighbours(%__MODULE__{layout: l, id: id, zones: zones}),
    do: for(n <- Layout.neighbours(l, id), do: {n, Map.fetch!(zones, n)})

  @doc """
  For every row of the grid, the neighbours that need the cells of that row as shadows:
  `{region id, first col, last col}` (the neighbour's region grown by `margin` cells, two
  with shadows every tick), as a tuple indexed by row.
  """
  @spec shadow_rows(t) :: tuple
  def shadow_rows(%__MODULE__{layout: l} = p) do
    rects = for {n, _} <- neighbours(p), do: {n, grow(l, Layout.region(l, n).cells, p.margin)}

    for row <- 0..(l.rows - 1) do
      for {n, {c0, r0, c1, r1}} <- rects, row >= r0 and row <= r1, do: {n, c0, c1}
    end
    |> List.to_tuple()
  end

  @doc """
  The cells whose entities the zone's workers read (`{c0, r0, c1, r1}`): its region grown by
  two cells (its ring, and the reach of the ring's 3x3 blocks). Shadows beyond them (a lower
  shadow rate sends a wider margin) are not read.
  """
  @spec reach(t) :: {integer, integer, integer, integer}
  def reach(%__MODULE__{layout: l, region: region}), do: grow(l, region, 2)

  @doc "The zone owning an entity of this zone at `(x, y)` (units) after a tick (see above)."
  @spec owner(t, integer, integer) :: term
  def owner(%__MODULE__{box: {x0, y0, x1, y1}, hysteresis: h, id: id} = p, x, y) do
    dx = max(max(x0 - x, x - x1), 0)
    dy = max(max(y0 - y, y - y1), 0)

    if dx * dx + dy * dy <= h * h do
      id
    else
      l = p.layout
      cell = Entity.meters(l.cell_size)
      col = x |> div(cell) |> max(0) |> min(l.cols - 1)
      row = y |> div(cell) |> max(0) |> min(l.rows - 1)
      Layout.zone_of_cell(l, col, row)
    end
  end

  @doc """
  Whether a cell (column, row) is the zone's region's (the others of the ring are the
  neighbours').
  """
  @spec inside?(t, integer, integer) :: boolean
  def inside?(%__MODULE__{region: {c0, r0, c1, r1}}, col, row),
    do: col >= c0 and col <= c1 and row >= r0 and row <= r1

  defp grow(l, {c0, r0, c1, r1}, k),
    do: {max(c0 - k, 0), max(r0 - k, 0), min(c1 + k, l.cols - 1), min(r1 + k, l.rows - 1)}
end

defmodule Overworld.Interest do
  @moduledoc """
  What one observer (a player's connection, a spectator, a camera) receives of a zone, tick
  after tick: the snapshot frames of docs/protocol.md, built from the cell blocks the zone's
  workers encode once per tick (zone option `wire:`).

  An observer is a value held by whoever sends the frames (a session process, a test, the
  encode benchmark): `new/2` sets it up for a running zone, then after every tick `frame/4`
  (or `frame/3` with a position) answers the frame to send and the observer's next value.
  Nothing of it lives in the zone: observers cost the zone nothing but the keyframe blocks
  they ask for.

  ## What a frame holds

  * **Interest by cell** (`Overworld.Interest.Region`): the cells whose nearest point is within
    the view radius enter; a cell leaves only once its farthest point is beyond the leave
    radius (hysteresis: border entities do not flicker). Every entity within the view radius
    is in a cell the observer sees, and no entity beyond the leave radius ever is.
  * A cell that enters the view is asked of its worker as a **keyframe** block (the worker
    encodes it with its next tick, once for every observer that asked); until it comes, the
    cell is *pending*. A cell that leaves is listed in the frame's left cells.
  * A cell the client holds gets the worker's **delta blocks**, shared by every observer: the
    blocks of a run of cells in a row at a tick are one slice of the worker's binary for that
    tick (`Overworld.Zone.Wire`), so a frame is an iolist of a few shared slices per row, with
    no per-observer encoding and no copying.
  * **Priority and byte budget**: the runs and keyframes to send are ordered by distance from
    the observer, and a run or keyframe waiting rises by one cell of distance per tick it
    waits (nothing starves); they are taken in that order while they fit the budget for the
    tick (option `:budget`, bytes per second). What does not fit waits: its cells keep the
    tick the client holds, and a later frame sends every block since, in order (the workers
    keep #{Overworld.Zone.Wire.ring()} ticks of blocks; a cell that falls further behind is
    asked for a keyframe again). A single cell larger than the whole budget is sent alone
    when nothing else is due, so the budget bounds every frame but that one.
  * **Baseline**: a frame's baseline is the previous frame's tick (an ordered, reliable
    stream), or 0 when the client must first drop everything it holds: the first frame, and
    the first after `resync/2`.

  ## Options

  * `:radius`: view radius in metres (default 90).
  * `:leave_radius`: leave radius in metres (default: the view radius plus two cells); at least
    the view radius plus a cell diagonal.
  * `:budget`: bytes per second (default 65,536, i.e. 64 KiB/s); each frame gets
    `budget / tick_rate` bytes, times the ticks since the previous frame (at most 8) when the
    sender skipped ticks.
  """
  require Logger
  require Overworld.Entity
  alias Overworld.Entity
  alias Overworld.Interest.{Blocks, Region, Runs, Take}
  alias Overworld.Protocol.{Codec, Snapshot}
  alias Overworld.Spatial.Grid
  alias Overworld.World.Place
  alias Overworld.Zone.Wire

  # How far (metres) an observer moves before its region is computed again.
  @slack_m 1
  @slack @slack_m * 1024
  # Ticks of budget a frame may gather after skipped ticks.
  @accrue 8

  @enforce_keys [:zone, :table, :grid, :owners, :rows, :workers, :radius, :leave, :budget]
  defstruct @enforce_keys ++
              [
                # A zone on another node: this node's mirror of it (keyframes are asked there).
                mirror: nil,
                # A world's zone: its place (the cells it publishes, band keys).
                place: nil,
                tick: 0,
                input_ack: 0,
                # Extensions for the next frame only ({type, bytes}; see `announce/2`).
                ext: [],
                reset: true,
                at: nil,
                region: %{},
                # Cells in the region (its size, counted when it changes).
                cells: 0,
                held: %{},
                uniform: nil,
                pending: %{},
                kfs: %{}
              ]

  @typedoc """
  An observer. `region`: the cells in view (`Overworld.Interest.Region`); `held`: per row, runs
  `{first_col, last_col, tick}` of cells the client holds, at that tick; `pending`: cell key =>
  `{row, col, waiting since, last asked, stale}` for cells waiting for their keyframe (`stale`:
  the client may still hold an old state of the cell).
  """
  @type t :: %__MODULE__{
          zone: term,
          table: :ets.tid(),
          mirror: pid | nil,
          grid: Grid.t(),
          owners: tuple,
          rows: {non_neg_integer, non_neg_integer} | nil,
          place: Overworld.World.Place.t() | nil,
          workers: pos_integer,
          radius: non_neg_integer,
          leave: non_neg_integer,
          budget: pos_integer,
          tick: non_neg_integer,
          ext: [{non_neg_integer, binary}],
          input_ack: non_neg_integer,
          reset: boolean,
          region: Region.t(),
          cells: non_neg_integer,
          held: %{optional(non_neg_integer) => [{non_neg_integer, non_neg_integer, integer}]},
          pending: %{
            optional(integer) =>
              {non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer, boolean}
          },
          uniform: non_neg_integer | nil,
          kfs: %{optional(integer) => {non_neg_integer, binary | nil}}
        }

  @typedoc """
  What `frame/4` tells about the frame: its size, block count, the cells in view, held and
  pending, how many runs and keyframes waited for lack of budget, how many cells left the view
  (and their keys), the runs of cells the frame lists as held back (first key, count), and
  whether it took the fast path (nothing changed but the tick: one slice per row of the view and
  tick since the previous frame).
  """
  @type info :: %{
          bytes: non_neg_integer,
          blocks: non_neg_integer,
          cells: non_neg_integer,
          pending: non_neg_integer,
          deferred: non_neg_integer,
          left: non_neg_integer,
          left_keys: [non_neg_integer],
          behind: [{non_neg_integer, pos_integer}],
          fast: boolean
        }

  @doc """
  An observer of a running zone started with `wire:`. Answers `{:error, :not_found}` for a zone
  that is not running and `{:error, :no_wire}` for one without a wire; raises `ArgumentError`
  on invalid options.
  """
  @spec new(term, keyword) :: {:ok, t} | {:error, :not_found | :no_wire}
  def new(zone, opts \\ []) do
    case Overworld.Zone.config(zone) do
      %{wire: nil} -> {:error, :no_wire}
      %{} = config -> {:ok, from_config(config, opts)}
      nil -> {:error, :not_found}
    end
  end

  @doc false
  @spec schema() :: Overworld.Options.schema()
  def schema,
    do: [
      radius: {:pos_number, 90},
      leave_radius: {:pos_number, nil},
      budget: {:pos_integer, 65_536}
    ]

  defp from_config(config, opts) do
    o = Overworld.Options.validate!(opts, schema(), "Overworld.Interest")
    leave_m = o.leave_radius || o.radius + 2 * config.cell_size

    # The region is computed with the view radius grown and the leave radius shrunk by the
    # slack, so it holds for any position within the slack of where it was computed.
    with {:error, _} <- Region.check_radii(o.radius + 2 * @slack_m, leave_m, config.cell_size) do
      raise ArgumentError,
            "invalid options for Overworld.Interest: the leave radius (#{leave_m}) must be at " <>
              "least the view radius (#{o.radius}) plus a cell diagonal " <>
              "(#{ceil(config.cell_size * :math.sqrt(2))}) and #{2 * @slack_m} m of slack"
    end

    %__MODULE__{
      zone: config.id,
      table: config.shared.wire,
      mirror: config.shared.mirror,
      grid: config.grid,
      owners: config.owners,
      # A zone owning a region of the grid publishes the rows its workers hold only (its
      # region's, and in a world the ring around it): the view stops there.
      rows:
        config.region &&
          {elem(elem(config.stripes, 0), 0),
           elem(elem(config.stripes, tuple_size(config.stripes) - 1), 1) - 1},
      # A world's zone publishes its region and ring (`Overworld.World.Place`), the ring's
      # cells under band keys.
      place: config.world,
      workers: config.workers,
      radius: Entity.meters(o.radius),
      leave: Entity.meters(leave_m),
      budget: max(div(o.budget, config.tick_rate), 64)
    }
  end

  @doc "The position of an entity of the zone (units), for observers that follow one."
  @spec position(term, pos_integer) :: {integer, integer} | nil
  def position(zone, id) do
    case Overworld.Zone.entity(zone, id) do
      nil -> nil
      e -> {Entity.entity(e, :x), Entity.entity(e, :y)}
    end
  end

  @doc "The cells in view (held or pending): cell key => `{row, col}`."
  @spec region_cells(t) :: %{optional(integer) => {non_neg_integer, non_neg_integer}}
  def region_cells(%__MODULE__{region: region, grid: g}) do
    for {row, {a, b}} <- region,
        col <- a..b,
        into: %{},
        do: {Grid.key_at(g, col, row), {row, col}}
  end

  @doc """
  What operators see of an observer (the visualizer draws it): its view and leave radii
  (metres), the runs of cells the client holds (`[row, first_col, last_col, tick]`, the tick
  each run is at), the cells waiting for their keyframe, and the byte budget (bytes per
  second). For a world's observer, the runs of every zone it watches (one grid: the world's).
  """
  @spec describe(t | Overworld.Interest.World.t()) :: map
  def describe(%Overworld.Interest.World{subs: subs}) do
    parts = subs |> Map.values() |> Enum.map(&describe/1)
    [first | _] = parts

    %{
      first
      | held: parts |> Enum.flat_map(& &1.held) |> Enum.sort() |> Enum.dedup(),
        pending: Enum.sum(for p <- parts, do: p.pending)
    }
  end

  def describe(%__MODULE__{} = o) do
    unit = Overworld.Entity.meters(1)

    %{
      radius_m: o.radius / unit,
      leave_m: o.leave / unit,
      held: for({row, runs} <- o.held, {a, b, t} <- runs, do: [row, a, b, t]) |> Enum.sort(),
      pending: map_size(o.pending),
      budget: o.budget
    }
  end

  @doc """
  The client lost track (a gap, a baseline it does not hold, a block it could not decode): the
  next frame starts from nothing (baseline 0) and every cell in view comes again as a
  keyframe. The cause is logged.
  """
  @spec resync(t | Overworld.Interest.World.t(), term) :: t | Overworld.Interest.World.t()
  def resync(%Overworld.Interest.World{} = w, reason),
    do: Overworld.Interest.World.resync(w, reason)

  def resync(%__MODULE__{} = o, reason) do
    Logger.info("interest: resync of an observer of zone #{inspect(o.zone)}: #{inspect(reason)}")
    restart(o)
  end

  @doc false
  # `resync/2` without the log (a world observer starting its zones' observers over).
  @spec restart(t) :: t
  def restart(%__MODULE__{} = o) do
    # From scratch, at whatever tick comes next (a zone recovered from a snapshot, or rewound,
    # goes back in ticks).
    %{
      o
      | reset: true,
        tick: 0,
        held: %{},
        pending: %{},
        kfs: %{},
        region: %{},
        cells: 0,
        at: nil,
        uniform: nil
    }
  end

  @doc """
  Sets the input acknowledgement the next frames carry: the newest input sequence number of the
  client that the zone consumed (`Overworld.Zone.input_ack/2`). (`resync/2`, `acknowledge/2` and
  `announce/2` take a world observer too: `Overworld.Interest.World`.)
  """
  @spec acknowledge(t | Overworld.Interest.World.t(), non_neg_integer) ::
          t | Overworld.Interest.World.t()
  def acknowledge(%Overworld.Interest.World{} = w, seq),
    do: Overworld.Interest.World.acknowledge(w, seq)

  def acknowledge(%__MODULE__{} = o, seq) when is_integer(seq) and seq >= 0,
    do: %{o | input_ack: max(o.input_ack, seq)}

  @doc """
  Has the next frame carry the send interval (SNAPSHOT extension 1, docs/protocol.md): the
  ticks between two snapshots of this client from that frame on. A frame that is not sent
  leaves the observer as it was, announcement included.
  """
  @spec announce(t | Overworld.Interest.World.t(), pos_integer) ::
          t | Overworld.Interest.World.t()
  def announce(%Overworld.Interest.World{} = w, interval),
    do: Overworld.Interest.World.announce(w, interval)

  def announce(%__MODULE__{} = o, interval) when is_integer(interval) and interval >= 1,
    do: %{o | ext: [Snapshot.send_interval_extension(interval)]}

  @doc """
  The frame of tick `n` (the zone's last completed tick) for an observer at `(x, y)` (units):
  `{frame, info, observer}`, the frame an iolist of a snapshot message. A tick not after the
  last frame's answers `nil` for the frame.
  """
  @spec frame(t, non_neg_integer, integer, integer) :: {iodata | nil, info | nil, t}
  def frame(%__MODULE__{tick: last} = o, n, _x, _y) when n <= last, do: {nil, nil, o}

  def frame(%__MODULE__{} = o, n, x, y) do
    baseline = if o.reset, do: 0, else: o.tick
    budget = frame_budget(o, n) - 16
    {p, o2} = compose(o, n, x, y, budget, budget)
    head = Snapshot.head(n, baseline, o.input_ack, p.blocks)
    tail = Snapshot.tail(p.left_keys, p.behind, o.ext)
    info = %{p | bytes: byte_size(head) + p.block_bytes + IO.iodata_length(tail)}
    {[head, p.io | tail], Map.delete(info, :io), %{o2 | ext: []}}
  end

  @doc false
  # A world observer's share of its frame (`Overworld.Interest.World`): what this zone's tick
  # `n` adds within `room` bytes, what the nearer zones left of the frame's `full` budget
  # (blocks, cells left and held back, under the keys the zone publishes them by), as
  # `frame/4`'s info plus `io` (the blocks; `bytes`: all it takes of the frame), and the
  # observer after it; nil for a tick not after the last.
  @spec part(t, non_neg_integer, integer, integer, integer, integer) :: {map | nil, t}
  def part(%__MODULE__{tick: last} = o, n, _x, _y, _room, _full) when n <= last, do: {nil, o}
  def part(%__MODULE__{} = o, n, x, y, room, full), do: compose(o, n, x, y, room, full)

  defp compose(o, n, x, y, room, full) do
    %Grid{width: w, height: h} = o.grid
    {x, y} = {x |> max(0) |> min(w), y |> max(0) |> min(h)}
    {region, at} = region(o, x, y)

    case fast(o, region, n, room) do
      {:ok, blocks, count, bytes} ->
        finish(%{o | uniform: n}, n, at, blocks, count, bytes, [], [], 0, true)

      :slow ->
        slow(materialize(o), n, x, y, region, at, room, full)
    end
  end

  # The common frame: the view did not change, the client holds every cell at the tick of the
  # previous frame (u), nothing is pending, and the blocks of ticks u+1..n of every row of the
  # view fit the budget: per row, one slice per tick (a paced observer, sent every k ticks,
  # takes k), and nothing to update but the tick.
  defp fast(
         %__MODULE__{uniform: u, region: region, pending: p, reset: false} = o,
         region,
         n,
         room
       )
       when is_integer(u) and u < n and n - u <= @accrue and map_size(p) == 0 do
    case Blocks.published_span(o, n, u, []) do
      nil -> :slow
      ticks -> Blocks.fast_rows(:maps.to_list(region), ticks, o, room, [], 0, 0)
    end
  end

  defp fast(_o, _region, _n, _room), do: :slow

  # The budget of the ticks since the last frame (at most #{@accrue}): a frame after ticks the
  # sender skipped (a client that lagged, coalesced) may carry what those ticks would have,
  # so the client catches up with deltas instead of falling out of the ring of recent ticks.
  # The first frame and the first after a resync get one tick's budget.
  defp frame_budget(%__MODULE__{tick: last, reset: false, budget: b}, n) when last > 0,
    do: accrued(b, n - last)

  defp frame_budget(%__MODULE__{budget: b}, _n), do: b

  @doc false
  # A frame's budget after `ticks` ticks of `budget` (per tick): at most #{@accrue} ticks' worth.
  @spec accrued(pos_integer, pos_integer) :: pos_integer
  def accrued(budget, ticks), do: budget * min(ticks, @accrue)

  # Runs held at the uniform tick (see `fast/3`) get it written in.
  defp materialize(%__MODULE__{uniform: nil} = o), do: o

  defp materialize(%__MODULE__{uniform: u, held: held} = o) do
    held = Map.new(held, fn {row, runs} -> {row, for({a, b, _} <- runs, do: {a, b, u})} end)
    %{o | held: held, uniform: nil}
  end

  # (`full`: the whole frame's budget, which decides what is too big to ever fit; `room`: what
  # is left of it for this zone, the same but in a world observer.)
  defp slow(o, n, x, y, region, at, room, full) do
    {o, left} = leave(o, region)
    o = enter(o, region, n)
    me = {div(y, o.grid.cell), div(x, o.grid.cell)}
    {items, o, cache} = held_items(o, n, me)
    {kf_items, o, cache} = pending_items(o, n, me, cache)
    left_bytes = Enum.reduce(left, 0, &(&2 + byte_size(Codec.varint(&1))))
    {room, full} = {room - left_bytes, full - left_bytes}

    items = Enum.sort(items ++ kf_items)
    {sent, deferred, again} = Take.take(items, room, [], 0, {o, cache, n, full, []})
    o1 = o |> apply_sent(sent, n) |> refetch(again, n)
    behind1 = behind(o1, n)
    b = runs_bytes(behind1)

    # The frame lists the cells it holds back too (most frames hold none back: done). When the
    # list does not fit beside the blocks, the blocks are chosen again in the room it leaves.
    {o, sent, behind, deferred} =
      cond do
        b == 0 ->
          {o1, sent, [], deferred}

        b + cost(sent) <= room ->
          {o1, sent, behind1, deferred}

        true ->
          {sent, deferred, again} = Take.take(items, room - b, [], 0, {o, cache, n, full - b, []})
          fit_behind(o, sent, again, deferred, n, room)
      end

    {blocks, count, bytes} = blocks(sent)
    o = %{o | uniform: uniform(o, n)}
    finish(o, n, at, blocks, count, bytes, left, behind, deferred, false)
  end

  # What the frame sends with the list of the cells it holds back (`behind/2`): while the two do
  # not fit the room together, the last (least urgent) item waits too, but for an item larger
  # than the whole room, which goes alone (see take/5: the one frame allowed over budget).
  defp fit_behind(o0, sent, again, deferred, n, room) do
    o = o0 |> apply_sent(sent, n) |> refetch(again, n)
    behind = behind(o, n)

    case sent do
      [{_, c, _, _, _}] when c > room ->
        {o, sent, behind, deferred}

      [_ | _] ->
        if cost(sent) + runs_bytes(behind) > room,
          do: fit_behind(o0, Enum.drop(sent, -1), again, deferred + 1, n, room),
          else: {o, sent, behind, deferred}

      [] ->
        {o, sent, behind, deferred}
    end
  end

  defp cost(items), do: Enum.reduce(items, 0, fn {_, c, _, _, _}, acc -> acc + c end)

  # The cells the client holds at an older tick than `n` (their blocks held back), as runs
  # `{first key, cell count}`, by key: what the snapshot lists as behind.
  # Those are the held runs at an older tick, and the cells the client may still hold an old
  # state of while their keyframe is on its way (pending and stale); neighbours are one run.
  defp behind(%__MODULE__{held: held, pending: pending, grid: g, place: place} = o, n) do
    held_back =
      for {row, runs} <- held, {a, b, t} <- runs, t < n, do: {Grid.key_at(g, a, row), b - a + 1}

    stale = for {key, {_, _, _, _, true}} <- pending, do: {key, 1}

    case place do
      nil ->
        Runs.join_keys(Enum.sort(held_back ++ stale))

      _ ->
        keys = for {k, c} <- held_back ++ stale, key <- k..(k + c - 1), do: {wire_key(o, key), 1}
        Runs.join_keys(Enum.sort(keys))
    end
  end

  # The key the zone publishes a cell under (a world's zone: its ring's under band keys).
  defp wire_key(%__MODULE__{place: place}, key), do: Place.wire_key(place, key)

  defp runs_bytes([]), do: 0
  defp runs_bytes(runs), do: IO.iodata_length(Snapshot.runs(runs)) - 1

  # Every cell held, at tick n: the next frame may take the fast path.
  defp uniform(%__MODULE__{pending: p, held: held}, n) when map_size(p) == 0 do
    if Enum.all?(held, fn {_row, runs} -> Enum.all?(runs, &(elem(&1, 2) == n)) end), do: n
  end

  defp uniform(_o, _n), do: nil

  defp finish(o, n, at, blocks, count, bytes, left, behind, deferred, fast?) do
    left_bytes = Enum.reduce(left, 0, &(&2 + byte_size(Codec.varint(&1))))

    part = %{
      io: blocks,
      bytes: bytes + left_bytes + runs_bytes(behind),
      blocks: count,
      block_bytes: bytes,
      cells: o.cells,
      pending: map_size(o.pending),
      deferred: deferred,
      left: length(left),
      left_keys: left,
      behind: behind,
      fast: fast?
    }

    {part, %{o | tick: n, reset: false, at: at}}
  end

  # The region is computed again only once the observer moved beyond the slack.
  defp region(%__MODULE__{at: {ax, ay}, region: region}, x, y)
       when (x - ax) * (x - ax) + (y - ay) * (y - ay) < @slack * @slack,
       do: {region, {ax, ay}}

  defp region(%__MODULE__{rows: rows, place: place} = o, x, y) do
    region = Region.next(o.region, o.grid, x, y, o.radius + @slack, o.leave - @slack)
    region = if rows, do: only_rows(region, rows), else: region
    {if(place, do: only_cols(region, place.ring), else: region), {x, y}}
  end

  defp only_rows(region, {r0, r1}),
    do: :maps.filter(fn row, _ -> row >= r0 and row <= r1 end, region)

  defp only_cols(region, {c0, _r0, c1, _r1}) do
    for {row, {a, b}} <- region,
        max(a, c0) <= min(b, c1),
        into: %{},
        do: {row, {max(a, c0), min(b, c1)}}
  end

  @doc "A frame for the observer at an entity's position (see `frame/4`)."
  @spec frame(t, non_neg_integer, {integer, integer}) :: {iodata | nil, info | nil, t}
  def frame(o, n, {x, y}), do: frame(o, n, x, y)

  ## Cells leaving and entering the view
  #
  # Every cell of the region is either held (in a run of `held`) or pending, and nothing else
  # is: so the cells that leave are the old region's minus the new one's, and the cells that
  # enter the new region's minus the old one's, row by row, in runs. Most frames change
  # nothing (a walking observer crosses a cell border every few seconds).

  # Cells of the old region not in the new one: the held ones are listed as left; pending ones
  # are forgotten.
  defp leave(%__MODULE__{region: region} = o, region), do: {o, []}

  defp leave(%__MODULE__{region: old, grid: g} = o, region) do
    Enum.reduce(old, {o, []}, fn {row, run}, {o, left} ->
      case Map.get(region, row) do
        ^run ->
          {o, left}

        new ->
          gone = Runs.minus(run, new)
          runs = Map.get(o.held, row, [])

          keys =
            for {a, b} <- gone,
                {c, d, _} <- runs,
                col <- max(a, c)..min(b, d)//1,
                do: wire_key(o, Grid.key_at(g, col, row))

          dropped = for {a, b} <- gone, col <- a..b, do: Grid.key_at(g, col, row)
          held = Map.put(o.held, row, Runs.clip(runs, new))

          o = %{
            o
            | held: held,
              pending: Map.drop(o.pending, dropped),
              kfs: Map.drop(o.kfs, dropped)
          }

          {o, keys ++ left}
      end
    end)
    |> then(fn {o, left} -> {o, Enum.sort(left)} end)
  end

  # Cells new to the region are asked of their workers as keyframes.
  defp enter(%__MODULE__{region: region} = o, region, _n), do: o

  defp enter(%__MODULE__{grid: g} = o, region, n) do
    new =
      for {row, run} <- region,
          # (a match in a comprehension filters on its value: nil would drop the row)
          {old} = {Map.get(o.region, row)},
          old != run,
          {a, b} <- Runs.minus(run, old),
          col <- a..b,
          do: {Grid.key_at(g, col, row), {row, col, n, n, false}}

    ask(o, Enum.map(new, &elem(&1, 0)))

    %{
      o
      | region: region,
        cells: Region.size(region),
        pending: Map.merge(o.pending, Map.new(new))
    }
  end

  defp ask(_o, []), do: :ok

  defp ask(%__MODULE__{grid: g, owners: owners, zone: zone, mirror: mirror}, keys) do
    keys
    |> Enum.group_by(fn k -> elem(owners, div(k, g.stride) - 1) end)
    |> Enum.each(fn {w, ks} ->
      cond do
        # A zone on another node: its workers are asked through this node's mirror.
        mirror != nil ->
          send(mirror, {:wire_want, w, ks})

        pid = Overworld.Names.whereis(Overworld.Names.bucket(zone, w)) ->
          send(pid, {:wire_want, ks})

        true ->
          :ok
      end
    end)
  end

  ## Items: what could go into the frame

  # An item: {priority, cost, blocks, iodata, what}; `what` is {:run, row, a, b, tick held} or
  # {:key, row, col, key, tick of the keyframe}.

  # The held runs: for each, every tick's slice since the tick the client holds.
  defp held_items(%__MODULE__{} = o, n, me) do
    ring = Wire.ring()

    {items, stale, cache} =
      Enum.reduce(o.held, {[], [], %{}}, fn {row, runs}, acc ->
        Enum.reduce(runs, acc, fn {a, b, t}, {items, stale, cache} ->
          cond do
            t >= n ->
              {items, stale, cache}

            t <= n - ring ->
              {items, [{row, a, b, t + 1} | stale], cache}

            true ->
              case Blocks.slices(o, cache, row, a, b, t + 1, n, [], 0, 0) do
                {:ok, io, cost, count, cache} ->
                  prio = distance(me, row, a, b) - (n - 1 - t)
                  {[{prio, cost, count, io, {:run, row, a, b, t}} | items], stale, cache}

                {:missing, cache} ->
                  {items, [{row, a, b, t + 1} | stale], cache}
              end
          end
        end)
      end)

    {items, refetch(o, stale, n), cache}
  end

  # Cells whose blocks are gone (too far behind, or the zone restarted) come back as keyframes.
  defp refetch(o, [], _n), do: o

  # A cell keeps the tick it has been waiting since (its priority).
  defp refetch(%__MODULE__{grid: g} = o, stale, n) do
    cells =
      for {row, a, b, since} <- stale, col <- a..b do
        key = Grid.key_at(g, col, row)

        case o.pending do
          %{^key => {_, _, was, _, stale}} -> {key, {row, col, was, n, stale}}
          _ -> {key, {row, col, since, n, true}}
        end
      end

    held =
      Enum.reduce(stale, o.held, fn {row, a, b, _}, held ->
        Map.update(held, row, [], &Runs.drop(&1, a, b))
      end)

    ask(o, Enum.map(cells, &elem(&1, 0)))
    %{o | held: held, pending: Map.merge(o.pending, Map.new(cells))}
  end

  # The pending cells whose keyframe has come: the keyframe, then the slices since.
  defp pending_items(%__MODULE__{table: table} = o, n, me, cache) do
    ring = Wire.ring()

    {items, retry, cache, kfs} =
      Enum.reduce(o.pending, {[], [], cache, o.kfs}, fn {key, {row, col, since, asked, stale}},
                                                        {items, retry, cache, kfs} ->
        # A keyframe fetched once is kept while it is usable (a budget may defer it).
        found =
          case kfs do
            %{^key => {m, _} = kf} when m > n - ring -> kf
            _ -> Blocks.lookup_keyframe(table, key, n, ring)
          end

        kfs = if found, do: Map.put(kfs, key, found), else: kfs

        case found do
          {m, block} ->
            case Blocks.slices(o, cache, row, col, col, m + 1, n, [], 0, 0) do
              {:ok, io, cost, count, cache} ->
                # An empty cell has no keyframe; a client that may hold an old state of it
                # gets an empty one.
                {kf, kf_cost, kf_count} =
                  cond do
                    block -> {block, byte_size(block), 1}
                    stale -> (e = Blocks.empty_keyframe(wire_key(o, key))) && {e, byte_size(e), 1}
                    true -> {[], 0, 0}
                  end

                prio = distance(me, row, col, col) - (n - since)

                item =
                  {prio, cost + kf_cost, count + kf_count, [kf | io], {:key, row, col, key, m}}

                {[item | items], retry, cache, kfs}

              {:missing, cache} ->
                {items, [key | retry], cache, Map.delete(kfs, key)}
            end

          nil when n - asked >= 3 ->
            {items, [key | retry], cache, kfs}

          nil ->
            {items, retry, cache, kfs}
        end
      end)

    ask(o, retry)
    pending = Enum.reduce(retry, o.pending, fn k, p -> Map.update!(p, k, &put_elem(&1, 3, n)) end)
    {items, %{o | pending: pending, kfs: kfs}, cache}
  end

  # Distance in cells from the observer's cell to a run of a row.
  defp distance({r, c}, row, a, b), do: abs(row - r) + max(0, max(a - c, c - b))

  ## After the frame

  defp apply_sent(%__MODULE__{} = o, sent, n) do
    Enum.reduce(sent, o, fn
      {_, _, _, _, {:run, row, a, b, _t}}, o ->
        %{o | held: Map.update!(o.held, row, &Runs.set(&1, a, b, n))}

      {_, _, _, _, {:key, row, col, key, _m}}, o ->
        held = Map.update(o.held, row, [{col, col, n}], &Runs.set(&1, col, col, n))

        %{o | held: held, pending: Map.delete(o.pending, key), kfs: Map.delete(o.kfs, key)}
    end)
  end

  defp blocks(sent) do
    Enum.reduce(sent, {[], 0, 0}, fn {_, cost, count, io, _}, {acc, c, b} ->
      {[acc | io], c + count, b + cost}
    end)
  end
end

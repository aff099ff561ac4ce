defmodule Overworld.Interest.World do
  @moduledoc """
  An observer of a whole world of zones (`Overworld.World`): the client sees one world, one
  stream of snapshots whose cells come from every zone within its view radius
  (docs/protocol.md, "A world of zones").

  It holds one `Overworld.Interest` observer per zone of the world, each clipped to the cells
  its zone publishes (its region, and its ring under band keys), and joins their shares of a
  frame into one snapshot:

  * **When a frame is sent, and its tick**: on the ticks of the observer's **home zone** (the
    zone of the player's avatar; `frame/5` is called with it and its tick). The frame carries,
    of every zone, the blocks up to the newest tick that zone completed (read from its wire
    table: `Overworld.Zone.Wire`), so it never waits for a zone. Its tick is the observer's
    own count: the previous frame's tick plus the home zone's ticks since then (at least 1;
    1 when the home zone changed), so frame ticks always grow, across crossings too, and
    keep the home zone's pace for the client's interpolation.
  * **Budget and priority across the zones**: the frame's byte budget (the option `:budget`,
    per second, as `Overworld.Interest`) is shared: the zones' shares are taken nearest zone
    first, each from what the ones before left (within a zone, nearest cells first).
  * A zone that went back in ticks (restarted from an older snapshot) starts the whole view
    over (baseline 0), as one zone's observer does.
  """
  require Logger
  alias Overworld.Interest
  alias Overworld.Interest.Runs
  alias Overworld.Protocol.Snapshot
  alias Overworld.Zone.Wire

  @enforce_keys [:world, :subs, :budget]
  defstruct @enforce_keys ++
              [tick: 0, home: nil, home_tick: nil, reset: true, input_ack: 0, ext: []]

  @typedoc "A world observer: `subs` zone id => its zone's observer."
  @type t :: %__MODULE__{
          world: term,
          subs: %{optional(term) => Interest.t()},
          budget: pos_integer,
          tick: non_neg_integer,
          home: term,
          home_tick: non_neg_integer | nil,
          reset: boolean,
          input_ack: non_neg_integer,
          ext: [{non_neg_integer, binary}]
        }

  @doc """
  An observer of the running world `name` (its zones started with `wire:`); options as
  `Overworld.Interest.new/2`. `{:error, :not_found}` when the world is not running,
  `{:error, :no_wire}` when its zones have no wire.
  """
  @spec new(term, keyword) :: {:ok, t} | {:error, :not_found | :no_wire}
  def new(name, opts \\ []) do
    case Overworld.World.zones(name) do
      [] ->
        {:error, :not_found}

      zones ->
        Enum.reduce_while(zones, {:ok, %{}}, fn zone, {:ok, acc} ->
          case Interest.new(zone, opts) do
            {:ok, o} -> {:cont, {:ok, Map.put(acc, zone, o)}}
            error -> {:halt, error}
          end
        end)
        |> case do
          {:ok, subs} ->
            o = subs |> Map.values() |> hd()
            {:ok, %__MODULE__{world: name, subs: subs, budget: o.budget}}

          error ->
            error
        end
    end
  end

  @doc "See `Overworld.Interest.resync/2`: the next frame starts over (baseline 0)."
  @spec resync(t, term) :: t
  def resync(%__MODULE__{} = w, reason) do
    Logger.info(
      "interest: resync of an observer of world #{inspect(w.world)}: #{inspect(reason)}"
    )

    reset(w)
  end

  defp reset(w) do
    subs = Map.new(w.subs, fn {z, o} -> {z, Interest.restart(o)} end)
    # (The frame ticks go on growing: the client starts over from baseline 0, not tick 0.)
    %{w | subs: subs, reset: true, home_tick: nil}
  end

  @doc "See `Overworld.Interest.acknowledge/2`."
  @spec acknowledge(t, non_neg_integer) :: t
  def acknowledge(%__MODULE__{} = w, seq) when is_integer(seq) and seq >= 0,
    do: %{w | input_ack: max(w.input_ack, seq)}

  @doc "See `Overworld.Interest.announce/2`."
  @spec announce(t, pos_integer) :: t
  def announce(%__MODULE__{} = w, interval) when is_integer(interval) and interval >= 1,
    do: %{w | ext: [Snapshot.send_interval_extension(interval)]}

  @doc """
  The frame of the home zone's tick `n` for an observer at `(x, y)` (units): `{frame, info,
  observer}` as `Overworld.Interest.frame/4` (`info.ticks`: the tick of every zone the frame
  read). A home tick not after the last frame's answers nil.
  """
  @spec frame(t, term, non_neg_integer, integer, integer) :: {iodata | nil, map | nil, t}
  def frame(%__MODULE__{home: home, home_tick: last} = w, home, n, _x, _y)
      when is_integer(last) and n <= last,
      do: {nil, nil, w}

  def frame(%__MODULE__{} = w, home, n, x, y) do
    # The zones read, nearest first: {distance, zone, its tick}. (A zone whose cells all lie
    # beyond the leave radius, of which the client holds nothing, is not read at all: most
    # observers see one zone or two.)
    read =
      for {z, o} <- w.subs,
          d <- [distance(o, x, y)],
          z == home or not idle?(o, d),
          t <- [if(z == home, do: n, else: newest(o))],
          t != nil do
        {d, z, t, t < o.tick}
      end
      |> Enum.sort()

    if Enum.any?(read, &elem(&1, 3)) do
      Logger.info(
        "interest: a zone of world #{inspect(w.world)} went back in ticks: starting over"
      )

      build(reset(w), home, n, x, y, read)
    else
      build(w, home, n, x, y, read)
    end
  end

  defp build(w, home, n, x, y, read) do
    steps = if w.home == home and is_integer(w.home_tick), do: max(n - w.home_tick, 1), else: 1
    tick = w.tick + steps
    baseline = if w.reset, do: 0, else: w.tick
    full = Interest.accrued(w.budget, if(w.reset, do: 1, else: steps)) - 16

    {parts, subs, _room} =
      Enum.reduce(read, {[], w.subs, full}, fn {_d, z, t, _}, {parts, subs, room} ->
        case Interest.part(Map.fetch!(subs, z), t, x, y, max(room, 0), full) do
          {nil, _} -> {parts, subs, room}
          {p, o} -> {[p | parts], Map.put(subs, z, o), room - p.bytes}
        end
      end)

    parts = :lists.reverse(parts)
    left = parts |> Enum.flat_map(& &1.left_keys) |> Enum.sort()
    behind = parts |> Enum.flat_map(& &1.behind) |> Enum.sort() |> Runs.join_keys()
    sum = fn key -> Enum.reduce(parts, 0, &(Map.fetch!(&1, key) + &2)) end
    head = Snapshot.head(tick, baseline, w.input_ack, sum.(:blocks))
    tail = Snapshot.tail(left, behind, w.ext)

    info = %{
      bytes: byte_size(head) + sum.(:block_bytes) + IO.iodata_length(tail),
      blocks: sum.(:blocks),
      block_bytes: sum.(:block_bytes),
      cells: Enum.reduce(Map.values(subs), 0, &(&1.cells + &2)),
      pending: sum.(:pending),
      deferred: sum.(:deferred),
      left: length(left),
      left_keys: left,
      behind: behind,
      fast: Enum.all?(parts, & &1.fast),
      ticks: Map.new(read, fn {_, z, t, _} -> {z, t} end)
    }

    w = %{w | subs: subs, tick: tick, home: home, home_tick: n, reset: false, ext: []}
    {[head, Enum.map(parts, & &1.io) | tail], info, w}
  end

  # The zone's newest complete tick (nil: none yet, or not running).
  defp newest(%Interest{table: table}) do
    Wire.newest(table)
  rescue
    ArgumentError -> nil
  end

  defp idle?(%Interest{held: held, pending: pending, region: region, leave: leave}, d),
    do:
      map_size(held) == 0 and map_size(pending) == 0 and map_size(region) == 0 and
        d > leave * leave

  # Distance (units, squared) from the observer to the cells the zone publishes.
  defp distance(%Interest{grid: g, place: %{ring: {c0, r0, c1, r1}}}, x, y) do
    dx = max(max(c0 * g.cell - x, x - (c1 + 1) * g.cell), 0)
    dy = max(max(r0 * g.cell - y, y - (r1 + 1) * g.cell), 0)
    dx * dx + dy * dy
  end

  defp distance(_o, _x, _y), do: 0
end

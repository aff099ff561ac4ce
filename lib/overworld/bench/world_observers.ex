defmodule Overworld.Bench.WorldObservers do
  @moduledoc false
  # Observers of a world for `mix overworld.bench.world --observers N`: half of them at the
  # corners where four zones meet (every inner corner of the zone grid: the world must be at
  # least 2 x 2 zones; spread a few metres apart), half at the centres of the zones, far from
  # any border. Each is a process that builds a world frame (`Overworld.Interest.World`) on
  # every tick of its home zone, as a session does (nothing is sent). They start before the
  # warm-up (their first frames carry every cell's keyframe) and count from `measure/1`: per
  # group, bytes per second per observer, cells in view; one observer of each group also
  # decodes every frame (the entities it shows, and any frame that does not decode).

  alias Overworld.Interest.World, as: WorldView
  alias Overworld.Protocol.Snapshot
  alias Overworld.World.Layout

  @doc """
  Starts `n` observers of world `name` (its zones started with `wire:`); answers their pids.
  Raises `ArgumentError` for a world without a corner of four zones.
  """
  @spec start(term, non_neg_integer) :: [pid]
  def start(_name, 0), do: []

  def start(name, n) do
    config = Overworld.Zone.config(hd(Overworld.World.zones(name)))
    l = config.world.layout

    corners =
      with [] <- corners(l),
           do: raise(ArgumentError, "observers need a world of at least 2 x 2 zones")

    centres = for r <- l.regions, do: centre(r.cells, l)
    view = Snapshot.View.new(config.grid.cols, config.grid.rows)
    me = self()

    for i <- 0..(n - 1) do
      {group, spots} = if rem(i, 2) == 0, do: {:corner, corners}, else: {:inside, centres}
      {x, y} = Enum.at(spots, rem(div(i, 2), length(spots)))
      # A few metres apart, deterministic.
      {x, y} = {x + rem(i * 7, 11) * 512 - 2560, y + rem(i * 13, 11) * 512 - 2560}
      home = {name, Layout.zone_at(l, x / 1024, y / 1024)}
      # (The first of each group decodes.)
      decoding = if i < 2, do: view

      spawn_link(fn -> init(me, name, home, group, {x, y}, decoding) end)
    end
  end

  @doc "The measured window starts now."
  @spec measure([pid]) :: :ok
  def measure(pids), do: Enum.each(pids, &send(&1, :measure))

  @doc "Stops the observers; answers per group: observers, bytes/s each, cells, decoded figures."
  @spec stop([pid], number) :: map
  def stop(pids, seconds) do
    for pid <- pids, do: send(pid, {:report, self()})

    reports =
      for _ <- pids do
        receive do
          {:observer_report, r} -> r
        after
          10_000 -> nil
        end
      end

    for pid <- pids, do: Process.unlink(pid) && Process.exit(pid, :kill)

    reports
    |> Enum.reject(&is_nil/1)
    |> Enum.group_by(& &1.group)
    |> Map.new(fn {group, rs} ->
      decoded = Enum.filter(rs, & &1.decoded)

      {group,
       %{
         observers: length(rs),
         bytes_per_s: Float.round(Enum.sum(Enum.map(rs, & &1.bytes)) / length(rs) / seconds, 1),
         frames: Enum.sum(Enum.map(rs, & &1.frames)),
         cells_mean:
           Float.round(
             Enum.sum(Enum.map(rs, & &1.cells)) / max(Enum.sum(Enum.map(rs, & &1.frames)), 1),
             1
           ),
         visible_mean: visible(decoded),
         decode_errors: Enum.sum(Enum.map(decoded, & &1.errors))
       }}
    end)
  end

  defp visible([]), do: nil
  defp visible([d | _]), do: d.visible && Float.round(d.visible, 1)

  defp init(parent, name, home, group, {x, y}, view) do
    {:ok, w} = WorldView.new(name, budget: 1_000_000_000)
    :ok = Overworld.Zone.subscribe(home, self())
    templates = view && Overworld.Zone.config(home).wire.__templates__()

    loop(%{
      parent: parent,
      w: w,
      home: home,
      group: group,
      at: {x, y},
      templates: templates,
      view: view,
      measuring: false,
      bytes: 0,
      frames: 0,
      cells: 0,
      errors: 0,
      seen: 0,
      counted: 0
    })
  end

  defp loop(st) do
    receive do
      {:overworld_tick, zone, n, _} when zone == st.home ->
        n = newest(zone, n)
        {x, y} = st.at

        case WorldView.frame(st.w, st.home, n, x, y) do
          {nil, _, w} -> loop(%{st | w: w})
          {frame, info, w} -> loop(decode(%{st | w: w}, frame, info))
        end

      {:overworld_tick, _, _, _} ->
        loop(st)

      :measure ->
        loop(%{st | measuring: true})

      {:report, _from} ->
        send(st.parent, {:observer_report, report(st)})
    end
  end

  defp report(st),
    do: %{
      group: st.group,
      bytes: st.bytes,
      frames: st.frames,
      cells: st.cells,
      decoded: st.templates != nil,
      errors: st.errors,
      visible: if(st.counted > 0, do: st.seen / st.counted)
    }

  defp decode(st, frame, info) do
    st =
      if st.measuring,
        do: %{
          st
          | bytes: st.bytes + info.bytes,
            frames: st.frames + 1,
            cells: st.cells + info.cells
        },
        else: st

    case st.templates do
      nil ->
        st

      ts ->
        case Snapshot.apply(st.view, IO.iodata_to_binary(frame), ts) do
          {:ok, view} ->
            if st.measuring,
              do: %{
                st
                | view: view,
                  seen: st.seen + map_size(Snapshot.View.entities(view)),
                  counted: st.counted + 1
              },
              else: %{st | view: view}

          {:error, _} ->
            %{st | errors: st.errors + 1, w: WorldView.resync(st.w, :bench)}
        end
    end
  end

  defp newest(zone, n) do
    receive do
      {:overworld_tick, ^zone, m, _} -> newest(zone, max(n, m))
    after
      0 -> n
    end
  end

  # The points (units) where zones' regions meet inside the world: every region's corner that
  # is not on the world's edge.
  defp corners(%Layout{} = l) do
    cell = Overworld.Entity.meters(l.cell_size)

    for r <- l.regions,
        {c0, r0, _c1, _r1} = r.cells,
        c0 > 0 and r0 > 0,
        uniq: true,
        do: {c0 * cell, r0 * cell}
  end

  defp centre({c0, r0, c1, r1}, l) do
    cell = Overworld.Entity.meters(l.cell_size)
    {div((c0 + c1 + 1) * cell, 2), div((r0 + r1 + 1) * cell, 2)}
  end
end

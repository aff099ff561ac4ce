defmodule Overworld.Bench.WorldObservers do
  @moduledoc false
  # Observers of a world for `mix overworld.bench.world --observers N`: half of them at the
  # corners where four zones meet (or two, on the world's edge: at every inner corner of the
  # zone grid, spread a few metres apart), half at the centres of the zones, far from any
  # border. Each is a process that builds a world frame (`Overworld.Interest.World`) on every
  # tick of its home zone, as a session does (nothing is sent). Per group: bytes per second
  # per observer, cells in view; one observer of each group also decodes every frame (the
  # entities it shows, and any frame that does not decode).

  alias Overworld.Interest.World, as: WorldView
  alias Overworld.Protocol.Snapshot
  alias Overworld.World.Layout

  @doc "Starts `n` observers of world `name` (templates: the wire's); answers their pids."
  @spec start(term, non_neg_integer, module) :: [pid]
  def start(_name, 0, _wire), do: []

  def start(name, n, wire) do
    zones = Overworld.World.zones(name)
    place = Overworld.Zone.config(hd(zones)).world
    l = place.layout
    corners = corners(l)
    centres = for r <- l.regions, do: centre(r.cells, l)
    me = self()

    for i <- 0..(n - 1) do
      {group, spots} = if rem(i, 2) == 0, do: {:corner, corners}, else: {:inside, centres}
      {x, y} = Enum.at(spots, rem(div(i, 2), length(spots)))
      # A few metres apart, deterministic.
      {x, y} = {x + rem(i * 7, 11) * 512 - 2560, y + rem(i * 13, 11) * 512 - 2560}
      home = {name, Layout.zone_of_cell(l, cell(x, l, l.cols), cell(y, l, l.rows))}
      decoder = if i < 2, do: wire

      spawn_link(fn -> init(me, name, home, group, {x, y}, decoder) end)
    end
  end

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

  defp init(parent, name, home, group, {x, y}, wire) do
    {:ok, w} = WorldView.new(name, budget: 1_000_000_000)
    :ok = Overworld.Zone.subscribe(home, self())
    templates = wire && wire.__templates__()

    loop(%{
      parent: parent,
      w: w,
      home: home,
      group: group,
      at: {x, y},
      templates: templates,
      view: %Snapshot.View{space: space(name)},
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
    st = %{st | bytes: st.bytes + info.bytes, frames: st.frames + 1, cells: st.cells + info.cells}

    case st.templates do
      nil ->
        st

      ts ->
        case Snapshot.apply(st.view, IO.iodata_to_binary(frame), ts) do
          {:ok, view} ->
            # (Counted once the view has filled: after the first second.)
            if st.frames > 30,
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

  defp space(name) do
    g = Overworld.Zone.config(hd(Overworld.World.zones(name))).grid
    g.stride * (g.rows + 2)
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

  defp cell(u, l, count),
    do: u |> div(Overworld.Entity.meters(l.cell_size)) |> max(0) |> min(count - 1)
end

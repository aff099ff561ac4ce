defmodule Goblins.Bench.Observer do
  @moduledoc false
  # An observer process of the encode benchmark: subscribed to a zone, it builds its frame
  # (`Overworld.Interest`) after every tick while walking a straight line at a set speed,
  # bouncing off the world's edges, and keeps what the benchmark reports. A decoding observer
  # also applies every frame to a client view (`Overworld.Protocol.Snapshot`), which counts the
  # entities it sees and proves the frames decode.
  #
  # Behind by more than one tick (its frame came after the next tick's notice), it takes the
  # newest tick only: the frame then carries every block since (coalesced).

  alias Overworld.Interest
  alias Overworld.Protocol.Snapshot

  defstruct [
    :zone,
    :obs,
    :pos,
    :vel,
    :size,
    :templates,
    view: nil,
    measuring: false,
    frames: 0,
    bytes: 0,
    frame_native: 0,
    coalesced: 0,
    fast: 0,
    deferred: 0,
    visible: 0,
    errors: 0,
    done: []
  ]

  @doc """
  Starts an observer of `zone` at `{x, y}` (units) moving by `{vx, vy}` units per tick.
  Options: Interest's (`:radius`, `:budget`, ...) and `decode: true`.
  """
  @spec start(term, {integer, integer}, {integer, integer}, keyword) :: pid
  def start(zone, pos, vel, opts) do
    {decode, opts} = Keyword.pop(opts, :decode, false)
    parent = self()

    :erlang.spawn_opt(
      fn ->
        {:ok, obs} = Interest.new(zone, opts)
        :ok = Overworld.Zone.subscribe(zone)

        st = %__MODULE__{
          zone: zone,
          obs: obs,
          pos: pos,
          vel: vel,
          size: {obs.grid.width, obs.grid.height},
          templates: decode && Overworld.Zone.wire(zone).templates,
          view: decode && %Snapshot.View{}
        }

        send(parent, {:observer_ready, self()})
        loop(st)
      end,
      [:link]
    )
  end

  defp loop(st) do
    receive do
      {:overworld_tick, _zone, n, t0} ->
        {n, t0, skipped} = newest(n, t0, 0)
        loop(frame(st, n, t0, skipped))

      :measure ->
        loop(%{st | measuring: true})

      {:report, from} ->
        send(from, {:observer_report, self(), report(st)})
        loop(%{st | measuring: false})
    end
  end

  defp newest(n, t0, skipped) do
    receive do
      {:overworld_tick, _zone, n2, t2} -> newest(n2, t2, skipped + 1)
    after
      0 -> {n, t0, skipped}
    end
  end

  defp frame(st, n, t0, skipped) do
    st = walk(st, skipped + 1)
    {x, y} = st.pos
    a = System.monotonic_time()
    {frame, info, obs} = Interest.frame(st.obs, n, x, y)
    b = System.monotonic_time()
    st = %{st | obs: obs}
    st = if st.view && frame, do: decode(st, frame), else: st

    if st.measuring and frame do
      %{
        st
        | frames: st.frames + 1,
          bytes: st.bytes + info.bytes,
          frame_native: st.frame_native + (b - a),
          coalesced: st.coalesced + skipped,
          deferred: st.deferred + info.deferred,
          fast: st.fast + if(info.fast, do: 1, else: 0),
          done: [{n, b - t0} | st.done]
      }
    else
      st
    end
  end

  defp decode(st, frame) do
    case Snapshot.apply(st.view, IO.iodata_to_binary(frame), st.templates) do
      {:ok, view} ->
        visible = Enum.reduce(view.cells, 0, fn {_k, entries}, acc -> acc + length(entries) end)

        %{st | view: view, visible: if(st.measuring, do: st.visible + visible, else: 0)}

      {:error, _} ->
        %{st | errors: st.errors + 1, obs: Interest.resync(st.obs, :undecodable)}
    end
  end

  # Straight lines, bouncing off the edges.
  defp walk(%{pos: {x, y}, vel: {vx, vy}, size: {w, h}} = st, ticks) do
    {x, vx} = bounce(x + vx * ticks, vx, w)
    {y, vy} = bounce(y + vy * ticks, vy, h)
    %{st | pos: {x, y}, vel: {vx, vy}}
  end

  defp bounce(p, v, max) when p < 0, do: {min(-p, max), -v}
  defp bounce(p, v, max) when p > max, do: {max(2 * max - p, 0), -v}
  defp bounce(p, v, _max), do: {p, v}

  defp report(st) do
    %{
      frames: st.frames,
      bytes: st.bytes,
      frame_us: System.convert_time_unit(st.frame_native, :native, :nanosecond) / 1000,
      coalesced: st.coalesced,
      deferred: st.deferred,
      fast: st.fast,
      visible: st.visible,
      errors: st.errors,
      done: st.done
    }
  end
end

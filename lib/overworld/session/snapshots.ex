defmodule Overworld.Session.Snapshots do
  @moduledoc false
  # A session's snapshots (lifecycle step 3 in `Overworld.Session`): on each tick of its zone,
  # the frame its observer (`Overworld.Interest`, or `Overworld.Interest.World`) builds for the
  # client, sent when it is the session's turn at the server's send interval and its socket
  # keeps up; a client that does not is skipped (coalesced), then closed as too slow.

  alias Overworld.{Interest, Server, Session}
  alias Overworld.Transport.WebSocket
  alias Overworld.Zone.Wire

  @doc """
  A tick `n` of `zone` (the newest of the notices waiting: a session that fell behind, on an
  overloaded node, builds one frame for the newest tick, not one per notice, and so catches
  up instead of falling further behind).
  """
  @spec tick(Session.t(), term, non_neg_integer) :: tuple
  def tick(st, zone, n) do
    {n, stale} = newest_tick(zone, n, 0)
    c = st.cfg.counters
    if stale > 0, do: :counters.add(c, Server.counter(:frames_skipped), stale)
    k = Overworld.Server.Pace.interval(st.cfg)

    # Built after the next tick's notice came (`stale`): the sessions are more than a tick
    # behind; counted with the frame when it is sent (Pace compares it with the frames sent).
    if my_turn?(st, n, k), do: snapshot(st, n, k, stale > 0), else: {:noreply, st}
  end

  defp newest_tick(zone, n, stale) do
    receive do
      {:overworld_tick, ^zone, m, _t0} -> newest_tick(zone, max(n, m), stale + 1)
    after
      0 -> {n, stale}
    end
  end

  # At a send interval of k, a session sends on the ticks n with rem(n + pace_hash, k) == 0
  # (the hash of its user: the sessions spread over the k ticks), or as soon as k ticks
  # passed since its last frame (it missed its turn: busy, or the interval changed).
  defp my_turn?(_st, _n, 1), do: true

  defp my_turn?(st, n, k),
    do: rem(n + st.pace_hash, k) == 0 or n - last_tick(st.obs) >= k

  # The zone tick of the last frame.
  defp last_tick(%Interest.World{home_tick: t}), do: t || 0
  defp last_tick(obs), do: obs.tick

  defp snapshot(st, n, k, late?) do
    queued = queued(st.sock)
    cfg = st.cfg

    cond do
      queued > st.max_outbound ->
        Session.too_slow(st, "#{queued} bytes queued")

      queued > 0 ->
        # The kernel's send buffer is full (the client is a good part of a second behind):
        # no snapshot now; the next one carries everything since (coalescing). Waiting any
        # longer would put the client beyond the ring of recent ticks, and every catch-up
        # would need keyframes, costing the zone's workers and the client's bandwidth more.
        :counters.add(cfg.counters, Server.counter(:frames_skipped), 1)
        since = st.slow_since || System.monotonic_time(:millisecond)

        if System.monotonic_time(:millisecond) - since > cfg.slow_timeout,
          do: Session.too_slow(st, "no progress for #{cfg.slow_timeout} ms"),
          else: {:noreply, %{st | slow_since: since}}

      true ->
        {:noreply, send_snapshot(%{st | slow_since: nil}, n, k, late?)}
    end
  end

  defp send_snapshot(st, n, k, late?) do
    case position(st) do
      nil ->
        st

      {x, y} = pos ->
        obs =
          if st.entity,
            do: Interest.acknowledge(st.obs, Wire.input_ack(st.table, st.entity)),
            else: st.obs

        obs = if k != st.told_interval, do: Interest.announce(obs, k), else: obs

        case frame(obs, st.zone, n, x, y) do
          {nil, _, obs} ->
            %{st | obs: obs, pos: pos}

          {frame, info, obs} ->
            cond do
              Session.send_raw(st, WebSocket.frame(2, frame, info.bytes)) ->
                c = st.cfg.counters
                :counters.add(c, Server.counter(:bytes_out), info.bytes)
                :counters.add(c, Server.counter(:frames_out), 1)
                if late?, do: :counters.add(c, Server.counter(:frames_late), 1)
                if st.stats, do: Overworld.Session.Stats.frame(st.stats, info.deferred)
                %{st | obs: obs, pos: pos, told_interval: k}

              Port.info(st.sock) == nil ->
                # The socket is closed; its :tcp_closed message follows.
                %{st | pos: pos}

              true ->
                # The port refused the frame: the client never saw it, so the observer stays
                # as it was before it (the next frame carries everything since).
                :counters.add(st.cfg.counters, Server.counter(:frames_skipped), 1)
                %{st | pos: pos}
            end
        end
    end
  rescue
    # The zone's tables went with it (it stopped, was fenced or moved) after this notice was
    # sent: no frame; its :DOWN follows, and the session re-attaches.
    e in ArgumentError ->
      if :ets.info(st.table, :id) == :undefined, do: st, else: reraise(e, __STACKTRACE__)
  end

  defp frame(%Interest.World{} = obs, zone, n, x, y), do: Interest.World.frame(obs, zone, n, x, y)
  defp frame(obs, _zone, n, x, y), do: Interest.frame(obs, n, x, y)

  # (An observer stays where it stands: `pos`.)
  defp position(%{entity: nil} = st), do: st.pos

  defp position(st) do
    case Wire.position(st.table, st.entity) do
      {x, y, _n} -> {x, y}
      nil -> st.pos
    end
  end

  defp queued(sock) do
    case :erlang.port_info(sock, :queue_size) do
      {:queue_size, n} -> n
      _ -> 0
    end
  end
end

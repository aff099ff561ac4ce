defmodule Overworld.Operators.Sessions do
  @moduledoc """
  The players' sessions as the operator API sees them: those of a zone, one's view.

  A zone's players come from its in-memory copy (`Overworld.Zone.players/1`, no message to the
  zone); each one's session is described by the node it runs on, from what the session
  registered with (`Overworld.Session.Hello`: when it connected, its socket), without a
  message to the session: the client's address and the bytes sent on its socket
  (`:inet.peername/1`, `:inet.getstat/2`), the round-trip time the kernel measures on it
  (Linux's `TCP_INFO`), and what the session measured of its frames
  (`Overworld.Session.Stats`: frames sent, their interval and jitter, budget deferrals).
  """

  @doc """
  The sessions of the zone `id` of this node, at most `limit` (by user id), and how many
  players it has: `{:ok, sessions, total}`. Each session: `user_id` (text), `entity`,
  `connected` (its socket is open: false for a player waiting in its grace period, or joined
  without a session), `connected_at` (unix seconds), `address`, `bytes_out`, `rtt_ms`,
  `frames`, `frame_interval_ms`, `frame_jitter_ms`, `deferred`, `node`.
  """
  @spec of_zone(term, pos_integer) :: {:ok, [map], non_neg_integer}
  def of_zone(id, limit) do
    players = Overworld.Zone.players(id)
    chosen = players |> Enum.sort_by(&elem(&1, 0)) |> Enum.take(limit)

    described =
      chosen
      |> Enum.map(&elem(&1, 2))
      |> Enum.filter(&is_pid/1)
      |> Enum.group_by(&node/1)
      |> Enum.flat_map(fn
        {n, pids} when n == node() ->
          describe(pids)

        {n, pids} ->
          try do
            :erpc.call(n, __MODULE__, :describe, [pids], 2_000)
          catch
            _, _ -> []
          end
      end)
      |> Map.new()

    sessions =
      for {player, entity, pid} <- chosen do
        Map.merge(
          %{
            user_id: Overworld.Operators.Zones.text(player),
            entity: entity,
            connected: false,
            connected_at: nil,
            address: nil,
            bytes_out: nil,
            rtt_ms: nil,
            frames: nil,
            frame_interval_ms: nil,
            frame_jitter_ms: nil,
            deferred: nil,
            node: if(is_pid(pid), do: Atom.to_string(node(pid)))
          },
          Map.get(described, pid, %{})
        )
      end

    {:ok, sessions, length(players)}
  end

  @doc """
  What the session of `user_id` (on whichever node of the cluster holds it) sees: its
  position (metres), view and leave radii, the runs of cells its client holds
  (`Overworld.Interest.describe/1`), its zone and avatar. A message to that one session,
  answered within 2 s. `{:error, :no_session}` when the user has none, `{:error, :no_view}`
  before its first frame.
  """
  @spec interest(binary) :: {:ok, map} | {:error, :no_session | :no_view}
  def interest(user_id) do
    pids =
      Overworld.Cluster.live()
      |> :erpc.multicall(Overworld.Names, :sessions_of, [user_id], 2_000)
      |> Enum.flat_map(fn
        {:ok, pids} -> pids
        _ -> []
      end)

    case pids do
      [] ->
        {:error, :no_session}

      [pid | _] ->
        try do
          GenServer.call(pid, :interest, 2_000)
        catch
          :exit, _ -> {:error, :no_session}
        end
    end
  end

  @doc false
  # The sessions `pids` of this node: `{pid, what operators see}`.
  @spec describe([pid]) :: [{pid, map}]
  def describe(pids) do
    for pid <- pids,
        {_server, _user, %{since: since, sock: sock} = seen} <- [Overworld.Names.session_of(pid)] do
      address =
        case :inet.peername(sock) do
          {:ok, {ip, port}} -> "#{:inet.ntoa(ip)}:#{port}"
          _ -> nil
        end

      bytes =
        case :inet.getstat(sock, [:send_oct]) do
          {:ok, [send_oct: n]} -> n
          _ -> nil
        end

      frames = if seen[:stats], do: Overworld.Session.Stats.read(seen.stats), else: %{}

      {pid,
       Map.merge(frames, %{
         connected: address != nil,
         connected_at: since,
         address: address,
         bytes_out: bytes,
         rtt_ms: rtt_ms(sock)
       })}
    end
  end

  # The kernel's smoothed round-trip time of the socket (`struct tcp_info`'s `tcpi_rtt`, µs,
  # at byte 68), or nil where it cannot be read.
  defp rtt_ms(sock) do
    case :inet.getopts(sock, [{:raw, 6, 11, 104}]) do
      {:ok, [{:raw, 6, 11, <<_::binary-size(68), rtt::native-32, _::binary>>}]} -> rtt / 1000
      _ -> nil
    end
  end
end

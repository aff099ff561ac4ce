defmodule Overworld.Bench.ClusterProbe do
  @moduledoc false
  # Probes of a zone for `mix overworld.bench.cluster`, started on any node of the cluster
  # (through `:erpc`):
  #
  #   * `observe/4`: an observer of the zone (`Overworld.Interest`, as a session has) in a
  #     process of its own: at each tick the zone (or this node's mirror of it) announces, it
  #     builds its frame and notes the OS clock (one clock for every node of this machine),
  #     then answers `{:probe, self(), [{tick, os_us, bytes}]}` after `ticks` ticks;
  #   * `subscribers/2`: that many more observers subscribed to the zone (they take its tick
  #     notices, as idle sessions' observers do), until the caller goes or `stop/1`;
  #   * `sent_bytes/1`: the bytes this node has sent over its distribution connection to a
  #     node (TCP distribution: the connection's socket statistics).

  alias Overworld.{Interest, Zone}

  @doc "An observer of `zone` at `pos`, for `ticks` ticks; answers to `to`."
  @spec observe(term, {integer, integer}, pos_integer, pid) :: pid
  def observe(zone, pos, ticks, to) do
    spawn(fn ->
      {:ok, obs} = Interest.new(zone, radius: 60, budget: 1_000_000)
      :ok = Zone.subscribe(zone)
      send(to, {:probe, self(), frames(obs, zone, pos, ticks, [])})
    end)
  end

  defp frames(_obs, _zone, _pos, 0, acc), do: Enum.reverse(acc)

  defp frames(obs, zone, pos, left, acc) do
    receive do
      {:overworld_tick, ^zone, n, _} ->
        case Interest.frame(obs, n, pos) do
          {nil, _, obs} ->
            frames(obs, zone, pos, left, acc)

          {frame, _info, obs} ->
            us = :os.system_time(:microsecond)
            frames(obs, zone, pos, left - 1, [{n, us, IO.iodata_length(frame)} | acc])
        end

      _other ->
        frames(obs, zone, pos, left, acc)
    after
      5_000 -> Enum.reverse(acc)
    end
  end

  @doc "`count` processes subscribed to `zone`, until `owner` goes or `stop/1`."
  @spec subscribers(term, non_neg_integer, pid) :: [pid]
  def subscribers(zone, count, owner) do
    for _ <- 1..count//1 do
      spawn(fn ->
        ref = Process.monitor(owner)
        :ok = Zone.subscribe(zone)
        idle(ref)
      end)
    end
  end

  # (Tick notices are taken and dropped: a session's observer builds its frame from them.)
  defp idle(ref) do
    receive do
      {:DOWN, ^ref, _, _, _} -> :ok
      :stop -> :ok
      _ -> idle(ref)
    end
  end

  @doc "Stops subscribers."
  @spec stop([pid]) :: :ok
  def stop(pids), do: Enum.each(pids, &send(&1, :stop))

  @doc "Bytes sent to `node` over this node's distribution connection, or nil (not TCP)."
  @spec sent_bytes(node) :: non_neg_integer | nil
  def sent_bytes(node) do
    with {_, port} when is_port(port) <- List.keyfind(:erlang.system_info(:dist_ctrl), node, 0),
         {:ok, [send_oct: bytes]} <- :inet.getstat(port, [:send_oct]) do
      bytes
    else
      _ -> nil
    end
  end
end

defmodule Overworld.Bench.ClusterProbe do
  @moduledoc false
  # Probes of a zone for `mix overworld.bench.cluster`, started on any node of the cluster
  # (through `:erpc`):
  #
  #   * `observe/5`: an observer of the zone (`Overworld.Interest`, as a session has) and a
  #     player in it, in a process of its own: at each tick the zone (or this node's mirror of
  #     it) announces, it builds its frame and notes the OS clock (one clock for every node of
  #     this machine), writes its player's input numbered with that tick, and reads from the
  #     frame's table the newest input the zone acknowledged; after `ticks` ticks the player
  #     leaves and it answers `{:probe, self(), [{tick, os_us, bytes, ticks_since_acked}]}`;
  #   * `subscribers/2`: that many more observers subscribed to the zone (they take its tick
  #     notices, as idle sessions' observers do), until the caller goes or `stop/1`;
  #   * `sent_bytes/1`: the bytes this node has sent over its distribution connection to a
  #     node (TCP distribution: the connection's socket statistics);
  #   * `looter/3`, `looted/1`, `total/2`: a goblin-world player walking among the goblins
  #     and picking their loot up (durable events; it claims its player again, as a session
  #     re-attaches, when its zone's server goes), the totals acknowledged to it, and the
  #     total its avatar holds in a zone (read on the zone's node): after a node kill, no
  #     acknowledged total may exceed it.

  require Overworld.Entity

  alias Overworld.{Interest, World, Zone}
  alias Overworld.Zone.Wire

  @doc """
  An observer of zone `zone` of world `world` at `pos` and a player in it whose input each
  tick is `input`, for `ticks` ticks; answers to `to`.
  """
  @spec observe(term, term, {integer, integer}, pos_integer, term, pid) :: pid
  def observe(world, zone, pos, ticks, input, to) do
    spawn(fn ->
      {:ok, obs} = Interest.new(zone, radius: 60, budget: 1_000_000)
      :ok = Zone.subscribe(zone)
      {player, avatar} = player(world, zone, 1)
      {:ok, slot} = Zone.input_slot(zone, player)
      records = frames(obs, zone, pos, {avatar, slot, input}, ticks, [])
      Zone.leave(zone, player)
      send(to, {:probe, self(), records})
    end)
  end

  # A player whose avatar stays in the zone (the game places it; one placed in another zone
  # is handed there: it leaves, and another name is tried).
  defp player(world, zone, i) when i <= 50 do
    player = "probe-#{node()}-#{System.unique_integer([:positive])}"
    {:ok, avatar} = Zone.join(zone, player, %{session: self()})
    for _ <- 1..3, do: receive(do: ({:overworld_tick, ^zone, _, _} -> :ok))

    if Zone.player_entity(zone, player) == avatar do
      {player, avatar}
    else
      with z when z != nil <- World.zone_for(world, player), do: Zone.leave(z, player)
      player(world, zone, i + 1)
    end
  end

  defp frames(_obs, _zone, _pos, _me, 0, acc), do: Enum.reverse(acc)

  defp frames(obs, zone, pos, {avatar, slot, input} = me, left, acc) do
    receive do
      {:overworld_tick, ^zone, n, _} ->
        case Interest.frame(obs, n, pos) do
          {nil, _, obs} ->
            frames(obs, zone, pos, me, left, acc)

          {frame, _info, obs} ->
            us = :os.system_time(:microsecond)
            :ok = Zone.put_input(slot, input, n)
            acked = Wire.input_ack(obs.table, avatar)
            since = if acked > 0, do: n - acked
            acc = [{n, us, IO.iodata_length(frame), since} | acc]
            frames(obs, zone, pos, me, left - 1, acc)
        end

      _other ->
        frames(obs, zone, pos, me, left, acc)
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

  ## Looters: acknowledged durable events across node kills

  @doc """
  A looter (a process of the calling node: the bench's): the session of `player`, a player of
  the goblin world that a zone of world `name` takes in, walking at random (an input every
  200 ms through a live node of `nodes`, wherever its avatar is). Every durable event
  acknowledged to it (the goblins' loot: `<<"L", goblin::32, amount::16, total::32>>`, sent
  once the pickup is journaled on two nodes) is kept: `looted/1` answers their totals.

  Like a session, it watches the server of its player's zone: when that server goes (its node
  killed, the zone handed to another node) or its avatar crosses into another zone, it claims
  its player again wherever a zone holds it (`attach_here/3` on every live node), at once and
  then every 200 ms until one does. (A recovered zone keeps a player no session claims for
  its `rejoin_ms` only.)
  """
  @spec looter(term, term, [node]) :: pid
  def looter(name, player, nodes) do
    spawn(fn ->
      loot(%{name: name, player: player, nodes: nodes, totals: [], input: nil, zone: nil})
    end)
  end

  @doc "The totals a looter was acknowledged so far, newest first."
  @spec looted(pid) :: [non_neg_integer]
  def looted(looter) do
    ref = make_ref()
    send(looter, {:looted, self(), ref})

    receive do
      {^ref, totals} -> totals
    after
      5_000 -> exit(:looter_silent)
    end
  end

  defp loot(st) do
    receive do
      {:overworld_send, <<"L", _gid::32, _amount::16, total::32>>} ->
        loot(%{st | totals: [total | st.totals]})

      {:looted, from, ref} ->
        send(from, {ref, st.totals})
        loot(st)

      # Claimed in a zone: its server watched.
      {:attached, pid} when is_pid(pid) and st.zone == :attaching ->
        loot(%{st | zone: {pid, Process.monitor(pid)}})

      {:attached, nil} when st.zone == :attaching ->
        loot(%{st | zone: nil})

      # Its zone's server went, or its avatar crossed: claimed again wherever it is.
      {:DOWN, ref, :process, _, _} ->
        if match?({_, ^ref}, st.zone), do: loot(attach(%{st | zone: nil})), else: loot(st)

      {:overworld_moved, _zone, _id} ->
        with {_pid, ref} <- st.zone, do: Process.demonitor(ref, [:flush])
        loot(attach(%{st | zone: nil}))

      :stop ->
        :ok

      _ ->
        loot(st)
    after
      200 ->
        # (A new direction now and then: a random walk among the goblins.)
        input =
          if st.input == nil or :rand.uniform(10) == 1,
            do: %{mx: Enum.random([-100, 0, 100]), my: Enum.random([-100, 0, 100])},
            else: st.input

        case live(st.nodes) do
          [] -> :ok
          live -> :erpc.cast(Enum.random(live), __MODULE__, :steer, [st.name, st.player, input])
        end

        loot(attach(%{st | input: input}))
    end
  end

  defp live(nodes), do: Enum.filter(nodes, &(&1 in Node.list()))

  # Unless claimed (or being claimed): every live node asked to claim the player for us where
  # one of its zones holds it, by a process of its own (the answer, `{:attached, pid | nil}`).
  defp attach(%{zone: nil} = st) do
    looter = self()
    args = [st.name, st.player, looter]

    spawn(fn ->
      answers = :erpc.multicall(live(st.nodes), __MODULE__, :attach_here, args, 5_000)
      send(looter, {:attached, Enum.find_value(answers, fn {_, a} -> is_pid(a) && a end)})
    end)

    %{st | zone: :attaching}
  end

  defp attach(st), do: st

  @doc false
  # On a server node: `looter` claims `player` in the zone of world `name` running here that
  # holds it (read from the zone's own tables); answers that zone's server, or nil.
  @spec attach_here(term, term, pid) :: pid | nil
  def attach_here(name, player, looter) do
    Enum.find_value(World.zones(name), fn zone ->
      with pid when is_pid(pid) and node(pid) == node() <-
             Overworld.Names.whereis(Overworld.Names.zone(zone)),
           id when id != nil <- Zone.player_entity(zone, player),
           :ok <- Zone.claim_session(zone, player, looter) do
        pid
      else
        _ -> nil
      end
    end)
  catch
    :exit, _ -> nil
  end

  @doc false
  # On a server node: the player's input, to its avatar's zone, written on the zone's own
  # node (this one has no mirror of it to keep: the looter subscribes to nothing).
  @spec steer(term, term, map) :: :ok
  def steer(name, player, input) do
    with zone when zone != nil <- World.zone_for(name, player, 0),
         pid when is_pid(pid) <- Overworld.Cluster.zone(zone) do
      if node(pid) == node(),
        do: Zone.input(zone, player, input),
        else: :erpc.cast(node(pid), Zone, :input, [zone, player, input])
    end

    :ok
  rescue
    # (The zone stopping or moving at that moment: its tables went. The next input goes on.)
    ArgumentError -> :ok
  end

  @doc """
  On the node where zone `zone` runs: the loot total of `player`'s avatar if the zone holds it
  (the `data` of its entity, read from the zone's own tables: no mirror), else nil.
  """
  @spec total(term, term) :: non_neg_integer | nil
  def total(zone, player) do
    with id when id != nil <- Zone.player_entity(zone, player) do
      Enum.find_value(Zone.entities(zone), fn e ->
        if Overworld.Entity.entity(e, :id) == id, do: Overworld.Entity.entity(e, :data)
      end)
    end
  end
end

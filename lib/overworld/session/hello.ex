defmodule Overworld.Session.Hello do
  @moduledoc false
  # A session's HELLO and the player's place in the zone (lifecycle steps 2 and 4 in
  # `Overworld.Session`): the protocol version and the token checked, the session registered
  # as its user's (a live one of the same user is taken over: it hands its player and its
  # waiting reliable messages over), the zone joined or the player taken back, HANDSHAKE
  # sent; and, when the zone server restarts, the session re-attached to the new one.

  require Logger

  alias Overworld.{Interest, Protocol, Session}
  alias Overworld.Session.Outbox

  @version Protocol.version()

  @doc """
  HELLO: `{:ok, st}` (live), or what the session's callback returns (closed with a code).
  """
  @spec hello(map, Session.t()) :: {:ok, Session.t()} | tuple
  def hello(%{version: v}, st) when v != @version do
    Session.close(
      st,
      4001,
      "unsupported protocol version #{v}, this server speaks #{@version}",
      1
    )
  end

  def hello(%{token: token}, st) do
    case hello_user(token, st) do
      {:ok, claims} -> player(claims, st)
      {:operator, op} -> observe(op, token, st)
      closed -> closed
    end
  end

  defp observe(op, token, st) do
    with {:ok, st} <- Overworld.Session.Observer.hello(st, op.name, token) do
      Process.flag(:priority, :normal)
      {:ok, %{st | phase: :live}}
    end
  end

  defp player(%{user_id: user} = claims, st) do
    # (What operators see of the session: `Overworld.Operators.Sessions`.)
    stats = Overworld.Session.Stats.new()
    seen = %{since: System.system_time(:second), sock: st.sock, stats: stats}

    with {:ok, handoff} <- register(st.cfg.name, user, seen, 3),
         :ok <- Overworld.Accounts.LastSeen.touch(user),
         st = %{st | user: user, claims: claims, pace_hash: :erlang.phash2(user), stats: stats},
         {:ok, st} <- enter_zone(st, handoff) do
      # Until now the connection ran at high priority (answering within a second whatever
      # the load); a live session's snapshots yield to the zone's tick.
      Process.flag(:priority, :normal)
      # A session in no zone (matches, RPC) holds a few KB that live, and churns through the
      # frames it passes on: every collection sweeps it all, so its heap stays that small
      # instead of keeping tens of KB of dead frames in an old generation.
      if st.zone == nil, do: Process.flag(:fullsweep_after, 0)
      {:ok, Session.flush_outbox(%{st | phase: :live})}
    end
  end

  defp hello_user("", %{token_user: nil} = st),
    do: Session.close(st, 4003, "unauthorized: no token", 3)

  defp hello_user("", %{token_user: claims}), do: {:ok, claims}

  # A player's session token, or an operator's (`{:operator, claims}`: an observer connection,
  # `Overworld.Session.Observer`), checked once each.
  defp hello_user(token, st) do
    case Overworld.Accounts.verify_token(st.cfg.keys, token, :session) do
      {:ok, claims} -> {:ok, claims}
      {:error, :wrong_type} -> operator(token, st)
      {:error, why} -> Session.close(st, 4003, "unauthorized: #{why}", 3)
    end
  end

  defp operator(token, st) do
    case Overworld.Operators.verify(st.cfg, token) do
      {:ok, op} -> {:operator, op}
      {:error, why} -> Session.close(st, 4003, "unauthorized: #{why}", 3)
    end
  end

  # Registers as the user's session, taking over an earlier one.
  defp register(name, user, value, tries) do
    case Overworld.Names.register(Overworld.Names.session(name, user), value) do
      {:ok, _} ->
        {:ok, nil}

      {:error, {:already_registered, pid}} when tries > 0 ->
        handoff =
          try do
            GenServer.call(pid, {:takeover, self()}, 5_000)
          catch
            :exit, _ -> nil
          end

        case register(name, user, value, tries - 1) do
          {:ok, nil} -> {:ok, handoff}
          other -> other
        end

      {:error, _} ->
        {:ok, nil}
    end
  end

  defp enter_zone(%{zone: nil} = st, _handoff) do
    Session.send_msg(st, handshake(nil, 0))
    {:ok, st}
  end

  # A world of zones (the server's zone name names `{:world, name}`): the zone that has the
  # player, else the one its id hashes to (it joins there, and crosses from there). An avatar
  # that crossed to a neighbour between the join and the attach (it spawned beyond the zone's
  # border, and the zone's tick came in between) is looked for again where it went.
  defp enter_zone(%{zone: {:world, _}} = st, handoff), do: enter_world(st, handoff, 3)

  defp enter_zone(st, handoff), do: entered(st, join_zone(st, handoff))

  defp enter_world(%{zone: {:world, name}} = st, handoff, tries) do
    case Overworld.World.zone_for(name, st.user) do
      nil ->
        Session.close(st, 4006, "zone unavailable: world #{inspect(name)} is not running", 6)

      zone ->
        case join_zone(%{st | zone: zone}, handoff) do
          {:error, :not_joined} when tries > 1 -> enter_world(st, nil, tries - 1)
          result -> entered(%{st | zone: zone}, result)
        end
    end
  end

  defp join_zone(st, handoff) do
    with {:ok, config} <- zone_config(st.zone),
         {:ok, entity} <- player_entity(st, handoff, config.world != nil),
         {:ok, pid, mon, slot, obs} <- attach(st, st.zone, config) do
      seq = if handoff, do: handoff.input_seq, else: 0
      Session.send_msg(st, handshake(config, entity))
      # Reliable messages the earlier connection never wrote: numbered on this one.
      st = Enum.reduce(if(handoff, do: handoff.outbox, else: []), st, &Session.keep(&2, &1))

      {:ok,
       %{
         st
         | zone_pid: pid,
           zone_mon: mon,
           table: config.shared.wire,
           entity: entity,
           slot: slot,
           obs: obs,
           module: config.module,
           # Typed inputs: decoded with the zone's input layout, else by its decode_input/1.
           input: config.wire.__input__(),
           input_seq: max(seq, st.input_seq)
       }}
    end
  end

  defp entered(_st, {:ok, st}), do: {:ok, st}

  defp entered(st, {:error, :no_wire}) do
    # A server configured with a zone it cannot serve: the developer's to fix.
    why =
      "zone #{inspect(st.zone)} has no wire: it cannot serve players over the network " <>
        "(start it with the :wire option, a module using Overworld.Template)"

    Logger.warning("session #{st.user}: #{why}")
    Session.close(st, 4006, why, 6)
  end

  defp entered(st, {:error, {:full, why}}) do
    :counters.add(st.cfg.counters, Overworld.Server.counter(:refused_joins), 1)
    wait = Overworld.Server.Pace.retry_after(st.cfg)
    Session.close(st, 4008, "retry_after=#{wait}; #{why}", 8)
  end

  defp entered(st, {:error, why}),
    do: Session.close(st, 4006, "zone unavailable: #{inspect(why)}", 6)

  @doc """
  The zone server died and a new one runs (`pid`): the player is still its (the zone kept
  it), so the session subscribes again and its client starts over from a keyframe; the
  client's reliable messages held meanwhile go now. Otherwise the zone lost the player.
  A new server that dies before it has answered (a bucket worker died while it recovered:
  the zone restarts again) is no answer: the session waits for the next one, within the
  `tries` left of its wait (`{:reattach, tries}`).
  """
  @spec reattach(Session.t(), pid, non_neg_integer) :: tuple
  def reattach(st, pid, tries) do
    # The claim is a call: answered once the new server has finished starting (its players
    # read back), so what follows sees its players, never a half-loaded table.
    with :ok <- reclaim(st),
         :ok <- Overworld.Zone.subscribe(st.zone, self()) do
      mon = Process.monitor(pid)
      obs = st.obs && Interest.resync(st.obs, :zone_restarted)
      # (While the zone our avatar left still sends on what we sent it, they wait for that.)
      if st.fence == nil, do: release(st.held_in, pid, st.user)
      held = if st.fence == nil, do: [], else: st.held_in
      {:noreply, %{st | zone_pid: pid, zone_mon: mon, obs: obs, held_in: held}}
    else
      {:error, :not_found} -> reattach_later(st, pid, tries)
      _ -> zone_lost(st)
    end
  catch
    :exit, _ -> reattach_later(st, pid, tries)
  end

  # Our player in the new server (an observer has none): still ours, with its avatar.
  defp reclaim(%Session{observer: nil} = st) do
    with :ok <- Overworld.Zone.claim_session(st.zone, st.user, self(), 10_000) do
      if Overworld.Zone.player_entity(st.zone, st.user) == st.entity, do: :ok, else: :lost
    end
  end

  defp reclaim(_observer), do: :ok

  # The server `pid` is gone (or was never up): the next one, unless it is too late. A server
  # still alive that did not answer (a timeout) is not waited for again.
  defp reattach_later(st, pid, tries) do
    if tries > 0 and not Overworld.Cluster.alive?(pid) do
      Process.send_after(self(), {:reattach, tries - 1}, 5)
      {:noreply, %{st | zone_was: pid}}
    else
      zone_lost(st)
    end
  end

  @doc """
  Our avatar (`entity`) crossed into `zone`, another zone of the world, which now has our
  player: the session subscribes to it, its inputs go to the new zone's slots from now (the
  newest one written again there: none is lost on the way, acknowledgements stay
  monotonic), and the client's view goes on (its observer sees the whole world: its frames
  now come on the new zone's ticks; the same connection, no reconnect).
  """
  @spec moved(Session.t(), term, pos_integer) :: tuple
  # (A notice of the zone we are in already: a HELLO that found the avatar gone from its first
  # zone followed it there itself, before this notice was read. Nothing to leave: leaving
  # "the old zone" would unsubscribe us from the one we are in.)
  def moved(%Session{zone: zone, zone_pid: pid} = st, zone, entity) when is_pid(pid),
    do: {:noreply, %{st | entity: entity}}

  def moved(st, zone, entity) do
    with {:ok, config} <- zone_config(zone),
         {:ok, pid, mon, slot, obs} <- attach(st, zone, config) do
      # (The observer is the one we had: its acknowledgements never go back.)
      if st.zone_mon, do: Process.demonitor(st.zone_mon, [:flush])
      # The client's reliable messages wait until the zone we leave has sent on (after the
      # avatar) those we sent it: in order, none lost, none twice (until it answers, goes
      # down, or `@fence_wait` ms pass). Without one (it was restarting), those held go now.
      if st.fence, do: Process.demonitor(st.fence, [:flush])
      fence = fence(st.zone_pid, st.user)
      if fence == nil, do: release(st.held_in, pid, st.user)
      # (By its id: a zone on another node is left through this node's mirror.)
      if st.zone_pid, do: catch_exit(fn -> Overworld.Zone.unsubscribe(st.zone, self()) end)

      # (Written there already if the new zone told us the avatar was coming.)
      if slot != st.slot, do: put_last_input(st, slot)

      {:noreply,
       %{
         st
         | zone: zone,
           zone_pid: pid,
           zone_mon: mon,
           zone_was: nil,
           table: config.shared.wire,
           entity: entity,
           slot: slot,
           obs: obs,
           fence: fence,
           held_in: if(fence, do: st.held_in, else: [])
       }}
    else
      _ -> zone_lost(st)
    end
  end

  @doc """
  Our avatar is on its way into another zone of the world: the client's inputs go to its slot
  from now, the newest one sent (maybe to the zone it left, after it left) written there at
  once, so the tick that adopts the avatar applies it.
  """
  @spec arriving(Session.t(), Overworld.Zone.input_slot()) :: Session.t()
  def arriving(st, slot) do
    put_last_input(st, slot)
    %{st | slot: slot}
  end

  defp put_last_input(%{last_input: {input, seq}}, slot),
    do: Overworld.Zone.put_input(slot, input, seq)

  defp put_last_input(_st, _slot), do: :ok

  @fence_wait 5_000

  @doc false
  def fence_wait, do: @fence_wait

  # (The monitor's reference names the fence: the old zone's answer, its :DOWN and the
  # timeout all carry it.)
  defp fence(nil, _user), do: nil

  defp fence(old, user) do
    ref = Process.monitor(old)
    send(old, {:overworld_flush, user, self(), ref})
    Process.send_after(self(), {:fence_timeout, ref}, @fence_wait)
    ref
  end

  @doc """
  The zone our avatar left has sent on what we sent it (or went down, or took too long): the
  client's reliable messages held since go to our zone now.
  """
  @spec unfence(Session.t()) :: Session.t()
  def unfence(st) do
    Process.demonitor(st.fence, [:flush])

    if st.zone_pid do
      release(st.held_in, st.zone_pid, st.user)
      %{st | fence: nil, held_in: []}
    else
      # (Our zone is restarting: they wait for it, `reattach/3`.)
      %{st | fence: nil}
    end
  end

  defp release(held, pid, user),
    do: for(p <- Enum.reverse(held), do: send(pid, {:overworld_event, user, p}))

  # The session takes its place in a zone that has its player: the player's input slot, an
  # observer of the zone (of a world's zone: of the whole world, kept across crossings), its
  # ticks (subscribed), the zone server watched.
  defp attach(st, zone, config) do
    with {:ok, slot} <- Overworld.Zone.input_slot(zone, st.user),
         {:ok, pid, mon, obs} <- watch(st, zone, config, st.cfg.interest) do
      {:ok, pid, mon, slot, obs}
    end
  end

  @doc false
  # An observer of `zone` (of its whole world for a zone of one; a session's world observer is
  # kept across crossings) with the interest options `opts`, the zone's ticks subscribed to,
  # its server monitored: `{:ok, pid, monitor, observer}`.
  @spec watch(Session.t(), term, Overworld.Zone.Config.t(), keyword) ::
          {:ok, pid, reference, Interest.t() | Interest.World.t()} | {:error, term}
  def watch(st, zone, config, opts) do
    with {:ok, obs} <- observer(st, zone, config, opts),
         :ok <- Overworld.Zone.subscribe(zone, self()),
         pid when is_pid(pid) <- Overworld.Zone.whereis(zone) || {:error, :not_running} do
      {:ok, pid, Process.monitor(pid), obs}
    end
  end

  defp observer(%{obs: %Interest.World{} = obs}, _zone, _config, _opts), do: {:ok, obs}

  defp observer(_st, _zone, %{world: %Overworld.World.Place{name: name}}, opts),
    do: Interest.World.new(name, opts)

  defp observer(_st, zone, _config, opts), do: Interest.new(zone, opts)

  defp catch_exit(fun) do
    fun.()
  catch
    :exit, _ -> :ok
  end

  @doc "The zone is gone, or lost the player: a live client is closed with 4006."
  @spec zone_lost(Session.t()) :: tuple
  def zone_lost(st) do
    Logger.warning("session #{st.user}: zone #{inspect(st.zone)} is gone, or lost our player")
    st = %{st | zone_pid: nil, entity: nil, slot: nil}

    case st.phase do
      :live -> Session.close(st, 4006, "zone unavailable", 6)
      :detached -> {:stop, :normal, %{st | phase: :gone}}
      _ -> {:noreply, st}
    end
  end

  @doc """
  A newer connection of the user (`pid`) takes the player over: the zone sends the player's
  reliable messages to it from now on; those the zone sent us before are in our mailbox
  already (they came before its answer), and go, with those not yet written to our socket,
  in the handoff: `{handoff | nil, st}`.
  """
  @spec takeover(Session.t(), pid) :: {map | nil, Session.t()}
  def takeover(%Session{entity: nil} = st, _pid), do: {nil, st}

  def takeover(st, pid) do
    st = claim_for(st, pid)
    {payloads, outbox} = Outbox.drain(st.outbox)

    {%{zone: st.zone, entity: st.entity, input_seq: st.input_seq, outbox: payloads},
     %{st | outbox: outbox}}
  end

  defp claim_for(st, pid) do
    Overworld.Zone.claim_session(st.zone, st.user, pid)
    drain_sends(st)
  catch
    :exit, _ -> drain_sends(st)
  end

  defp drain_sends(st) do
    receive do
      {:overworld_send, payload} -> st |> Session.keep(payload) |> drain_sends()
    after
      0 -> st
    end
  end

  @doc false
  @spec zone_config(term) :: {:ok, Overworld.Zone.Config.t()} | {:error, term}
  def zone_config(zone) do
    case Overworld.Zone.config(zone) do
      nil -> {:error, :not_running}
      %{wire: nil} -> {:error, :no_wire}
      config -> {:ok, config}
    end
  end

  # The avatar the earlier connection had, if the zone has it. (In a world, entity ids are the
  # world's, and the avatar may have crossed into this zone since: `Overworld.World.zone_for/2`
  # found it here.)
  defp player_entity(st, %{zone: zone, entity: id} = handoff, world?)
       when zone == st.zone or world? do
    cond do
      Overworld.Zone.player_entity(st.zone, st.user) == id -> take_player(st, id)
      zone == st.zone -> player_entity(st, nil, world?)
      true -> player_entity(st, handoff, false)
    end
  end

  # A new avatar: only when the server admits a new player now (`Overworld.Server.Pace.admit/2`;
  # a player resuming its avatar, above, always is).
  defp player_entity(st, handoff, _world?) do
    case Overworld.Server.Pace.admit(st.cfg, st.zone) do
      :ok -> join(st, handoff)
      {:full, why} -> {:error, {:full, why}}
    end
  end

  defp join(st, handoff) do
    if handoff, do: Overworld.Zone.leave(handoff.zone, st.user, :moved)

    case Overworld.Zone.join(st.zone, st.user, %{session: self()}) do
      {:ok, id} ->
        {:ok, id}

      {:error, :already_joined} ->
        case Overworld.Zone.player_entity(st.zone, st.user) do
          nil -> {:error, :not_joined}
          id -> {:ok, id}
        end

      {:error, why} ->
        {:error, why}
    end
  catch
    :exit, _ -> {:error, :not_running}
  end

  # The player stays in the zone; from now on the zone sends its reliable messages to us (the
  # session we took over asked already, unless the zone was restarting then).
  defp take_player(st, id) do
    case Overworld.Zone.claim_session(st.zone, st.user, self()) do
      :ok -> {:ok, id}
      # It left in between: it joins again.
      {:error, :not_joined} -> player_entity(st, nil, false)
      {:error, why} -> {:error, why}
    end
  catch
    :exit, _ -> {:error, :not_running}
  end

  @doc false
  @spec handshake(Overworld.Zone.Config.t() | nil, non_neg_integer) :: map
  def handshake(nil, entity), do: Protocol.handshake(entity_id: entity)

  def handshake(config, entity) do
    Protocol.handshake(
      tick_rate: config.tick_rate,
      entity_id: entity,
      width: config.width,
      height: config.height,
      cell_size: Overworld.Entity.meters(config.cell_size),
      cols: config.grid.cols,
      rows: config.grid.rows,
      templates: config.wire.__templates__(),
      input: config.wire.__input__()
    )
  end
end

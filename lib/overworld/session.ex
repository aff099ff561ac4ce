defmodule Overworld.Session do
  @moduledoc """
  A connected player: one process per WebSocket connection (the connection's own process,
  turned into a session by the upgrade). See docs/protocol.md, "Transport".

  ## Lifecycle

  1. **Upgrade** (`GET /ws?token=...&zone=...`): the request is checked (RFC 6455), a token in
     the URL is verified (`401` otherwise), the zone name is resolved (`404` for an unknown
     one); `101`, and the process waits for HELLO (`:hello_timeout`, else closed with 1008).
  2. **HELLO**: the protocol version is checked (4001), the token (URL or HELLO) verified
     (4003). The session registers as the user's session: a live session of the same user is
     replaced (it is closed with 4004) and a detached one (within its grace period) hands its
     entity over. The session joins the zone as the player (the user id) or takes over the
     entity, subscribes to the zone's ticks and sends HANDSHAKE.
  3. **Live**: every tick, or every k ticks when the server paces its snapshots
     (`Overworld.Server.Pace`), the player's snapshot (`Overworld.Interest` at the player's
     entity, carrying the newest input the zone consumed) is written to the socket without
     ever blocking (`:prim_inet.send/3` with `:nosuspend`). When the client does not read, snapshots
     are skipped (the next one carries everything since: coalescing) and past
     `:max_outbound` queued bytes or `:slow_timeout` the connection is closed (4005). INPUTs
     are decoded by the zone module's `decode_input/1` and written, with their sequence
     number, into the player's input slot (`Overworld.Zone.put_input/3`: the worker holding the
     avatar applies the newest next tick), at most `:input_rate` per second (the excess is
     dropped and counted). PING gets
     PONG, RESYNC restarts the snapshots from baseline 0, RELIABLE messages reach the zone's
     `c:Overworld.Zone.handle_event/3`, in order.
  4. **Disconnect**: a close frame 1000 from the client leaves the zone at once. Any other
     end (a lost connection, 1001, a protocol error) keeps the player in the zone for the
     `:grace_period`; a reconnect of the same user within it resumes the same entity. Then
     the player leaves the zone and the process ends. The zone's reliable messages (EVENT)
     for the player meanwhile, and those the old socket had not taken, wait in the session
     (at most 1,024) and go to the new connection right after its HANDSHAKE, numbered on it;
     the zone sends later ones to the new session. (Messages the old socket took but the
     client never read are not sent again: clients do not acknowledge EVENTs.)

  Every violation closes only this connection, with the close code of docs/protocol.md (and
  an ERROR message first for the 4000s), and logs a line.
  """
  use GenServer
  require Logger

  alias Overworld.{Interest, Protocol, Server}
  alias Overworld.Session.{Backend, Hello, Outbox, Snapshots}
  alias Overworld.Transport.WebSocket

  # A restarted zone server is looked for every 5 ms for up to 5 s (a new one that dies before
  # it answers is no answer: the zone is restarting again; see Hello.reattach/3).
  @reattach_tries 1_000

  # Messages delivered per {active, N} batch.
  @active 64
  # Time to wait for the client's close frame or FIN after ours.
  @linger 1_000

  defstruct [
    :sock,
    :cfg,
    :zone,
    :user,
    # The claims of the token given in the URL (until HELLO), then of the session's token:
    # checked again when its account's tokens are revoked (`revoked/1`).
    :token_user,
    :claims,
    :zone_pid,
    # The monitor of the zone server (one at a time: a crossing replaces it).
    :zone_mon,
    :zone_was,
    :table,
    :entity,
    :slot,
    :obs,
    :pos,
    :module,
    :input,
    :slow_since,
    :grace,
    ws: nil,
    buf: <<>>,
    phase: :hello,
    last_in: 0,
    input_seq: 0,
    # The newest input written to the slot, `{input, seq}`: written again into the new zone's
    # slot when the avatar crosses into another zone of a world.
    last_input: nil,
    event_seq: 0,
    # Reliable messages from the zone (EVENT), numbered; those the busy socket refused wait.
    outbox: %Outbox{},
    # Reliable messages of the client that came while the zone restarted, or while our old
    # zone finished with those sent to it before a crossing (`fence`), newest first.
    held_in: [],
    fence: nil,
    bucket: 0,
    refilled: 0,
    # The send interval this client was last told (SNAPSHOT extension 1; 1 until told).
    told_interval: 1,
    # Where the session's snapshots fall among the interval's ticks (from its user: spread).
    pace_hash: 0,
    # Backend services (Overworld.Session.Backend): the matches joined (id => {pid, monitor}),
    # the frames for the client in order (RESPONSE, MATCH_DATA, NOTIFY), requests running
    # apart (monitor => request id), a refused MATCH_SEND logged once.
    matches: %{},
    backend: %Outbox{},
    backend_timer: false,
    tasks: %{},
    warned: false,
    # Matchmaker tickets of the player (ids); matches this connection created.
    tickets: [],
    created: 0,
    # An operator's observer connection (the operator's name; `Overworld.Session.Observer`):
    # no avatar, the whole zone in view.
    observer: nil,
    # Bytes queued towards the client before it is too slow: the server's `:max_outbound`,
    # an observer's own (`Overworld.Session.Observer`).
    max_outbound: nil,
    # What the session measures of its frames, for operators (`Overworld.Session.Stats`).
    stats: nil
  ]

  @type t :: %__MODULE__{}

  # The code of a session, by concern: `Overworld.Session.Upgrade` (the HTTP upgrade, which
  # turns the connection process into the session), `Overworld.Session.Hello` (HELLO, the
  # user's registration and takeover, the zone joined and re-attached), `Overworld.Session.Outbox`
  # (the reliable messages for the client, a value), `Overworld.Session.Snapshots` (the
  # snapshots on each tick), `Overworld.Session.Observer` (an operator's observer connection),
  # `Overworld.Session.Backend` (requests, matches); here the session's life: frames from the
  # client, timeouts and the end.

  @doc """
  Tells `user_id`'s sessions, on every node of the cluster, that tokens of the user were
  revoked (`Overworld.Accounts.logout/2`, `revoke_all/1`, `disable/1`): each checks its own
  token again and a refused one is closed with 4003 (ERROR 3, "token revoked" or "token
  disabled"). Called by the accounts once the revocation is replicated.
  """
  @spec revoked(binary) :: :ok
  def revoked(user_id) do
    :erpc.multicast(Overworld.Cluster.live(), __MODULE__, :revoked_here, [user_id])
    :ok
  end

  @doc false
  def revoked_here(user_id) do
    for pid <- Overworld.Names.sessions_of(user_id), do: send(pid, :overworld_revoked)
    :ok
  end

  @doc """
  Closes `user_id`'s sessions, on every node of the cluster, with 4009 (ERROR 9, `kicked:
  <why>`; an operator's kick: `Overworld.Operators.Sessions`): the player leaves its zone at
  once (a session within its grace period too), the zone and the other players carry on.
  Answers how many sessions were told. `why` is cut to 100 bytes.
  """
  @spec kick(binary, String.t()) :: non_neg_integer
  def kick(user_id, why) when is_binary(why) do
    why = if byte_size(why) > 100, do: String.slice(why, 0, 100), else: why

    Overworld.Cluster.live()
    |> :erpc.multicall(__MODULE__, :kick_here, [user_id, why], 5_000)
    |> Enum.map(fn
      {:ok, n} when is_integer(n) -> n
      _ -> 0
    end)
    |> Enum.sum()
  end

  @doc false
  def kick_here(user_id, why) do
    pids = Overworld.Names.sessions_of(user_id)
    for pid <- pids, do: send(pid, {:overworld_kick, why})
    length(pids)
  end

  @doc false
  # The connection's upgrade (see `Overworld.Session.Upgrade`).
  @spec upgrade(:gen_tcp.socket(), Server.Config.t(), Overworld.Transport.HTTP.Request.t()) :: :ok
  defdelegate upgrade(sock, cfg, req), to: Overworld.Session.Upgrade

  @doc false
  # Messages the socket delivers per {active, N} batch.
  @spec active() :: pos_integer
  def active, do: @active

  ## GenServer

  @impl true
  def init(_), do: {:stop, :not_started_this_way}

  @impl true
  def handle_info({:tcp, sock, data}, %{sock: sock, phase: phase} = st)
      when phase in [:hello, :live] do
    frames(%{st | buf: st.buf <> data, last_in: now()})
  end

  def handle_info({:tcp, _sock, _data}, st), do: {:noreply, st}

  def handle_info({:tcp_passive, sock}, %{sock: sock} = st) do
    :inet.setopts(sock, active: @active)
    {:noreply, st}
  end

  # Ticks: snapshots (`Overworld.Session.Snapshots`). While the zone restarts (and until we
  # re-attached), its ticks may go back (a recovery from the last snapshot): no frames until
  # the observer starts over.
  def handle_info({:overworld_tick, _zone, _n, _t0}, %{zone_pid: nil} = st), do: {:noreply, st}

  # (A world's session gets the ticks of its avatar's zone; a notice of the zone it left is late.)
  def handle_info({:overworld_tick, zone, _n, _t0}, %{obs: %Interest.World{}, zone: other} = st)
      when zone != other,
      do: {:noreply, st}

  def handle_info({:overworld_tick, zone, n, _t0}, %{phase: :live} = st),
    do: Snapshots.tick(flush_outbox(st), zone, n)

  def handle_info({:overworld_tick, _, _, _}, st), do: {:noreply, st}

  # A reliable message from the zone (`{:send, player, payload}`, e.g. a durable event's
  # acknowledgement): numbered and sent in order; those a busy socket refuses wait (bounded).
  def handle_info({:overworld_send, payload}, %{phase: :live} = st) do
    st = %{st | outbox: Outbox.enqueue(st.outbox, payload)}

    if Outbox.size(st.outbox) > Outbox.max(),
      do: too_slow(st, "#{Outbox.max()} reliable messages waiting"),
      else: {:noreply, flush_outbox(st)}
  end

  # Connection lost or closing, player kept: the messages wait for a reconnect, which takes
  # them over.
  def handle_info({:overworld_send, payload}, %{phase: phase} = st)
      when phase in [:detached, :closing],
      do: {:noreply, keep(st, payload)}

  def handle_info({:overworld_send, _payload}, st), do: {:noreply, st}

  # The zone server died: it restarts (from its in-memory copy or its store) and keeps our
  # player and our subscription; we find it again and start the client over from a keyframe.
  def handle_info({:reattach, tries}, %{zone_pid: nil, phase: phase} = st)
      when phase in [:live, :detached] do
    # (The registry may still name the dead server for a moment.)
    case Overworld.Zone.whereis(st.zone) do
      pid when is_pid(pid) and pid != st.zone_was -> Hello.reattach(st, pid, tries)
      _ when tries > 0 -> Process.send_after(self(), {:reattach, tries - 1}, 5) && {:noreply, st}
      _ -> Hello.zone_lost(st)
    end
  end

  def handle_info({:reattach, _}, st), do: {:noreply, st}

  # Our avatar crossed into another zone of the world (Overworld.World): we follow it there,
  # on the same connection.
  def handle_info({:overworld_moved, zone, entity}, %{entity: e} = st) when e != nil,
    do: Hello.moved(st, zone, entity)

  def handle_info({:overworld_moved, _zone, _entity}, st), do: {:noreply, st}

  # Our avatar is on its way into another zone of the world, which has its transfer: our
  # inputs go to that zone's slot from now (applied on the tick that adopts it); the rest
  # follows with `:overworld_moved`.
  def handle_info({:overworld_arriving, zone, entity, slot}, %{entity: entity} = st)
      when entity != nil,
      do: {:noreply, Hello.arriving(st, Overworld.Zone.slot_here(zone, slot))}

  def handle_info({:overworld_arriving, _zone, _entity, _slot}, st), do: {:noreply, st}

  # The zone our avatar left has sent on what we sent it (or we waited long enough): the
  # client's reliable messages held since go to the new zone.
  def handle_info({:overworld_flushed, ref}, %{fence: ref} = st),
    do: {:noreply, Hello.unfence(st)}

  def handle_info({:overworld_flushed, _ref}, st), do: {:noreply, st}

  # ... or went down (what it had is lost with it), or is too slow to answer (said).
  def handle_info({:DOWN, ref, :process, _, _}, %{fence: ref} = st),
    do: {:noreply, Hello.unfence(st)}

  def handle_info({:fence_timeout, ref}, %{fence: ref} = st) do
    Logger.warning(
      "session #{st.user}: the zone our avatar left did not answer within " <>
        "#{Hello.fence_wait()} ms; our client's reliable messages go on to the new one"
    )

    {:noreply, Hello.unfence(st)}
  end

  def handle_info({:fence_timeout, _ref}, st), do: {:noreply, st}

  # A debug zone went back to a past tick: the client starts over from a keyframe.
  def handle_info({:overworld_rewound, _zone}, %{obs: obs} = st) when obs != nil,
    do: {:noreply, %{st | obs: Interest.resync(obs, :zone_rewound)}}

  def handle_info({:overworld_rewound, _zone}, st), do: {:noreply, st}

  def handle_info({:tcp_closed, sock}, %{sock: sock} = st), do: gone(st, lost(st))
  def handle_info({:tcp_error, sock, _}, %{sock: sock} = st), do: gone(st, lost(st))

  def handle_info({:timeout, _, :hello}, %{phase: :hello} = st),
    do: close(st, 1008, "no HELLO within #{st.cfg.hello_timeout} ms")

  def handle_info({:timeout, _, :idle}, %{phase: phase} = st) when phase in [:hello, :live] do
    case st.last_in + st.cfg.idle_timeout - now() do
      left when left > 0 ->
        :erlang.start_timer(left, self(), :idle)
        {:noreply, st}

      _ ->
        close(st, 4007, "heartbeat timeout: nothing for #{st.cfg.idle_timeout} ms", 7)
    end
  end

  def handle_info({:timeout, _, :linger}, %{phase: :closing} = st), do: gone(st, st.grace)

  def handle_info({:timeout, ref, :grace}, %{phase: :detached, grace: ref} = st) do
    leave(st, :disconnected)
    {:stop, :normal, %{st | phase: :gone}}
  end

  def handle_info({:DOWN, _, :process, pid, reason}, %{zone_pid: pid} = st) do
    Logger.info(
      "session #{st.user}: zone #{inspect(st.zone)} went down (#{inspect(reason)}); re-attaching"
    )

    send(self(), {:reattach, @reattach_tries})
    {:noreply, %{st | zone_pid: nil, zone_was: pid}}
  end

  # The operator of an observer connection logged out (got a new password, was removed).
  def handle_info(:overworld_revoked, %{observer: op} = st) when op != nil do
    with :live <- st.phase,
         {:error, why} <- Overworld.Session.Observer.check(st) do
      close(st, 4003, "token #{why}", 3)
    else
      _ -> {:noreply, st}
    end
  end

  # Tokens of the user were revoked (a logout, revoke_all, disable): this session's too?
  def handle_info(:overworld_revoked, %{phase: phase, claims: claims} = st)
      when phase in [:live, :detached] and claims != nil do
    case Overworld.Accounts.check_token(claims) do
      :ok ->
        {:noreply, st}

      {:error, why} when phase == :live ->
        close(st, 4003, "token #{why}", 3)

      {:error, _} ->
        # (Detached: nobody to tell; the player leaves now rather than after its grace.)
        leave(st, :left)
        {:stop, :normal, %{st | phase: :gone}}
    end
  end

  def handle_info(:overworld_revoked, st), do: {:noreply, st}

  # An operator kicked the player (`kick/2`).
  def handle_info({:overworld_kick, why}, %{phase: phase} = st) when phase in [:hello, :live],
    do: close(st, 4009, "kicked: #{why}", 9)

  def handle_info({:overworld_kick, _why}, %{phase: :detached} = st) do
    leave(st, :left)
    {:stop, :normal, %{st | phase: :gone}}
  end

  def handle_info({:overworld_kick, _why}, st), do: {:noreply, st}

  # Backend services (Overworld.Session.Backend): what matches and requests send the client.
  def handle_info({:overworld_match_frame, _id, frame}, %{phase: :live} = st),
    do: backend(Backend.push(st, frame))

  def handle_info({:overworld_match_notify, _id, kind, body}, %{phase: :live} = st),
    do: backend(Backend.notify(st, kind, body))

  def handle_info({:overworld_response, id, status, body}, %{phase: :live} = st),
    do: backend(Backend.response(st, id, status, body))

  def handle_info(:overworld_backend_flush, st),
    do: backend(Backend.flush(%{st | backend_timer: false}))

  def handle_info({:DOWN, ref, :process, _, reason}, st) do
    if Map.has_key?(st.tasks, ref) do
      {:noreply, Backend.task_down(st, ref, reason)}
    else
      case Backend.match_down(st, ref, reason) do
        {:handled, st} -> backend(st)
        :not_mine -> {:noreply, st}
      end
    end
  end

  def handle_info(_other, st), do: {:noreply, st}

  # A newer connection of the same user takes the player over.
  @impl true
  def handle_call({:takeover, pid}, _from, st) do
    {handoff, st} = Hello.takeover(st, pid)
    Overworld.Names.unregister(Overworld.Names.session(st.cfg.name, st.user))

    if st.phase in [:hello, :live] do
      send_msg(st, %{type: :error, code: 4, message: "replaced by a newer connection"})
      send_data(st, WebSocket.close(4004, "replaced"))
    end

    # A session closing (its close sent, waiting for the client's) is taken over too: its
    # socket and counters go now.
    disconnect(st)
    {:stop, :normal, handoff, %{st | entity: nil, phase: :gone}}
  end

  # What an operator sees of the session's view (`Overworld.Operators.Sessions.interest/1`).
  def handle_call(:interest, _from, %{obs: obs, pos: {x, y}} = st) when obs != nil do
    unit = Overworld.Entity.meters(1)

    view =
      obs
      |> Overworld.Interest.describe()
      |> Map.merge(%{zone: st.zone, entity: st.entity, x: x / unit, y: y / unit})

    {:reply, {:ok, view}, st}
  end

  def handle_call(:interest, _from, st), do: {:reply, {:error, :no_view}, st}

  # The server shuts down (1001) or the session crashed (1011, the crash is logged by
  # gen_server): close the socket, drop the counters, and take the player out of the zone
  # (nobody will resume it). Normal ends clean up before they stop (phase :gone).
  @impl true
  def terminate(_reason, %{phase: :gone}), do: :ok

  def terminate(reason, st) do
    if st.phase in [:hello, :live] do
      code = if shutdown?(reason), do: 1001, else: 1011
      send_data(st, WebSocket.close(code, if(code == 1001, do: "shutting down", else: "")))
    end

    disconnect(st)
    leave(st, :left)
  end

  defp shutdown?(:normal), do: true
  defp shutdown?(:shutdown), do: true
  defp shutdown?({:shutdown, _}), do: true
  defp shutdown?(_), do: false

  ## Frames from the client

  defp frames(st) do
    case WebSocket.next(st.buf, st.ws) do
      :more ->
        {:noreply, st}

      {:more, rest, ws} ->
        {:noreply, %{st | buf: rest, ws: ws}}

      {:message, :binary, payload, rest, ws} ->
        case message(Protocol.decode(payload), %{st | buf: rest, ws: ws}) do
          {:ok, st} -> frames(st)
          stop -> stop
        end

      {:message, :text, _payload, _rest, _ws} ->
        close(st, 1003, "text messages are not supported: the protocol is binary")

      {:ping, data, rest, ws} ->
        send_data(st, WebSocket.frame(10, data))
        frames(%{st | buf: rest, ws: ws})

      {:pong, rest, ws} ->
        frames(%{st | buf: rest, ws: ws})

      {:close, code, _reason} ->
        # The client closes: answer its close and go (1000: the player leaves now).
        send_data(st, WebSocket.close(1000, ""))
        gone(st, if(code == 1000, do: :left, else: :lost))

      {:error, code, why} ->
        close(st, code, why)
    end
  end

  # Each answers {:ok, st} to read on, or what the GenServer callback returns.
  defp message({:ok, %{type: :hello} = m}, %{phase: :hello} = st), do: Hello.hello(m, st)

  defp message({:ok, _}, %{phase: :hello} = st),
    do: close(st, 4002, "expected HELLO first", 2)

  # An observer only watches: its inputs are dropped, anything else it would send closes it.
  defp message({:ok, %{type: :input}}, %{observer: op} = st) when op != nil do
    :counters.add(st.cfg.counters, Server.counter(:inputs_dropped), 1)
    {:ok, st}
  end

  defp message({:ok, %{type: type}}, %{observer: op} = st)
       when op != nil and type in [:client_event, :request, :match_send],
       do: close(st, 4002, "an observer sends no #{type}: it only watches", 2)

  defp message({:ok, %{type: :input, seq: seq, payload: p}}, st) do
    :counters.add(st.cfg.counters, Server.counter(:inputs), 1)

    case take_token(st) do
      {:ok, st} when seq > st.input_seq ->
        {:ok, forward_input(%{st | input_seq: seq}, seq, p)}

      {:ok, st} ->
        {:ok, st}

      {:drop, st} ->
        :counters.add(st.cfg.counters, Server.counter(:inputs_dropped), 1)
        {:ok, st}
    end
  end

  defp message({:ok, %{type: :ping, client_time: t}}, st) do
    tick = if st.obs, do: st.obs.tick, else: 0
    send_msg(st, %{type: :pong, client_time: t, server_tick: tick})
    {:ok, st}
  end

  defp message({:ok, %{type: :resync, reason: r}}, st) do
    {:ok, if(st.obs, do: %{st | obs: Interest.resync(st.obs, {:client, r})}, else: st)}
  end

  defp message({:ok, %{type: :client_event, seq: seq, payload: p}}, st) do
    cond do
      seq != st.event_seq + 1 ->
        close(st, 4002, "reliable_seq #{seq} after #{st.event_seq}: a gap", 2)

      true ->
        case take_token(st) do
          {:ok, st} when (st.zone_pid == nil and st.zone_was != nil) or st.fence != nil ->
            # The zone is restarting, or our avatar just crossed and the zone it left has not
            # yet sent on what we sent it: kept, in order (bounded like the outbox).
            if length(st.held_in) >= Outbox.max(),
              do: close(st, 4006, "zone unavailable", 6),
              else: {:ok, %{st | event_seq: seq, held_in: [p | st.held_in]}}

          {:ok, st} ->
            if st.zone_pid, do: send(st.zone_pid, {:overworld_event, st.user, p})
            {:ok, %{st | event_seq: seq}}

          {:drop, st} ->
            close(st, 4002, "reliable messages beyond the rate limit", 2)
        end
    end
  end

  defp message({:ok, %{type: :request} = m}, st) do
    case take_token(st) do
      {:ok, st} -> Backend.request(st, m)
      {:drop, st} -> {:ok, Backend.too_fast(st, m)}
    end
  end

  defp message({:ok, %{type: :match_send} = m}, st) do
    case take_token(st) do
      {:ok, st} ->
        Backend.match_send(st, m)

      {:drop, st} ->
        :counters.add(st.cfg.counters, Server.counter(:inputs_dropped), 1)
        {:ok, Backend.rate_limited(st, m)}
    end
  end

  defp message({:ok, %{type: :hello}}, st), do: close(st, 4002, "HELLO twice", 2)

  defp message({:ok, %{type: type}}, st),
    do: close(st, 4002, "#{type} is a server message", 2)

  defp message({:error, why}, st),
    do: close(st, 4002, "undecodable message: #{inspect(why)}", 2)

  # Token bucket: `input_rate` per second, in thousandths.
  defp take_token(st) do
    now = now()
    cap = st.cfg.input_rate * 1000
    bucket = min(cap, st.bucket + (now - st.refilled) * st.cfg.input_rate)
    st = %{st | refilled: now}

    if bucket >= 1000,
      do: {:ok, %{st | bucket: bucket - 1000}},
      else: {:drop, %{st | bucket: bucket}}
  end

  # Into the player's input slot, read by the worker that holds its avatar: no message to
  # the zone (`Overworld.Zone.Inputs`).
  defp forward_input(%{slot: nil} = st, _seq, _payload), do: st

  defp forward_input(st, seq, payload) do
    case decode_input(st, payload) do
      {:ok, input} ->
        Overworld.Zone.put_input(st.slot, input, seq)
        %{st | last_input: {input, seq}}

      _ ->
        :counters.add(st.cfg.counters, Server.counter(:inputs_dropped), 1)
        st
    end
  end

  defp decode_input(%{input: nil, module: module}, payload), do: safe_decode(module, payload)

  defp decode_input(%{input: layout}, payload),
    do: Overworld.Template.decode_input(layout, payload)

  defp safe_decode(module, payload) do
    module.decode_input(payload)
  catch
    _, _ -> {:error, :raised}
  end

  ## Reliable messages for the client (Overworld.Session.Outbox)

  @doc false
  # Sends the reliable messages waiting, in order, while the socket takes them.
  @spec flush_outbox(t) :: t
  def flush_outbox(st) do
    send = fn seq, payload -> send_msg(st, %{type: :event, seq: seq, payload: payload}) end
    %{st | outbox: Outbox.flush(st.outbox, send)}
  end

  @doc false
  # A reliable message kept for a reconnect (bounded: the oldest go first, said once).
  @spec keep(t, binary) :: t
  def keep(st, payload) do
    case Outbox.keep(st.outbox, payload) do
      {outbox, :ok} ->
        %{st | outbox: outbox}

      {outbox, :dropping} ->
        Logger.warning(
          "session #{st.user}: #{Outbox.max()} reliable messages kept for a reconnect: " <>
            "the oldest are dropped"
        )

        %{st | outbox: outbox}
    end
  end

  @doc false
  # Closes a client that does not keep up (4005).
  @spec too_slow(t, String.t()) :: tuple
  def too_slow(st, why) do
    :counters.add(st.cfg.counters, Server.counter(:closed_slow), 1)
    Logger.info("session #{st.user}: closed as too slow (#{why})")
    # Most likely refused by the busy port; sent when the socket can still take it.
    send_msg(st, %{type: :error, code: 5, message: "too slow"})
    send_data(st, WebSocket.close(4005, "too slow"))
    gone(st, :lost)
  end

  ## Sending and closing

  # The backend's queue for the client: past its bound the client is too slow.
  defp backend(st) do
    if Backend.too_much?(st),
      do: too_slow(st, "#{Outbox.max()} backend messages waiting"),
      else: {:noreply, st}
  end

  @doc false
  # Sends bytes already framed; false when the socket is busy (not sent).
  @spec send_raw(t, iodata) :: boolean
  def send_raw(st, data), do: send_data(st, data)

  @doc false
  # Sends a protocol message; false when the socket is busy (not sent).
  @spec send_msg(t, map) :: boolean
  def send_msg(st, msg), do: send_data(st, WebSocket.binary(Protocol.encode(msg)))

  # Never blocks: false when the port is busy (the data is not sent) or the socket failed.
  # `:prim_inet.send/3` is gen_tcp's own send with the port command's options: `:nosuspend`
  # answers busy instead of suspending the session, and the driver's reply is taken here, not
  # as one more message through the session's mailbox per frame.
  defp send_data(%{sock: sock}, data), do: :prim_inet.send(sock, data, [:nosuspend]) == :ok

  @doc false
  # Bounds what waits for a client (`max_outbound` bytes): the kernel's send buffer (left to
  # autotuning it grows to megabytes, net.ipv4.tcp_wmem, which would hide a client that does
  # not read from the bound for a minute or more, and hold that much memory per client) and
  # the port's watermarks, a sixteenth, a half and a quarter of it.
  @spec bound_outbound(port, pos_integer) :: :ok | {:error, term}
  def bound_outbound(sock, max_outbound) do
    :inet.setopts(sock,
      sndbuf: max(div(max_outbound, 16), 4_096),
      high_watermark: div(max_outbound, 2),
      low_watermark: div(max_outbound, 4)
    )
  end

  @doc false
  # Closes with a code (after an ERROR message for the 4000s), then waits a moment for the
  # client's close or FIN before dropping the socket.
  @spec close(t, pos_integer, String.t(), pos_integer | nil) :: {:noreply, t}
  def close(st, code, why, error \\ nil) do
    # (A connection refused before it was live ran at high priority: no longer.)
    Process.flag(:priority, :normal)
    Logger.info("session #{st.user || "(no user yet)"}: closing with #{code}: #{why}")
    if error, do: send_msg(st, %{type: :error, code: error, message: why})
    send_data(st, WebSocket.close(code, why))
    :gen_tcp.shutdown(st.sock, :write)
    :erlang.start_timer(@linger, self(), :linger)
    grace = if code in [4003, 4004, 4006, 4008, 4009], do: :left, else: :lost
    {:noreply, %{st | phase: :closing, grace: grace}}
  end

  # How a connection that ended went: as our close said, or lost.
  defp lost(%{phase: :closing, grace: how}), do: how
  defp lost(_st), do: :lost

  # The socket is gone (or going): the counters drop once.
  defp disconnect(%{phase: phase} = st) when phase in [:hello, :live, :closing] do
    close_socket(st.sock)
    c = st.cfg.counters
    :counters.sub(c, Server.counter(:sessions), 1)
    :counters.sub(c, Server.counter(:connections), 1)
  end

  defp disconnect(_st), do: :ok

  # With bytes still queued in the port (a client that does not read), `gen_tcp.close/1`
  # would wait for them to be sent, blocking this process as long as the client does not
  # read: the queue is dropped instead (and the connection reset).
  defp close_socket(sock) do
    case :erlang.port_info(sock, :queue_size) do
      {:queue_size, n} when n > 0 -> :inet.setopts(sock, linger: {true, 0})
      _ -> :ok
    end

    :gen_tcp.close(sock)
  end

  defp gone(st, how) do
    disconnect(st)
    how = if how == :error, do: :lost, else: how
    Backend.gone(st, how)

    case how do
      :left ->
        leave(st, :left)
        {:stop, :normal, %{st | phase: :gone}}

      _ ->
        detach(st)
    end
  end

  # Lost: the player stays in the zone for the grace period.
  defp detach(%{entity: nil} = st), do: {:stop, :normal, %{st | phase: :gone}}

  defp detach(st) do
    # (By its id: a zone on another node is left through this node's mirror, which took
    # the subscription; its server's pid would answer for the zone alone.)
    if st.zone_pid, do: Overworld.Zone.unsubscribe(st.zone, self())
    ref = :erlang.start_timer(st.cfg.grace_period, self(), :grace)
    {:noreply, %{st | phase: :detached, grace: ref, buf: <<>>, obs: nil}}
  end

  defp leave(%{entity: nil}, _reason), do: :ok

  defp leave(st, reason) do
    Overworld.Zone.leave(st.zone, st.user, reason)
  catch
    :exit, _ -> :ok
  end

  defp now, do: System.monotonic_time(:millisecond)
end

defmodule Overworld.Match.Server do
  @moduledoc false
  # One match: its handler's state, its presences, the messages of the tick, the clock
  # (`Overworld.Match`). Messages to and from the players' sessions:
  #
  #   in:  {:overworld_match_data, user, op, payload}  a player's message (from its session)
  #        {:overworld_match_lost, user, session}      a player's connection was lost (grace)
  #   out: {:overworld_match_frame, id, frame}          a WebSocket frame (MATCH_DATA) for the client
  #        {:overworld_match_notify, id, kind, map}     a notification (presence, kick, end)
  use GenServer, restart: :temporary
  require Logger

  alias Overworld.Protocol
  alias Overworld.Transport.WebSocket

  @max_label 2_048

  def child_spec({id, _, _, _} = arg),
    do: %{id: id, start: {__MODULE__, :start_link, [arg]}, restart: :temporary}

  def start_link(arg), do: GenServer.start_link(__MODULE__, arg)

  @impl true
  def init({id, handler, params, opts}) do
    Process.flag(:trap_exit, true)
    {module, init_arg} = init_arg(handler, params)

    case safe(fn -> module.init(init_arg) end) do
      {:ok, {:ok, hs, rate, label}} when is_integer(rate) and rate in 1..60 ->
        with {:ok, label} <- check_label(label) do
          :ok = :pg.join(Overworld.Cluster.scope(), {:match, id}, self())

          st = %{
            id: id,
            module: module,
            name: handler_name(handler),
            hs: hs,
            rate: rate,
            tick: 0,
            label: label,
            presences: %{},
            inbox: [],
            inbox_n: 0,
            dropped: 0,
            grace: Keyword.get(opts, :grace, 15_000),
            max_messages: Keyword.get(opts, :max_messages, 1_024),
            # Without players for this long, the match ends (:infinity: never).
            empty_timeout: Keyword.get(opts, :empty_timeout, :infinity),
            empty_since: System.monotonic_time(:millisecond),
            next: System.monotonic_time(:millisecond),
            ending: nil,
            # Between ticks a match whose handler says so sleeps compacted (hibernation: a full
            # collection), holding its live data only: Lua handlers (their states churn).
            sleep: function_exported?(module, :hibernate?, 0) and module.hibernate?()
          }

          publish(st)
          {:ok, schedule(st)}
        else
          {:error, why} -> {:stop, {:init, why}}
        end

      {:ok, {:ok, _hs, rate, _label}} ->
        {:stop, {:init, "tick rate #{inspect(rate)}: expected an integer in 1..60"}}

      {:ok, {:error, why}} ->
        {:stop, {:init, why}}

      {:ok, other} ->
        {:stop, {:init, "init answered #{inspect(other, limit: 5)}"}}

      {:raised, why} ->
        {:stop, {:init, why}}
    end
  end

  # A Lua handler carries its module's name to init (Overworld.Match.Lua).
  defp init_arg({module, arg}, params), do: {module, {arg, params}}
  defp init_arg(module, params) when is_atom(module), do: {module, params}

  defp handler_name({_module, {_runtime, name}}) when is_binary(name), do: name
  defp handler_name({module, arg}), do: "#{inspect(module)} #{inspect(arg, limit: 3)}"
  defp handler_name(module), do: inspect(module)

  defp check_label(label) when is_map(label) do
    case safe(fn -> :jiffy.encode(label) end) do
      {:ok, json} when byte_size(json) <= @max_label -> {:ok, label}
      {:ok, json} -> {:error, "label of #{byte_size(json)} bytes, at most #{@max_label}"}
      _ -> {:error, "the label is not a JSON object"}
    end
  end

  defp check_label(_), do: {:error, "the label must be a map (a JSON object)"}

  defp publish(st) do
    connected = map_size(st.presences)
    :ets.insert(Overworld.Match.table(), {st.id, self(), st.name, st.label, connected, st.rate})
  end

  defp schedule(st) do
    next = st.next + div(1000, st.rate)
    now = System.monotonic_time(:millisecond)
    # (Behind by more than a tick: the missed ones are not run in a burst.)
    next = if next < now - div(1000, st.rate), do: now, else: next
    :erlang.start_timer(next, self(), :tick, abs: true)
    %{st | next: next}
  end

  ## Players

  @impl true
  def handle_call({:join, p, metadata}, _from, st) do
    user = p.user_id

    case st.presences do
      %{^user => old} ->
        # The same player again (a reconnect within the grace, or another connection of it):
        # it takes its place back, unseen by the handler.
        Process.demonitor(old.ref, [:flush])
        if old.timer, do: Process.cancel_timer(old.timer)

        if old.session != p.session,
          do:
            send(
              old.session,
              {:overworld_match_notify, st.id, "match_replaced", %{match_id: st.id}}
            )

        presence = Map.merge(p, %{ref: Process.monitor(p.session), timer: nil})
        st = %{st | presences: Map.put(st.presences, user, presence)}
        {:reply, {:ok, joined(st, true)}, st}

      _ ->
        case run(st, :join_attempt, [public(p), metadata, st.hs]) do
          {:ok, {:accept, hs}} ->
            presence = Map.merge(p, %{ref: Process.monitor(p.session), timer: nil})
            st = %{st | hs: hs, presences: Map.put(st.presences, p.user_id, presence)}

            notify(
              st,
              Map.keys(st.presences) -- [p.user_id],
              "match_presence",
              presence_event(st, [p.user_id], [])
            )

            publish(st)

            case run(st, :join, [[public(p)], st.hs]) do
              {:ok, result} ->
                st = result(st, result)
                {:reply, {:ok, joined(st, false)}, st}

              {:stop, why} ->
                {:stop, why, {:error, :not_found}, st}
            end

          {:ok, {:reject, reason, hs}} ->
            {:reply, {:error, {:rejected, to_string(reason)}}, %{st | hs: hs}}

          {:ok, other} ->
            crash(st, :join_attempt, "answered #{inspect(other, limit: 5)}")

          {:stop, why} ->
            {:stop, why, {:error, :not_found}, st}
        end
    end
  end

  def handle_call({:leave, user}, _from, st) do
    case gone(st, [user], "match_presence") do
      {:ok, st} -> {:reply, {:ok, :ok}, st}
      {:stop, why, st} -> {:stop, why, {:ok, :ok}, st}
    end
  end

  def handle_call({:signal, data}, _from, st) do
    case run(st, :signal, [data, st.hs]) do
      {:ok, {:reply, reply, hs}} ->
        {:reply, {:ok, reply}, %{st | hs: hs}}

      {:ok, {:reply, reply, hs, actions}} ->
        {:reply, {:ok, reply}, act(%{st | hs: hs}, actions)}

      {:ok, other} ->
        crash(st, :signal, "answered #{inspect(other, limit: 5)}")

      {:stop, why} ->
        {:stop, why, {:error, :not_found}, st}
    end
  end

  defp joined(st, rejoined?) do
    %{
      match_id: st.id,
      label: st.label,
      tick_rate: st.rate,
      presences: st.presences |> Map.keys() |> Enum.sort(),
      rejoined: rejoined?
    }
  end

  defp public(p), do: Map.take(p, [:user_id, :session, :node])

  @impl true
  def handle_info({:overworld_match_data, user, op, payload}, st) do
    cond do
      not Map.has_key?(st.presences, user) ->
        {:noreply, st}

      st.inbox_n >= st.max_messages ->
        {:noreply, %{st | dropped: st.dropped + 1}}

      true ->
        {:noreply,
         %{
           st
           | inbox: [%{sender: user, op: op, data: payload} | st.inbox],
             inbox_n: st.inbox_n + 1
         }}
    end
  end

  def handle_info({:timeout, _, :tick}, st) do
    messages = Enum.reverse(st.inbox)
    st = %{st | inbox: [], inbox_n: 0, tick: st.tick + 1}

    case run(st, :loop, [st.tick, messages, st.hs]) do
      {:ok, {:stop, hs}} ->
        ended(%{st | hs: hs}, [])

      {:ok, {:stop, hs, actions}} ->
        ended(%{st | hs: hs}, actions)

      {:ok, result} ->
        st = result(st, result)

        now = System.monotonic_time(:millisecond)

        cond do
          st.ending && now >= st.ending -> ended(st, [])
          abandoned?(st, now) -> ended(st, [])
          # (A match without players sleeps compacted too: many idle matches stay cheap.)
          st.sleep or st.presences == %{} -> {:noreply, schedule(st), :hibernate}
          true -> {:noreply, schedule(st)}
        end

      {:stop, why} ->
        {:stop, why, st}
    end
  end

  # A player's connection was lost: it stays for the grace, then leaves.
  def handle_info({:overworld_match_lost, user, session}, st),
    do: {:noreply, lost(st, user, session)}

  def handle_info({:DOWN, ref, :process, session, _}, st) do
    case Enum.find(st.presences, fn {_, p} -> p.ref == ref end) do
      {user, _} -> {:noreply, lost(st, user, session)}
      nil -> {:noreply, st}
    end
  end

  def handle_info({:overworld_match_grace, user}, st) do
    case st.presences do
      %{^user => %{timer: t}} when t != nil ->
        case gone(st, [user], "match_presence") do
          {:ok, st} -> {:noreply, st}
          {:stop, why, st} -> {:stop, why, st}
        end

      _ ->
        {:noreply, st}
    end
  end

  def handle_info({:overworld_match_shutdown, grace}, st) do
    case run(st, :terminate, [grace, st.hs]) do
      {:ok, result} ->
        {:noreply,
         %{result(st, result) | ending: System.monotonic_time(:millisecond) + grace * 1000}}

      {:stop, why} ->
        {:stop, why, st}
    end
  end

  def handle_info({:EXIT, _pid, reason}, st), do: {:stop, reason, st}
  def handle_info(_other, st), do: {:noreply, st}

  defp abandoned?(%{empty_timeout: :infinity}, _now), do: false

  defp abandoned?(st, now),
    do: st.presences == %{} and now - st.empty_since >= st.empty_timeout

  defp lost(st, user, session) do
    case st.presences do
      %{^user => %{session: ^session, timer: nil} = p} ->
        Process.demonitor(p.ref, [:flush])
        timer = Process.send_after(self(), {:overworld_match_grace, user}, st.grace)
        %{st | presences: Map.put(st.presences, user, %{p | timer: timer})}

      _ ->
        st
    end
  end

  # Players removed: the handler's leave/2, the others told.
  defp gone(st, users, kind) do
    {left, presences} = Map.split(st.presences, users)

    if left == %{} do
      {:ok, st}
    else
      for {_, p} <- left do
        Process.demonitor(p.ref, [:flush])
        if p.timer, do: Process.cancel_timer(p.timer)
      end

      st = %{st | presences: presences, empty_since: System.monotonic_time(:millisecond)}
      publish(st)
      notify(st, Map.keys(presences), kind, presence_event(st, [], Map.keys(left)))

      case run(st, :leave, [Enum.map(Map.values(left), &public/1), st.hs]) do
        {:ok, result} -> {:ok, result(st, result)}
        {:stop, why} -> {:stop, why, st}
      end
    end
  end

  defp presence_event(st, joins, leaves) do
    %{
      match_id: st.id,
      joins: for(u <- joins, do: %{user_id: u}),
      leaves: for(u <- leaves, do: %{user_id: u})
    }
  end

  ## The handler's answers

  defp result(st, {:ok, hs}), do: %{st | hs: hs}
  defp result(st, {:ok, hs, actions}), do: act(%{st | hs: hs}, actions)

  # The actions, in order: the players' messages of this call in one frame each.
  defp act(st, actions) when is_list(actions) do
    {st, out} =
      Enum.reduce(actions, {st, []}, fn
        {:broadcast, op, data}, acc -> out(acc, op, data, nil, nil)
        {:broadcast, op, data, to}, acc -> out(acc, op, data, to, nil)
        {:broadcast, op, data, to, from}, acc -> out(acc, op, data, to, from)
        {:label, label}, {st, out} -> {relabel(st, label), out}
        {:kick, users}, {st, out} -> {kick(st, users), out}
        other, acc -> bad_action(st, other, acc)
      end)

    deliver(st, Enum.reverse(out))
    st
  end

  defp act(st, other), do: bad_action(st, other, st)

  defp out({st, out}, op, data, to, from)
       when is_integer(op) and op >= 0 and op < 4_294_967_296 and is_binary(data) and
              (to == nil or is_list(to)) and (from == nil or is_binary(from)) do
    encoded = Protocol.match_message({op, from || "", data})
    # (A set: each recipient is looked up in it, per message.)
    {st, [{to && MapSet.new(to), encoded} | out]}
  end

  defp out(acc, op, data, to, from),
    do: bad_action(elem(acc, 0), {:broadcast, op, data, to, from}, acc)

  defp bad_action(st, action, acc) do
    Logger.warning("match #{st.id}: ignored #{inspect(action, limit: 5)} from #{st.name}")
    acc
  end

  defp relabel(st, label) do
    case check_label(label) do
      {:ok, label} ->
        st = %{st | label: label}
        publish(st)
        st

      {:error, why} ->
        Logger.warning("match #{st.id}: label refused: #{why}")
        st
    end
  end

  defp kick(st, users) when is_list(users) do
    users = Enum.filter(users, &Map.has_key?(st.presences, &1))
    notify(st, users, "match_kicked", %{match_id: st.id})

    case gone(st, users, "match_presence") do
      {:ok, st} -> st
      # (A handler that raises in leave/2 while kicking: ended after this tick's delivery.)
      {:stop, _why, st} -> %{st | ending: 0}
    end
  end

  # One frame per player: every player gets the same bytes when each message went to all.
  defp deliver(_st, []), do: :ok

  defp deliver(st, out) do
    live = for {u, %{timer: nil} = p} <- st.presences, do: {u, p.session}

    if Enum.all?(out, fn {to, _} -> to == nil end) do
      frame = frame(st, Enum.map(out, &elem(&1, 1)))
      for {_, s} <- live, do: send(s, {:overworld_match_frame, st.id, frame})
    else
      live
      |> Enum.group_by(
        fn {u, _} -> for({to, m} <- out, to == nil or MapSet.member?(to, u), do: m) end,
        fn {_, s} -> s end
      )
      |> Enum.each(fn
        {[], _} ->
          :ok

        {ms, sessions} ->
          f = frame(st, ms)
          Enum.each(sessions, &send(&1, {:overworld_match_frame, st.id, f}))
      end)
    end
  end

  defp frame(st, messages),
    do: IO.iodata_to_binary(WebSocket.binary(Protocol.match_data(st.id, messages)))

  defp notify(st, users, kind, body) do
    for u <- users,
        %{session: s} <- [st.presences[u]],
        do: send(s, {:overworld_match_notify, st.id, kind, body})
  end

  ## Ending

  defp ended(st, actions) do
    st = act(st, actions)
    {:stop, :normal, st}
  end

  defp crash(st, callback, why) do
    Logger.error("match #{st.id} (#{st.name}): #{callback} #{why}")
    {:stop, {:shutdown, :handler_error}, st}
  end

  # A handler call: {:ok, answer}, or {:stop, reason} once its exception is logged.
  defp run(st, callback, args) do
    case safe(fn -> apply(st.module, callback, args) end) do
      {:ok, answer} ->
        {:ok, answer}

      {:raised, why} ->
        Logger.error("match #{st.id} (#{st.name}): #{callback} raised: #{why}")
        {:stop, {:shutdown, :handler_error}}
    end
  end

  defp safe(fun) do
    {:ok, fun.()}
  catch
    kind, reason -> {:raised, Exception.format_banner(kind, reason, __STACKTRACE__)}
  end

  @impl true
  def terminate(reason, st) do
    :ets.delete(Overworld.Match.table(), st.id)

    case reason do
      :normal ->
        notify(st, Map.keys(st.presences), "match_end", %{match_id: st.id})

      :shutdown ->
        # The node stops: the handler hears it with no grace.
        _ = run(st, :terminate, [0, st.hs])
        notify(st, Map.keys(st.presences), "match_end", %{match_id: st.id})

      _ ->
        notify(st, Map.keys(st.presences), "match_error", %{
          match_id: st.id,
          message: "the match failed"
        })
    end

    :ok
  end
end

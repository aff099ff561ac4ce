defmodule Overworld.Session.Backend do
  @moduledoc false
  # The backend services over a session's WebSocket (docs/protocol.md, "Matches and RPC"):
  # REQUESTs (rpc, match_create, match_join, match_leave, match_list, matchmaker_add,
  # matchmaker_remove) answered by RESPONSEs with the request's id, MATCH_SEND to the matches
  # the player joined, and what the matches and the matchmaker send the player (MATCH_DATA
  # frames, NOTIFY). Everything for the client of this kind goes through one queue, in order:
  # what the busy socket refuses waits (bounded: past it the client is too slow, 4005).
  require Logger

  alias Overworld.{Match, Protocol, Session}
  alias Overworld.Session.Outbox
  alias Overworld.Transport.WebSocket

  # Requests that run apart from the session (rpc, match_list) at once, at most.
  @max_tasks 16
  # Matches a connection may create.
  @max_created 16
  # Methods a client may call.
  @methods ~w(rpc match_create match_join match_leave match_list matchmaker_add matchmaker_remove)

  @doc "A REQUEST from the client."
  @spec request(Session.t(), map) :: {:ok, Session.t()} | {:noreply, Session.t()}
  def request(st, %{id: id, method: method, body: body}) do
    case decode(body) do
      {:ok, args} when method in @methods ->
        call(st, id, method, args)

      {:ok, _} ->
        {:ok,
         respond(st, id, 404, %{
           error: "unknown_method",
           message: "no method #{printable(method)}"
         })}

      :error ->
        {:ok,
         respond(st, id, 400, %{error: "bad_json", message: "the body is not a JSON object"})}
    end
  end

  defp decode(""), do: {:ok, %{}}

  defp decode(body) do
    case Overworld.Web.decode_json(body, null_term: nil) do
      {:ok, map} when is_map(map) -> {:ok, map}
      _ -> :error
    end
  end

  defp call(st, id, "match_join", args) do
    with {:ok, match_id} <- string(args, "match_id"),
         {:ok, meta} <- object(args, "metadata") do
      case Match.join(match_id, st.user, meta) do
        {:ok, joined} ->
          st = watch(st, match_id)
          {:ok, respond(st, id, 200, joined)}

        {:error, :not_found} ->
          {:ok,
           respond(st, id, 404, %{error: "match_not_found", message: "no match #{match_id}"})}

        {:error, {:rejected, reason}} ->
          {:ok, respond(st, id, 403, %{error: "match_join_rejected", message: reason})}
      end
    else
      {:error, message} ->
        {:ok, respond(st, id, 400, %{error: "invalid_request", message: message})}
    end
  end

  defp call(st, id, "match_leave", args) do
    case string(args, "match_id") do
      {:ok, match_id} ->
        st = unwatch(st, match_id)
        _ = Match.leave(match_id, st.user)
        {:ok, respond(st, id, 200, %{})}

      {:error, message} ->
        {:ok, respond(st, id, 400, %{error: "invalid_request", message: message})}
    end
  end

  defp call(%{created: n} = st, id, "match_create", _args) when n >= @max_created do
    {:ok,
     respond(st, id, 429, %{
       error: "too_many_matches",
       message: "a connection creates #{@max_created} matches at most"
     })}
  end

  defp call(st, id, "match_create", args) do
    with {:ok, handler} <- handler(st.cfg, Map.get(args, "name")),
         {:ok, params} <- object(args, "params") do
      case Match.create(handler, params, Match.options(st.cfg)) do
        {:ok, match_id} ->
          {:ok, respond(%{st | created: st.created + 1}, id, 200, %{match_id: match_id})}

        {:error, why} ->
          {:ok, respond(st, id, 400, %{error: "match_create_failed", message: message(why)})}
      end
    else
      {:error, status, code, message} ->
        {:ok, respond(st, id, status, %{error: code, message: message})}

      {:error, message} ->
        {:ok, respond(st, id, 400, %{error: "invalid_request", message: message})}
    end
  end

  # The player's tickets are the session's (at most 3; they go with the connection).
  defp call(st, id, "matchmaker_add", args) do
    if length(st.tickets) >= Overworld.Matchmaker.max_tickets() do
      {:ok,
       respond(st, id, 409, %{
         error: "too_many_tickets",
         message: "at most #{Overworld.Matchmaker.max_tickets()} tickets a player"
       })}
    else
      case Overworld.Matchmaker.add(args, st.user, st.cfg, self()) do
        {:ok, ticket} ->
          st = %{st | tickets: [ticket | st.tickets]}
          {:ok, respond(st, id, 200, %{ticket: ticket})}

        {:error, status, code, message} ->
          {:ok, respond(st, id, status, %{error: code, message: message})}
      end
    end
  end

  defp call(st, id, "matchmaker_remove", args) do
    ticket = Map.get(args, "ticket")

    case Overworld.Matchmaker.remove(ticket, st.user, st.cfg) do
      :ok ->
        {:ok, respond(%{st | tickets: List.delete(st.tickets, ticket)}, id, 200, %{})}

      {:error, status, code, message} ->
        {:ok, respond(st, id, status, %{error: code, message: message})}
    end
  end

  # The rest may take a while (a Lua function, every node's table): apart from the session.
  defp call(st, id, method, args) do
    if map_size(st.tasks) >= @max_tasks do
      {:ok,
       respond(st, id, 429, %{
         error: "too_many_requests",
         message: "#{@max_tasks} requests at once at most"
       })}
    else
      session = self()
      user = st.user
      cfg = st.cfg

      {:ok, pid} =
        Task.start(fn ->
          {status, body} = Overworld.Session.Backend.Calls.run(method, args, user, cfg, session)
          send(session, {:overworld_response, id, status, body})
        end)

      {:ok, %{st | tasks: Map.put(st.tasks, Process.monitor(pid), id)}}
    end
  end

  @doc "A REQUEST beyond the session's rate (`:input_rate`): answered 429, not run."
  @spec too_fast(Session.t(), map) :: Session.t()
  def too_fast(st, %{id: id}) do
    respond(st, id, 429, %{
      error: "too_many_requests",
      message: "more than #{st.cfg.input_rate} messages a second"
    })
  end

  @doc "A task's answer: the RESPONSE."
  @spec response(Session.t(), non_neg_integer, pos_integer, map) :: Session.t()
  def response(st, id, status, body), do: respond(st, id, status, body)

  @doc "A request task ended (its answer came before, if it did not crash)."
  @spec task_down(Session.t(), reference, term) :: Session.t()
  def task_down(st, ref, reason) do
    {id, tasks} = Map.pop(st.tasks, ref)
    st = %{st | tasks: tasks}

    if reason == :normal,
      do: st,
      else: respond(st, id, 500, %{error: "internal", message: "the request failed"})
  end

  defp handler(_cfg, nil), do: {:ok, Overworld.Match.Relay}

  defp handler(cfg, name) when is_binary(name) do
    case Match.handler(cfg, name) do
      {:ok, handler} -> {:ok, handler}
      :error -> {:error, 404, "unknown_handler", "no match handler #{printable(name)}"}
    end
  end

  defp handler(_cfg, _name), do: {:error, "name: expected a string"}

  defp message(why) when is_binary(why), do: why
  defp message(why), do: inspect(why, limit: 5)

  defp string(args, key) do
    case args do
      %{^key => v} when is_binary(v) and v != "" -> {:ok, v}
      _ -> {:error, "#{key}: expected a string"}
    end
  end

  defp object(args, key) do
    case Map.get(args, key, %{}) do
      m when is_map(m) -> {:ok, m}
      _ -> {:error, "#{key}: expected a JSON object"}
    end
  end

  ## Matches

  @doc "A MATCH_SEND from the client: to the match, if the player is in it."
  @spec match_send(Session.t(), map) :: {:ok, Session.t()}
  def match_send(st, %{match_id: match_id, op: op, payload: payload}) do
    max = st.cfg.matches.max_data_bytes

    cond do
      not Map.has_key?(st.matches, match_id) ->
        {:ok, refused(st, "not_in_match", "not in match #{printable(match_id)}")}

      byte_size(payload) > max ->
        {:ok, refused(st, "match_data_too_large", "#{byte_size(payload)} bytes, at most #{max}")}

      true ->
        {pid, _ref} = st.matches[match_id]
        send(pid, {:overworld_match_data, st.user, op, payload})
        {:ok, st}
    end
  end

  @doc "A MATCH_SEND beyond the session's rate (`:input_rate`): dropped, and the client told."
  @spec rate_limited(Session.t(), map) :: Session.t()
  def rate_limited(st, %{match_id: match_id}) do
    refused(
      st,
      "rate_limited",
      "more than #{st.cfg.input_rate} messages a second: one for match #{printable(match_id)} dropped"
    )
  end

  # A refused MATCH_SEND: a NOTIFY error to the client, logged once per session.
  defp refused(st, code, message) do
    unless st.warned, do: Logger.info("session #{st.user}: #{code}: #{message}")
    notify(%{st | warned: true}, "error", %{error: code, message: message})
  end

  defp watch(st, match_id) do
    case st.matches do
      %{^match_id => _} ->
        st

      _ ->
        case Match.whereis(match_id) do
          # (It ended right after the join: its end is on the way to the client.)
          nil -> st
          pid -> %{st | matches: Map.put(st.matches, match_id, {pid, Process.monitor(pid)})}
        end
    end
  end

  defp unwatch(st, match_id) do
    case Map.pop(st.matches, match_id) do
      {{_pid, ref}, rest} ->
        Process.demonitor(ref, [:flush])
        %{st | matches: rest}

      {nil, _} ->
        st
    end
  end

  @doc """
  A match this session watches went down: its end or failure was notified before, but when
  it was killed (a Lua call past its time, its heap past its bound), said here.
  """
  @spec match_down(Session.t(), reference, term) :: {:handled, Session.t()} | :not_mine
  def match_down(st, ref, reason) do
    case Enum.find(st.matches, fn {_, {_, r}} -> r == ref end) do
      {match_id, _} ->
        st = %{st | matches: Map.delete(st.matches, match_id)}

        st =
          if reason == :killed,
            do: notify(st, "match_error", %{match_id: match_id, message: "the match failed"}),
            else: st

        {:handled, st}

      nil ->
        :not_mine
    end
  end

  @doc """
  The session's connection ended: the matches keep the player for their grace (`:lost`) or
  see it leave (`:left`, a close 1000).
  """
  @spec gone(Session.t(), atom) :: :ok
  def gone(st, how) do
    # (Tickets go with the connection, even while a zone keeps the player for its grace.)
    if st.tickets != [] do
      {tickets, user, cfg} = {st.tickets, st.user, st.cfg}
      spawn(fn -> for t <- tickets, do: Overworld.Matchmaker.remove(t, user, cfg) end)
    end

    for {match_id, {pid, _}} <- st.matches do
      if how == :left,
        do: spawn(fn -> Match.leave(match_id, st.user) end),
        else: send(pid, {:overworld_match_lost, st.user, self()})
    end

    :ok
  end

  ## To the client, in order

  @doc "A frame for the client (already a WebSocket frame), after those waiting."
  @spec push(Session.t(), binary) :: Session.t()
  def push(st, frame) do
    st = %{st | backend: Outbox.enqueue(st.backend, frame)}
    flush(st)
  end

  @doc "Sends what waits while the socket takes it; a timer tries again later."
  @spec flush(Session.t()) :: Session.t()
  def flush(%{phase: :live} = st) do
    backend = Outbox.flush(st.backend, fn _seq, frame -> Session.send_raw(st, frame) end)

    if Outbox.size(backend) > 0 and not st.backend_timer do
      Process.send_after(self(), :overworld_backend_flush, 20)
      %{st | backend: backend, backend_timer: true}
    else
      %{st | backend: backend}
    end
  end

  def flush(st), do: st

  @doc """
  Whether more waits than the client may leave unread: more than `Outbox.max/0` frames, or
  four times the server's `:max_outbound` bytes (a match's frame may be large).
  """
  @spec too_much?(Session.t()) :: boolean
  def too_much?(st),
    do:
      Outbox.size(st.backend) > Outbox.max() or
        Outbox.bytes(st.backend) > 4 * st.cfg.max_outbound

  @doc "A notification (NOTIFY) for the client (a matched ticket is no longer the player's)."
  @spec notify(Session.t(), binary, map) :: Session.t()
  def notify(st, kind, %{ticket: t} = body)
      when kind in ["matchmaker_matched", "matchmaker_failed"],
      do: notify_client(%{st | tickets: List.delete(st.tickets, t)}, kind, body)

  def notify(st, kind, body), do: notify_client(st, kind, body)

  defp notify_client(st, kind, body),
    do: push(st, frame(%{type: :notify, kind: kind, body: :jiffy.encode(body)}))

  defp respond(st, id, status, {:json, json}),
    do: push_response(st, id, status, IO.iodata_to_binary(json))

  defp respond(st, id, status, body) do
    {status, json} =
      try do
        {status, IO.iodata_to_binary(:jiffy.encode(body))}
      catch
        _, _ ->
          Logger.error(
            "session #{st.user}: an answer that is not JSON: #{inspect(body, limit: 5)}"
          )

          {500, ~s({"error":"internal","message":"the answer could not be encoded"})}
      end

    push_response(st, id, status, json)
  end

  defp push_response(st, id, status, json) do
    if status >= 400,
      do:
        Logger.info(
          "session #{st.user}: request #{id} answered #{status} #{String.slice(json, 0, 120)}"
        )

    push(st, frame(%{type: :response, id: id, status: status, body: json}))
  end

  defp frame(msg), do: IO.iodata_to_binary(WebSocket.binary(Protocol.encode(msg)))

  defp printable(s), do: Overworld.Web.printable(s)
end

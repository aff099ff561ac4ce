defmodule Overworld.Zone.Joins do
  @moduledoc false
  # Players joining and leaving, as functions over the zone server's state
  # (`Overworld.Zone.State`). Every change is written to the in-memory copy in an order that a
  # server killed at any instant can repair (`Overworld.Zone.Recovery`): the avatar (a pending
  # spawn) before the player's row on a join, the avatar's despawn before the row goes on a
  # leave. Joins and leaves are journaled; the avatar's input route is set at the join, so a
  # player's inputs reach its avatar's worker from its first tick on (`Overworld.Zone.Inputs`).

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone.{Actions, Callbacks, Durable, Inputs, Memory, Players, State}

  @doc """
  `c:Overworld.Zone.handle_join/3` and the avatar it specifies: `{reply, st}`. A player already
  joined (a session coming back after a reconnect, a takeover or a recovery) takes the player
  over: `{:error, :already_joined}`.
  """
  @spec join(State.t(), term, term) :: {{:ok, pos_integer} | {:error, term}, State.t()}
  def join(st, player, meta) do
    if Players.joined?(st.players, player) do
      {{:error, :already_joined}, st |> set_session(player, meta) |> unorphan(player)}
    else
      case Callbacks.call(st, :handle_join, [player, meta, st.game]) do
        {:ok, {:ok, spec, game}} ->
          add(%{st | game: game}, player, meta, spec, [])

        {:ok, {:ok, spec, game, actions}} when is_list(actions) ->
          add(%{st | game: game}, player, meta, spec, actions)

        {:ok, {:reject, reason, game}} ->
          {{:error, {:rejected, reason}}, %{st | game: game}}

        {:ok, other} ->
          {{:error, :callback_failed}, Actions.bad_return(st, :handle_join, other)}

        {:error, _, _, _} ->
          {{:error, :callback_failed}, st}
      end
    end
  end

  defp add(st, player, meta, spec, actions) do
    case Actions.build_all(st, [spec], player) do
      {:ok, [e], st} ->
        # The avatar (pending spawn) before the player's row: a server killed in between
        # leaves an avatar without a player, which the next one despawns.
        st = st |> State.remember() |> set_session(player, meta)
        Inputs.route(st.config.shared.inputs, entity(e, :id), State.worker_of(st, e))
        Durable.journal(st, {:join, State.next_tick(st), player, e})

        st =
          if actions == [],
            do: st,
            else: State.remember(Actions.perform(st, actions, :handle_join))

        {{:ok, entity(e, :id)}, st}

      {:error, reason} ->
        {{:error, reason}, st}
    end
  end

  @doc "`c:Overworld.Zone.handle_leave/3` after the player's avatar goes."
  @spec leave(State.t(), term, term) :: {:ok | {:error, :not_joined}, State.t()}
  def leave(st, player, reason) do
    case Players.entity(st.players, player) do
      nil ->
        {{:error, :not_joined}, st}

      id ->
        st = drop(st, player, id)
        st = Actions.run(st, :handle_leave, [player, reason, st.game])
        {:ok, State.remember(st)}
    end
  end

  @doc """
  A session taking over a joined player: the player's reliable messages go to `pid` from now
  on (`Overworld.Zone.claim_session/3`).
  """
  @spec claim(State.t(), term, pid) :: {:ok | {:error, :not_joined}, State.t()}
  def claim(st, player, pid) do
    if Players.joined?(st.players, player),
      do: {:ok, st |> set_session(player, %{session: pid}) |> unorphan(player)},
      else: {{:error, :not_joined}, st}
  end

  @doc """
  A player goes: the avatar's despawn (pending) before the player's row goes (a server killed in
  between finds a row whose avatar is going, and drops it). No game callback.
  """
  @spec drop(State.t(), term, pos_integer) :: State.t()
  def drop(st, player, id) do
    %{wire: wire, inputs: inputs} = st.config.shared
    if wire, do: Overworld.Zone.Wire.forget_player(wire, id)
    Inputs.forget(inputs, id)
    st = State.remember(%{st | despawns: [id | st.despawns]})
    Memory.delete_player(st.memory, player)
    Durable.journal(st, {:leave, State.next_tick(st), player, id})

    %{st | players: Players.remove(st.players, player), sessions: Map.delete(st.sessions, player)}
    |> unorphan(player)
  end

  @doc "Avatars that game code despawned (a worker's report): their players leave."
  @spec gone(State.t(), non_neg_integer, [pos_integer]) :: State.t()
  def gone(st, _n, []), do: st

  def gone(st, n, ids) do
    by_id = for id <- ids, into: %{}, do: {Players.player(st.players, id), id}
    {players, all} = Players.report(st.players, ids)

    Enum.reduce(players, %{st | players: all}, fn player, st ->
      id = by_id[player]
      Memory.delete_player(st.memory, player)
      Inputs.forget(st.config.shared.inputs, id)
      Durable.journal(st, {:leave, n, player, id})
      %{st | sessions: Map.delete(st.sessions, player)}
    end)
  end

  @doc "Players whose session did not come back by their deadline leave."
  @spec orphans_expired(State.t()) :: State.t()
  def orphans_expired(st) do
    now = System.monotonic_time(:millisecond)
    {expired, kept} = Enum.split_with(st.orphans, fn {_p, deadline} -> deadline <= now end)

    st =
      Enum.reduce(expired, %{st | orphans: Map.new(kept)}, fn {player, _}, st ->
        case Players.entity(st.players, player) do
          nil -> st
          id -> drop(st, player, id)
        end
      end)

    Memory.put_orphans(st.memory, st.orphans)
    arm_orphans(st)
  end

  @doc """
  Players whose session has not come back leave at their deadline (kept in the memory table:
  a server restarted meanwhile keeps it): a timer for the first, in place of the one armed
  before. (A timer cancelled as it fired leaves its message: `orphans_expired/1` drops no one
  before their deadline.)
  """
  @spec arm_orphans(State.t()) :: State.t()
  def arm_orphans(st) do
    if st.orphans_timer, do: Process.cancel_timer(st.orphans_timer)

    timer =
      if map_size(st.orphans) > 0 do
        left = Enum.min(Map.values(st.orphans)) - System.monotonic_time(:millisecond)
        Process.send_after(self(), :orphans, max(left, 0))
      end

    %{st | orphans_timer: timer}
  end

  @doc """
  The sessions on node `node` are gone with it (a gateway node died: its players' clients
  reconnect through another node): their players stay for `rejoin_ms` (the zone option),
  then leave unless a session joined as them again.
  """
  @spec sessions_lost(State.t(), node) :: State.t()
  def sessions_lost(st, node) do
    case for {p, pid} <- st.sessions, node(pid) == node, do: p do
      [] ->
        st

      lost ->
        deadline = System.monotonic_time(:millisecond) + st.config.rejoin_ms

        for p <- lost,
            do: Memory.put_player(st.memory, p, Players.entity(st.players, p), nil)

        orphans = Enum.reduce(lost, st.orphans, &Map.put(&2, &1, deadline))
        Memory.put_orphans(st.memory, orphans)

        Logger.info(
          "zone #{inspect(st.config.id)}: #{length(lost)} players' sessions went with node " <>
            "#{node}; they leave in #{st.config.rejoin_ms} ms unless they come back"
        )

        arm_orphans(%{st | orphans: orphans, sessions: Map.drop(st.sessions, lost)})
    end
  end

  # The session of a player (from the join's meta `%{session: pid}`), remembered with it.
  defp set_session(st, player, meta) do
    session =
      case meta do
        %{session: pid} when is_pid(pid) -> pid
        _ -> Map.get(st.sessions, player)
      end

    Memory.put_player(st.memory, player, Players.entity(st.players, player), session)
    if session, do: %{st | sessions: Map.put(st.sessions, player, session)}, else: st
  end

  defp unorphan(%State{orphans: orphans} = st, player) when is_map_key(orphans, player) do
    orphans = Map.delete(orphans, player)
    Memory.put_orphans(st.memory, orphans)
    %{st | orphans: orphans}
  end

  defp unorphan(st, _player), do: st
end

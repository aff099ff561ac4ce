defmodule Overworld.Zone.Crossings do
  @moduledoc false
  # A zone of a world and what crosses its borders, seen from its server
  # (`Overworld.Zone.Neighbours` carries the messages): players adopted with their avatars
  # and handed away with them; what comes for an entity in flight, or for a player after it
  # left, sent on after it (a despawn or its leave, `{:overworld_gone, ...}`; a client's
  # reliable messages and its session's flush, `{:overworld_event_on, ...}`); what the zone
  # sends a player that left, still to its session.

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Zone.{Config, Joins, Memory, Neighbours, Players, State}

  # Ticks a player handed away is remembered (its session, where it went).
  @remember 300
  # A player's reliable messages sent on from zone to zone at most this many times (an avatar
  # handed on again before they caught up with it); kept for an avatar on its way to us, at
  # most `@early` per player, for `@early_players` players.
  @hops 4
  @early 256
  @early_players 1_024

  # Entities adopted: ours now (no longer away); those despawned, or whose player left, after
  # their old zone handed them to us go now (despawned this tick: never computed here).
  @doc false
  @spec arrived(State.t(), MapSet.t()) :: State.t()
  def arrived(st, ids) do
    if MapSet.size(ids) == 0 do
      st
    else
      w = st.world
      w = %{w | away: Map.drop(w.away, MapSet.to_list(ids))}
      {now, doomed} = Map.split(w.doomed, MapSet.to_list(ids))
      Enum.reduce(now, %{st | world: %{w | doomed: doomed}}, &doom/2)
    end
  end

  defp doom({id, {player, reason, _at}}, st) do
    if player != nil and Players.entity(st.players, player) == id,
      do: elem(Joins.leave(st, player, reason), 1),
      else: State.remember(%{st | despawns: [id | st.despawns]})
  end

  @doc """
  Before tick n's message to the workers: the despawns asked for entities we handed to a
  neighbour (the workers no longer have them) go to it (`{:overworld_gone, ...}`).
  """
  @spec forward(State.t()) :: State.t()
  def forward(%State{world: nil} = st), do: st
  def forward(%State{world: %{away: away}} = st) when map_size(away) == 0, do: st
  def forward(%State{despawns: []} = st), do: st

  def forward(%State{world: w} = st) do
    case Enum.split_with(st.despawns, &is_map_key(w.away, &1)) do
      {[], _} ->
        st

      {gone, kept} ->
        send_gone(st, for(id <- gone, do: {id, nil, nil}))
        %{st | despawns: kept}
    end
  end

  @doc """
  A player that is not ours leaves: if we handed its avatar to a neighbour lately (it may be
  in flight: the leave came before the session heard where it went), the leave goes on to
  that neighbour. `{:ok | {:error, :not_joined}, st}`.
  """
  @spec leave(State.t(), term, term) :: {:ok | {:error, :not_joined}, State.t()}
  def leave(%State{world: nil} = st, _player, _reason), do: {{:error, :not_joined}, st}

  def leave(%State{world: w} = st, player, reason) do
    case Enum.find(w.away, fn {_id, {_to, _at, p}} -> p == player end) do
      nil ->
        {{:error, :not_joined}, st}

      {id, {to, at, _}} ->
        send_gone(st, [{id, player, reason}])
        # (Once: the player is leaving.)
        {:ok, %{st | world: %{w | away: Map.put(w.away, id, {to, at, nil})}}}
    end
  end

  @doc """
  A neighbour's `{:overworld_gone, from, entries}`: what it despawned, or whose player left,
  after it handed them to us. Ours: despawned (the player's leave runs here); handed on
  again: sent on; not here yet: despawned when adopted.
  """
  @spec gone(State.t(), [{pos_integer, term, term}]) :: State.t()
  def gone(%State{world: nil} = st, _entries), do: st

  def gone(%State{world: w} = st, entries) do
    {on, here} = Enum.split_with(entries, fn {id, _, _} -> is_map_key(w.away, id) end)
    if on != [], do: send_gone(st, on)

    Enum.reduce(here, st, fn {id, player, reason} = entry, st ->
      if player != nil and Players.entity(st.players, player) == id do
        elem(Joins.leave(st, player, reason), 1)
      else
        # (Despawned now if a worker has it; remembered for its adoption otherwise.)
        w = st.world
        doomed = Map.put(w.doomed, id, {elem(entry, 1), reason, st.tick})
        State.remember(%{st | despawns: [id | st.despawns], world: %{w | doomed: doomed}})
      end
    end)
  end

  defp send_gone(%State{world: w, config: c}, entries) do
    entries
    |> Enum.group_by(fn {id, _, _} -> elem(Map.fetch!(w.away, id), 0) end)
    |> Enum.each(fn {to, l} -> Neighbours.send_to(w, to, {:overworld_gone, c.world.id, l}) end)
  end

  # A player's avatar on its way to us (its transfer came; we adopt it at our next tick): its
  # inputs are routed to the worker that will hold it, and its session told to write them
  # into our slot from now (`{:overworld_arriving, zone, entity, slot}`), so the input its
  # client sent while the avatar was in flight applies on the tick that adopts it (the
  # worker's take comes after the adoption), not a tick later. The session follows in full
  # (subscription, home zone, reliable messages) when we adopt it (`players_in/2`).
  @doc false
  @spec arriving(State.t(), [{Overworld.Entity.t(), pid}]) :: :ok
  def arriving(st, avatars) do
    for {e, pid} <- avatars do
      id = route_in(st, e)
      send(pid, {:overworld_arriving, st.config.id, id, {st.config.shared.inputs, id}})
    end

    :ok
  end

  # The inputs of avatar `e`, coming to us, go to the worker that will hold it.
  defp route_in(st, e) do
    id = entity(e, :id)
    worker = Config.owner_of(st.config, entity(e, :x), entity(e, :y))
    Overworld.Zone.Inputs.route(st.config.shared.inputs, id, worker)
    id
  end

  # Players whose avatar we adopted are ours: their rows, and their sessions, told to follow
  # (`{:overworld_moved, zone}`: they subscribe to us, and write their inputs to our slots).
  @doc false
  @spec players_in(State.t(), [{Overworld.Entity.t(), pid | nil}]) :: State.t()
  def players_in(st, []), do: st

  def players_in(st, arrived) do
    Enum.reduce(arrived, st, fn {e, pid}, st ->
      player = entity(e, :owner)
      # Routed before the session hears of it: its inputs find the worker at once.
      id = route_in(st, e)
      Memory.put_player(st.memory, player, id, pid)
      # (Back with us: not away any more.)
      Memory.delete_moved(st.memory, player)
      st = %{st | world: %{st.world | moved: Map.delete(st.world.moved, player)}}
      # What its old zone sent on for it meanwhile is handled first: now, or before anything
      # for the player that comes later (the server's `player_item/5`).
      if is_map_key(st.world.early, player), do: send(self(), {:overworld_early, player})
      if is_pid(pid), do: send(pid, {:overworld_moved, st.config.id, id})
      sessions = if is_pid(pid), do: Map.put(st.sessions, player, pid), else: st.sessions
      %{st | players: Players.add(st.players, player, id), sessions: sessions}
    end)
  end

  # Players whose avatar we handed over are not ours any more (their session follows it); we
  # remember their session a while (`@remember` ticks) for what we still send them.
  @doc false
  @spec players_out(State.t(), [{term, Overworld.Entity.t()}]) :: State.t()
  def players_out(st, []), do: st

  def players_out(st, avatars) do
    st =
      Enum.reduce(avatars, st, fn {to, e}, st ->
        player = entity(e, :owner)
        Memory.delete_player(st.memory, player)
        w = st.world
        where = {Map.get(st.sessions, player), st.tick, to}
        Memory.put_moved(st.memory, player, System.monotonic_time(:millisecond), where)
        moved = Map.put(w.moved, player, where)

        %{
          st
          | players: Players.remove(st.players, player),
            sessions: Map.delete(st.sessions, player),
            world: %{w | moved: moved}
        }
      end)

    {old, moved} =
      Enum.split_with(st.world.moved, fn {_, {_, t, _}} -> t < st.tick - @remember end)

    for {player, _} <- old, do: Memory.delete_moved(st.memory, player)
    %{st | world: %{st.world | moved: Map.new(moved)}}
  end

  @doc """
  Something for a player that is not ours (`{:event, payload}`, a reliable message of its
  client, or `{:flush, pid, ref}`, its session asking to be told once what it sent before
  has been handled), `hops` zones after the one its session sent it to, the last of them
  `from` (nil: from the session): sent on to the zone we handed its avatar to lately, unless
  that zone sent it (it handed the avatar back to us: it is on its way here); kept, if a zone
  sent it on to us (the avatar is on its way: `early/2` gives it back once we adopted it);
  else dropped (a flush answered at once).
  """
  @spec event(State.t(), term, {:event, binary} | {:flush, pid, reference}, non_neg_integer, term) ::
          State.t()
  def event(%State{world: nil} = st, _player, item, _hops, _from), do: answered(st, item)

  def event(%State{world: w} = st, player, item, hops, from) do
    case Map.get(w.moved, player) do
      {_, _, to} when to != from and hops < @hops ->
        msg = {:overworld_event_on, st.config.world.id, player, item, hops + 1}
        if Neighbours.send_to(w, to, msg), do: st, else: answered(st, item)

      {_, _, to} when to != from ->
        Logger.warning(
          "zone #{inspect(st.config.id)}: a message for player #{inspect(player)} went " <>
            "#{hops} zones after its avatar without reaching it: dropped"
        )

        answered(st, item)

      _ when hops > 0 ->
        keep(st, player, item)

      _ ->
        answered(st, item)
    end
  end

  defp keep(%State{world: %{early: early} = w} = st, player, item) do
    {at, items} = Map.get(early, player, {st.tick, []})

    if length(items) >= @early or (items == [] and map_size(early) >= @early_players) do
      Logger.warning(
        "zone #{inspect(st.config.id)}: too much waits for player #{inspect(player)} " <>
          "(its avatar on its way here): dropped"
      )

      answered(st, item)
    else
      %{st | world: %{w | early: Map.put(early, player, {at, [item | items]})}}
    end
  end

  defp answered(st, item) do
    answer(item)
    st
  end

  # A session waiting on its flush goes on: nothing more of its comes this way.
  defp answer({:flush, pid, ref}), do: send(pid, {:overworld_flushed, ref})
  defp answer({:event, _payload}), do: :ok

  @doc """
  What was kept for `player` (`event/4`) now that its avatar is ours, oldest first.
  """
  @spec early(State.t(), term) :: {[tuple], State.t()}
  def early(%State{world: %{early: early} = w} = st, player) when is_map_key(early, player) do
    {{_at, items}, early} = Map.pop(early, player)
    {Enum.reverse(items), %{st | world: %{w | early: early}}}
  end

  def early(st, _player), do: {[], st}

  @doc """
  A reliable message for a player whose avatar left us for a neighbour zone (a durable event
  acknowledged after the crossing): to its session, if we remember it.
  """
  @spec send_moved(State.t(), term, binary) :: :ok
  def send_moved(%State{world: %{moved: moved}}, player, payload) do
    case moved do
      %{^player => {pid, _, _}} when is_pid(pid) -> send(pid, {:overworld_send, payload})
      _ -> :ok
    end

    :ok
  end

  def send_moved(_st, _player, _payload), do: :ok

  # What waited in vain for an avatar (it never came): dropped, said.
  @doc false
  @spec prune_early(map, non_neg_integer, term) :: map
  def prune_early(early, n, zone) when rem(n, 32) == 0 and map_size(early) > 0 do
    {old, kept} = Enum.split_with(early, fn {_, {at, _}} -> at < n - @remember end)

    for {player, {_, items}} <- old do
      Logger.warning(
        "zone #{inspect(zone)}: #{length(items)} message(s) for player #{inspect(player)} " <>
          "waited #{@remember} ticks for its avatar, which never came: dropped"
      )

      Enum.each(items, &answer/1)
    end

    Map.new(kept)
  end

  def prune_early(early, _n, _zone), do: early
end

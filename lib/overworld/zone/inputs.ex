defmodule Overworld.Zone.Inputs do
  @moduledoc false
  # Players' inputs on their way to the bucket workers, without a message to the zone server.
  #
  # Every player has a slot: the newest input it sent (latest wins, so the slots are bounded by
  # the players). A session (or `Overworld.Zone.input/4`) writes the slot straight into an ETS
  # table of the worker that holds the player's avatar; at the start of each tick every worker
  # takes the new slots of its table once, and puts each input into its avatar
  # (`entity(e, :input)`) before `handle_entity/3` runs. The zone server never sees an input:
  # at 19,000 players sending 10 inputs a second, one process could not even receive them
  # within the tick, let alone run game code for each.
  #
  # Two kinds of rows, in tables made by the zone's supervisor (they outlive server and
  # worker restarts):
  #
  #   * the route of each avatar, `{entity id, worker}` (one table): written by the server
  #     when a player joins (the worker its avatar will spawn in), by the workers when an
  #     avatar spawns on a load step or leaves for another worker's stripe (only while the
  #     route exists: a player that left is not routed again), deleted when the player leaves
  #     or its avatar is gone;
  #   * the slots, `{entity id, input, seq, stamp, taken}` (one table per worker): `seq` is the
  #     client's input sequence number (acknowledged in the player's snapshots once applied,
  #     nil for none), `stamp` a strictly increasing integer (which of two slots is newer),
  #     `taken` 0 for a new slot, else the unique number of the take that consumed it.
  #
  # Taking is race-free without locks, and an input is never applied twice nor after a newer
  # one:
  #
  #   * a worker marks every new slot of its table as taken by this take (one atomic
  #     conditional replace per object, all in one call: no Erlang work per slot), then
  #     selects the slots so marked: exactly those it applies. A slot written again between the
  #     two is a new slot again (it replaced the marked one: latest wins) and is applied next
  #     tick;
  #   * a consumed slot stays in the table (deleted only with its avatar), so it keeps the
  #     stamp of the newest input applied;
  #   * a slot of an avatar the worker does not hold (it crossed into another stripe after the
  #     session looked its route up) moves to the table its route names, but only over an older
  #     slot there, consumed or not, or into an empty place (atomic conditional writes): an
  #     input older than one already applied is dropped. One whose avatar has not arrived yet
  #     (spawning) waits; one without a route (the player left) goes.

  @enforce_keys [:routes, :slots]
  defstruct @enforce_keys

  @type t :: %__MODULE__{routes: :ets.tid(), slots: tuple}

  @doc "The tables of a zone with `workers` bucket workers."
  @spec new(pos_integer) :: t
  def new(workers) do
    %__MODULE__{
      routes: :ets.new(:overworld_routes, [:set, :public, read_concurrency: true]),
      slots:
        List.to_tuple(
          for _ <- 1..workers,
              do: :ets.new(:overworld_inputs, [:set, :public, write_concurrency: true])
        )
    }
  end

  @doc "The worker that holds (or will hold) avatar `id` is `worker`."
  @spec route(t, pos_integer, non_neg_integer) :: true
  def route(%__MODULE__{routes: r}, id, worker), do: :ets.insert(r, {id, worker})

  @doc "Routes of several avatars, `[{id, worker}]`."
  @spec routes(t, [{pos_integer, non_neg_integer}]) :: true
  def routes(%__MODULE__{routes: r}, pairs), do: :ets.insert(r, pairs)

  @doc """
  Avatars that moved to another worker, `[{id, worker}]`: routed there, only those still
  routed (a player that left meanwhile stays gone).
  """
  @spec reroute(t, [{pos_integer, non_neg_integer}]) :: :ok
  def reroute(%__MODULE__{routes: r}, pairs) do
    Enum.each(pairs, fn {id, w} -> :ets.update_element(r, id, {2, w}) end)
  end

  @doc "Forgets an avatar: its route and its slot."
  @spec forget(t, pos_integer) :: :ok
  def forget(%__MODULE__{routes: r, slots: slots}, id) do
    :ets.delete(r, id)
    for i <- 0..(tuple_size(slots) - 1)//1, do: :ets.delete(elem(slots, i), id)
    :ok
  end

  @doc """
  Forgets every route and slot (a zone that starts a new world, or goes back in ticks: its
  avatars are routed again as they load, and no input of before applies).
  """
  @spec reset(t) :: :ok
  def reset(%__MODULE__{routes: r, slots: slots}) do
    :ets.delete_all_objects(r)
    for i <- 0..(tuple_size(slots) - 1)//1, do: :ets.delete_all_objects(elem(slots, i))
    :ok
  end

  @doc """
  Writes the newest input of avatar `id` (latest wins). `{:error, :no_route}` when the zone
  does not know the avatar (its player left, or never joined), `{:error, :not_found}` when the
  zone is gone (its tables with it).
  """
  @spec put(t, pos_integer, term, non_neg_integer | nil) ::
          :ok | {:error, :no_route | :not_found}
  def put(%__MODULE__{routes: r, slots: slots}, id, input, seq) do
    case :ets.lookup(r, id) do
      [{_, w}] ->
        stamp = :erlang.unique_integer([:monotonic, :positive])
        :ets.insert(elem(slots, w), {id, input, seq, stamp, 0})
        :ok

      [] ->
        {:error, :no_route}
    end
  rescue
    ArgumentError -> {:error, :not_found}
  end

  @doc """
  Worker `w` takes the new inputs of the avatars it holds (`avatars`: id => true, or `:all`
  for every avatar routed to it: a mirror's one slot table, `Overworld.Zone.Mirror`): answers
  `{inputs, acks}`, `inputs` a map id => input, `acks` `[{id, seq}]` for those that carried a
  sequence number. Slots of other avatars move on, wait or go (see the moduledoc).
  """
  @spec take(t, non_neg_integer, %{optional(pos_integer) => true} | :all) ::
          {%{optional(pos_integer) => term}, [{pos_integer, non_neg_integer}]}
  def take(%__MODULE__{slots: slots} = t, w, avatars) do
    table = elem(slots, w)
    take = :erlang.unique_integer([:positive, :monotonic])
    mark = [{{:"$1", :"$2", :"$3", :"$4", 0}, [], [{{:"$1", :"$2", :"$3", :"$4", take}}]}]

    case :ets.select_replace(table, mark) do
      0 ->
        {%{}, []}

      _ ->
        take(
          :ets.select(table, [{{:_, :_, :_, :_, take}, [], [:"$_"]}]),
          t,
          table,
          w,
          avatars,
          [],
          []
        )
    end
  end

  defp take([], _t, _table, _w, _avatars, inputs, acks), do: {:maps.from_list(inputs), acks}

  defp take([{id, input, seq, _, _} | rest], t, table, w, avatars, inputs, acks)
       when avatars == :all or is_map_key(avatars, id) do
    acks = if seq, do: [{id, seq} | acks], else: acks
    take(rest, t, table, w, avatars, [{id, input} | inputs], acks)
  end

  defp take([{id, input, seq, stamp, taken} = row | rest], t, table, w, avatars, inputs, acks) do
    case :ets.lookup(t.routes, id) do
      [{_, ^w}] ->
        # Its avatar has not arrived yet: new again (unless written again meanwhile).
        new = [{{id, :_, :_, stamp, taken}, [], [{{id, {:const, input}, seq, stamp, 0}}]}]
        :ets.select_replace(table, new)

      [{_, other}] ->
        move(elem(t.slots, other), {id, input, seq, stamp, 0})
        :ets.delete_object(table, row)

      [] ->
        :ets.delete_object(table, row)
    end

    take(rest, t, table, w, avatars, inputs, acks)
  end

  # Into another worker's table: over an older slot of the avatar (consumed or not: one
  # atomic conditional replace), or into an empty place (atomic too). A slot older than the
  # one there, which a tick may have applied already, goes.
  defp move(table, {id, _, _, stamp, _} = row) do
    older = [{{id, :_, :_, :"$1", :_}, [{:<, :"$1", stamp}], [{:const, row}]}]
    if :ets.select_replace(table, older) == 0, do: :ets.insert_new(table, row)
  end
end

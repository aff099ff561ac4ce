defmodule Overworld.Zone.Inputs do
  @moduledoc false
  # Players' inputs on their way to the bucket workers, without a message to the zone server.
  #
  # Every player has a slot: the newest input it sent and not yet consumed (latest wins, so
  # the slots are bounded by the players). A session (or `Overworld.Zone.input/4`) writes the
  # slot straight into an ETS table of the worker that holds the player's avatar; at the start
  # of each tick every worker takes the slots of its table once, and puts each input into its
  # avatar (`entity(e, :input)`) before `handle_entity/3` runs. The zone server never sees an
  # input: at 19,000 players sending 10 inputs a second, one process could not even receive
  # them within the tick, let alone run game code for each.
  #
  # Two kinds of rows, in tables made by the zone's supervisor (they outlive server and
  # worker restarts):
  #
  #   * the route of each avatar, `{entity id, worker}` (one table): written by the server
  #     when a player joins (the worker its avatar will spawn in), by the workers when an
  #     avatar spawns or leaves for another worker's stripe, deleted when the player leaves;
  #   * the slots, `{entity id, input, seq, stamp}` (one table per worker): `seq` is the
  #     client's input sequence number (acknowledged in the player's snapshots once consumed,
  #     nil for none), `stamp` a strictly increasing integer (which of two slots is newer).
  #
  # Taking is race-free without locks: a worker reads its table, then deletes exactly the
  # objects it read (`:ets.delete_object/2`); a slot written again meanwhile is another object
  # (another stamp) and stays for the next tick. A slot of an avatar the worker does not hold
  # (it crossed into another stripe after the session looked its route up) moves to the table
  # its route names, unless a newer one is there already (compared by stamp, with atomic
  # conditional writes: never an older input over a newer one); one whose avatar has not
  # arrived yet (spawning) waits; one without a route (the player left) goes.

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

  @doc "Forgets an avatar: its route and any input waiting for it."
  @spec forget(t, pos_integer) :: :ok
  def forget(%__MODULE__{routes: r, slots: slots}, id) do
    :ets.delete(r, id)
    for i <- 0..(tuple_size(slots) - 1)//1, do: :ets.delete(elem(slots, i), id)
    :ok
  end

  @doc """
  Writes the newest input of avatar `id` (latest wins). `{:error, :no_route}` when the zone
  does not know the avatar (its player left, or never joined).
  """
  @spec put(t, pos_integer, term, non_neg_integer | nil) :: :ok | {:error, :no_route}
  def put(%__MODULE__{routes: r, slots: slots}, id, input, seq) do
    case :ets.lookup(r, id) do
      [{_, w}] ->
        :ets.insert(elem(slots, w), {id, input, seq, :erlang.unique_integer([:monotonic])})
        :ok

      [] ->
        {:error, :no_route}
    end
  end

  @doc """
  Worker `w` takes the inputs waiting for the avatars it holds (`avatars`: id => true): answers
  `{inputs, acks}`, `inputs` a map id => input, `acks` `[{id, seq}]` for those that carried a
  sequence number. Slots of other avatars move on or wait (see the moduledoc).
  """
  @spec take(t, non_neg_integer, %{optional(pos_integer) => true}) ::
          {%{optional(pos_integer) => term}, [{pos_integer, non_neg_integer}]}
  def take(%__MODULE__{slots: slots} = t, w, avatars) do
    table = elem(slots, w)

    # (Most ticks of most zones have no input: the size is cheaper than an empty walk.)
    if :ets.info(table, :size) == 0,
      do: {%{}, []},
      else: take(:ets.tab2list(table), t, table, w, avatars, [], [])
  end

  defp take([], _t, _table, _w, _avatars, inputs, acks), do: {:maps.from_list(inputs), acks}

  defp take([{id, input, seq, _} = row | rest], t, table, w, avatars, inputs, acks)
       when is_map_key(avatars, id) do
    :ets.delete_object(table, row)
    acks = if seq, do: [{id, seq} | acks], else: acks
    take(rest, t, table, w, avatars, [{id, input} | inputs], acks)
  end

  defp take([{id, _, _, _} = row | rest], t, table, w, avatars, inputs, acks) do
    case :ets.lookup(t.routes, id) do
      [{_, ^w}] ->
        :ok

      [{_, other}] ->
        move(elem(t.slots, other), row)
        :ets.delete_object(table, row)

      [] ->
        :ets.delete_object(table, row)
    end

    take(rest, t, table, w, avatars, inputs, acks)
  end

  # Into another worker's table, unless a newer slot of the avatar is there: replaced only if
  # older (one atomic conditional replace), else inserted only if absent (atomic too).
  defp move(table, {id, _, _, stamp} = row) do
    older = [{{id, :_, :_, :"$1"}, [{:<, :"$1", stamp}], [{:const, row}]}]
    if :ets.select_replace(table, older) == 0, do: :ets.insert_new(table, row)
  end
end

defmodule Overworld.Zone.Memory do
  @moduledoc false
  # The zone's in-memory copy: an ETS table owned by the zone's supervisor, so it outlives the
  # zone server. The server writes, before it sends a tick to the workers, the tick's record
  # (game state, next entity id and the tick's dispatch: spawns, despawns; the workers write
  # the inputs they applied); between
  # ticks, what changed since (pending spawns and despawns, game state); and
  # a row per player and per subscriber; a row per batch of durable events handed to the
  # journal and not yet synced. A restarted server reads it back (the entities never
  # left the bucket workers). The tick records form a ring of the last `history` ticks, which
  # with the workers' keyframes is the zone's time-travel history (`Overworld.Zone.History`).

  @type t :: :ets.tid()
  @type dispatch :: %{
          n: non_neg_integer,
          simulate: boolean,
          spawns: [Overworld.Entity.t()],
          despawns: [pos_integer]
        }

  @doc "Rows kept for tick records: the last `history` ticks and the current one."
  @spec slots(non_neg_integer) :: pos_integer
  def slots(history), do: history + 1

  @spec put_tick(t, non_neg_integer, map, list) :: true
  def put_tick(t, history, %{n: n} = record, rows \\ []) do
    slot = rem(n, slots(history))
    :ets.insert(t, [{{:tick, slot}, n, record}, {:last, n, slot} | rows])
  end

  @doc "The row of `put_world/2`, to write with a tick record in one insert."
  @spec world_row(map) :: tuple
  def world_row(world), do: {:world, world}

  @doc "The record of the last tick sent to the workers, or nil."
  @spec last(t) :: map | nil
  def last(t) do
    with [{:last, n, slot}] <- :ets.lookup(t, :last),
         [{_, ^n, record}] <- :ets.lookup(t, {:tick, slot}) do
      record
    else
      _ -> nil
    end
  end

  @doc "The record of tick `n`, if still in the ring."
  @spec tick(t, non_neg_integer, non_neg_integer) :: map | nil
  def tick(t, history, n) do
    case :ets.lookup(t, {:tick, rem(n, slots(history))}) do
      [{_, ^n, record}] -> record
      _ -> nil
    end
  end

  @doc "Changes since the last tick record, for the tick `for_tick` (stale once it is sent)."
  @spec put_pending(t, non_neg_integer, map) :: true
  def put_pending(t, for_tick, pending), do: :ets.insert(t, {:pending, for_tick, pending})

  @spec pending(t, non_neg_integer) :: map | nil
  def pending(t, for_tick) do
    case :ets.lookup(t, :pending) do
      [{:pending, ^for_tick, p}] -> p
      _ -> nil
    end
  end

  @doc """
  A zone of a world: the transfers it handed to neighbours and has not seen acknowledged, and
  those it adopted (a transfer sent again is not adopted twice).
  """
  @spec put_world(t, map) :: true
  def put_world(t, world), do: :ets.insert(t, world_row(world))

  @spec world(t) :: map | nil
  def world(t) do
    case :ets.lookup(t, :world) do
      [{:world, w}] -> w
      [] -> nil
    end
  end

  @spec put_player(t, term, pos_integer, pid | nil) :: true
  def put_player(t, player, id, session), do: :ets.insert(t, {{:player, player}, id, session})

  @doc "The entity id of a player's avatar, or nil."
  @spec player_entity(t, term) :: pos_integer | nil
  def player_entity(t, player) do
    case :ets.lookup(t, {:player, player}) do
      [{_, id, _session}] -> id
      [] -> nil
    end
  end

  @spec delete_player(t, term) :: true
  def delete_player(t, player), do: :ets.delete(t, {:player, player})

  @doc """
  A zone of a world handed a player's avatar to a neighbour (at monotonic millisecond `at`):
  until the neighbour has it, a reconnecting client waits for it (`Overworld.World.zone_for/2`).
  `where` is `{session pid | nil, tick, neighbour}`: a restarted server still sends on what
  comes for the player (`Overworld.Zone.Neighbours`).
  """
  @spec put_moved(t, term, integer, tuple) :: true
  def put_moved(t, player, at, where), do: :ets.insert(t, {{:moved, player}, at, where})

  @doc "When the zone handed the player's avatar away (monotonic ms), or nil."
  @spec moved(t, term) :: integer | nil
  def moved(t, player) do
    case :ets.lookup(t, {:moved, player}) do
      [{_, at, _}] -> at
      [] -> nil
    end
  end

  @doc "Every player whose avatar the zone handed away: `{player, where}` (see `put_moved/4`)."
  @spec moved_all(t) :: [{term, tuple}]
  def moved_all(t), do: :ets.select(t, [{{{:moved, :"$1"}, :_, :"$2"}, [], [{{:"$1", :"$2"}}]}])

  @spec delete_moved(t, term) :: true
  def delete_moved(t, player), do: :ets.delete(t, {:moved, player})

  @doc "Players as `{player, entity id, session pid | nil}`."
  @spec players(t) :: [{term, pos_integer, pid | nil}]
  def players(t),
    do: :ets.select(t, [{{{:player, :"$1"}, :"$2", :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])

  @spec put_subscriber(t, pid, non_neg_integer) :: true
  def put_subscriber(t, pid, shard), do: :ets.insert(t, {{:sub, pid}, shard})

  @spec delete_subscriber(t, pid) :: true
  def delete_subscriber(t, pid), do: :ets.delete(t, {:sub, pid})

  @spec subscribers(t) :: [{pid, non_neg_integer}]
  def subscribers(t), do: :ets.select(t, [{{{:sub, :"$1"}, :"$2"}, [], [{{:"$1", :"$2"}}]}])

  @doc "The zone's journal writer (nil without a store)."
  @spec journal(t) :: pid | nil
  def journal(t), do: value(t, :journal, nil)

  @spec put_journal(t, pid) :: true
  def put_journal(t, pid), do: :ets.insert(t, {:journal, pid})

  @doc """
  The journal segment the zone writes to: the one its store opened, or the one its server
  rolled to since (0 without a store).
  """
  @spec segment(t) :: non_neg_integer
  def segment(t), do: value(t, :segment, 0)

  @spec put_segment(t, non_neg_integer) :: true
  def put_segment(t, n), do: :ets.insert(t, {:segment, n})

  @doc """
  Forgets the tick records, keyframes, hashes and changes pending (a zone that starts a new
  timeline: recovered from a snapshot, rewound, or started over).
  """
  @spec forget_history(t) :: true
  def forget_history(t) do
    :ets.match_delete(t, {{:tick, :_}, :_, :_})
    :ets.match_delete(t, {{:kf, :_, :_}, :_, :_})
    :ets.match_delete(t, {{:hash, :_, :_}, :_, :_})
    :ets.match_delete(t, {{:inputs, :_, :_}, :_, :_})
    :ets.delete(t, :last)
    :ets.delete(t, :pending)
    :ets.delete(t, :finished)
  end

  @doc """
  Forgets the players too (a zone that starts over from `init/1` or from its store), and the
  durable events waiting for their fsync (a store recovery replays what reached the disk).
  """
  @spec forget_world(t) :: true
  def forget_world(t) do
    forget_history(t)
    :ets.delete(t, :world)
    :ets.match_delete(t, {{:player, :_}, :_, :_})
    :ets.match_delete(t, {{:moved, :_}, :_, :_})
    :ets.match_delete(t, {{:unsynced, :_}, :_, :_})
    :ets.delete(t, :orphans)
  end

  @doc """
  Durable events handed to the journal under `ref`, not yet acknowledged by its fsync: a
  server that replaces a dead one acknowledges them (c:Overworld.Zone.handle_durable/2).
  With `finished` (a tick), that tick's end is recorded in the same insert (see
  `put_finished/2`).
  """
  @spec put_unsynced(t, reference, [term], non_neg_integer | nil) :: true
  def put_unsynced(t, ref, events, finished \\ nil) do
    row = {{:unsynced, ref}, System.unique_integer([:monotonic]), events}
    :ets.insert(t, if(finished, do: [row, {:finished, finished}], else: [row]))
  end

  @spec delete_unsynced(t, [reference]) :: :ok
  def delete_unsynced(t, refs), do: Enum.each(refs, &:ets.delete(t, {:unsynced, &1}))

  @doc "Every unsynced row, `{ref, events}`, in the order they were journaled."
  @spec unsynced(t) :: [{reference, [term]}]
  def unsynced(t) do
    t
    |> :ets.match_object({{:unsynced, :_}, :_, :_})
    |> Enum.sort_by(&elem(&1, 1))
    |> Enum.map(fn {{:unsynced, ref}, _, events} -> {ref, events} end)
  end

  @doc "The last tick whose end the server handled (its durable events journaled)."
  @spec finished(t) :: integer
  def finished(t), do: value(t, :finished, -1)

  @spec put_finished(t, non_neg_integer) :: true
  def put_finished(t, n), do: :ets.insert(t, {:finished, n})

  @doc """
  Players whose session has not come back (recovered from disk, or their session's node
  died), each with the time (monotonic ms) it leaves at.
  """
  @spec orphans(t) :: %{optional(term) => integer}
  def orphans(t) do
    case :ets.lookup(t, :orphans) do
      [{:orphans, m}] -> m
      [] -> %{}
    end
  end

  @spec put_orphans(t, map) :: true
  def put_orphans(t, m) when map_size(m) == 0, do: :ets.delete(t, :orphans)
  def put_orphans(t, m), do: :ets.insert(t, {:orphans, m})

  @doc """
  The inputs worker `w` applied at tick `n` (`%{entity id => input}`), in the ring of the last
  `history` ticks (`Overworld.Zone.History` replays them).
  """
  @spec put_inputs(t, non_neg_integer, non_neg_integer, non_neg_integer, map) :: true
  def put_inputs(t, history, w, n, inputs),
    do: :ets.insert(t, {{:inputs, w, rem(n, slots(history))}, n, inputs})

  @doc "The inputs of tick `n` per worker (`%{worker => %{id => input}}`; empty for none)."
  @spec inputs(t, non_neg_integer, non_neg_integer, non_neg_integer) :: map
  def inputs(t, history, workers, n) do
    slot = rem(n, slots(history))

    for w <- 0..(workers - 1),
        [{_, ^n, inputs}] <- [:ets.lookup(t, {:inputs, w, slot})],
        into: %{},
        do: {w, inputs}
  end

  @doc "A worker's cells at tick `n` (a history keyframe), in slot `slot`."
  @spec put_keyframe(t, non_neg_integer, non_neg_integer, non_neg_integer, list) :: true
  def put_keyframe(t, w, slot, n, pairs), do: :ets.insert(t, {{:kf, w, slot}, n, pairs})

  @spec keyframes(t) :: [{non_neg_integer, non_neg_integer, list}]
  def keyframes(t),
    do: :ets.select(t, [{{{:kf, :"$1", :_}, :"$2", :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])

  @doc "A worker's state hash at tick `n` (debug zones hash every tick)."
  @spec put_hash(t, non_neg_integer, non_neg_integer, non_neg_integer, non_neg_integer) :: true
  def put_hash(t, w, slots, n, hash), do: :ets.insert(t, {{:hash, w, rem(n, slots)}, n, hash})

  @doc "The zone's hash at tick `n` (the sum of its workers'), if every worker recorded it."
  @spec hash(t, non_neg_integer, non_neg_integer, non_neg_integer) :: non_neg_integer | nil
  def hash(t, workers, slots, n) do
    Enum.reduce_while(0..(workers - 1), 0, fn w, acc ->
      case :ets.lookup(t, {:hash, w, rem(n, slots)}) do
        [{_, ^n, h}] -> {:cont, acc + h}
        _ -> {:halt, nil}
      end
    end)
    |> case do
      nil -> nil
      sum -> rem(sum, 0x100000000)
    end
  end

  @doc """
  The hash of a list of cells `{key, entities}`: the sum of one `:erlang.phash2/1` per cell,
  so it does not depend on how the cells are split between workers.

      iex> a = [{1, [:x]}, {2, [:y]}]
      iex> Overworld.Zone.Memory.cells_hash(a) ==
      ...>   Overworld.Zone.Memory.cells_hash([{1, [:x]}]) + Overworld.Zone.Memory.cells_hash([{2, [:y]}])
      true
  """
  @spec cells_hash([{integer, list}]) :: non_neg_integer
  def cells_hash(pairs), do: Enum.reduce(pairs, 0, fn cell, acc -> acc + :erlang.phash2(cell) end)

  @doc "The memory the table takes, in bytes (the history's share of a zone's memory)."
  @spec bytes(t) :: non_neg_integer
  def bytes(t), do: :ets.info(t, :memory) * :erlang.system_info(:wordsize)

  # The value of a `{key, value}` row, or `default`.
  defp value(t, key, default) do
    case :ets.lookup(t, key) do
      [{^key, v}] -> v
      [] -> default
    end
  end
end

defmodule Overworld.Zone.Wire do
  @moduledoc false
  # A zone's wire encoding, done by its bucket workers (see the `:wire` option).
  #
  # Fused with the pass: right after a cell is simulated, its old entities (the previous tick,
  # in id order) and the ones that stayed (in id order) are walked together, while both are hot:
  # each replicated entity gets its 2-bit op (`00` unchanged, `01` + template delta, `10` left)
  # against what every observer holding the cell has. Entities that arrive in a cell (moved from
  # another cell or worker, spawned, or changed template) are only known after the grid phase;
  # then `publish/7` finishes each cell's delta block and the worker publishes them.
  #
  # Old values are quantized again rather than stored: the compiled quantizer is cheaper than
  # keeping a second copy of the state alive.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Protocol.Snapshot
  alias Overworld.World.Place

  # Ticks of delta blocks kept per worker: an observer that skipped a cell (byte budget, a slow
  # client) catches up with the blocks it missed, up to this many ticks back.
  @ring 16

  @doc false
  @spec ring() :: pos_integer
  def ring, do: @ring

  @doc false
  @spec slot(non_neg_integer) :: non_neg_integer
  def slot(n), do: rem(n, @ring)

  @type cell :: {integer, [bitstring], boolean, [Snapshot.entry()]}

  @typedoc "The compiled functions of a templates module, captured once (no export lookups)."
  @type funs ::
          {(term -> non_neg_integer | nil), (non_neg_integer, tuple -> tuple),
           (non_neg_integer, tuple, tuple -> bitstring | nil),
           (non_neg_integer, tuple, tuple -> boolean)}

  @doc false
  @spec funs(module) :: funs
  def funs(mod),
    do: {&mod.__index__/1, &mod.__quantize__/2, &mod.__delta__/3, &mod.__same__/3}

  @doc false
  # :ok when the wire can encode the entity (or does not replicate its kind); otherwise how
  # quantizing it failed: a value that its template cannot quantize (`Overworld.Template.Error`),
  # or a `{module, function}` source (game code too) that raised, threw or exited.
  @spec check(funs, Overworld.Entity.t()) :: :ok | {:error, atom, term, list}
  def check({index, quantize, _, _}, e) do
    case index.(entity(e, :kind)) do
      nil ->
        :ok

      ti ->
        _ = quantize.(ti, e)
        :ok
    end
  catch
    kind, reason -> {:error, kind, reason, __STACKTRACE__}
  end

  @doc false
  # The ops of a cell: {key, the ops' bit fragments in reverse, any op not 00?, arrivals in the
  # cell (entities that changed template)}. `handed`: ids handed to a neighbour zone this tick
  # (a world's zone): their op is 11, "handed", not 10 (docs/protocol.md, "A world of zones").
  @spec cell(funs, integer, [Overworld.Entity.t()], [Overworld.Entity.t()], map) :: cell
  def cell(funs, k, old, new, handed \\ %{}) do
    {ops, changed, arrivals} = walk(funs, old, new, [], false, [], handed)
    {k, ops, changed, :lists.reverse(arrivals)}
  end

  # `new` is a subset of `old` (the entities that stayed), both in id order.
  defp walk(_funs, [], _new, ops, changed, arrivals, _handed), do: {ops, changed, arrivals}

  defp walk(
         {index, quantize, delta, same} = funs,
         [o | old],
         [n | rest] = new,
         ops,
         changed,
         arr,
         h
       ) do
    kind = entity(o, :kind)

    case index.(kind) do
      nil ->
        if entity(n, :id) === entity(o, :id) do
          # Not replicated before; replicated now (its kind changed): an arrival.
          walk(funs, old, rest, ops, changed, arrival(funs, n, arr), h)
        else
          walk(funs, old, new, ops, changed, arr, h)
        end

      ti ->
        cond do
          entity(n, :id) !== entity(o, :id) ->
            walk(funs, old, new, [gone(o, h) | ops], true, arr, h)

          entity(n, :kind) === kind and same.(ti, o, n) ->
            walk(funs, old, rest, [<<0::2>> | ops], changed, arr, h)

          entity(n, :kind) === kind or index.(entity(n, :kind)) === ti ->
            case delta.(ti, quantize.(ti, o), quantize.(ti, n)) do
              nil -> walk(funs, old, rest, [<<0::2>> | ops], changed, arr, h)
              d -> walk(funs, old, rest, [d, <<1::2>> | ops], true, arr, h)
            end

          true ->
            walk(funs, old, rest, [<<2::2>> | ops], true, arrival(funs, n, arr), h)
        end
    end
  end

  defp walk({index, _, _, _} = funs, [o | old], [], ops, changed, arrivals, h) do
    case index.(entity(o, :kind)) do
      nil -> walk(funs, old, [], ops, changed, arrivals, h)
      _ -> walk(funs, old, [], [gone(o, h) | ops], true, arrivals, h)
    end
  end

  # The op of an entity that left the cell: 11 when it was handed to a neighbour zone.
  defp gone(_o, handed) when map_size(handed) == 0, do: <<2::2>>
  defp gone(o, handed), do: if(is_map_key(handed, entity(o, :id)), do: <<3::2>>, else: <<2::2>>)

  defp arrival({index, quantize, _, _}, e, arrivals) do
    case index.(entity(e, :kind)) do
      nil -> arrivals
      ti -> [{entity(e, :id), ti, quantize.(ti, e)} | arrivals]
    end
  end

  @doc false
  # What a worker publishes for tick `n`: the delta blocks of its stripe's cells, in key order,
  # as one binary (`data`), and an index over every key of the stripe from `first` to `stop`
  # (inclusive): per key, 8 bytes, the byte offset and the count of the blocks of the keys
  # before it. The blocks of any run of keys are then one slice of `data` (see
  # `Overworld.Interest`). Cells come from the pass (descending); `arrivals` are the entities
  # that entered a cell from elsewhere (moved, spawned or immigrated, of any kind).
  @spec publish(
          funs,
          Snapshot.encoder(),
          [cell],
          [Overworld.Entity.t()],
          Overworld.Spatial.Grid.t(),
          integer,
          integer,
          Overworld.World.Place.t() | nil
        ) :: {binary, binary}
  def publish({index, quantize, _, _}, enc, cells, arrivals, grid, first, stop, place \\ nil) do
    incoming =
      arrivals
      |> Enum.flat_map(fn e ->
        case index.(entity(e, :kind)) do
          nil ->
            []

          ti ->
            [
              {Overworld.Spatial.Grid.key(grid, entity(e, :x), entity(e, :y)),
               {entity(e, :id), ti, quantize.(ti, e)}}
            ]
        end
      end)
      |> Enum.group_by(&elem(&1, 0), &elem(&1, 1))
      |> Enum.sort()

    enc = {enc, place}
    {data, index} = merge(:lists.reverse(cells), incoming, enc, {first, stop, 0, 0}, <<>>, <<>>)

    {data, index}
  end

  # Cells (ascending) and incoming arrivals (ascending by key) into the data and the index, both
  # appended in place. `at`: {next key to index, stop, offset, count}.
  defp merge([{k, _, _, _} = c | cells], [{ik, _} | _] = incoming, enc, at, data, idx)
       when k < ik do
    {data, idx, at} = block(c, [], enc, at, data, idx)
    merge(cells, incoming, enc, at, data, idx)
  end

  defp merge([{k, _, _, _} = c | cells], [{k, more} | incoming], enc, at, data, idx) do
    {data, idx, at} = block(c, more, enc, at, data, idx)
    merge(cells, incoming, enc, at, data, idx)
  end

  defp merge(cells, [{ik, more} | incoming], enc, at, data, idx) do
    {data, idx, at} = block({ik, [], false, []}, more, enc, at, data, idx)
    merge(cells, incoming, enc, at, data, idx)
  end

  defp merge([c | cells], [], enc, at, data, idx) do
    {data, idx, at} = block(c, [], enc, at, data, idx)
    merge(cells, [], enc, at, data, idx)
  end

  defp merge([], [], _enc, {key, stop, off, count}, data, idx),
    do: {data, fill(idx, stop + 1 - key, <<off::32, count::32>>)}

  defp block({_k, _ops, false, []}, [], _enc, at, data, idx), do: {data, idx, at}

  defp block({k, ops, _changed, local}, more, {enc, place}, {key, stop, off, count}, data, idx) do
    wk = Place.wire_key(place, k)

    b =
      case local ++ more do
        [] -> Snapshot.delta_block_bits(wk, bits(ops), [], enc)
        arrivals -> Snapshot.delta_block_bits(wk, bits(ops), Enum.sort(arrivals), enc)
      end

    # Keys from `key` to `k - 1` have no block: they repeat the running entry.
    idx = fill(idx, k - key, <<off::32, count::32>>)
    idx = <<idx::binary, off::32, count::32>>
    {<<data::binary, b::binary>>, idx, {k + 1, stop, off + byte_size(b), count + 1}}
  end

  defp bits([]), do: <<>>
  defp bits(ops), do: :erlang.list_to_bitstring(:lists.reverse(ops))

  defp fill(idx, 0, _entry), do: idx
  defp fill(idx, 1, entry), do: <<idx::binary, entry::binary>>
  defp fill(idx, n, entry), do: <<idx::binary, :binary.copy(entry, n)::binary>>

  @doc false
  # Keyframe blocks of the given cells from the worker's current cells.
  @spec keyframes(
          funs,
          Snapshot.encoder(),
          [{integer, [Overworld.Entity.t()]}],
          [integer],
          Overworld.World.Place.t() | nil
        ) :: [{integer, binary}]
  def keyframes(mod, enc, own, keys, place \\ nil) do
    wanted = MapSet.new(keys)

    for {k, es} <- own,
        MapSet.member?(wanted, k),
        entries = es |> Enum.reduce([], &arrival(mod, &1, &2)) |> :lists.reverse(),
        entries != [],
        do: {k, Snapshot.keyframe_block(Place.wire_key(place, k), entries, enc)}
  end

  ## The wire table: this module owns its rows (the workers write them, observers and tools
  ## read them, through these functions only).
  ##
  ##   {{:tick, worker, slot}, n, data, index, first key}   a worker's blocks of tick n
  ##   {{:kf, key}, n, block | nil}                        a cell's keyframe block at tick n
  ##   {{:pos, entity id}, x, y, n}                         an avatar's position after tick n
  ##   {{:ack, entity id}, seq}                             the newest input seq a tick consumed
  ##   {:newest, n}                                         the zone's last complete tick
  ##   {:mirrors, [pid]}                                    mirrors on other nodes (below)

  @doc false
  # The zone's last tick whose blocks every worker published (the server, once the tick is done).
  @spec put_newest(:ets.tid(), non_neg_integer) :: true
  def put_newest(table, n), do: :ets.insert(table, {:newest, n})

  @doc false
  @spec newest(:ets.tid()) :: non_neg_integer | nil
  def newest(table) do
    case :ets.lookup(table, :newest) do
      [{:newest, n}] -> n
      [] -> nil
    end
  end

  @doc false
  # A worker's published blocks of tick `n` (`publish/7`), in the ring slot of `n`.
  @spec put_tick(:ets.tid(), non_neg_integer, non_neg_integer, binary, binary, integer) :: true
  def put_tick(table, w, n, data, index, first),
    do: :ets.insert(table, {{:tick, w, slot(n)}, n, data, index, first})

  @doc false
  # A worker's published tick `n`: `{data, index, first key}`, or nil once it left the ring.
  @spec tick(:ets.tid(), non_neg_integer, non_neg_integer) :: {binary, binary, integer} | nil
  def tick(table, w, n) do
    case :ets.lookup(table, {:tick, w, slot(n)}) do
      [{_, ^n, data, index, first}] -> {data, index, first}
      _ -> nil
    end
  end

  @doc false
  # Keyframe blocks of cells (nil for a cell without replicated entities) at tick `n`.
  @spec put_keyframes(:ets.tid(), non_neg_integer, [{integer, binary | nil}]) :: true
  def put_keyframes(table, n, blocks),
    do: :ets.insert(table, for({k, block} <- blocks, do: {{:kf, k}, n, block}))

  @doc false
  # A cell's newest keyframe block: `{tick, block | nil}`, or nil.
  @spec keyframe(:ets.tid(), integer) :: {non_neg_integer, binary | nil} | nil
  def keyframe(table, key) do
    case :ets.lookup(table, {:kf, key}) do
      [{_, n, block}] -> {n, block}
      [] -> nil
    end
  end

  ## Players: where their entities are and which input the zone consumed, for their sessions
  ## (one ETS read each per tick, no message to the zone).

  @doc false
  # The positions of the owned entities (players' avatars) among a worker's cells (those before
  # `stop`: its stripe), at tick n.
  # (Answers the rows written: a zone's mirrors get them too.)
  @spec put_positions(:ets.tid(), [{integer, [Overworld.Entity.t()]}], integer, non_neg_integer) ::
          [tuple]
  def put_positions(table, own, stop, n) do
    rows = positions(own, stop, n, [])
    :ets.insert(table, rows)
    rows
  end

  defp positions([{k, es} | rest], stop, n, acc) when k < stop,
    do: positions(rest, stop, n, owned(es, n, acc))

  defp positions(_, _stop, _n, acc), do: acc

  defp owned([], _n, acc), do: acc

  defp owned([{:entity, id, _, x, y, _, _, _, _, _, _, owner, _} | rest], n, acc)
       when owner !== nil,
       do: owned(rest, n, [{{:pos, id}, x, y, n} | acc])

  defp owned([_ | rest], n, acc), do: owned(rest, n, acc)

  @doc false
  # The position of a player's entity after the last tick that saw it: {x, y, tick} or nil.
  @spec position(:ets.tid(), pos_integer) ::
          {integer, integer, non_neg_integer} | nil
  def position(table, id) do
    case :ets.lookup(table, {:pos, id}) do
      [{_, x, y, n}] -> {x, y, n}
      [] -> nil
    end
  end

  @doc false
  # The input sequence numbers a tick consumed, `[{avatar id, seq}]`.
  @spec put_acks(:ets.tid(), [{pos_integer, non_neg_integer}]) :: true
  def put_acks(table, acks), do: :ets.insert(table, for({id, seq} <- acks, do: {{:ack, id}, seq}))

  @doc false
  # The newest input sequence number of an avatar's player that a tick consumed (0: none yet).
  @spec input_ack(:ets.tid(), pos_integer) :: non_neg_integer
  def input_ack(table, id) do
    case :ets.lookup(table, {:ack, id}) do
      [{_, seq}] -> seq
      [] -> 0
    end
  end

  @doc false
  # A player's avatar is gone: its position and acknowledgement go.
  @spec forget_player(:ets.tid(), pos_integer) :: true
  def forget_player(table, id) do
    :ets.delete(table, {:ack, id})
    :ets.delete(table, {:pos, id})
  end

  @doc false
  # The rows of avatars (acknowledgement, position), to delete later if unchanged
  # (`forget_rows/2`).
  @spec player_rows(:ets.tid(), [pos_integer]) :: [tuple]
  def player_rows(table, ids),
    do: for(id <- ids, key <- [{:ack, id}, {:pos, id}], row <- :ets.lookup(table, key), do: row)

  @doc false
  # Deletes rows of `player_rows/2` that are still as they were (one written since stays).
  @spec forget_rows(:ets.tid(), [tuple]) :: :ok
  def forget_rows(table, rows), do: Enum.each(rows, &:ets.delete_object(table, &1))

  @doc false
  # Forgets every avatar's position and acknowledgement (a zone that starts a new world:
  # entity ids start over) or only the positions (`acks: false`: a zone recovered from its
  # store, whose avatars keep their ids; their positions come again with the next tick).
  @spec forget_players(:ets.tid(), boolean) :: true
  def forget_players(table, acks? \\ true) do
    :ets.match_delete(table, {{:pos, :_}, :_, :_, :_})
    if acks?, do: :ets.match_delete(table, {{:ack, :_}, :_}), else: true
  end

  @doc false
  # The zone's mirrors on other nodes (`Overworld.Zone.Mirror`): each bucket worker sends
  # them its part of every tick it publishes. Written by the zone server only.
  @spec put_mirrors(:ets.tid(), [pid]) :: true
  def put_mirrors(table, pids), do: :ets.insert(table, {:mirrors, pids})

  @doc false
  @spec mirrors(:ets.tid()) :: [pid]
  def mirrors(table) do
    case :ets.lookup(table, :mirrors) do
      [{:mirrors, pids}] -> pids
      [] -> []
    end
  end

  @doc """
  Forgets every published block (ticks and keyframes): a zone recovered from a snapshot ticks
  again from an older tick, and must not be mixed with blocks of the lost timeline.
  """
  @spec forget_ticks(:ets.tid()) :: true
  def forget_ticks(table) do
    :ets.match_delete(table, {{:tick, :_, :_}, :_, :_, :_, :_})
    :ets.match_delete(table, {{:kf, :_}, :_, :_})
    :ets.delete(table, :newest)
  end
end

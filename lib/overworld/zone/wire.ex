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
           (non_neg_integer, tuple, tuple -> bitstring | nil)}

  @doc false
  @spec funs(module) :: funs
  def funs(mod), do: {&mod.__index__/1, &mod.__quantize__/2, &mod.__delta__/3}

  @doc false
  # The ops of a cell: {key, op fragments in reverse, any op not 00?, arrivals in the cell
  # (entities that changed template)}.
  @spec cell(funs, integer, [Overworld.Entity.t()], [Overworld.Entity.t()]) :: cell
  def cell(funs, k, old, new) do
    {ops, changed, arrivals} = walk(funs, old, new, [], false, [])
    {k, ops, changed, :lists.reverse(arrivals)}
  end

  # `new` is a subset of `old` (the entities that stayed), both in id order.
  defp walk(_funs, [], _new, ops, changed, arrivals), do: {ops, changed, arrivals}

  defp walk(
         {index, quantize, delta} = mod,
         [o | old],
         [n | new_rest] = new,
         ops,
         changed,
         arrivals
       ) do
    case index.(entity(o, :kind)) do
      nil ->
        if entity(n, :id) === entity(o, :id) do
          # Not replicated before; replicated now (its kind changed): an arrival.
          walk(mod, old, new_rest, ops, changed, arrival(mod, n, arrivals))
        else
          walk(mod, old, new, ops, changed, arrivals)
        end

      ti ->
        if entity(n, :id) === entity(o, :id) do
          case index.(entity(n, :kind)) do
            ^ti ->
              case delta.(ti, quantize.(ti, o), quantize.(ti, n)) do
                nil -> walk(mod, old, new_rest, [<<0::2>> | ops], changed, arrivals)
                d -> walk(mod, old, new_rest, [d, <<1::2>> | ops], true, arrivals)
              end

            _other ->
              walk(mod, old, new_rest, [<<2::2>> | ops], true, arrival(mod, n, arrivals))
          end
        else
          walk(mod, old, new, [<<2::2>> | ops], true, arrivals)
        end
    end
  end

  defp walk({index, _, _} = mod, [o | old], [], ops, changed, arrivals) do
    case index.(entity(o, :kind)) do
      nil -> walk(mod, old, [], ops, changed, arrivals)
      _ -> walk(mod, old, [], [<<2::2>> | ops], true, arrivals)
    end
  end

  defp arrival({index, quantize, _}, e, arrivals) do
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
          integer
        ) :: {binary, binary}
  def publish({index, quantize, _}, enc, cells, arrivals, grid, first, stop) do
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

    blocks = merge(:lists.reverse(cells), incoming, enc, [])
    {IO.iodata_to_binary(for({_k, b} <- blocks, do: b)), index(blocks, first, stop, 0, 0, [])}
  end

  # Cells (ascending) and incoming arrivals (ascending by key) into the blocks {key, binary} of
  # the cells that changed, ascending.
  defp merge([{k, _, _, _} = c | cells], [{ik, _} | _] = incoming, enc, acc) when k < ik,
    do: merge(cells, incoming, enc, block(c, [], enc, acc))

  defp merge([{k, _, _, _} = c | cells], [{k, more} | incoming], enc, acc),
    do: merge(cells, incoming, enc, block(c, more, enc, acc))

  defp merge(cells, [{ik, more} | incoming], enc, acc),
    do: merge(cells, incoming, enc, block({ik, [], false, []}, more, enc, acc))

  defp merge([c | cells], [], enc, acc), do: merge(cells, [], enc, block(c, [], enc, acc))
  defp merge([], [], _enc, acc), do: :lists.reverse(acc)

  defp block({_k, _ops, false, []}, [], _enc, acc), do: acc

  defp block({k, ops, _changed, local}, more, enc, acc),
    do: [{k, Snapshot.assemble_delta(k, ops, Enum.sort(local ++ more), enc)} | acc]

  # Runs of keys without a block repeat the same entry.
  defp index(_blocks, key, stop, _off, _count, acc) when key > stop,
    do: IO.iodata_to_binary(:lists.reverse(acc))

  defp index([{key, b} | blocks], key, stop, off, count, acc),
    do:
      index(blocks, key + 1, stop, off + byte_size(b), count + 1, [<<off::32, count::32>> | acc])

  defp index(blocks, key, stop, off, count, acc) do
    run =
      case blocks do
        [{next, _} | _] -> min(next, stop + 1) - key
        [] -> stop + 1 - key
      end

    entry = <<off::32, count::32>>
    index(blocks, key + run, stop, off, count, [:binary.copy(entry, run) | acc])
  end

  @doc false
  # Keyframe blocks of the given cells from the worker's current cells.
  @spec keyframes(funs, Snapshot.encoder(), [{integer, [Overworld.Entity.t()]}], [integer]) :: [
          {integer, binary}
        ]
  def keyframes(mod, enc, own, keys) do
    wanted = MapSet.new(keys)

    for {k, es} <- own,
        MapSet.member?(wanted, k),
        entries = es |> Enum.reduce([], &arrival(mod, &1, &2)) |> :lists.reverse(),
        entries != [],
        do: {k, Snapshot.keyframe_block(k, entries, enc)}
  end
end

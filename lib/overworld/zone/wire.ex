defmodule Overworld.Zone.Wire do
  @moduledoc false
  # A zone's wire encoding, done by its bucket workers (see the `:wire` option).
  #
  # Fused with the pass: right after a cell is simulated, its old entities (the previous tick,
  # in id order) and the ones that stayed (in id order) are walked together, while both are hot:
  # each replicated entity gets its 2-bit op (`00` unchanged, `01` + template delta, `10` left)
  # against what every observer holding the cell has. Entities that arrive in a cell (moved from
  # another cell or worker, spawned, or changed template) are only known after the grid phase;
  # then `rows/6` finishes each cell's delta block and the rows go to the wire table.
  #
  # Old values are quantized again rather than stored: the compiled quantizer is cheaper than
  # keeping a second copy of the state alive.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Protocol.Snapshot

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
  # The rows of tick `n` for the wire table: every cell the pass walked, and every cell that
  # received entities (`arrivals`: moved, spawned or immigrated, of any kind).
  @spec rows(
          funs,
          Snapshot.encoder(),
          [cell],
          [Overworld.Entity.t()],
          non_neg_integer,
          Overworld.Spatial.Grid.t()
        ) ::
          [{integer, non_neg_integer, binary | nil}]
  def rows({index, quantize, _}, enc, cells, arrivals, n, grid) do
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

    {rows, incoming} =
      Enum.reduce(cells, {[], incoming}, fn {k, ops, changed, local}, {rows, incoming} ->
        {more, incoming} = Map.pop(incoming, k, [])

        row =
          case local ++ more do
            [] when not changed -> {k, n, nil}
            arr -> {k, n, Snapshot.assemble_delta(k, ops, Enum.sort(arr), enc)}
          end

        {[row | rows], incoming}
      end)

    Enum.reduce(incoming, rows, fn {k, arr}, rows ->
      [{k, n, Snapshot.assemble_delta(k, [], Enum.sort(arr), enc)} | rows]
    end)
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

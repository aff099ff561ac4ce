defmodule Overworld.Interest.Blocks do
  @moduledoc false
  # How an observer (`Overworld.Interest`) reads a zone's published blocks from its wire table
  # (`Overworld.Zone.Wire`): every worker's tick, slices of runs of cells in a row, keyframes.
  # Nothing here changes the observer.

  alias Overworld.Interest
  alias Overworld.Protocol.Codec
  alias Overworld.Spatial.Grid
  alias Overworld.Zone.Wire

  @doc false
  # Every worker's published ticks u+1..n, oldest first: one tuple per tick of
  # {data, index, first key} per worker; nil when any is missing.
  @spec published_span(Interest.t(), non_neg_integer, non_neg_integer, list) :: [tuple] | nil
  def published_span(_o, u, u, acc), do: acc

  def published_span(o, t, u, acc) do
    case published(o, t, o.workers - 1, []) do
      nil -> nil
      found -> published_span(o, t - 1, u, [List.to_tuple(found) | acc])
    end
  end

  # Every worker's published tick n: [{data, index, first key}], or nil.
  defp published(_o, _n, -1, acc), do: acc

  defp published(%Interest{table: table} = o, n, w, acc) do
    case Wire.tick(table, w, n) do
      nil -> nil
      found -> published(o, n, w - 1, [found | acc])
    end
  end

  @doc false
  # The blocks of every row of the region at the ticks given (`published_span/4`), one slice per
  # row and tick: {:ok, iodata, block count, bytes}, or :slow when they exceed `room`.
  @spec fast_rows(list, [tuple], Interest.t(), integer, iodata, non_neg_integer, non_neg_integer) ::
          {:ok, iodata, non_neg_integer, non_neg_integer} | :slow
  def fast_rows([], _ticks, _o, _room, io, count, bytes), do: {:ok, io, count, bytes}

  def fast_rows([{row, {a, b}} | rest], ticks, o, room, io, count, bytes) do
    w = elem(o.owners, row)

    case fast_row(ticks, w, (row + 1) * o.grid.stride + 1, a, b, io, count, bytes) do
      {_io, _count, more} when more > room -> :slow
      {io, count, bytes} -> fast_rows(rest, ticks, o, room, io, count, bytes)
    end
  end

  # Cells a..b of a row (keys base + a .. base + b) at each tick, in tick order.
  defp fast_row([], _w, _base, _a, _b, io, count, bytes), do: {io, count, bytes}

  defp fast_row([tick | ticks], w, base, a, b, io, count, bytes) do
    case slice(elem(tick, w), base + a, base + b) do
      {_, 0, _} -> fast_row(ticks, w, base, a, b, io, count, bytes)
      {s, cost, c} -> fast_row(ticks, w, base, a, b, [io | s], count + c, bytes + cost)
    end
  end

  # The part of a worker's published tick holding the blocks of cells k0..k1 (consecutive
  # keys): the slice, its bytes and its block count, from the tick's index of offsets.
  defp slice({data, index, first}, k0, k1) do
    <<_::binary-size((k0 - first) * 8), off0::32, count0::32, _::binary>> = index
    <<_::binary-size((k1 + 1 - first) * 8), off1::32, count1::32, _::binary>> = index

    case off1 - off0 do
      0 -> {<<>>, 0, 0}
      cost -> {binary_part(data, off0, cost), cost, count1 - count0}
    end
  end

  @doc false
  # A cell's keyframe block still usable at tick n: {tick, block | nil}, or nil.
  @spec lookup_keyframe(:ets.tid(), integer, non_neg_integer, pos_integer) ::
          {non_neg_integer, binary | nil} | nil
  def lookup_keyframe(table, key, n, ring) do
    case Wire.keyframe(table, key) do
      {m, _block} = found when m > n - ring and m <= n -> found
      _ -> nil
    end
  end

  @doc false
  # A keyframe of an empty cell (for a client that may hold an old state of it).
  @spec empty_keyframe(integer) :: binary
  def empty_keyframe(key), do: IO.iodata_to_binary([Codec.varint(key * 4), 0])

  @doc false
  # The slices of cells a..b of a row for ticks t..n, in tick order:
  # {:ok, iodata, bytes, block count, cache} or {:missing, cache}.
  @spec slices(
          Interest.t(),
          map,
          integer,
          integer,
          integer,
          integer,
          integer,
          list,
          integer,
          integer
        ) ::
          {:ok, iodata, non_neg_integer, non_neg_integer, map} | {:missing, map}
  def slices(_o, cache, _row, _a, _b, t, n, io, cost, count) when t > n,
    do: {:ok, :lists.reverse(io), cost, count, cache}

  def slices(%Interest{grid: g} = o, cache, row, a, b, t, n, io, cost, count) do
    w = elem(o.owners, row)

    case tick_row(o, cache, w, t) do
      {nil, cache} ->
        {:missing, cache}

      {published, cache} ->
        case slice(published, Grid.key_at(g, a, row), Grid.key_at(g, b, row)) do
          {_, 0, _} ->
            slices(o, cache, row, a, b, t + 1, n, io, cost, count)

          {s, c, k} ->
            slices(o, cache, row, a, b, t + 1, n, [s | io], cost + c, count + k)
        end
    end
  end

  # A worker's published tick (its data, index and first key), looked up once per frame.
  defp tick_row(%Interest{table: table}, cache, w, t) do
    case cache do
      %{{^w, ^t} => found} ->
        {found, cache}

      _ ->
        found = Wire.tick(table, w, t)
        {found, Map.put(cache, {w, t}, found)}
    end
  end
end

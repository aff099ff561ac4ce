defmodule Overworld.Interest.Take do
  @moduledoc false
  # Taking an observer's items (`Overworld.Interest`: runs of held cells and keyframes, each
  # `{priority, cost, blocks, iodata, what}`) by priority within a frame's byte budget.

  alias Overworld.Interest.Blocks

  @typep item :: {integer, non_neg_integer, non_neg_integer, iodata, tuple}

  # Items go in priority order while they fit. Of a run too big for what is left, the longest
  # first part that fits goes (the rest waits as one run: runs do not crumble into cells). A
  # cell whose blocks since the tick the client holds outgrew the whole budget is asked for a
  # keyframe again (smaller than many ticks of deltas). A keyframe bigger than the whole budget
  # goes alone when it is first in line, or it would never go. `ctx`: {observer, tick cache,
  # tick, the whole room, runs to fetch again}. Answers {sent, deferred count, runs to fetch
  # again}.
  @doc false
  @spec take([item], integer, [item], non_neg_integer, tuple) :: {[item], non_neg_integer, list}
  def take([], _room, sent, deferred, {_o, _cache, _n, _full, again}),
    do: {:lists.reverse(sent), deferred, again}

  def take([{_p, cost, _, _, _} = item | rest], room, sent, deferred, ctx) when cost <= room,
    do: take(rest, room - cost, [item | sent], deferred, ctx)

  def take([{p, _, _, _, {:run, row, a, b, t}} | rest], room, sent, deferred, ctx) when b > a do
    {o, cache, n, _, _} = ctx

    part = fn c, d ->
      {:ok, io, cost, count, _} = Blocks.slices(o, cache, row, c, d, t + 1, n, [], 0, 0)
      {p, cost, count, io, {:run, row, c, d, t}}
    end

    # The longest first part of the run that fits goes; the rest waits, as one run.
    case fit(part, a, a, b - 1, room) do
      nil ->
        take([part.(a, a) | rest], room, sent, deferred + 1, ctx)

      {_, cost, _, _, _} = item ->
        take(rest, room - cost, [item | sent], deferred + 1, ctx)
    end
  end

  def take(
        [{_, cost, _, _, {:run, row, col, col, t}} | rest],
        room,
        sent,
        deferred,
        {o, cache, n, full, again}
      )
      when cost > full do
    take(rest, room, sent, deferred + 1, {o, cache, n, full, [{row, col, col, t + 1} | again]})
  end

  def take([{_p, cost, _, _, {:key, _, _, _, n}} = item | rest], room, [], deferred, ctx)
      when cost > elem(ctx, 3) and n == elem(ctx, 2),
      do: take(rest, room - cost, [item], deferred, ctx)

  def take(
        [{_, cost, _, _, {:key, row, col, _, _}} | rest],
        room,
        sent,
        deferred,
        {o, cache, n, full, again}
      )
      when cost > full do
    take(rest, room, sent, deferred + 1, {o, cache, n, full, [{row, col, col, n} | again]})
  end

  def take([_item | rest], room, sent, deferred, ctx),
    do: take(rest, room, sent, deferred + 1, ctx)

  # The item of cells a..k for the largest k in lo..hi whose cost fits in room (nil: none);
  # the cost grows with k, so a binary search.
  defp fit(_part, _a, lo, hi, _room) when lo > hi, do: nil

  defp fit(part, a, lo, hi, room) do
    mid = div(lo + hi, 2)
    {_, cost, _, _, _} = item = part.(a, mid)

    if cost <= room,
      do: fit(part, a, mid + 1, hi, room) || item,
      else: fit(part, a, lo, mid - 1, room)
  end
end

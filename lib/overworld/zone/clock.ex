defmodule Overworld.Zone.Clock do
  @moduledoc false
  # The tick clock's arithmetic: deadline k of a clock started at t0 (native monotonic units)
  # is t0 + k/rate, computed from k every time, so ticks never drift; after an overrun the
  # clock skips to the first deadline still ahead instead of running the missed ones.

  @doc """
  The deadline of slot `k` in native units.

      iex> per_s = System.convert_time_unit(1, :second, :native)
      iex> Overworld.Zone.Clock.deadline(0, 3, 30) == div(per_s, 10)
      true
  """
  @spec deadline(integer, non_neg_integer, pos_integer) :: integer
  def deadline(t0, k, rate), do: t0 + div(k * System.convert_time_unit(1, :second, :native), rate)

  @doc """
  The origin of a clock started at `now` (native units): `now` itself without an offset, else
  the instant `offset` (a fraction of the period) into the period of the monotonic clock that
  holds `now`, or of the period before: never after `now`, so the first deadline (one period
  later) is still ahead. Clocks of one node with the same rate and offsets `i / n` tick at
  instants spread evenly over the period, whenever each started.

      iex> per_s = System.convert_time_unit(1, :second, :native)
      iex> p = div(per_s, 10)
      iex> Overworld.Zone.Clock.origin(7 * p + div(p, 2), 10, nil) == 7 * p + div(p, 2)
      true
      iex> Overworld.Zone.Clock.origin(7 * p + div(p, 2), 10, 0.25) == 7 * p + div(p, 4)
      true
      iex> Overworld.Zone.Clock.origin(7 * p + div(p, 2), 10, 0.75) == 6 * p + div(3 * p, 4)
      true
  """
  @spec origin(integer, pos_integer, number | nil) :: integer
  def origin(now, _rate, nil), do: now

  def origin(now, rate, offset) do
    period = div(System.convert_time_unit(1, :second, :native), rate)
    at = Integer.floor_div(now, period) * period + trunc(offset * period)
    if at <= now, do: at, else: at - period
  end

  @doc """
  A native deadline as the millisecond the timer service fires at, rounded up (so a timer never
  fires before its deadline; monotonic time may be negative).

      iex> per_ms = System.convert_time_unit(1, :millisecond, :native)
      iex> Overworld.Zone.Clock.timer_ms(-per_ms - 1)
      -1
      iex> Overworld.Zone.Clock.timer_ms(per_ms + 1)
      2
  """
  @spec timer_ms(integer) :: integer
  def timer_ms(deadline),
    do: -Integer.floor_div(-deadline, System.convert_time_unit(1, :millisecond, :native))

  @doc """
  After the tick of slot `k` ended at `now`: `{next_slot, skipped}`, the next slot whose deadline
  is still ahead and how many deadlines were skipped (0 when there was no overrun).

      iex> per_s = System.convert_time_unit(1, :second, :native)
      iex> Overworld.Zone.Clock.next(0, 30, 5, div(5 * per_s, 30) + 1)
      {6, 0}
      iex> Overworld.Zone.Clock.next(0, 30, 5, div(8 * per_s, 30) + 1)
      {9, 3}
  """
  @spec next(integer, pos_integer, non_neg_integer, integer) :: {pos_integer, non_neg_integer}
  def next(t0, rate, k, now) do
    if deadline(t0, k + 1, rate) > now do
      {k + 1, 0}
    else
      passed = div((now - t0) * rate, System.convert_time_unit(1, :second, :native))
      {passed + 1, passed - k}
    end
  end
end

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

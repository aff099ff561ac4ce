defmodule Overworld.Zone.ClockTest do
  use ExUnit.Case, async: true
  doctest Overworld.Zone.Clock

  alias Overworld.Zone.Clock

  test "deadlines never drift: slot k is exactly k/rate after t0" do
    per_s = System.convert_time_unit(1, :second, :native)
    t0 = 123_456_789

    for rate <- [1, 7, 30, 60, 1000], k <- [0, 1, 29, 30, 3_000_001] do
      assert Clock.deadline(t0, k, rate) == t0 + div(k * per_s, rate)
    end

    # Three seconds at 30 Hz are exactly 90 slots.
    assert Clock.deadline(t0, 90, 30) - t0 == 3 * per_s
  end

  test "after an overrun the next slot is the first one still ahead" do
    per_s = System.convert_time_unit(1, :second, :native)

    for k <- 0..50, late <- 0..5 do
      now = Clock.deadline(0, k + 1 + late, 30) + 1
      {next, skipped} = Clock.next(0, 30, k, now)
      assert Clock.deadline(0, next, 30) > now
      assert Clock.deadline(0, next - 1, 30) <= now
      assert skipped == next - k - 1
    end

    assert Clock.next(0, 30, 10, div(11 * per_s, 30) - 1) == {11, 0}
  end

  # The phase (0..1) of a tick's start in the period of the node's monotonic clock.
  defp phase(t0, rate) do
    period = div(System.convert_time_unit(1, :second, :native), rate)
    rem(rem(t0, period) + period, period) / period
  end

  test "zones with tick offsets start their ticks at those points of the period" do
    rate = 30

    zones =
      for offset <- [0.0, 0.5] do
        id = {__MODULE__, make_ref()}

        {:ok, _} =
          Overworld.start_zone(Overworld.Test.Walkers,
            id: id,
            tick_rate: rate,
            tick_offset: offset,
            size: {100, 100},
            workers: 1
          )

        on_exit(fn -> Overworld.stop_zone(id) end)
        :ok = Overworld.Zone.subscribe(id, self())
        {id, offset}
      end

    # Tick starts of each zone over 20 ticks: their median phase is the offset (the timer fires
    # a millisecond or two after the deadline: a twentieth of a period at most).
    for {id, offset} <- zones do
      phases =
        for _ <- 1..20 do
          assert_receive {:overworld_tick, ^id, _n, t0}, 1_000
          phase(t0, rate)
        end

      median = phases |> Enum.sort() |> Enum.at(10)
      assert median >= offset and median < offset + 0.15, inspect({offset, phases})
    end
  end
end

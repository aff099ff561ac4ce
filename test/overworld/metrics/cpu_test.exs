defmodule Overworld.Metrics.CPUTest do
  use ExUnit.Case, async: false
  alias Overworld.Metrics.CPU

  defp spin(until) do
    if System.monotonic_time(:millisecond) < until, do: spin(until)
  end

  # 300 ms of one busy scheduler, measured.
  defp busy_sample do
    a = CPU.sample()
    spin(System.monotonic_time(:millisecond) + 300)
    CPU.compare(a, CPU.sample())
  end

  defp busy?(r),
    do:
      r.scheduler >= 0.8 / System.schedulers_online() and is_float(r.os_cpu) and
        r.os_cpu > 0.2 / System.schedulers_online()

  test "scheduler utilization rises with work and OS CPU is read from /proc" do
    # (Other OS processes of the suite can take this one's core for a while: up to three
    # tries, the first that shows the work is checked; a broken reading fails all three.)
    r =
      Enum.reduce_while(1..3, nil, fn _, _ ->
        r = busy_sample()
        if busy?(r), do: {:halt, r}, else: {:cont, r}
      end)

    assert r.seconds >= 0.29
    assert length(r.per_scheduler) == System.schedulers_online()
    # One busy scheduler out of n.
    assert r.scheduler >= 0.8 / System.schedulers_online()
    assert r.scheduler <= 1.0
    assert is_float(r.os_cpu) and r.os_cpu > 0.2 / System.schedulers_online()
  end
end

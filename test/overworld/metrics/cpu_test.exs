defmodule Overworld.Metrics.CPUTest do
  use ExUnit.Case, async: false
  alias Overworld.Metrics.CPU

  defp spin(until) do
    if System.monotonic_time(:millisecond) < until, do: spin(until)
  end

  test "scheduler utilization rises with work and OS CPU is read from /proc" do
    a = CPU.sample()
    spin(System.monotonic_time(:millisecond) + 300)
    b = CPU.sample()
    r = CPU.compare(a, b)
    assert r.seconds >= 0.29
    assert length(r.per_scheduler) == System.schedulers_online()
    # One busy scheduler out of n.
    assert r.scheduler >= 0.8 / System.schedulers_online()
    assert r.scheduler <= 1.0
    assert is_float(r.os_cpu) and r.os_cpu > 0.2 / System.schedulers_online()
  end
end

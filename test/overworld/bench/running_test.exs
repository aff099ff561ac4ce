defmodule Overworld.Bench.RunningTest do
  use ExUnit.Case, async: true

  alias Overworld.Bench.Running

  test "time on a CPU: the running intervals within each scrape" do
    assert Running.on_cpu([{2, 4}, {6, 22}, {25, 40}, {50, 60}], [
             {0, 10},
             {20, 30}
           ]) ==
             [2, 6, 5, 0]
  end

  test "events paired into running intervals, unpaired ones left out" do
    events =
      [out: 1, in: 2, out: 5, foo: 6, in: 7, in: 8, out: 9, out: 10, in: 11]
      |> Enum.reduce([], fn {inout, ts}, acc -> Running.event(acc, inout, ts) end)

    assert Running.intervals(events) == [{2, 5}, {8, 9}]
  end

  test "a traced process's scheduling" do
    pid =
      spawn_link(fn ->
        receive do
          :go -> Enum.each(1..3, fn _ -> Process.sleep(1) end)
        end
      end)

    Running.trace(pid)
    ref = Process.monitor(pid)
    send(pid, :go)
    assert_receive {:DOWN, ^ref, _, _, _}

    events = collect([], :erlang.trace_delivered(pid))
    assert [_ | _] = intervals = Running.intervals(events)
    assert Enum.all?(intervals, fn {a, b} -> a <= b end)
  end

  defp collect(acc, ref) do
    receive do
      {:trace_ts, _, inout, _, ts} -> collect(Running.event(acc, inout, ts), ref)
      {:trace_delivered, _, ^ref} -> acc
    end
  end
end

defmodule Overworld.Bench.ReportTest do
  use ExUnit.Case, async: false

  alias Overworld.Bench.Report

  setup do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(Overworld.Test.Walkers, id: id, size: {200, 200})
    on_exit(fn -> Overworld.stop_zone(id) end)
    %{zone: id}
  end

  defp lines(n, acc \\ []) do
    if n == 0 do
      Enum.reverse(acc)
    else
      receive do
        {:line, at, line} -> lines(n - 1, [{at, line} | acc])
      after
        5_000 -> flunk("only #{length(acc)} statistics lines in time")
      end
    end
  end

  test "lines come every interval with the interval they cover, even with the schedulers saturated",
       %{zone: zone} do
    me = self()
    # Normal-priority processes spinning on every scheduler, twice over: a saturated node.
    hogs =
      for _ <- 1..(2 * System.schedulers_online()),
          do:
            spawn(fn ->
              Stream.repeatedly(fn -> :erlang.phash2(make_ref()) end) |> Stream.run()
            end)

    {:ok, reporter} =
      Report.start_link(zone, 200, fn line ->
        send(me, {:line, System.monotonic_time(:millisecond), line})
      end)

    try do
      t0 = System.monotonic_time(:millisecond)
      got = lines(6)
      Enum.each(hogs, &Process.exit(&1, :kill))
      times = Enum.map(got, &elem(&1, 0))

      # On absolute timers: the sixth line 1.2 s after the start, give or take a little.
      assert_in_delta List.last(times) - t0, 1_200, 150

      for {_at, line} <- got do
        assert [_, ticks, secs] = Regex.run(~r/\| (\d+) ticks in ([\d.]+) s \|/, line)
        # The interval measured, not assumed; the zone (at high priority) kept ticking.
        assert_in_delta String.to_float(secs), 0.2, 0.1
        assert String.to_integer(ticks) in 3..9
        assert line =~ ~r/tick µs p50 \d+, max \d+/
      end
    after
      Enum.each(hogs, &Process.exit(&1, :kill))
      Process.unlink(reporter)
      Process.exit(reporter, :kill)
    end
  end
end

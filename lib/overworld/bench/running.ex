defmodule Overworld.Bench.Running do
  @moduledoc false
  # A process's time on a CPU, from tracing its scheduling (`:erlang.trace/3` `:running` events
  # with monotonic timestamps), for the benches that measure what a process itself costs while
  # higher-priority work shares the schedulers (`Overworld.Bench.Metrics`: each scrape;
  # `Overworld.Bench.Inputs`: each tick of a zone's server).
  #
  #   1. `trace/1` the process: the caller receives `{:trace_ts, pid, :in | :out, mfa, ts}`;
  #   2. keep its events with `event/3` as they come (the other trace messages are dropped);
  #   3. `intervals/1`: the events paired into the intervals it was scheduled in;
  #   4. `on_cpu/2`: how much of them falls within each window of interest.

  @typedoc "Events kept by `event/3`, newest first."
  @type events :: [{:in | :out, integer}]

  @doc false
  # Traces the scheduling of `pid`, to the caller.
  @spec trace(pid) :: non_neg_integer
  def trace(pid), do: :erlang.trace(pid, true, [:running, :monotonic_timestamp])

  @doc false
  # Stops tracing `pid`.
  @spec untrace(pid) :: non_neg_integer
  def untrace(pid), do: :erlang.trace(pid, false, [:running])

  @doc false
  # `events` with one more trace event (`inout`, at the timestamp `ts`): only `:in` and `:out`
  # are kept.
  @spec event(events, atom, integer) :: events
  def event(events, inout, ts) when inout in [:in, :out], do: [{inout, ts} | events]
  def event(events, _, _), do: events

  @doc false
  # The intervals `{in, out}` the process ran in, in order, from the events kept (an `:in`
  # without its `:out`, or an `:out` without its `:in`, is left out).
  @spec intervals(events) :: [{integer, integer}]
  def intervals(events), do: pair(Enum.reverse(events), [])

  defp pair([{:in, a}, {:out, b} | rest], acc), do: pair(rest, [{a, b} | acc])
  defp pair([_ | rest], acc), do: pair(rest, acc)
  defp pair([], acc), do: Enum.reverse(acc)

  @doc false
  # Per window `{t0, t1}` (in order), how much of the (sorted, disjoint) running intervals
  # falls within it.
  @spec on_cpu([{integer, integer}], [{integer, integer}]) :: [non_neg_integer]
  def on_cpu(windows, running) do
    {cpu, _} =
      Enum.map_reduce(windows, running, fn {t0, t1}, rs ->
        # (Intervals ending before this window end before every later one.)
        rs = Enum.drop_while(rs, fn {_, b} -> b <= t0 end)
        inside = Enum.take_while(rs, fn {a, _} -> a < t1 end)
        {Enum.sum(for {a, b} <- inside, do: min(b, t1) - max(a, t0)), rs}
      end)

    cpu
  end
end

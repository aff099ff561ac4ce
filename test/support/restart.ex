defmodule Overworld.Test.Restart do
  @moduledoc false
  # Killing a zone's server (or a worker) and waiting for its successor, for the recovery tests.

  import ExUnit.Assertions

  alias Overworld.Zone

  @doc "The zone's server once it is another than `old` (polled every 5 ms, up to 5 s)."
  def await_new_server(zone, old, tries \\ 1_000) do
    case Zone.whereis(zone) do
      pid when is_pid(pid) and pid != old -> pid
      _ when tries > 0 -> Process.sleep(5) && await_new_server(zone, old, tries - 1)
    end
  end

  @doc "Kills the zone's server and answers its successor once it has started (it answers a call)."
  def kill_server(zone) do
    old = Zone.whereis(zone)
    Process.exit(old, :kill)
    new = await_new_server(zone, old)
    Zone.info(zone)
    new
  end

  @doc """
  Kills bucket worker `i` of `zone` at a chosen moment, found by tracing the worker (what it
  receives and sends, and its exit) from this process, raised to `:high` priority meanwhile
  (the workers run at `:high`: at normal priority the kill would wait until they are idle):

    * `:during`: `delay` ms after a tick reached it (worker 0 gets each tick from the server
      and forwards the others' parts);
    * `:between`: `delay` ms after it heard that the whole tick is over (`:idle`).

  Answers `{killed_at, landed, pid}`: the monotonic time of the kill, where it landed as the
  trace shows once the worker is gone: `{:during, n}` (tick `n` had reached it and it had not
  reported it done: the zone's tick was running) or `{:between, n}` (it had reported its last
  tick `n` done and no other tick had reached it), and the worker killed.
  """
  def kill_worker(zone, i, at, delay) when at in [:during, :between] do
    [{w, _}] = Registry.lookup(Overworld.Registry, {:bucket, zone, i})
    priority = Process.flag(:priority, :high)
    :erlang.trace(w, true, [:receive, :send, :procs, {:tracer, self()}])
    seen = await_moment(w, at, %{tick: 0, done: 0})
    if delay > 0, do: Process.sleep(delay)
    killed_at = System.monotonic_time()
    Process.exit(w, :kill)
    Process.flag(:priority, priority)
    %{tick: tick, done: done} = drain_trace(w, seen)
    {killed_at, if(tick > done, do: {:during, tick}, else: {:between, done}), w}
  end

  @doc """
  Kills bucket worker `i` of `zone` as soon as a successor of `old` (a worker killed) is
  registered: while the zone recovers from that kill (its new server not started yet, or
  loading the world into the new workers), looked for every millisecond at `:high` priority.
  Answers the monotonic time of the kill.
  """
  def kill_new_worker(zone, i, old) do
    priority = Process.flag(:priority, :high)
    killed_at = kill_new(zone, i, old, 5_000)
    Process.flag(:priority, priority)
    killed_at
  end

  defp kill_new(zone, i, old, tries) do
    case Registry.lookup(Overworld.Registry, {:bucket, zone, i}) do
      [{pid, _}] when pid != old ->
        killed_at = System.monotonic_time()
        Process.exit(pid, :kill)
        killed_at

      _ when tries > 0 ->
        Process.sleep(1)
        kill_new(zone, i, old, tries - 1)

      _ ->
        flunk("no new bucket worker #{i} within 5 s")
    end
  end

  defp await_moment(w, at, seen) do
    receive do
      {:trace, ^w, :receive, msg} ->
        seen = saw(seen, {:in, msg})

        case {at, msg} do
          {:during, {:tick_all, _, mine}} when is_tuple(mine) ->
            if simulated_tick(mine), do: seen, else: await_moment(w, at, seen)

          {:during, tick} when elem(tick, 0) == :tick ->
            if simulated_tick(tick), do: seen, else: await_moment(w, at, seen)

          {:between, {:idle, _, _, _, _}} ->
            seen

          _ ->
            await_moment(w, at, seen)
        end

      {:trace, ^w, :send, msg, _to} ->
        await_moment(w, at, saw(seen, {:out, msg}))

      {:trace, ^w, :exit, reason} ->
        flunk("bucket worker exited before it was killed: #{inspect(reason)}")
    after
      5_000 -> flunk("no #{at} moment of bucket worker #{inspect(w)} within 5 s")
    end
  end

  # The trace up to the worker's exit: no message of it is left behind.
  defp drain_trace(w, seen) do
    receive do
      {:trace, ^w, :receive, msg} -> drain_trace(w, saw(seen, {:in, msg}))
      {:trace, ^w, :send, msg, _to} -> drain_trace(w, saw(seen, {:out, msg}))
      {:trace, ^w, :exit, _reason} -> seen
    after
      5_000 -> flunk("bucket worker #{inspect(w)} did not exit")
    end
  end

  defp saw(seen, {:in, {:tick_all, _others, mine}}), do: saw(seen, {:in, mine})

  defp saw(seen, {:in, tick}) when elem(tick, 0) == :tick do
    case simulated_tick(tick) do
      nil -> seen
      n -> %{seen | tick: max(seen.tick, n)}
    end
  end

  defp saw(seen, {:out, {:done, _, n, _, _}}), do: %{seen | done: max(seen.done, n)}
  # (The notice of a tick over: its report was sent before the trace began, maybe.)
  defp saw(seen, {:in, {:idle, _, {_, _, n, _}, _, _}}), do: %{seen | done: max(seen.done, n)}
  defp saw(seen, _), do: seen

  # The number of a simulated tick's message to a worker (`{:tick, epoch, n, true, ...}`,
  # Overworld.Zone.Dispatch.send_tick/9, whatever else it carries), or nil.
  defp simulated_tick(msg) when tuple_size(msg) >= 4 and elem(msg, 0) == :tick and elem(msg, 3),
    do: elem(msg, 2)

  defp simulated_tick(_msg), do: nil
end

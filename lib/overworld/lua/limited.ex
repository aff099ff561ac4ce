defmodule Overworld.Lua.Limited do
  @moduledoc false
  # Runs a function in a short-lived process under a time and a memory limit, for the caller
  # (`Overworld.Lua.call_limited/4`, and loading a runtime's scripts at start).
  #
  # Why a process: luerl 1.0 has no instruction counter to stop a script from the inside (its
  # trace function sees function calls and line changes, so `while true do end` on one line
  # never reaches it), and a BEAM process can always be killed from the outside.
  #
  #   * Time: the caller waits for the answer until the deadline, then kills the process.
  #   * Heap: the process's `max_heap_size` is its heap at start (the function's closure,
  #     a Lua state included) plus the limit; the VM kills it when a garbage collection finds
  #     it larger (no error report: `error_logger: false`).
  #   * Strings longer than 64 bytes are off-heap binaries that `max_heap_size` does not count
  #     (OTP 25 has no `include_shared_binaries`). Overworld.Lua.Strings bounds each string
  #     and makes string building cost reductions (so the process is scheduled out, and
  #     signals reach it); the caller, while it waits, looks every 10 ms at the bytes of
  #     binaries the process holds; over the limit, it collects the process's garbage and
  #     looks again, and kills it if still over.
  #   * Link: the process is linked to the caller, so it dies with the caller (a runaway loop
  #     never outlives whoever asked for it). Its death must not take the caller with it: the
  #     caller traps exits while it waits and unlinks before killing; an exit signal from
  #     another of its links meanwhile stops it as it would have (when it did not trap exits
  #     itself), the call first.

  @poll_ms 10

  @type outcome :: {:ok, term} | {:error, :timeout | :memory_limit | {:crashed, term}}

  @doc "Runs `fun` in a new process, at most `timeout` ms and `max_bytes` bytes of memory."
  @spec run((() -> term), pos_integer, pos_integer) :: outcome
  def run(fun, timeout, max_bytes) do
    caller = self()
    tag = make_ref()
    words = div(max_bytes, :erlang.system_info(:wordsize))
    trapping = Process.flag(:trap_exit, true)

    pid =
      spawn_link(fn ->
        {:total_heap_size, heap} = Process.info(self(), :total_heap_size)
        Process.flag(:max_heap_size, %{size: heap + words, kill: true, error_logger: false})
        send(caller, {tag, fun.()})
      end)

    deadline = System.monotonic_time(:microsecond) + timeout * 1000

    try do
      wait(pid, tag, deadline, max_bytes, trapping)
    after
      Process.unlink(pid)

      receive do
        {:EXIT, ^pid, _} -> :ok
      after
        0 -> :ok
      end

      Process.flag(:trap_exit, trapping)
    end
  end

  defp wait(pid, tag, deadline, max_bytes, trapping) do
    left = div(deadline - System.monotonic_time(:microsecond) + 999, 1000)

    receive do
      {^tag, result} ->
        {:ok, result}

      {:EXIT, ^pid, :killed} ->
        {:error, :memory_limit}

      {:EXIT, ^pid, reason} ->
        {:error, {:crashed, reason}}

      # An exit signal from another link of a caller that does not trap exits: it would have
      # stopped the caller at once; it does, and the call with it.
      {:EXIT, from, reason} when not trapping and from != pid ->
        if reason != :normal do
          stop(pid, reason)
          exit(reason)
        end

        wait(pid, tag, deadline, max_bytes, trapping)
    after
      min(max(left, 0), @poll_ms) ->
        cond do
          left <= 0 -> stop(pid, :timeout)
          binaries_over?(pid, max_bytes) -> stop(pid, :memory_limit)
          true -> wait(pid, tag, deadline, max_bytes, trapping)
        end
    end
  end

  defp stop(pid, why) do
    Process.unlink(pid)
    Process.exit(pid, :kill)
    {:error, why}
  end

  @doc """
  True when `pid` holds more than `max_bytes` of off-heap binaries, even after a garbage
  collection (binaries it no longer uses are not counted).
  """
  @spec binaries_over?(pid, pos_integer) :: boolean
  def binaries_over?(pid, max_bytes) do
    binary_bytes(pid) > max_bytes and :erlang.garbage_collect(pid) and
      binary_bytes(pid) > max_bytes
  end

  # The process's virtual binary heap (young and old): the bytes of the off-heap binaries it
  # refers to. (Not `process_info(pid, :binary)`: it leaves out the binaries that appending
  # made, which are exactly those of `s = s .. s`.)
  defp binary_bytes(pid) do
    case Process.info(pid, :garbage_collection_info) do
      {:garbage_collection_info, info} ->
        (info[:bin_vheap_size] + info[:bin_old_vheap_size]) * :erlang.system_info(:wordsize)

      nil ->
        0
    end
  end
end

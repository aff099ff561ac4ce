defmodule Overworld.Lua.Worker do
  @moduledoc false
  # A worker of an `Overworld.Lua.Runtime`, and its guard (see the runtime's moduledoc, "How
  # it works"). The worker holds the base state and runs calls one at a time, each on the base
  # state (the state after the call is dropped). The guard, linked to it, stops a call that
  # passes its deadline or holds too many off-heap binaries, by killing the worker.
  #
  # Each worker process has `:atomics` slots of its own (a restarted worker has new ones, so
  # nothing of a killed worker's carries over):
  #
  #   @queued    calls sent to this worker and not done: callers add one before sending (and
  #              refuse past :max_queue), the worker takes one off when it is done with a call
  #   @running   the id of the running call; 0 when idle; minus the id once the call is
  #              condemned (the worker is being killed for it)
  #   @deadline  the running call's deadline (monotonic ms), written before @running
  #   @verdict   why the running call was condemned (1 timeout, 2 memory)
  #
  # The invariant: a worker is killed for a call only by whoever turns @running from that
  # call's id to minus it (one compare-and-swap), and the worker answers a call only after
  # turning @running from its id to 0 (the same compare-and-swap). So a call is either
  # answered or condemned, never both, and a worker is never killed for a call it finished.
  # A caller whose worker died reads @running: its own id means the VM killed the worker
  # during its call (max_heap_size); minus its id, the verdict says why; anything else means
  # its call never ran.

  use GenServer
  alias Overworld.Lua
  alias Overworld.Lua.{Limited, Runtime}

  @queued 1
  @running 2
  @deadline 3
  @verdict 4

  # How often (ms) the guard looks at the running call.
  @poll_ms 10

  @type config :: %{name: atom, max_heap_bytes: pos_integer}

  @spec child_spec({config, tuple, non_neg_integer}) :: Supervisor.child_spec()
  def child_spec({_config, _base, index} = arg) do
    %{id: {__MODULE__, index}, start: {__MODULE__, :start_link, [arg]}}
  end

  @spec start_link({config, tuple, non_neg_integer}) :: GenServer.on_start()
  def start_link(arg), do: GenServer.start_link(__MODULE__, arg)

  @doc """
  Kills `pid` for the call `call_id` if it is still running it; true if so. Called by the
  guard and by a caller whose wait ran out.
  """
  @spec condemn(pid, :atomics.atomics_ref(), pos_integer, :timeout | :memory_limit) :: boolean
  def condemn(pid, slots, call_id, why) do
    case :atomics.compare_exchange(slots, @running, call_id, -call_id) do
      :ok ->
        :atomics.put(slots, @verdict, if(why == :memory_limit, do: 2, else: 1))
        Process.exit(pid, :kill)
        true

      _ ->
        false
    end
  end

  @doc "Why the guard condemned the call that was running."
  @spec verdict(:atomics.atomics_ref()) :: :timeout | :memory_limit
  def verdict(slots),
    do: if(:atomics.get(slots, @verdict) == 2, do: :memory_limit, else: :timeout)

  @impl true
  def init({config, base, index}) do
    slots = :atomics.new(4, signed: true)
    # The heap now holds the base state (copied from the start arguments); a call may use
    # :max_heap_bytes more.
    {:total_heap_size, heap} = Process.info(self(), :total_heap_size)
    words = div(config.max_heap_bytes, :erlang.system_info(:wordsize))
    Process.flag(:max_heap_size, %{size: heap + words, kill: true, error_logger: false})
    worker = self()
    spawn_link(fn -> guard(worker, slots, config.max_heap_bytes) end)
    Runtime.put_worker(config.name, index, worker, slots)
    {:ok, %{base: base, slots: slots}}
  end

  @impl true
  def handle_info({:"$lua_call", reply, call_id, id, args, context, deadline}, s) do
    %{slots: slots} = s

    # A call whose caller has given up is not run.
    if System.monotonic_time(:millisecond) < deadline do
      :atomics.put(slots, @deadline, deadline)
      :atomics.put(slots, @running, call_id)
      answer = run(s.base, id, args, context)
      :atomics.sub(slots, @queued, 1)

      case :atomics.compare_exchange(slots, @running, call_id, 0) do
        :ok -> send(reply, {reply, answer})
        # Condemned: the kill is on its way.
        _ -> Process.sleep(:infinity)
      end
    else
      :atomics.sub(slots, @queued, 1)
    end

    {:noreply, s}
  end

  defp run(base, id, args, context) do
    answer = Lua.call_rpc(base, id, args, context)
    # math.random's generator (the process's): the next call starts from a fresh seed, even
    # if this one called math.randomseed.
    Process.delete(:rand_seed)

    case answer do
      {:ok, values, _state} -> {:ok, values}
      {:error, _} = error -> error
    end
  end

  defp guard(worker, slots, max_bytes) do
    Process.sleep(@poll_ms)
    call_id = :atomics.get(slots, @running)

    if call_id > 0 do
      cond do
        System.monotonic_time(:millisecond) >= :atomics.get(slots, @deadline) ->
          condemn(worker, slots, call_id, :timeout)

        Limited.binaries_over?(worker, max_bytes) ->
          condemn(worker, slots, call_id, :memory_limit)

        true ->
          false
      end
    end

    guard(worker, slots, max_bytes)
  end
end

defmodule Overworld.Lua.Runtime do
  @moduledoc """
  A pool of Lua workers that run the RPC functions of a set of scripts, each call under a time
  and a memory limit (as Nakama's pool of Lua VMs).

      {:ok, _} =
        Overworld.Lua.Runtime.start_link(
          name: MyGame.Lua,
          dir: "priv/lua",
          functions: %{"game" => %{"user_id" => fn [] -> Overworld.Lua.context()[:user] end}}
        )

      # priv/lua/gold.lua:
      #   overworld.register_rpc("gold", function(n) return {user = game.user_id(), gold = n * 2} end)

      {:ok, [%{"user" => 7, "gold" => 42}]} =
        Overworld.Lua.Runtime.call(MyGame.Lua, "gold", [21], %{user: 7})

  ## Options

    * `:name` (required) — the atom the runtime is registered under (its supervisor, and an ETS
      table of the same name); the first argument of `call/4`.
    * `:files` — the scripts to load, in order; or `:dir` — every `*.lua` file of a directory,
      in name order. One of them is required.
    * `:workers` — default `System.schedulers_online()`.
    * `:timeout` — milliseconds, default 1000: the longest a call may take, waiting for its
      worker included; then `{:error, :timeout}`.
    * `:max_heap_bytes` — default 16 MiB: the memory a call may use besides the loaded state
      (its heap; and as much again in strings longer than 64 bytes); then
      `{:error, :memory_limit}`.
    * `:max_queue` — default 64: the calls a worker may hold (running and waiting); one more
      is answered `{:error, :busy}` at once.
    * `:functions` — `%{table => %{name => fun}}`, Elixir functions exposed to the scripts
      (`Overworld.Lua.set_functions/3`); they read the call's context with
      `Overworld.Lua.context/0`.
    * `:print` — `:discard` (default) or `:log`, what Lua's `print` does.
    * `:max_string_bytes` — default 1 MiB: the longest string a script may make
      (`Overworld.Lua.new/1`).
    * `:load_timeout` — milliseconds, default 5000: the longest loading the scripts may take
      (their top-level code runs under the memory limit too).

  ## Calls

  Scripts register the functions clients may call with
  `overworld.register_rpc(id, function(...) ... end)`: `call/4` runs only those (a client
  never calls a global by name). The scripts are loaded once, at start, into a base state;
  every call runs on a worker's copy of that base state and its changes are dropped after
  it, so calls never see each other's data (not even through `math.randomseed`: the worker's
  generator is reseeded after each call). The context given to `call/4` is the call's
  `Overworld.Lua.context/0`, in Elixir functions, and `overworld.context()`, in Lua.

  A call's errors: `{:lua_error, message}` (the script failed; the worker carries on),
  `:not_found` (no such RPC), `:timeout`, `:memory_limit`, `:busy` (the worker's queue is
  full), `:noproc` (no such runtime), `:unavailable` (no worker could take it before its
  deadline).

  ## How it works

  A caller goes to a worker directly, through no process of the runtime's: it reads the
  workers from the runtime's ETS table, takes the next two in round-robin order (an
  `:atomics` counter) and sends its call to the one with fewer calls in hand (each worker
  counts them in `:atomics`: the `:max_queue` bound), monitors it, and waits for the answer
  until the deadline.

  Limits are enforced from outside the worker, because luerl cannot stop a script from
  inside (it has no instruction counter): the worker is killed, and its supervisor starts
  another from the base state (nothing is loaded again: a restart cannot fail). The calls
  waiting on a killed worker never ran, and go to another worker.

    * Time: a guard process linked to each worker looks every 10 ms at the call it runs
      (its id and deadline, which the worker writes into `:atomics`) and kills the worker
      once the deadline has passed. The caller's own wait ends 50 ms after the deadline, in
      case the guard is late, and kills the worker too.
    * Heap: the worker's `max_heap_size` is its heap with the base state plus
      `:max_heap_bytes`; the VM kills it when a garbage collection finds it larger.
    * Strings longer than 64 bytes live off the heap, where `max_heap_size` does not see
      them (`s = s .. s` reaches a gigabyte in under a second): no string is longer than
      `:max_string_bytes`, making strings costs reductions (so the worker is scheduled out,
      and signals reach it), and the guard adds up the binaries the worker holds while a
      call runs, and kills it over `:max_heap_bytes` (after a garbage collection).

  A guard wakes every 10 ms whether its worker is busy or not (a few microseconds each).

  Who killed the worker is settled by one compare-and-swap on the running call's id, so a
  worker is never killed for a call it has finished, and the caller whose call was running
  learns why (`:timeout` or `:memory_limit`).
  """

  use Supervisor
  require Logger
  alias Overworld.Lua
  alias Overworld.Lua.{Convert, Limited, Worker}
  alias Overworld.Options

  # Milliseconds a caller waits past its deadline for the guard to stop its call.
  @grace 50

  # The worker's `:atomics` slots (Overworld.Lua.Worker owns the layout).
  @queued 1
  @running 2

  @typedoc "Why a call failed."
  @type error ::
          {:lua_error, String.t()}
          | :not_found
          | :timeout
          | :memory_limit
          | :busy
          | :noproc
          | :unavailable

  defp schema do
    name = {:custom, &(is_atom(&1) and &1 not in [nil, true, false]), "an atom (not nil)"}

    paths =
      {:custom, &(is_list(&1) and Enum.all?(&1, fn f -> is_binary(f) end)), "a list of paths"}

    [
      name: {name, :required},
      files: {paths, []},
      dir: {{:custom, &(is_nil(&1) or is_binary(&1)), "a directory path"}, nil},
      workers: {:pos_integer, System.schedulers_online()},
      timeout: {:pos_integer, 1000},
      max_heap_bytes: {:pos_integer, 16 * 1024 * 1024},
      max_queue: {:pos_integer, 64},
      functions: {{:custom, &is_map/1, "a map of table names to maps of functions"}, %{}},
      print: {{:in, [:discard, :log]}, :discard},
      max_string_bytes: {:pos_integer, 1024 * 1024},
      load_timeout: {:pos_integer, 5000}
    ]
  end

  @doc """
  Loads the scripts and starts the runtime (see the options above). Raises `ArgumentError` on
  an invalid option; answers `{:error, {:lua_load, file, message}}` when a script cannot be
  loaded (read, compiled, or run).
  """
  @spec start_link(keyword) :: Supervisor.on_start() | {:error, {:lua_load, Path.t(), String.t()}}
  def start_link(opts) do
    o = Options.validate!(opts, schema(), inspect(__MODULE__))

    with {:ok, files} <- files(o),
         {:ok, base} <- load(o, files) do
      Supervisor.start_link(__MODULE__, {o, base}, name: o.name)
    end
  end

  @doc false
  @spec child_spec(keyword) :: Supervisor.child_spec()
  def child_spec(opts),
    do:
      Overworld.Options.supervisor_spec(__MODULE__, opts, {__MODULE__, Keyword.get(opts, :name)})

  defp files(%{files: [], dir: nil}),
    do: raise(ArgumentError, "expected :files or :dir for #{inspect(__MODULE__)}")

  defp files(%{files: files, dir: nil}), do: {:ok, files}

  defp files(%{files: [], dir: dir}) do
    case File.ls(dir) do
      {:ok, names} ->
        {:ok, for(n <- Enum.sort(names), Path.extname(n) == ".lua", do: Path.join(dir, n))}

      {:error, reason} ->
        {:error, {:lua_load, dir, load_error({:file, dir, reason})}}
    end
  end

  defp files(_),
    do: raise(ArgumentError, "expected :files or :dir for #{inspect(__MODULE__)}, not both")

  # Builds the base state, each script's top-level code run in a process of its own under
  # the limits.
  defp load(o, files) do
    lua = Lua.new(functions: o.functions, print: o.print, max_string_bytes: o.max_string_bytes)

    Enum.reduce_while(files, {:ok, lua}, fn
      file, {:ok, st} ->
        case Limited.run(fn -> Lua.load_file(st, file) end, o.load_timeout, o.max_heap_bytes) do
          {:ok, {:ok, st}} -> {:cont, {:ok, st}}
          {:ok, {:error, error}} -> {:halt, {:error, {:lua_load, file, load_error(error)}}}
          {:error, why} -> {:halt, {:error, {:lua_load, file, load_error(why)}}}
        end
    end)
    |> case do
      {:ok, st} -> {:ok, Lua.gc(st)}
      error -> error
    end
  end

  defp load_error({:file, _, reason}), do: "cannot read the file: #{:file.format_error(reason)}"
  defp load_error({:syntax, _, message}), do: message
  defp load_error({:lua_error, message}), do: message
  defp load_error(:timeout), do: "loading took too long (option :load_timeout)"
  defp load_error(:memory_limit), do: "loading used too much memory (option :max_heap_bytes)"
  defp load_error(other), do: inspect(other)

  @impl true
  def init({o, base}) do
    # The runtime's table, owned by this supervisor: callers read it, workers write their
    # row when they start. Only this module touches its rows, but for the names of the
    # scripts' match handlers that Overworld.Match.Lua keeps there once read.
    table = :ets.new(o.name, [:named_table, :public, read_concurrency: true])
    counter = :atomics.new(1, signed: false)
    :ets.insert(table, {:config, o.workers, o.timeout, o.max_queue, counter})
    :ets.insert(table, for(id <- Lua.rpc_names(base), do: {{:rpc, id}}))
    :ets.insert(table, {:base, %{timeout: o.timeout, max_heap_bytes: o.max_heap_bytes}})
    # The base state for states kept elsewhere (a Lua match's): in persistent_term, so that
    # every match refers to one copy and holds on its heap only what it changed.
    :persistent_term.put({__MODULE__, o.name, :base}, base)

    config = %{name: o.name, max_heap_bytes: o.max_heap_bytes}
    workers = for i <- 0..(o.workers - 1), do: Worker.child_spec({config, base, i})

    # A worker is killed by design when a call exceeds a limit: that is a stopped call, not a
    # fault, and a restart costs a copy of the base state (it cannot fail), so restarts are
    # not meant to give up.
    Supervisor.init(workers, strategy: :one_for_one, max_restarts: 100_000, max_seconds: 1)
  end

  @doc false
  # A worker announces itself (Overworld.Lua.Worker's init).
  @spec put_worker(atom, non_neg_integer, pid, :atomics.atomics_ref()) :: true
  def put_worker(runtime, index, pid, slots),
    do: :ets.insert(runtime, {{:worker, index}, pid, slots})

  @doc "The ids of the RPC functions the scripts registered, sorted."
  @spec functions(atom) :: [String.t()]
  def functions(runtime) when is_atom(runtime) do
    :ets.select(runtime, [{{{:rpc, :"$1"}}, [], [:"$1"]}]) |> Enum.sort()
  rescue
    # No such runtime.
    ArgumentError -> []
  end

  @doc """
  The state the scripts were loaded into, and the runtime's limits: for a process that keeps
  a Lua state of its own (a match's) and calls it with `Overworld.Lua.call_limited/4` or
  under limits of its own.
  """
  @spec base(atom) ::
          {:ok, Lua.state(), %{timeout: pos_integer, max_heap_bytes: pos_integer}}
          | {:error, :noproc}
  def base(runtime) when is_atom(runtime) do
    case :ets.lookup(runtime, :base) do
      [{:base, limits}] -> {:ok, :persistent_term.get({__MODULE__, runtime, :base}), limits}
      [] -> {:error, :noproc}
    end
  rescue
    ArgumentError -> {:error, :noproc}
  end

  @doc """
  Calls the RPC function `id` with `args` (converted as `Overworld.Lua` says, "Values";
  raises `ArgumentError` on one that cannot be) and `context` as the call's context. Answers
  the function's results.
  """
  @spec call(atom, String.t(), [term], map) :: {:ok, [term]} | {:error, error}
  def call(runtime, id, args, context \\ %{})
      when is_atom(runtime) and is_binary(id) and is_list(args) and is_map(context) do
    Convert.check!(args)

    case lookup_config(runtime) do
      nil ->
        {:error, :noproc}

      {workers, timeout, max_queue, counter} ->
        if :ets.member(runtime, {:rpc, id}) do
          deadline = System.monotonic_time(:millisecond) + timeout
          request = {id, args, context, deadline}
          # A call goes to another worker when its worker died before running it.
          attempt(runtime, {workers, max_queue, counter}, request, 2 * workers)
        else
          {:error, :not_found}
        end
    end
  end

  defp lookup_config(runtime) do
    case :ets.lookup(runtime, :config) do
      [{:config, workers, timeout, max_queue, counter}] -> {workers, timeout, max_queue, counter}
      [] -> nil
    end
  rescue
    ArgumentError -> nil
  end

  defp attempt(_runtime, _config, _request, 0), do: {:error, :unavailable}

  defp attempt(runtime, {workers, max_queue, counter} = config, request, tries) do
    {_id, _args, _context, deadline} = request

    with true <- System.monotonic_time(:millisecond) < deadline || {:error, :timeout},
         {pid, slots} <- pick(runtime, workers, counter) || {:error, :unavailable},
         true <- enqueue(slots, max_queue) || {:error, :busy} do
      case send_and_wait(pid, slots, request) do
        :retry -> attempt(runtime, config, request, tries - 1)
        answer -> answer
      end
    end
  end

  # The less busy of the next two workers in round-robin order.
  defp pick(runtime, workers, counter) do
    n = :atomics.add_get(counter, 1, 1)
    a = lookup_worker(runtime, rem(n, workers))

    if workers == 1 do
      a
    else
      b = lookup_worker(runtime, rem(n + 1, workers))

      case {a, b} do
        {nil, b} ->
          b

        {a, nil} ->
          a

        {{_, sa}, {_, sb}} ->
          if :atomics.get(sb, @queued) < :atomics.get(sa, @queued), do: b, else: a
      end
    end
  end

  defp lookup_worker(runtime, index) do
    case :ets.lookup(runtime, {:worker, index}) do
      [{_, pid, slots}] -> {pid, slots}
      [] -> nil
    end
  end

  defp enqueue(slots, max_queue) do
    if :atomics.add_get(slots, @queued, 1) > max_queue do
      :atomics.sub(slots, @queued, 1)
      false
    else
      true
    end
  end

  defp send_and_wait(pid, slots, {id, args, context, deadline}) do
    call_id = :erlang.unique_integer([:positive])
    mref = :erlang.monitor(:process, pid, [{:alias, :demonitor}])
    send(pid, {:"$lua_call", mref, call_id, id, args, context, deadline})
    wait = max(deadline - System.monotonic_time(:millisecond), 0) + @grace

    receive do
      {^mref, answer} ->
        Process.demonitor(mref, [:flush])
        answer

      {:DOWN, ^mref, :process, _, reason} ->
        down(id, slots, call_id, reason)
    after
      wait ->
        Process.demonitor(mref, [:flush])
        # The guard is late: stop the call here (if it is still this one that runs).
        _ = Worker.condemn(pid, slots, call_id, :timeout)
        stopped(id, :timeout)
    end
  end

  defp down(id, slots, call_id, reason) do
    running = :atomics.get(slots, @running)

    cond do
      running == call_id and reason == :killed -> stopped(id, :memory_limit)
      running == call_id -> {:error, {:lua_error, "#{id}: the worker failed: #{inspect(reason)}"}}
      running == -call_id -> stopped(id, Worker.verdict(slots))
      # Not this call's doing: it never ran (an answer comes before the monitor's message).
      true -> :retry
    end
  end

  defp stopped(id, why) do
    Logger.warning("Lua call #{inspect(id)} stopped: #{why}")
    {:error, why}
  end
end

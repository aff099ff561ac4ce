defmodule Overworld.Lua do
  @moduledoc """
  Game server code in Lua: a sandboxed Lua 5.3 state (on luerl 1.0, Debian's `erlang-luerl`)
  and the functions to load scripts into it, call their functions, and give them Elixir
  functions to call.

      lua = Overworld.Lua.new(functions: %{"game" => %{"now" => fn [] -> 42 end}})
      {:ok, lua} = Overworld.Lua.load_string(lua, "function add(a, b) return a + b + game.now() end")
      {:ok, [45], lua} = Overworld.Lua.call(lua, "add", [1, 2])

  A state is a value: every function here is pure but for the process dictionary key of
  `context/0`, and a call answers the state after it (`load_string/3` keeps what a script
  defines; a call may change globals). These functions run Lua in the calling process with no
  limit: a script's `while true do end` never returns. Code that must be stopped runs with
  `call_limited/4` (one call in a process of its own, under a time and memory limit) or in a
  pool, `Overworld.Lua.Runtime` (RPC functions called by clients).

  ## The sandbox

  Lua's `string`, `table`, `math`, `utf8` and `bit32` libraries, and `assert`, `error`,
  `pcall`, `ipairs`, `pairs`, `next`, `select`, `type`, `tostring`, `tonumber`, `unpack`,
  `rawget`, `rawset`, `rawequal`, `rawlen`, `getmetatable`, `setmetatable`. The `os` table
  has `os.time`, `os.clock`, `os.date` and `os.difftime` only. Nothing reaches outside the
  state: there is no `io`, `file`, `require`, `package`, `load`, `loadstring`, `loadfile`,
  `dofile`, `debug`, `string.dump`, `collectgarbage`, nor the rest of `os`. `print` discards
  its arguments (`print: :log` logs them at `:info`). `math.random` draws from the calling
  process's `:rand` generator (so calls on the same state do not repeat the same numbers).

  No string is longer than `:max_string_bytes` (1 MiB by default): `..` and the functions
  that make long strings (`string.rep`, `string.format`, `string.gsub`, `table.concat`)
  raise a Lua error rather than make one (long strings live outside the process heap, where
  memory limits see them late; `..` is compiled as a call to a bounded concatenation).

  luerl's Lua has no `goto` and no coroutines, and a division by zero (`1 // 0`, `1 / 0`)
  raises an Erlang `badarith` that `pcall` does not catch: the call fails with
  `"arithmetic error ..."`.

  ## Values

  Arguments go from Elixir to Lua, and results come back, by these rules:

  | Elixir                          | Lua                                     |
  | ------------------------------- | --------------------------------------- |
  | `nil`, `true`, `false`          | `nil`, `true`, `false`                  |
  | binary                          | string (bytes as they are)              |
  | integer, float                  | number                                  |
  | atom                            | its name, a string (one way)            |
  | list                            | a sequence: keys 1..n                   |
  | map                             | table (keys: strings, numbers; atoms become strings) |

  Back from Lua, a number that is an integral float within ±2^53 is an integer (`3.0` is
  `3`); a table whose keys are exactly 1..n is a list (the empty table is `[]`); any other
  table is a map whose keys are strings (number and boolean keys are written out: `"3"`,
  `"1.5"`, `"true"`). A `nil` in a list leaves a hole in the Lua sequence (so it comes back
  as a map). Other Elixir values (tuples, pids, references, functions) raise `ArgumentError`;
  Lua functions, userdata, tables that contain themselves and tables with table keys cannot
  come back (the call fails with a `{:lua_error, message}` saying so).

      iex> {:ok, lua} = Overworld.Lua.load_string(Overworld.Lua.new(), "function echo(...) return ... end")
      iex> {:ok, values, _lua} = Overworld.Lua.call(lua, "echo", [%{"a" => [1, 2.5]}, %{b: 3.0}, :ok, nil, %{}])
      iex> values
      [%{"a" => [1, 2.5]}, %{"b" => 3}, "ok", nil, []]

      iex> {:ok, [table], _lua} = Overworld.Lua.eval(Overworld.Lua.new(), "return {10, 20, x = {[1.5] = true}}")
      iex> table
      %{"1" => 10, "2" => 20, "x" => %{"1.5" => true}}

  ## Errors

  Loading answers `{:error, {:syntax, chunk_name, message}}` for code that does not compile
  and `{:error, {:lua_error, message}}` for a chunk that raises; a call answers
  `{:error, {:lua_error, message}}`. A message is Lua's: the function called, the file and
  line where the error was raised, and the error (its value, for Lua's `error(value)`).

      iex> {:ok, lua} = Overworld.Lua.load_string(Overworld.Lua.new(), "function f(t)\\n  return t.x.y\\nend", "f.lua")
      iex> Overworld.Lua.call(lua, "f", [%{}])
      {:error, {:lua_error, "f: f.lua:2: attempt to index a nil value (field 'y')"}}
      iex> Overworld.Lua.load_string(lua, "x = = 1", "bad.lua")
      {:error, {:syntax, "bad.lua", "bad.lua:1: syntax error before: '='"}}

  ## Elixir functions

  `set_functions/3` (or `new/1`'s `:functions`) puts Elixir functions in a table of the state.
  A function gets the Lua arguments as a list of Elixir values and answers a value, or
  `{:multi, values}` for several results, or `{:error, message}` to raise a Lua error
  (as a raise does): Lua code sees `error("table.name: message")`, which `pcall` catches.

  A function runs in the process that runs the call, so it reads the call's context (who is
  calling: the user id of an RPC) with `context/0`: the map given to `call/4`,
  `call_limited/4` (`:context`) or `Overworld.Lua.Runtime.call/4`. Lua code reads it with
  `overworld.context()`.

  ## Registered functions

  A script registers the functions clients may call by name:

      overworld.register_rpc("add_gold", function(amount) ... end)

  They are kept in the table `__overworld_rpc` of the state (`rpc_names/1` lists them,
  `call_rpc/4` calls one), and they are the only functions `Overworld.Lua.Runtime.call/4`
  runs: a client never calls a global by name.

  ## Long-lived states

  A state that is kept from call to call (a match's) gathers the tables its calls no longer
  use: luerl's heap is collected only by `gc/1`, which costs time in proportion to what the
  state holds. Call it every few hundred calls, or when `size/1` has grown.
  """

  alias Overworld.Lua.{Convert, Errors, Exposed, Limited, Sandbox, Strings}
  alias Overworld.Options

  @typedoc "A Lua state (luerl's)."
  @type state :: tuple

  @typedoc "A global function's name, or the path of keys to a function in nested tables."
  @type path :: String.t() | [String.t(), ...]

  @typedoc "What an Elixir function exposed to Lua answers (see \"Elixir functions\")."
  @type result :: term | {:multi, [term]} | {:error, term}

  @typedoc "Elixir functions by name, exposed to Lua in a table."
  @type functions :: %{String.t() => ([term] -> result)}

  @typedoc "Why loading a script failed."
  @type load_error ::
          {:syntax, String.t(), String.t()} | {:lua_error, String.t()} | {:file, Path.t(), term}

  @default_timeout 1000
  @default_max_heap_bytes 16 * 1024 * 1024
  @default_max_string_bytes 1024 * 1024

  defguardp is_state(st) when is_tuple(st) and elem(st, 0) == :luerl

  @doc """
  A new sandboxed state (see "The sandbox").

  ## Options

    * `:functions` — `%{table_name => %{name => fun}}`, Elixir functions exposed to Lua (as
      `set_functions/3` does); default none.
    * `:print` — `:discard` (default) or `:log` (Lua's `print` logs at `:info`).
    * `:max_string_bytes` — the longest string Lua code may make, default 1 MiB (1,048,576);
      longer, `..`, `string.rep`, `string.format`, `string.gsub` and `table.concat` raise a
      Lua error. (Long strings live outside the process heap, where the memory limit of
      `call_limited/4` and `Overworld.Lua.Runtime` would see them late.)
  """
  @spec new(keyword) :: state
  def new(opts \\ []) do
    o =
      Options.validate!(
        opts,
        [
          functions: {{:custom, &is_map/1, "a map of table names to maps of functions"}, %{}},
          print: {{:in, [:discard, :log]}, :discard},
          max_string_bytes: {:pos_integer, @default_max_string_bytes}
        ],
        inspect(__MODULE__)
      )

    Enum.reduce(o.functions, Sandbox.new(o.print, o.max_string_bytes), fn {table, funs}, st ->
      set_functions(st, table, funs)
    end)
  end

  @doc """
  Runs the chunk `code` (a script: it defines globals, registers functions); answers the state
  with what it did. `chunk_name` names it in error messages (a file name, usually).
  """
  @spec load_string(state, binary, String.t()) :: {:ok, state} | {:error, load_error}
  def load_string(state, code, chunk_name \\ "chunk")
      when is_state(state) and is_binary(code) and is_binary(chunk_name) do
    with {:ok, f, st} <- compile(state, code, chunk_name),
         {:ok, _results, st} <- run_chunk(f, st, chunk_name) do
      {:ok, st}
    end
  end

  @doc "Reads the file at `path` and runs it as `load_string/3` does (its path is its name)."
  @spec load_file(state, Path.t()) :: {:ok, state} | {:error, load_error}
  def load_file(state, path) when is_state(state) do
    case File.read(path) do
      {:ok, code} -> load_string(state, code, to_string(path))
      {:error, reason} -> {:error, {:file, path, reason}}
    end
  end

  @doc """
  Runs the chunk `code` and answers what it returns.

      iex> {:ok, values, _lua} = Overworld.Lua.eval(Overworld.Lua.new(), "return 7 // 2, 7 / 2, ('x'):rep(3)")
      iex> values
      [3, 3.5, "xxx"]
  """
  @spec eval(state, binary) :: {:ok, [term], state} | {:error, load_error}
  def eval(state, code) when is_state(state) and is_binary(code) do
    with {:ok, f, st} <- compile(state, code, "eval"),
         {:ok, results, st} <- run_chunk(f, st, "eval") do
      decode_results("eval", results, st)
    end
  end

  @doc """
  Calls the function at `path` with `args` (converted as "Values" says; raises
  `ArgumentError` on one that cannot be), with `context` as the call's context (`context/0`).
  Answers its results and the state after the call.
  """
  @spec call(state, path, [term], map) ::
          {:ok, [term], state} | {:error, {:lua_error, String.t()}}
  def call(state, path, args, context \\ %{})
      when is_state(state) and is_list(args) and is_map(context) do
    keys = keys!(path)
    Convert.check!(args)
    Exposed.with_context(context, fn -> run_call(state, keys, Enum.join(keys, "."), args) end)
  end

  @doc """
  Calls the function registered as `id` with `overworld.register_rpc(id, fn)`, as `call/4`
  does (its errors name it `id`).
  """
  @spec call_rpc(state, String.t(), [term], map) ::
          {:ok, [term], state} | {:error, {:lua_error, String.t()}}
  def call_rpc(state, id, args, context \\ %{})
      when is_state(state) and is_binary(id) and is_list(args) and is_map(context) do
    Convert.check!(args)
    keys = [Sandbox.rpc_table(), id]
    Exposed.with_context(context, fn -> run_call(state, keys, id, args) end)
  end

  @doc """
  Calls the function at `path` as `call/4` does, in a new process, under limits: the call is
  stopped after `:timeout` milliseconds (default #{@default_timeout}), or when it uses more
  than `:max_heap_bytes` of memory (default #{@default_max_heap_bytes}, 16 MiB) besides the
  state it starts from. `:context` is the call's context (default `%{}`).

  For a state kept between calls (a match's): the state travels to the process and back, so
  a call costs a process spawn and two copies of the state more than `call/4`: some 30 µs
  for a state of 40 KB, some 4 ms for 2.7 MB (a table of 10,000 small tables). Keep the
  state small with `gc/1`. The state after a stopped call is lost: keep the one given.
  """
  @spec call_limited(state, path, [term], keyword) ::
          {:ok, [term], state}
          | {:error, {:lua_error, String.t()} | :timeout | :memory_limit | {:crashed, term}}
  def call_limited(state, path, args, opts \\ []) when is_state(state) and is_list(args) do
    o =
      Options.validate!(
        opts,
        [
          timeout: {:pos_integer, @default_timeout},
          max_heap_bytes: {:pos_integer, @default_max_heap_bytes},
          context: {{:custom, &is_map/1, "a map"}, %{}}
        ],
        "Overworld.Lua.call_limited/4"
      )

    keys = keys!(path)
    Convert.check!(args)

    name = Enum.join(keys, ".")
    run = fn -> Exposed.with_context(o.context, fn -> run_call(state, keys, name, args) end) end

    case Limited.run(run, o.timeout, o.max_heap_bytes) do
      {:ok, answer} -> answer
      {:error, _} = error -> error
    end
  end

  @doc """
  Puts Elixir functions in the table `table` of the state (a global, made if missing), as
  `table.name(...)` (see "Elixir functions").

      iex> lua = Overworld.Lua.set_functions(Overworld.Lua.new(), "util", %{
      ...>   "pair" => fn [a, b] -> {:multi, [b, a]} end,
      ...>   "fail" => fn _ -> {:error, "no such thing"} end
      ...> })
      iex> {:ok, values, _lua} = Overworld.Lua.eval(lua, "local a, b = util.pair(1, 2); return a, b, pcall(util.fail)")
      iex> values
      [2, 1, false, "util.fail: no such thing"]
  """
  @spec set_functions(state, String.t(), functions) :: state
  def set_functions(state, table, functions)
      when is_state(state) and is_binary(table) and is_map(functions) do
    st =
      case :luerl_new.get_table_keys([table], state) do
        {:ok, nil, st} ->
          {t, st} = :luerl_heap.alloc_table([], st)
          Sandbox.set(st, [table], t)

        {:ok, {:tref, _}, st} ->
          st

        {:ok, other, _} ->
          raise ArgumentError,
                "cannot put functions in #{inspect(table)}: it is #{Convert.describe(other)}, not a table"
      end

    Enum.reduce(functions, st, fn
      {name, fun}, st when is_binary(name) and is_function(fun, 1) ->
        Sandbox.set(st, [table, name], Exposed.wrap(table <> "." <> name, fun))

      {name, fun}, _st ->
        raise ArgumentError,
              "expected functions as %{name => fun/1} with string names, got: " <>
                "#{inspect(name)} => #{inspect(fun)}"
    end)
  end

  @doc """
  The context of the call the calling process is running (see "Elixir functions"), `%{}`
  outside a call.
  """
  @spec context() :: map
  defdelegate context, to: Exposed

  @doc """
  The ids of the functions registered with `overworld.register_rpc(id, fn)`, sorted.

      iex> {:ok, lua} = Overworld.Lua.load_string(Overworld.Lua.new(), ~S'overworld.register_rpc("hello", function(name) return "hi " .. name end)')
      iex> Overworld.Lua.rpc_names(lua)
      ["hello"]
      iex> {:ok, ["hi ann"], _lua} = Overworld.Lua.call_rpc(lua, "hello", ["ann"])
  """
  @spec rpc_names(state) :: [String.t()]
  def rpc_names(state) when is_state(state) do
    case :luerl_new.get_table_keys([Sandbox.rpc_table()], state) do
      {:ok, {:tref, _} = t, st} ->
        for({k, _} <- :luerl_new.decode(t, st), is_binary(k), do: k) |> Enum.sort()

      _ ->
        []
    end
  end

  @doc "Collects the tables and functions of the state that nothing refers to any more."
  @spec gc(state) :: state
  def gc(state) when is_state(state), do: :luerl_new.gc(state)

  @doc "The memory of the state, in bytes (as a term on this node's heap)."
  @spec size(state) :: non_neg_integer
  def size(state) when is_state(state),
    do: :erts_debug.size(state) * :erlang.system_info(:wordsize)

  ## Running

  defp keys!(name) when is_binary(name), do: [name]

  defp keys!([_ | _] = path) do
    if Enum.all?(path, &is_binary/1), do: path, else: keys!(nil)
  end

  defp keys!(other) do
    raise ArgumentError,
          "expected a function name (a string) or a path of names, got: #{inspect(other)}"
  end

  # luerl_comp:string/2's passes, with `..` rewritten between parsing and compiling
  # (Overworld.Lua.Strings).
  defp compile(st, code, chunk) do
    with {:ok, tokens, _} <- :luerl_scan.string(:erlang.binary_to_list(code)),
         {:ok, parsed} <- :luerl_parse.chunk(tokens),
         {:ok, compiled} <-
           :luerl_comp.forms(Strings.guard_concat(parsed), [:return, {:file, chunk}]) do
      {f, st} = :luerl_emul.load_chunk(compiled, st)
      {:ok, f, st}
    else
      {:error, error, _} -> {:error, {:syntax, chunk, Errors.syntax(chunk, error)}}
      {:error, error} -> {:error, {:syntax, chunk, Errors.syntax(chunk, error)}}
    end
  catch
    # luerl's compiler fails on some of what it does not support (`goto`).
    :error, reason ->
      {:error,
       {:syntax, chunk,
        "#{chunk}: luerl cannot compile this chunk (goto and labels are not supported): " <>
          inspect(reason, limit: 10)}}
  end

  defp run_chunk(f, st, chunk) do
    case :luerl_new.call_function(f, [], st) do
      {:ok, results, st} -> {:ok, results, st}
      {:lua_error, reason, st} -> {:error, {:lua_error, Errors.chunk(chunk, reason, st)}}
    end
  catch
    :error, reason -> {:error, {:lua_error, Errors.erlang(chunk, :error, reason)}}
  end

  defp run_call(st, keys, name, args) do
    case :luerl_new.get_table_keys(keys, st) do
      {:ok, nil, _st} ->
        {:error, {:lua_error, "#{name}: undefined function"}}

      {:ok, f, st} ->
        {args, st} = Convert.encode_list(args, st)

        case :luerl_new.call_function(f, args, st) do
          {:ok, results, st} -> decode_results(name, results, st)
          {:lua_error, reason, st} -> {:error, {:lua_error, Errors.lua(name, reason, st)}}
        end

      {:lua_error, reason, st} ->
        {:error, {:lua_error, Errors.lua(name, reason, st)}}
    end
  catch
    :error, reason -> {:error, {:lua_error, Errors.erlang(name, :error, reason)}}
  end

  defp decode_results(name, results, st) do
    {:ok, Convert.decode_list(results, st), st}
  rescue
    e in Convert.Error -> {:error, {:lua_error, "#{name}: cannot return a value: #{e.message}"}}
  end
end

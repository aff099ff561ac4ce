defmodule Overworld.Lua.Sandbox do
  @moduledoc false
  # The sandboxed state of `Overworld.Lua.new/1`: luerl's standard state, less everything
  # that reaches outside the state (files, the OS, code loading, the interpreter's internals),
  # plus Overworld's `overworld` table. What is removed and why:
  #
  #   io, file                   files and standard input/output
  #   os.execute, os.exit,       the OS (only os.time, os.clock, os.date and os.difftime stay:
  #   os.getenv, os.remove,        they read clocks)
  #   os.rename, os.tmpname
  #   require, package           loading modules from the file system
  #   load, loadstring,          compiling code at run time (`load` takes a custom environment
  #   loadfile, dofile             argument in luerl too; none of it is needed by game code)
  #   debug                      the interpreter's internals (metatables of anything, upvalues)
  #   string.dump                bytecode of functions
  #   collectgarbage             the collector of luerl's heap (slow; the runtime manages it)
  #   eprint                     luerl's debugging print, to standard output
  #
  # Replaced: `print` (standard output, through the group leader, a process shared by the
  # node) by one that discards its arguments or logs them; `math.random` and
  # `math.randomseed`, whose generator luerl keeps in the state (a pool that runs every call on
  # the same base state would answer the same "random" numbers every call), by ones on the
  # calling process's `:rand` generator; `..` and the string functions that make long strings
  # by bounded ones (Overworld.Lua.Strings).

  require Logger
  alias Overworld.Lua.{Convert, Exposed, Strings}

  @removed [
    ["io"],
    ["file"],
    ["require"],
    ["package"],
    ["load"],
    ["loadstring"],
    ["loadfile"],
    ["dofile"],
    ["debug"],
    ["collectgarbage"],
    ["eprint"],
    ["string", "dump"]
  ]

  @os_kept ["time", "clock", "date", "difftime"]

  # The registry of RPC functions: a table of the state, filled by the scripts at load.
  @rpc_table "__overworld_rpc"

  @prelude """
  overworld = overworld or {}
  local rpcs = {}
  #{@rpc_table} = rpcs
  function overworld.register_rpc(id, fn)
    if type(id) ~= "string" or id == "" then
      error("overworld.register_rpc: the id must be a non-empty string")
    end
    if type(fn) ~= "function" then
      error("overworld.register_rpc: expected a function for " .. id .. ", got " .. type(fn))
    end
    rpcs[id] = fn
  end
  """

  @doc "The Lua table RPC functions are registered in."
  @spec rpc_table() :: String.t()
  def rpc_table, do: @rpc_table

  @doc "A new sandboxed state (`print:` `:discard` or `:log`; strings up to `max_string`)."
  @spec new(:discard | :log, pos_integer) :: tuple
  def new(print, max_string) do
    st = :luerl_new.init()
    st = Enum.reduce(@removed, st, &set(&2, &1, nil))

    {os_funs, st} =
      Enum.map_reduce(@os_kept, st, fn name, st ->
        {:ok, f, st} = :luerl_new.get_table_keys(["os", name], st)
        {{name, f}, st}
      end)

    {os, st} = :luerl_heap.alloc_table(os_funs, st)
    st = set(st, ["os"], os)
    st = set(st, ["print"], {:erl_func, print_fun(print)})
    st = set(st, ["math", "random"], Exposed.wrap("math.random", &random/1))
    st = set(st, ["math", "randomseed"], Exposed.wrap("math.randomseed", &randomseed/1))
    {:ok, f, st} = :luerl_new.load(@prelude, [:return, {:file, "overworld"}], st)
    {:ok, _, st} = :luerl_new.call_function(f, [], st)
    st = set(st, ["overworld", "context"], Exposed.wrap("overworld.context", &context/1))
    st = Strings.install(st, max_string)
    :luerl_new.gc(st)
  end

  @doc "Sets the value at `path` (strings) of the state."
  @spec set(tuple, [String.t()], term) :: tuple
  def set(st, path, value) do
    {:ok, [], st} = :luerl_new.set_table_keys(path, value, st)
    st
  end

  defp print_fun(:discard), do: fn _args, st -> {[], st} end

  defp print_fun(:log) do
    fn args, st ->
      Logger.info(fn -> ["lua: " | Enum.map_join(args, "\t", &printable/1)] end)
      {[], st}
    end
  end

  defp printable(s) when is_binary(s), do: String.slice(s, 0, 1000)
  defp printable(n) when is_number(n), do: to_string(n)
  defp printable(nil), do: "nil"
  defp printable(b) when is_boolean(b), do: to_string(b)
  defp printable(v), do: Convert.describe(v)

  defp context(_args), do: Exposed.context()

  # math.random(), math.random(m), math.random(m, n), as Lua's.
  defp random([]), do: :rand.uniform()
  defp random([m]), do: random([1, m])

  defp random([m, n | _]) do
    case {integer(m), integer(n)} do
      {m, n} when is_integer(m) and is_integer(n) and m <= n -> m + :rand.uniform(n - m + 1) - 1
      {m, n} when is_integer(m) and is_integer(n) -> {:error, "interval is empty"}
      _ -> {:error, "expected integers, got #{inspect(m)} and #{inspect(n)}"}
    end
  end

  defp randomseed([seed | _]) when is_number(seed) do
    _ = :rand.seed(:exsss, :erlang.phash2(seed))
    nil
  end

  defp randomseed(_), do: {:error, "expected a number"}

  defp integer(i) when is_integer(i), do: i
  defp integer(f) when is_float(f) and f == trunc(f), do: trunc(f)
  defp integer(_), do: nil
end

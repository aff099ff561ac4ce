defmodule Overworld.Lua.Errors do
  @moduledoc false
  # Readable messages for what goes wrong in luerl: syntax errors of the compiler, Lua errors
  # (`{lua_error, reason, state}`: the reason is one of luerl's tuples, or `{error_call, value}`
  # for Lua's own `error(value)`) and Erlang errors that escape luerl (it divides with Erlang's
  # arithmetic: `1/0` raises `badarith`, which no `pcall` catches).
  #
  # A Lua error's message names the innermost Lua function's file and line, as Lua's do
  # (`script.lua:3: attempt to index a nil value (field 'x')`), read from the call stack the
  # error's state holds (`luerl_new:get_stacktrace/1`).

  alias Overworld.Lua.Convert

  @doc "The message of a compile error: `chunk:line: message`."
  @spec syntax(String.t(), term) :: String.t()
  def syntax(chunk, [{line, module, desc} | _]) when is_integer(line) and is_atom(module) do
    "#{chunk}:#{line}: #{format_desc(module, desc)}"
  end

  def syntax(chunk, [{_file, [first | _]} | _]), do: syntax(chunk, [first])
  def syntax(chunk, {line, module, desc}), do: syntax(chunk, [{line, module, desc}])
  def syntax(chunk, other), do: "#{chunk}: #{inspect(other, limit: 20)}"

  defp format_desc(module, desc) do
    module.format_error(desc) |> IO.chardata_to_string()
  rescue
    _ -> inspect(desc, limit: 20)
  end

  @doc """
  The message of a Lua error raised while running the function `name`:
  `name: file:line: message`.
  """
  @spec lua(String.t(), term, tuple) :: String.t()
  def lua(name, reason, st), do: prefix(name) <> location(st, "") <> reason(reason, st)

  @doc """
  The message of a Lua error raised while running the chunk `chunk` (loading a script):
  `file:line: message` (`chunk: message` when the stack has no line).
  """
  @spec chunk(String.t(), term, tuple) :: String.t()
  def chunk(chunk, reason, st), do: location(st, prefix(chunk)) <> reason(reason, st)

  @doc "The message of an Erlang error that escaped luerl while running `name`."
  @spec erlang(String.t(), atom, term) :: String.t()
  def erlang(name, :error, :badarith),
    do: prefix(name) <> "arithmetic error (division by zero, or a number too large)"

  def erlang(name, :error, :system_limit), do: prefix(name) <> "system limit reached"

  def erlang(name, kind, reason),
    do: prefix(name) <> "internal error: #{inspect({kind, reason}, limit: 20)}"

  defp prefix(name), do: name <> ": "

  defp location(st, default) do
    Enum.find_value(:luerl_new.get_stacktrace(st), default, fn
      {_name, _args, info} when is_list(info) ->
        case {info[:file], info[:line]} do
          # luerl names a frame that is not a Lua function's "-no-file-".
          {"-no-file-", _} -> nil
          {file, line} when is_binary(file) and is_integer(line) -> "#{file}:#{line}: "
          _ -> nil
        end

      _ ->
        nil
    end)
  catch
    _, _ -> default
  end

  @doc "A luerl error reason in Lua's words."
  @spec reason(term, tuple) :: String.t()
  def reason({:error_call, value}, st), do: error_value(value, st)

  def reason({:illegal_index, obj, key}, _st),
    do: "attempt to index #{value_name(obj)} (field #{quote_key(key)})"

  def reason({:undefined_function, f}, _st), do: "attempt to call #{value_name(f)}"

  def reason({:undefined_method, obj, name}, _st),
    do: "attempt to call method #{quote_key(name)} of #{value_name(obj)}"

  def reason({:badarg, :.., args}, _st) when is_list(args) do
    bad = Enum.find(args, List.first(args), &(not (is_binary(&1) or is_number(&1))))
    "attempt to concatenate #{value_name(bad)}"
  end

  def reason({:badarg, where, args}, _st) when is_list(args) do
    "bad argument to '#{where}' (#{Enum.map_join(args, ", ", &value_name/1)})"
  end

  def reason({:illegal_value, where, value}, _st),
    do: "invalid value in '#{where}': #{value_name(value)}"

  def reason({:illegal_value, value}, _st), do: "invalid value: #{value_name(value)}"
  def reason({:illegal_comp, where}, _st), do: "attempt to compare values in '#{where}'"
  def reason({:no_module, mod}, _st), do: "module '#{mod}' not found"

  def reason(other, _st) do
    :luerl_lib.format_error(other) |> IO.chardata_to_string()
  rescue
    _ -> inspect(other, limit: 20)
  end

  # error(value): a string as it is, anything else as Elixir shows its conversion.
  defp error_value(s, _st) when is_binary(s), do: s
  defp error_value(nil, _st), do: "nil"

  defp error_value(v, st) do
    case Convert.decode(v, st) do
      n when is_number(n) -> to_string(n)
      other -> inspect(other, limit: 20)
    end
  rescue
    Convert.Error -> Convert.describe(v)
  end

  defp quote_key(k) when is_binary(k), do: "'#{k}'"
  defp quote_key(k), do: value_name(k)

  defp value_name(nil), do: "a nil value"
  defp value_name(s) when is_binary(s), do: inspect(s, limit: 20, printable_limit: 60)
  defp value_name(n) when is_number(n), do: to_string(n)
  defp value_name(b) when is_boolean(b), do: to_string(b)
  defp value_name(other), do: Convert.describe(other)
end

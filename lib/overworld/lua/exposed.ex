defmodule Overworld.Lua.Exposed do
  @moduledoc false
  # Elixir functions as Lua functions (`Overworld.Lua.set_functions/3`), and the per-call
  # context they read (`Overworld.Lua.context/0`).
  #
  # A luerl Erlang function is `#erl_func{code = Fun}` (the tuple `{:erl_func, Fun}`), where
  # `Fun.(args, state)` answers `{results, state}` with luerl values. Ours decodes the
  # arguments, calls the Elixir function, and encodes what it returns; anything that goes
  # wrong becomes a Lua error with a message (`{lua_error, {error_call, message}, state}`,
  # the error `error(message)` raises in Lua), so `pcall` catches it. The error is raised
  # outside the `try` that catches the function's own exceptions.

  alias Overworld.Lua.Convert

  @context_key {Overworld.Lua, :context}

  @typedoc "What an exposed function answers."
  @type result :: term | {:multi, [term]} | {:error, term}

  @doc "A luerl function calling `fun` (called `label` in error messages)."
  @spec wrap(String.t(), ([term] -> result)) :: {:erl_func, function}
  def wrap(label, fun) when is_function(fun, 1) do
    {:erl_func, fn args, st -> call(label, fun, args, st) end}
  end

  defp call(label, fun, args, st) do
    outcome =
      try do
        args = Convert.decode_list(args, st)
        {:ok, fun.(args)}
      rescue
        e in Convert.Error -> {:error, "bad argument (#{e.message})"}
        e -> {:error, Exception.message(e)}
      catch
        :throw, value -> {:error, "throw: #{inspect(value, limit: 20)}"}
        :exit, reason -> {:error, "exit: #{inspect(reason, limit: 20)}"}
      end

    case outcome do
      {:ok, {:multi, values}} when is_list(values) -> results(label, values, st)
      {:ok, {:error, message}} -> raise_lua(label, message, st)
      {:ok, value} -> results(label, [value], st)
      {:error, message} -> raise_lua(label, message, st)
    end
  end

  defp results(label, values, st) do
    Convert.encode_list(values, st)
  rescue
    e in ArgumentError -> raise_lua(label, "returned a value Lua cannot hold: " <> e.message, st)
  end

  @doc "Raises a Lua error whose value is the string `label: message`."
  @spec raise_lua(String.t(), term, tuple) :: no_return
  def raise_lua(label, message, st) do
    message = if is_binary(message), do: message, else: inspect(message, limit: 20)
    :erlang.error({:lua_error, {:error_call, label <> ": " <> message}, st})
  end

  @doc "The context of the call the calling process runs (`%{}` outside a call)."
  @spec context() :: map
  def context, do: Process.get(@context_key, %{})

  @doc "Runs `fun` with `context` as the calling process's context."
  @spec with_context(map, (() -> result)) :: result when result: term
  def with_context(context, fun) do
    previous = Process.put(@context_key, context)

    try do
      fun.()
    after
      if previous == nil,
        do: Process.delete(@context_key),
        else: Process.put(@context_key, previous)
    end
  end
end

defmodule Overworld.RPC do
  @moduledoc """
  Remote procedure calls: functions of the game's server code that clients call by id, with
  their account, over HTTP (`POST /api/v1/rpc/:id`) or the WebSocket (REQUEST `rpc`).

  A function is registered by the server's options, in Elixir or in Lua:

    * `rpc: %{"id" => fun}` — `fun.(context, payload)` (or `{module, function}`, called the
      same way), where `context` is `%{user_id: user_id, server: server_name}` and `payload`
      the request's JSON value (nil when there is none). It answers `{:ok, result}` (any JSON
      value) or `{:error, code, message}` with a code of `t:code/0`. It runs in the calling
      connection's process (over HTTP, at normal priority) or, over the WebSocket, in a task of
      the session's (at most 16 at once per connection).
    * `lua: [dir: "priv/lua", ...]` — the scripts of an `Overworld.Lua.Runtime` started by the
      server; they register functions with `overworld.register_rpc(id, function(payload)
      ... end)`, run sandboxed in a pool, each call under a time and memory limit. The calling
      user is `overworld.context().user_id`; the server API is `Overworld.Lua.Server`'s.

  An id registered in Elixir is looked up first. Errors answer (HTTP status, code):
  unknown id (404 `unknown_rpc`), the function's own (`t:code/0`), an Elixir function that
  raises (500 `rpc_failed`, logged), a Lua error (500 `rpc_failed` with Lua's message), a Lua
  call over its time (504 `rpc_timeout`) or memory (500 `rpc_memory_limit`), a pool that is
  full (503 `busy`).
  """
  require Logger

  @typedoc "The error codes a function may answer, and their HTTP statuses."
  @type code ::
          :invalid_argument
          | :unauthenticated
          | :permission_denied
          | :not_found
          | :conflict
          | :unavailable
          | :internal

  @statuses %{
    invalid_argument: 400,
    unauthenticated: 401,
    permission_denied: 403,
    not_found: 404,
    conflict: 409,
    unavailable: 503,
    internal: 500
  }

  @typedoc """
  An answer: the result as JSON text (encoded once, here), or the HTTP status, code and
  message of the error.
  """
  @type answer :: {:ok, iodata} | {:error, pos_integer, binary, binary}

  @doc """
  Calls the function `id` of a server's config for `user_id` with `payload`; answers its
  result as JSON text (`payload/1` makes the body clients get).
  """
  @spec call(Overworld.Server.Config.t(), term, binary | nil, term) :: answer
  def call(cfg, id, user_id, payload) do
    answer =
      case cfg.rpc do
        %{^id => fun} -> elixir(fun, id, %{user_id: user_id, server: cfg.name}, payload)
        _ -> lua(cfg.lua, id, user_id, payload)
      end

    json(answer, id)
  end

  # A result goes to the client as JSON: one that cannot be (a tuple, a pid, bytes that are
  # not UTF-8) is the function's failure, said here, not the connection's.
  defp json({:ok, value}, id) do
    {:ok, :jiffy.encode(Overworld.Web.nulls(value))}
  catch
    _, _ ->
      Logger.error("rpc #{inspect(id)}: answered a value that is not JSON")
      {:error, 500, "rpc_failed", "the function answered a value that is not JSON"}
  end

  defp json(error, _id), do: error

  @doc ~S"""
  The body of a call's answer: `{"payload": result}`, from the result's JSON text.

      iex> Overworld.RPC.payload("[1,2]") |> IO.iodata_to_binary()
      ~s({"payload":[1,2]})
  """
  @spec payload(iodata) :: iodata
  def payload(json), do: [~s({"payload":), json, "}"]

  defp elixir(fun, id, ctx, payload) do
    result =
      case fun do
        {m, f} -> apply(m, f, [ctx, payload])
        f when is_function(f, 2) -> f.(ctx, payload)
      end

    case result do
      {:ok, value} ->
        {:ok, value}

      {:error, code, message} when is_map_key(@statuses, code) and is_binary(message) ->
        {:error, Map.fetch!(@statuses, code), Atom.to_string(code), message}

      other ->
        Logger.error("rpc #{id}: answered #{inspect(other, limit: 10)}")
        {:error, 500, "rpc_failed", "the function failed"}
    end
  catch
    kind, reason ->
      Logger.error("rpc #{id} failed: " <> Exception.format(kind, reason, __STACKTRACE__))
      {:error, 500, "rpc_failed", "the function failed"}
  end

  defp lua(nil, id, _user, _payload), do: unknown(id)

  defp lua(runtime, id, user, payload) when is_binary(id) do
    case Overworld.Lua.Runtime.call(runtime, id, [payload], %{user_id: user}) do
      {:ok, [value | _]} ->
        {:ok, value}

      {:ok, []} ->
        {:ok, nil}

      {:error, :not_found} ->
        unknown(id)

      {:error, {:lua_error, message}} ->
        {:error, 500, "rpc_failed", message}

      {:error, :timeout} ->
        {:error, 504, "rpc_timeout", "the function ran past its time"}

      {:error, :memory_limit} ->
        {:error, 500, "rpc_memory_limit", "the function used too much memory"}

      {:error, why} when why in [:busy, :unavailable] ->
        {:error, 503, "busy", "the server is busy: retry"}

      {:error, why} ->
        {:error, 503, "unavailable", "rpc unavailable (#{inspect(why)})"}
    end
  end

  defp lua(_runtime, id, _user, _payload), do: unknown(id)

  defp unknown(id) do
    {:error, 404, "unknown_rpc", "no function #{Overworld.Web.printable(id)}"}
  end
end

defmodule Overworld.Lua.Server do
  @moduledoc """
  The server API of Lua scripts (RPC functions and match handlers of an `Overworld.Server`'s
  `lua:` runtime), in the table `server`:

  | function | what |
  | --- | --- |
  | `server.user_id()` | the calling user's id (nil in a match handler: presences carry it) |
  | `server.storage_read(ids)` | `ids`: `{{collection=, key=, user_id=}, ...}` → the objects that exist |
  | `server.storage_write(objects)` | `{{collection=, key=, user_id=, value=, version=, read=, write=}, ...}` → acks (`{collection, key, user_id, version}`) |
  | `server.storage_delete(ids)` | `{{collection=, key=, user_id=, version=}, ...}` |
  | `server.storage_list(collection, user_id, limit, cursor)` | → `objects, cursor` |
  | `server.account_get(user_id)` | → `{user_id=, created_at=, devices=, email=, custom_id=}` or nil |
  | `server.match_create(name, params)` | → a new match's id (`name`: a Lua handler's, or a server's registered one) |
  | `server.match_list(query, limit)` | → matches `{match_id=, label=, size=}` |
  | `server.logger_info(msg)`, `server.logger_warn(msg)`, `server.logger_error(msg)` | log a line naming the script |

  Storage calls run as server code (`Overworld.Storage`'s `:server` caller: no permission
  applies); their errors, like every refusal here, raise a Lua error (`pcall` catches it) whose
  message says why.
  """
  require Logger

  alias Overworld.{Lua, Match, Storage}

  @doc "The `server` table's functions for a server named `server` with its store `store`."
  @spec functions(atom, atom | nil) :: %{binary => %{binary => function}}
  def functions(server, store) do
    %{
      "server" => %{
        "user_id" => fn _ -> Lua.context()[:user_id] end,
        "storage_read" => fn [ids | _] ->
          storage(store, &Storage.read(&1, :server, list(ids)))
        end,
        "storage_write" => fn [objects | _] ->
          storage(store, &Storage.write(&1, :server, list(objects)))
        end,
        "storage_delete" => fn [ids | _] ->
          storage(store, &Storage.delete(&1, :server, list(ids)))
        end,
        "storage_list" => fn args -> storage_list(store, args) end,
        "account_get" => fn [user | _] -> account(user) end,
        "match_create" => fn args -> match_create(server, args) end,
        "match_list" => fn args -> match_list(args) end,
        "logger_info" => fn args -> log(:info, args) end,
        "logger_warn" => fn args -> log(:warning, args) end,
        "logger_error" => fn args -> log(:error, args) end
      }
    }
  end

  # A Lua sequence comes as a list; an empty table as []. Objects as maps with string keys.
  defp list(l) when is_list(l), do: l
  defp list(_), do: []

  defp storage(nil, _fun), do: {:error, "this server has no storage"}

  defp storage(store, fun) do
    case fun.(store) do
      :ok -> true
      {:ok, result} -> plain(result)
      {:error, why} -> {:error, "storage: #{inspect(why)}"}
    end
  end

  defp storage_list(store, [collection | rest]) when is_binary(collection) do
    [user, limit, cursor] = Enum.take(rest ++ [nil, nil, nil], 3)

    opts =
      [user_id: user, limit: limit || 20, cursor: cursor]
      |> Enum.reject(fn {_, v} -> v == nil end)

    case store && Storage.list(store, :server, collection, opts) do
      nil -> {:error, "this server has no storage"}
      {:ok, objects, cursor} -> {:multi, [plain(objects), cursor]}
      {:error, why} -> {:error, "storage: #{inspect(why)}"}
    end
  end

  defp storage_list(_store, _args),
    do: {:error, "storage_list(collection, user_id, limit, cursor)"}

  # Objects as Lua tables: string keys, values JSON-decoded.
  defp plain(list) when is_list(list), do: Enum.map(list, &plain/1)

  defp plain(%{} = o) do
    Map.new(o, fn
      {:value, v} when is_binary(v) -> {"value", :jiffy.decode(v, [:return_maps])}
      {k, v} -> {to_string(k), v}
    end)
  end

  defp account(user) when is_binary(user) do
    case Overworld.Accounts.account(user) do
      {:ok, a} -> a |> Map.delete(:disabled) |> Map.new(fn {k, v} -> {to_string(k), v} end)
      {:error, :not_found} -> nil
    end
  end

  defp account(_), do: {:error, "account_get(user_id)"}

  defp match_create(server, [name | rest]) when is_binary(name) do
    params = List.first(rest) || %{}
    cfg = Overworld.Server.config(server)

    with {:ok, handler} <- Match.handler(cfg, name),
         {:ok, id} <-
           Match.create(handler, if(params == [], do: %{}, else: params), Match.options(cfg)) do
      id
    else
      :error -> {:error, "match_create: no match handler #{name}"}
      {:error, why} -> {:error, "match_create: #{inspect(why)}"}
    end
  end

  defp match_create(_server, _args), do: {:error, "match_create(name, params)"}

  defp match_list(args) do
    [query, limit] = Enum.take(args ++ [nil, nil], 2)
    query = if query in [nil, []], do: %{}, else: query

    case Match.list(query: query, limit: limit || 10) do
      {:ok, matches} -> Enum.map(matches, &plain/1)
      {:error, why} -> {:error, "match_list: #{why}"}
    end
  end

  defp log(level, args) do
    Logger.log(level, "lua: " <> Enum.map_join(args, " ", &to_string/1))
    nil
  end
end

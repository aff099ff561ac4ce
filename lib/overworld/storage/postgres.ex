defmodule Overworld.Storage.Postgres do
  @moduledoc """
  The PostgreSQL storage adapter (`Overworld.Storage`), on a pool of its own
  (`Overworld.Postgres`). The production choice: one database that every node of a cluster
  shares, with PostgreSQL's own durability (a commit answers once it is in its write-ahead
  log, fsynced, unless the server is set otherwise).

      Overworld.Storage.start_link(
        adapter: Overworld.Storage.Postgres,
        adapter_options: [pool: [host: "127.0.0.1", database: "game", user: "game", password: "..."]]
      )

  Adapter options: `:pool` (the `Overworld.Postgres` options but `:name`), `:table` (default
  `"overworld_storage"`; made if missing: `CREATE TABLE IF NOT EXISTS`).

  Keys are `text COLLATE "C"`: PostgreSQL orders them byte by byte, as the embedded adapter
  does, so listings come in the same order from both. A write reads each object `FOR UPDATE`
  in its transaction; an object created by another transaction between that read and the
  insert makes the transaction start over (at most 5 times), so that "only if absent" holds
  under concurrency.
  """
  @behaviour Overworld.Storage

  alias Overworld.Postgres
  alias Overworld.Storage.Object

  @columns "collection, user_id, key, value, version, read, write, created_at, updated_at"
  @tries 5

  @impl true
  def children(store, opts) do
    pool = Keyword.get(opts, :pool, [])
    [{Postgres, Keyword.put(pool, :name, pool_name(store))}]
  end

  defp pool_name(store), do: :"#{store}.Postgres"

  @impl true
  def init(store, opts) do
    table = Keyword.get(opts, :table, "overworld_storage")

    if is_binary(table) and table =~ ~r/\A[a-z_][a-z0-9_]{0,62}\z/ do
      pool = pool_name(store)

      sql =
        "CREATE TABLE IF NOT EXISTS #{table} (" <>
          "collection text COLLATE \"C\" NOT NULL, user_id text COLLATE \"C\" NOT NULL, " <>
          "key text COLLATE \"C\" NOT NULL, value text NOT NULL, version text NOT NULL, " <>
          "read smallint NOT NULL, write smallint NOT NULL, created_at bigint NOT NULL, " <>
          "updated_at bigint NOT NULL, PRIMARY KEY (collection, user_id, key))"

      case Postgres.query(pool, sql) do
        {:ok, _} -> {:ok, %{pool: pool, table: table}}
        # (Two stores making the table at once: one of them finds it made.)
        {:error, %{code: "23505"}} -> {:ok, %{pool: pool, table: table}}
        {:error, reason} -> {:error, {:create_table, reason}}
      end
    else
      {:error, {:invalid_option, :table, table}}
    end
  end

  @impl true
  def read(_state, []), do: {:ok, []}

  # One statement for the batch: WHERE (collection, user_id, key) IN ((...), (...)).
  def read(%{pool: pool, table: t}, ids) do
    tuples =
      ids
      |> Enum.with_index()
      |> Enum.map_join(", ", fn {_, i} -> "($#{3 * i + 1}, $#{3 * i + 2}, $#{3 * i + 3})" end)

    params = Enum.flat_map(ids, fn {c, k, u} -> [c, u, k] end)
    sql = "SELECT #{@columns} FROM #{t} WHERE (collection, user_id, key) IN (#{tuples})"

    case Postgres.query(pool, sql, params) do
      {:ok, %{rows: rows}} ->
        objects =
          Map.new(rows, fn row ->
            o = Object.from_row(row)
            {{o.collection, o.key, o.user_id}, o}
          end)

        {:ok, for(id <- ids, o = objects[id], do: o)}

      {:error, reason} ->
        {:error, {:unavailable, reason}}
    end
  end

  # (The handle of a transaction is `{connection, table}`.) An object made by another
  # transaction after our `locked/2` (`put/3` inserts nothing) starts this one over.
  @impl true
  def transaction(state, fun), do: transaction(state, fun, @tries)

  defp transaction(%{pool: pool, table: t} = state, fun, tries) do
    tx = fn conn ->
      case fun.({conn, t}) do
        {:error, reason} -> {:error, {:refused, reason}}
        ok -> ok
      end
    end

    case Postgres.transaction(pool, tx) do
      {:ok, result} -> {:ok, result}
      {:error, {:refused, :retry}} when tries > 1 -> transaction(state, fun, tries - 1)
      {:error, {:refused, reason}} -> {:error, reason}
      {:error, reason} -> {:error, {:unavailable, reason}}
    end
  end

  @impl true
  def locked({conn, t}, {c, k, u}) do
    case Postgres.query(conn, select(t, " FOR UPDATE"), [c, u, k]) do
      {:ok, %{rows: [row]}} -> {:ok, Object.from_row(row)}
      {:ok, %{rows: []}} -> {:ok, nil}
      {:error, reason} -> {:error, {:unavailable, reason}}
    end
  end

  # A new object is inserted only if nobody made it since our read (else the transaction
  # starts over); an existing one, locked by our read, is updated.
  @impl true
  def put({conn, t}, existing, o) do
    sql =
      if existing == nil,
        do:
          "INSERT INTO #{t} (#{@columns}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) " <>
            "ON CONFLICT DO NOTHING",
        else:
          "UPDATE #{t} SET value = $4, version = $5, read = $6, write = $7, created_at = $8, " <>
            "updated_at = $9 WHERE collection = $1 AND user_id = $2 AND key = $3"

    values = [
      o.collection,
      o.user_id,
      o.key,
      o.value,
      o.version,
      o.read,
      o.write,
      o.created_at,
      o.updated_at
    ]

    case Postgres.query(conn, sql, values) do
      {:ok, %{count: 0}} when existing == nil -> {:error, :retry}
      {:ok, _} -> :ok
      {:error, reason} -> {:error, {:unavailable, reason}}
    end
  end

  @impl true
  def remove({conn, t}, {c, k, u}) do
    sql = "DELETE FROM #{t} WHERE collection = $1 AND user_id = $2 AND key = $3"

    case Postgres.query(conn, sql, [c, u, k]) do
      {:ok, _} -> :ok
      {:error, reason} -> {:error, {:unavailable, reason}}
    end
  end

  @impl true
  def list(%{pool: pool, table: t}, collection, owner, after_id, limit, caller) do
    {u0, k0} = after_id || {"", ""}
    params = [collection, u0, k0, limit + 1]

    {owner_sql, params} =
      if owner == :any,
        do: {"", params},
        else: {" AND user_id = $#{length(params) + 1}", params ++ [owner]}

    {read_sql, params} =
      case caller do
        :server ->
          {"", params}

        {:user, u} ->
          n = length(params) + 1
          {" AND (read = 2 OR (read = 1 AND user_id = $#{n}))", params ++ [u]}
      end

    sql =
      "SELECT #{@columns} FROM #{t} WHERE collection = $1 AND (user_id, key) > ($2, $3)" <>
        owner_sql <> read_sql <> " ORDER BY user_id, key LIMIT $4"

    case Postgres.query(pool, sql, params) do
      {:ok, %{rows: rows}} ->
        objects = rows |> Enum.take(limit) |> Enum.map(&Object.from_row/1)

        next =
          if length(rows) > limit,
            do: objects |> List.last() |> then(&{&1.user_id, &1.key}),
            else: nil

        {:ok, objects, next}

      {:error, reason} ->
        {:error, {:unavailable, reason}}
    end
  end

  defp select(t, suffix),
    do:
      "SELECT #{@columns} FROM #{t} WHERE collection = $1 AND user_id = $2 AND key = $3" <>
        suffix
end

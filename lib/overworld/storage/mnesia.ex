defmodule Overworld.Storage.Mnesia do
  @moduledoc """
  The embedded storage adapter: objects in a Mnesia table (`ordered_set`, `disc_copies`),
  in the Mnesia the accounts run (`Overworld.Accounts.start/1` first), and so, in a cluster,
  replicated to every node as the accounts are (a partition heals as theirs do:
  `Overworld.Accounts.Heal`).

  Writes and deletes are Mnesia transactions, durable before they answer: each waits for
  the group commit of the node's transaction log (`Overworld.Accounts.Sync`). Reads and
  listings are dirty reads of the local copy: a read may miss a transaction that has not
  committed yet, never a committed one. A node of a cluster that sees no majority of it
  writes nothing (`{:error, :no_quorum}`): the majority's copy wins when the partition heals.

  Adapter options: `:table` (default `:overworld_storage`: the stores of a node share it, as
  its servers share the accounts), `:scan`
  (objects a listing looks at per call at most, default 1,000: a page may come back short,
  with a cursor, when most objects of a collection are not the caller's to read).

  The record: `{table, {collection, user_id, key}, value, version, read, write, created_at,
  updated_at}`.
  """
  @behaviour Overworld.Storage

  alias Overworld.Storage.Object

  @attributes [:id, :value, :version, :read, :write, :created_at, :updated_at]

  @impl true
  def children(_store, _opts), do: []

  @impl true
  def init(_store, opts) do
    table = Keyword.get(opts, :table, :overworld_storage)
    scan = Keyword.get(opts, :scan, 1_000)

    cond do
      not is_atom(table) ->
        {:error, {:invalid_option, :table, table}}

      not (is_integer(scan) and scan > 0) ->
        {:error, {:invalid_option, :scan, scan}}

      true ->
        with :ok <- Overworld.Accounts.ensure_table(table, @attributes, type: :ordered_set) do
          {:ok, %{table: table, scan: scan}}
        end
    end
  end

  @impl true
  def read(%{table: t}, ids) do
    {:ok,
     Enum.flat_map(ids, fn {c, k, u} ->
       case :mnesia.dirty_read(t, {c, u, k}) do
         [rec] -> [object(rec)]
         [] -> []
       end
     end)}
  catch
    :exit, reason -> {:error, {:unavailable, reason}}
  end

  # (The handle of a transaction is the table.)
  @impl true
  def transaction(%{table: t}, fun) do
    tx = fn ->
      case fun.(t) do
        {:ok, result} -> result
        {:error, reason} -> :mnesia.abort({:refused, reason})
      end
    end

    # (A node cut off from its cluster's majority writes nothing: the majority's copy wins
    # when the partition heals.)
    case Overworld.Accounts.transaction(tx) do
      {:error, {:aborted, reason}} -> {:error, {:unavailable, reason}}
      other -> other
    end
  end

  @impl true
  def locked(t, {c, k, u}) do
    case :mnesia.read(t, {c, u, k}, :write) do
      [rec] -> {:ok, object(rec)}
      [] -> {:ok, nil}
    end
  end

  @impl true
  def put(t, _existing, o) do
    :mnesia.write(
      {t, {o.collection, o.user_id, o.key}, o.value, o.version, o.read, o.write, o.created_at,
       o.updated_at}
    )
  end

  @impl true
  def remove(t, {c, k, u}), do: :mnesia.delete({t, {c, u, k}})

  @impl true
  def list(%{table: t, scan: scan}, collection, owner, after_id, limit, caller) do
    start =
      case {after_id, owner} do
        {{u, k}, _} -> {collection, u, k}
        # (Below the first id of the collection, or of the owner's objects in it: a key is
        # never empty.)
        {nil, :any} -> {collection, "", ""}
        {nil, u} -> {collection, u, ""}
      end

    walk(t, :mnesia.dirty_next(t, start), collection, owner, caller, limit, scan, [])
  catch
    :exit, reason -> {:error, {:unavailable, reason}}
  end

  # Up to `limit` readable objects from `id` on, looking at `scan` objects at most.
  defp walk(_t, :"$end_of_table", _c, _o, _caller, _limit, _scan, acc),
    do: {:ok, :lists.reverse(acc), nil}

  defp walk(t, {c, u, k} = id, c, owner, caller, limit, scan, acc)
       when owner == :any or owner == u do
    acc =
      case :mnesia.dirty_read(t, id) do
        [rec] ->
          o = object(rec)
          if Object.readable?(o, caller), do: [o | acc], else: acc

        [] ->
          acc
      end

    cond do
      length(acc) == limit -> {:ok, :lists.reverse(acc), more(t, id, c, owner)}
      scan == 1 -> {:ok, :lists.reverse(acc), {u, k}}
      true -> walk(t, :mnesia.dirty_next(t, id), c, owner, caller, limit, scan - 1, acc)
    end
  end

  # Past the collection (or the owner's objects).
  defp walk(_t, _id, _c, _o, _caller, _limit, _scan, acc), do: {:ok, :lists.reverse(acc), nil}

  # The cursor after a full page: none if nothing of the listing follows.
  defp more(t, {c, u, k} = id, c, owner) do
    case :mnesia.dirty_next(t, id) do
      {^c, u2, _} when owner == :any or owner == u2 -> {u, k}
      _ -> nil
    end
  end

  defp object({_t, {c, u, k}, value, version, read, write, created_at, updated_at}),
    do: Object.from_row([c, u, k, value, version, read, write, created_at, updated_at])
end

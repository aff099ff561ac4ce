defmodule Overworld.Storage do
  @moduledoc """
  Per-user collections of JSON objects, with versions for conditional writes and read and write
  permissions (`Overworld.Storage.Object` says what an object is and the rules), behind an
  adapter: `Overworld.Storage.Mnesia`, the embedded default (no server to install; replicated
  to every node of a cluster, as the accounts are), or `Overworld.Storage.Postgres`.

  A store is started under a name (`start_link/1`) and then used from any process: the calls
  run in the caller (nothing of a read, a write or a listing passes through a process of the
  store's, but the adapter's own: the Mnesia adapter's group commit, PostgreSQL's pool).

  Callers are `:server` (server code: no permission applies, and it may name any owner) or
  `{:user, user_id}` (a client: it writes and deletes its own objects, and reads its own whose
  `read` is 1 or 2 and anyone's whose `read` is 2).

    * `write/3`: a batch of writes, all or none. A write's `version` is its condition: `"*"`
      (only if the object does not exist), a version (only if the object has it), or none. A
      condition that does not hold fails the batch with `{:error, {:version_conflict, index}}`;
      a client writing an object whose `write` is 0, `{:error, {:permission_denied, index}}`.
      An answer `{:ok, acks}` comes once the objects are durable (on disk, fsynced).
    * `read/3`: the objects of a batch of ids that exist and the caller may read.
    * `delete/3`: a batch of deletes, all or none, with the same conditions (but `"*"`); an
      object already absent is no error, unless a version was asked.
    * `list/4`: a collection's objects the caller may read, one user's (`user_id:`) or
      everyone's, ordered by owner and key, in pages (`limit:`, at most 100) with a cursor.

  Invalid input answers `{:error, {:invalid, index, message}}` (the index of the offending item
  in its batch), `{:error, {:too_large, index, bytes, max}}` for a value over the store's
  `max_object_bytes`, `{:error, {:batch_too_large, count, max}}`.
  """

  alias Overworld.Storage.Object

  @typedoc "A store: the name it was started with."
  @type store :: atom

  @typedoc "An object's id: `{collection, key, user_id}` (`user_id` `\"\"`: the system's)."
  @type id :: {binary, binary, binary}

  @type error ::
          {:invalid, non_neg_integer, binary}
          | {:too_large, non_neg_integer, pos_integer, pos_integer}
          | {:batch_too_large, non_neg_integer, pos_integer}
          | {:version_conflict, non_neg_integer}
          | {:permission_denied, non_neg_integer}
          | {:bad_cursor, binary}
          | :no_quorum
          | {:unavailable, term}

  ## The adapter behaviour

  @doc """
  The children the adapter needs running (its group commit, its connection pool), started
  under the store's supervisor before `c:init/2`.
  """
  @callback children(store, keyword) :: [Supervisor.child_spec()]

  @doc "Prepares the adapter (tables, schema) and answers the state every call gets."
  @callback init(store, keyword) :: {:ok, term} | {:error, term}

  @doc "The objects of `ids` that exist, in any order (permissions are the caller's)."
  @callback read(state :: term, [id]) :: {:ok, [Object.t()]} | {:error, term}

  @doc """
  Runs `fun.(handle)` as one transaction, all or none, and answers once what it wrote is
  durable: `fun`'s `{:ok, result}` commits and is the answer, its `{:error, reason}` aborts
  and is the answer. The adapter's own failures answer `{:error, {:unavailable, reason}}` (or
  `{:error, :no_quorum}`). `handle` is what `c:locked/2`, `c:put/3` and `c:remove/2` take.
  """
  @callback transaction(state :: term, (handle :: term -> {:ok, term} | {:error, term})) ::
              {:ok, term} | {:error, term}

  @doc "In a transaction: the object `id` (or nil), locked until the transaction ends."
  @callback locked(handle :: term, id) :: {:ok, Object.t() | nil} | {:error, term}

  @doc "In a transaction: stores `object`, which `existing` (from `c:locked/2`) was."
  @callback put(handle :: term, existing :: Object.t() | nil, object :: Object.t()) ::
              :ok | {:error, term}

  @doc "In a transaction: deletes the object `id`."
  @callback remove(handle :: term, id) :: :ok | {:error, term}

  @doc """
  Up to `limit` objects of `collection` that `Object.readable?/2` lets `caller` read, of
  `user_id` (or of every owner: `:any`), ordered by `{user_id, key}` (bytewise), starting
  after `after` (nil: from the first); and the `{user_id, key}` to start the next page after
  (nil: no more). An adapter may answer fewer than `limit` with a next page (it bounds the
  objects it looks at per call).
  """
  @callback list(
              state :: term,
              collection :: binary,
              user_id :: binary | :any,
              after_id :: {binary, binary} | nil,
              limit :: pos_integer,
              caller :: Object.caller()
            ) :: {:ok, [Object.t()], {binary, binary} | nil} | {:error, term}

  ## Starting a store

  @options [
    name: {:atom, __MODULE__},
    adapter: {:module, Overworld.Storage.Mnesia},
    adapter_options: {{:custom, &Keyword.keyword?/1, "a keyword list"}, []},
    max_object_bytes: {:pos_integer, 65_536},
    max_batch: {:pos_integer, 100}
  ]

  @doc """
  Starts a store. Options: `:name` (default `Overworld.Storage`), `:adapter` (default
  `Overworld.Storage.Mnesia`), `:adapter_options` (the adapter's own), `:max_object_bytes`
  (an object's JSON text at most, default 65,536), `:max_batch` (items of a batch at most,
  default 100).
  """
  @spec start_link(keyword) :: Supervisor.on_start()
  def start_link(opts) do
    o = Overworld.Options.validate!(opts, @options, "Overworld.Storage")
    Supervisor.start_link(__MODULE__.Supervisor, o, name: :"#{o.name}.Supervisor")
  end

  @doc false
  def child_spec(opts),
    do: Overworld.Options.supervisor_spec(__MODULE__, opts, Keyword.get(opts, :name, __MODULE__))

  @doc false
  @spec put_config(store, map) :: :ok
  def put_config(name, config), do: :persistent_term.put({__MODULE__, name}, config)

  @doc false
  @spec erase_config(store) :: :ok
  def erase_config(name) do
    _ = :persistent_term.erase({__MODULE__, name})
    :ok
  end

  defp config(store) do
    :persistent_term.get({__MODULE__, store}, nil)
  end

  ## The calls

  @doc "Writes a batch (see the module's doc). Each item a map as `Object.validate_write/3` takes."
  @spec write(store, Object.caller(), [map]) ::
          {:ok, [%{collection: binary, key: binary, user_id: binary, version: binary}]}
          | {:error, error}
  def write(store \\ __MODULE__, caller, writes) do
    with {:ok, c} <- running(store),
         :ok <- batch(writes, c),
         {:ok, ws} <- each(writes, &Object.validate_write(&1, caller, c.max_object_bytes)) do
      now = System.system_time(:millisecond)

      in_transaction(c, ws, fn h, w, i ->
        with {:ok, existing} <- c.adapter.locked(h, id(w)),
             {:ok, o} <- refused(Object.apply_write(existing, w, caller, now), i),
             :ok <- c.adapter.put(h, existing, o) do
          {:ok, Map.take(o, [:collection, :key, :user_id, :version])}
        end
      end)
    end
  end

  @doc "Reads a batch of ids (maps with `collection`, `key`, `user_id`): the readable ones."
  @spec read(store, Object.caller(), [map]) :: {:ok, [Object.t()]} | {:error, error}
  def read(store \\ __MODULE__, caller, ids) do
    with {:ok, c} <- running(store),
         :ok <- batch(ids, c),
         {:ok, ids} <- each(ids, &Object.validate_id/1),
         {:ok, objects} <- c.adapter.read(c.state, Enum.uniq(ids)) do
      {:ok, Enum.filter(objects, &Object.readable?(&1, caller))}
    end
  end

  @doc "Deletes a batch (maps with `collection`, `key`, optionally `version`, `user_id`)."
  @spec delete(store, Object.caller(), [map]) :: :ok | {:error, error}
  def delete(store \\ __MODULE__, caller, deletes) do
    with {:ok, c} <- running(store),
         :ok <- batch(deletes, c),
         {:ok, ds} <- each(deletes, &Object.validate_delete(&1, caller)),
         {:ok, _} <-
           in_transaction(c, ds, fn h, d, i ->
             with {:ok, existing} <- c.adapter.locked(h, id(d)) do
               case Object.check_delete(existing, d, caller) do
                 :absent -> {:ok, nil}
                 :delete -> with :ok <- c.adapter.remove(h, id(d)), do: {:ok, nil}
                 refusal -> refused(refusal, i)
               end
             end
           end) do
      :ok
    end
  end

  # One transaction of the adapter over a batch: `step.(handle, item, index)` for each item,
  # the first error aborting it.
  defp in_transaction(c, items, step) do
    c.adapter.transaction(c.state, fn h -> indexed(items, &step.(h, &1, &2)) end)
  end

  defp id(item), do: {item.collection, item.key, item.user_id}

  # (A rule's refusal names the item.)
  defp refused({:error, reason}, i), do: {:error, {reason, i}}
  defp refused(ok, _i), do: ok

  @doc """
  Lists a collection (options `user_id:` one owner's objects, `""` the system's, default
  everyone's; `limit:` 1 to 100, default 20; `cursor:` from the previous page). Answers
  `{:ok, objects, cursor}`, `cursor` nil after the last page.
  """
  @spec list(store, Object.caller(), binary, keyword) ::
          {:ok, [Object.t()], binary | nil} | {:error, error}
  def list(store \\ __MODULE__, caller, collection, opts \\ []) do
    with {:ok, c} <- running(store),
         true <- Object.valid_name?(collection) || {:error, {:invalid, 0, "bad collection"}},
         {:ok, owner} <- list_owner(Keyword.get(opts, :user_id)),
         {:ok, limit} <- list_limit(Keyword.get(opts, :limit, 20)),
         {:ok, after_id} <- decode_cursor(Keyword.get(opts, :cursor)),
         {:ok, objects, next} <-
           c.adapter.list(c.state, collection, owner, after_id, limit, caller) do
      {:ok, objects, encode_cursor(next)}
    end
  end

  defp list_owner(nil), do: {:ok, :any}
  defp list_owner(""), do: {:ok, ""}

  defp list_owner(u) do
    if Object.valid_name?(u), do: {:ok, u}, else: {:error, {:invalid, 0, "bad user_id"}}
  end

  defp list_limit(n) when is_integer(n) and n in 1..100, do: {:ok, n}
  defp list_limit(_n), do: {:error, {:invalid, 0, "limit must be 1 to 100"}}

  @doc """
  A page's cursor: the last `{user_id, key}` listed, as URL-safe text (never a term read back
  with `binary_to_term`).

      iex> c = Overworld.Storage.encode_cursor({"u1", "k/9"})
      iex> Overworld.Storage.decode_cursor(c)
      {:ok, {"u1", "k/9"}}
      iex> Overworld.Storage.decode_cursor("nonsense")
      {:error, {:bad_cursor, "nonsense"}}
  """
  @spec encode_cursor({binary, binary} | nil) :: binary | nil
  def encode_cursor(nil), do: nil

  def encode_cursor({user_id, key}),
    do:
      Base.url_encode64(user_id, padding: false) <> "." <> Base.url_encode64(key, padding: false)

  @doc false
  @spec decode_cursor(term) :: {:ok, {binary, binary} | nil} | {:error, {:bad_cursor, term}}
  def decode_cursor(nil), do: {:ok, nil}
  def decode_cursor(""), do: {:ok, nil}

  def decode_cursor(text) when is_binary(text) and byte_size(text) <= 1024 do
    with [u, k] <- String.split(text, "."),
         {:ok, u} <- Base.url_decode64(u, padding: false),
         {:ok, k} <- Base.url_decode64(k, padding: false) do
      {:ok, {u, k}}
    else
      _ -> {:error, {:bad_cursor, text}}
    end
  end

  def decode_cursor(other), do: {:error, {:bad_cursor, inspect(other)}}

  defp running(store) do
    case config(store) do
      nil -> {:error, {:unavailable, {:not_started, store}}}
      c -> {:ok, c}
    end
  end

  defp batch(items, c) when is_list(items) do
    n = length(items)
    if n <= c.max_batch, do: :ok, else: {:error, {:batch_too_large, n, c.max_batch}}
  end

  defp batch(_items, _c), do: {:error, {:invalid, 0, "a batch must be a list"}}

  # Every item validated, or the first error with the item's index.
  defp each(items, fun) do
    indexed(items, fn item, i ->
      case fun.(item) do
        {:ok, _} = ok -> ok
        {:error, {:too_large, bytes, max}} -> {:error, {:too_large, i, bytes, max}}
        {:error, :permission_denied} -> {:error, {:permission_denied, i}}
        {:error, message} -> {:error, {:invalid, i, message}}
      end
    end)
  end

  # `{:ok, results}` of `fun.(item, index)` for every item in order, or its first error.
  defp indexed(items, fun) do
    items
    |> Enum.with_index()
    |> Enum.reduce_while({:ok, []}, fn {item, i}, {:ok, acc} ->
      case fun.(item, i) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        error -> {:halt, error}
      end
    end)
    |> case do
      {:ok, acc} -> {:ok, :lists.reverse(acc)}
      error -> error
    end
  end
end

defmodule Overworld.Storage.Supervisor do
  @moduledoc false
  # A store's processes: the adapter's children, then a process that prepares the adapter and
  # publishes the store's configuration (and takes it back when it stops).
  use Supervisor

  @impl true
  def init(o) do
    adapter_opts = o.adapter_options

    children =
      o.adapter.children(o.name, adapter_opts) ++
        [
          %{
            id: :config,
            start: {Overworld.Storage.Config, :start_link, [o]}
          }
        ]

    Supervisor.init(children, strategy: :rest_for_one)
  end
end

defmodule Overworld.Storage.Config do
  @moduledoc false
  # Prepares a store's adapter (`c:Overworld.Storage.init/2`) and publishes its configuration
  # (`:persistent_term`: every call reads it, no process); erases it when the store stops.
  use GenServer

  def start_link(o), do: GenServer.start_link(__MODULE__, o)

  @impl true
  def init(o) do
    Process.flag(:trap_exit, true)

    case o.adapter.init(o.name, o.adapter_options) do
      {:ok, state} ->
        Overworld.Storage.put_config(o.name, %{
          adapter: o.adapter,
          state: state,
          max_object_bytes: o.max_object_bytes,
          max_batch: o.max_batch
        })

        {:ok, o.name}

      {:error, reason} ->
        {:stop, {:storage_init, reason}}
    end
  end

  @impl true
  def terminate(_reason, name), do: Overworld.Storage.erase_config(name)
end

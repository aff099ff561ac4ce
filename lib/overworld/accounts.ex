defmodule Overworld.Accounts do
  @moduledoc """
  Device accounts, kept in Mnesia on the local disc.

  A client proves nothing but a device id it made up and keeps (for example a random string
  stored on the device); the first time a device id is seen it gets a new user. Two tables hold
  the accounts, both `disc_copies` on this node:

    * `:overworld_devices` — `{:overworld_devices, device_id, user_id}`
    * `:overworld_users` — `{:overworld_users, user_id, device_id, created_at}`, `created_at` in
      unix seconds

  A user id is 16 random bytes written as 32 lowercase hex characters. A third table,
  `:overworld_shared` (`{:overworld_shared, key, value}`), holds what every node of a cluster
  shares: the token signing secret (`shared_secret/1`).

  **In a cluster** (`Overworld.Cluster.join/2`) the tables are replicated to every node, each
  a `disc_copies` replica: a node whose data directory has no Mnesia schema yet, and whose
  configured cluster already runs the accounts, joins them (`extra_db_nodes`, its schema and
  every table copied to its disc) instead of making a database of its own; a node that
  already has one opens it, and Mnesia reconnects it to the nodes of its schema. Starts are
  serialized across the cluster (`:global.trans/3` over the configured nodes), so two fresh
  nodes never make two databases. A token issued by one node is accepted by all: they sign
  with the secret the first node put in `:overworld_shared`. When a partition heals, the
  majority's copy wins (`Overworld.Accounts.Heal`).

  Mnesia is an included application of `:overworld`: it is loaded but not started with it.
  `start/1` starts it in a data directory and makes the tables; call it before the other
  functions. Mnesia has one data directory per node, so every caller on a node must use the same
  one.
  """

  require Logger

  @devices :overworld_devices
  @users :overworld_users
  @shared :overworld_shared
  @tables [@devices, @users, @shared]
  @attributes %{
    @devices => [:device_id, :user_id],
    @users => [:user_id, :device_id, :created_at],
    @shared => [:key, :value]
  }
  @wait_timeout 10_000

  @typedoc "A user id: 32 lowercase hex characters."
  @type user_id :: binary

  @typedoc "A device id: 10 to 128 bytes of printable ASCII without spaces (0x21..0x7E)."
  @type device_id :: binary

  @typedoc "A user account."
  @type user :: %{user_id: user_id, device_id: device_id, created_at: integer}

  @doc """
  Starts Mnesia in `dir` and makes sure the account tables exist.

  On first boot the directory, the Mnesia schema and the tables are created. If Mnesia already
  runs in the same directory, only the tables are checked (and created if missing); if it runs in
  another directory the answer is `{:error, {:data_dir_in_use, current_dir}}`. Calling it again
  is harmless; concurrent calls on a node are serialized.
  """
  @spec start(Path.t()) :: :ok | {:error, term}
  def start(dir) do
    dir = Path.expand(dir)
    peers = cluster_peers()
    # (Serialized over this node and its connected configured peers: of two fresh nodes
    # starting at once, the second finds the first's accounts running and joins them.)
    :global.trans({{__MODULE__, :start}, self()}, fn -> start_locked(dir, peers) end, [
      node() | peers
    ])
  end

  defp start_locked(dir, peers) do
    if :mnesia.system_info(:is_running) == :yes do
      current = :mnesia.system_info(:directory) |> to_string() |> Path.expand()
      if current == dir, do: ensure_tables(), else: {:error, {:data_dir_in_use, current}}
    else
      running = Enum.filter(peers, &running?/1)
      # A data directory without a schema joins the cluster's accounts when they run.
      join? = not File.exists?(Path.join(dir, "schema.DAT")) and running != []

      with :ok <- File.mkdir_p(dir),
           :ok <- load_mnesia(),
           :ok <- Application.put_env(:mnesia, :dir, String.to_charlist(dir)),
           # Bursts of first authentications (thousands per second) write the transaction
           # log faster than the default threshold of 1,000 records dumps it.
           :ok <- Application.put_env(:mnesia, :dump_log_write_threshold, 50_000),
           :ok <- if(join?, do: :ok, else: create_schema()),
           :ok <- start_mnesia(),
           :ok <- if(join?, do: join(running), else: :ok) do
        apart(running)
        Overworld.Accounts.Heal.watch()
        ensure_tables()
      end
    end
  end

  # The configured nodes of this node's cluster that are connected (none for a node of its
  # own).
  defp cluster_peers do
    case Overworld.Cluster.configured() do
      nil -> []
      nodes -> Enum.filter(nodes, &(&1 in Node.list()))
    end
  end

  # Whether the accounts run on `node` (Mnesia started and the tables made).
  defp running?(node) do
    :erpc.call(
      node,
      fn ->
        :mnesia.system_info(:is_running) == :yes and @users in :mnesia.system_info(:tables)
      end,
      5_000
    )
  catch
    _, _ -> false
  end

  # Mnesia started on an empty schema: it connects to the running nodes, which hand it the
  # schema, and keeps the schema on its disc (the tables follow in ensure_tables/0).
  defp join(running) do
    with {:ok, [_ | _]} <- :mnesia.change_config(:extra_db_nodes, running),
         {:atomic, :ok} <- :mnesia.change_table_copy_type(:schema, node(), :disc_copies) do
      :ok
    else
      {:ok, []} -> {:error, {:cannot_join_accounts, running}}
      {:aborted, {:already_exists, :schema, _, :disc_copies}} -> :ok
      {:aborted, reason} -> {:error, {:join_accounts, reason}}
      {:error, reason} -> {:error, {:join_accounts, reason}}
    end
  end

  # A node with a database of its own that Mnesia did not connect to the cluster's (it was
  # made apart, for example before the node was configured into the cluster) keeps it, and
  # says so: an operator merges by starting it on an empty data directory.
  defp apart([]), do: :ok

  defp apart(running) do
    unless Enum.any?(running, &(&1 in :mnesia.system_info(:running_db_nodes))) do
      Logger.warning(
        "accounts: this node has a database of its own, apart from the cluster's on " <>
          "#{inspect(running)}: start it with an empty data directory to join theirs"
      )
    end

    :ok
  end

  @doc """
  The token signing secret every node of the cluster uses: the one already shared, or, the
  first time, `local` (this node's own, from its data directory), which becomes the shared one
  (one transaction: of nodes starting at once, one secret wins). A single node shares it with
  nobody and keeps its own.
  """
  @spec shared_secret(binary) :: {:ok, binary} | {:error, term}
  def shared_secret(local) when is_binary(local) do
    fun = fn ->
      case :mnesia.read(@shared, :token_secret, :write) do
        [{@shared, :token_secret, secret}] ->
          secret

        [] ->
          :ok = :mnesia.write({@shared, :token_secret, local})
          local
      end
    end

    case :mnesia.transaction(fun) do
      {:atomic, secret} -> {:ok, secret}
      {:aborted, reason} -> {:error, {:shared_secret, reason}}
    end
  end

  # Values put before an application is loaded would be replaced by those of its .app file.
  defp load_mnesia do
    case Application.load(:mnesia) do
      :ok -> :ok
      {:error, {:already_loaded, :mnesia}} -> :ok
      {:error, reason} -> {:error, {:mnesia_load, reason}}
    end
  end

  defp create_schema do
    case :mnesia.create_schema([node()]) do
      :ok -> :ok
      {:error, {_node, {:already_exists, _}}} -> :ok
      {:error, reason} -> {:error, {:create_schema, reason}}
    end
  end

  defp start_mnesia do
    case :mnesia.start() do
      :ok -> :ok
      {:error, reason} -> {:error, {:mnesia_start, reason}}
    end
  end

  defp ensure_tables do
    with :ok <-
           Enum.reduce_while(@tables, :ok, fn t, :ok ->
             create_table(t, Map.fetch!(@attributes, t), [])
           end) do
      wait_for(@tables)
    end
  end

  defp wait_for(tables) do
    case :mnesia.wait_for_tables(tables, @wait_timeout) do
      :ok -> :ok
      {:timeout, tables} -> {:error, {:tables_timeout, tables}}
      {:error, reason} -> {:error, {:wait_for_tables, reason}}
    end
  end

  @doc false
  # A table of this node's Mnesia (started by `start/1`) made as the accounts' are: a
  # `disc_copies` replica here, and on every node of the cluster that runs the accounts
  # (each adds its copy when it starts it). `opts`: more `:mnesia.create_table/2` options.
  @spec ensure_table(atom, [atom], keyword) :: :ok | {:error, term}
  def ensure_table(table, attributes, opts) do
    if :mnesia.system_info(:is_running) == :yes do
      case create_table(table, attributes, opts) do
        {:cont, :ok} -> wait_for([table])
        {:halt, error} -> error
      end
    else
      {:error, :accounts_not_started}
    end
  end

  defp create_table(table, attributes, opts) do
    opts = [attributes: attributes, disc_copies: [node()]] ++ opts

    case :mnesia.create_table(table, opts) do
      {:atomic, :ok} ->
        {:cont, :ok}

      {:aborted, {:already_exists, ^table}} ->
        case :mnesia.table_info(table, :attributes) do
          ^attributes -> local_copy(table)
          other -> {:halt, {:error, {:table_attributes, table, other}}}
        end

      {:aborted, reason} ->
        {:halt, {:error, {:create_table, table, reason}}}
    end
  end

  # A table made by another node of the cluster: this node keeps a copy on its disc too.
  defp local_copy(table) do
    if node() in :mnesia.table_info(table, :disc_copies) do
      {:cont, :ok}
    else
      case :mnesia.add_table_copy(table, node(), :disc_copies) do
        {:atomic, :ok} -> {:cont, :ok}
        {:aborted, {:already_exists, ^table, _}} -> {:cont, :ok}
        {:aborted, reason} -> {:halt, {:error, {:add_table_copy, table, reason}}}
      end
    end
  end

  @doc """
  Finds the user of a device id, or creates one the first time the device id is seen.

  The lookup and the creation are one transaction: concurrent first calls for a device id make
  one account, and all of them answer its user id (`created: true` for exactly one of them).
  `{:error, {:aborted, reason}}` reports a failed transaction (for example, Mnesia not started);
  `{:error, :no_quorum}` a node of a cluster that sees no majority of it (`Overworld.Cluster.quorate?/2`).
  A new account is on disk, fsynced, before the answer (`Overworld.Accounts.Sync`).
  """
  @spec authenticate_device(term) ::
          {:ok, %{user_id: user_id, created: boolean}}
          | {:error, :invalid_device_id | :no_quorum | {:aborted, term}}
  def authenticate_device(device_id) do
    cond do
      not valid_device_id?(device_id) ->
        {:error, :invalid_device_id}

      # (A node cut off from the majority of its cluster makes no account: the majority's
      # copy wins when the partition heals, and one made here would be lost.)
      not Overworld.Cluster.quorate?() ->
        {:error, :no_quorum}

      true ->
        case :mnesia.transaction(fn -> find_or_create(device_id) end) do
          {:atomic, {user_id, false}} -> {:ok, %{user_id: user_id, created: false}}
          # (A new account is durable before it is told: on disk, fsynced.)
          {:atomic, {user_id, true}} -> durable(%{user_id: user_id, created: true})
          {:aborted, reason} -> {:error, {:aborted, reason}}
        end
    end
  end

  defp durable(result) do
    case Overworld.Accounts.Sync.await() do
      :ok -> {:ok, result}
      {:error, reason} -> {:error, {:aborted, reason}}
    end
  end

  defp find_or_create(device_id) do
    case :mnesia.read(@devices, device_id, :write) do
      [{@devices, ^device_id, user_id}] ->
        {user_id, false}

      [] ->
        user_id = new_user_id()
        :ok = :mnesia.write({@devices, device_id, user_id})
        :ok = :mnesia.write({@users, user_id, device_id, System.system_time(:second)})
        {user_id, true}
    end
  end

  # 128 random bits do not collide in practice; the check keeps an account from ever being
  # overwritten if they did.
  defp new_user_id do
    user_id = Base.encode16(:crypto.strong_rand_bytes(16), case: :lower)

    case :mnesia.read(@users, user_id, :write) do
      [] -> user_id
      _taken -> new_user_id()
    end
  end

  @doc """
  Reads a user account (a dirty read: it may miss a transaction that has not yet committed).
  """
  @spec get_user(term) :: {:ok, user} | {:error, :not_found}
  def get_user(user_id) when is_binary(user_id) do
    case :mnesia.dirty_read(@users, user_id) do
      [{@users, ^user_id, device_id, created_at}] ->
        {:ok, %{user_id: user_id, device_id: device_id, created_at: created_at}}

      [] ->
        {:error, :not_found}
    end
  end

  def get_user(_user_id), do: {:error, :not_found}

  @doc "Counts the users."
  @spec count() :: non_neg_integer
  def count, do: :mnesia.table_info(@users, :size)

  @doc """
  Tells whether a term is an acceptable device id: a binary of 10 to 128 bytes, each of them
  printable ASCII other than space (0x21..0x7E).

      iex> Overworld.Accounts.valid_device_id?("phone-1234567")
      true
      iex> Overworld.Accounts.valid_device_id?("short")
      false
      iex> Overworld.Accounts.valid_device_id?("has a space")
      false
      iex> Overworld.Accounts.valid_device_id?("tab\\there-and-more")
      false
      iex> Overworld.Accounts.valid_device_id?(String.duplicate("x", 129))
      false
      iex> Overworld.Accounts.valid_device_id?(:phone_1234567)
      false
  """
  @spec valid_device_id?(term) :: boolean
  def valid_device_id?(id) when is_binary(id) and byte_size(id) >= 10 and byte_size(id) <= 128,
    do: printable?(id)

  def valid_device_id?(_id), do: false

  defp printable?(<<c, rest::binary>>) when c >= 0x21 and c <= 0x7E, do: printable?(rest)
  defp printable?(<<>>), do: true
  defp printable?(_), do: false
end

defmodule Overworld.Accounts do
  @moduledoc """
  Accounts, kept in Mnesia on the local disc.

  An account is found by any of its identities: device ids (a client proves nothing but a
  device id it made up and keeps, for example a random string stored on the device; the first
  time one is seen it gets a new account), an email address with a password
  (`Overworld.Accounts.Email`), or a custom id that a game's own auth server vouches for
  (`Overworld.Accounts.CustomAuth`). An account may link several devices, one address and one
  custom id (`link/2`, `unlink/2`), so a guest's device account upgraded with an address keeps
  its id and its data. Tables, all `disc_copies` on this node:

    * `:overworld_devices` — `{:overworld_devices, device_id, user_id}` (indexed by user)
    * `:overworld_users` — `{:overworld_users, user_id, device_id, created_at}`, `created_at` in
      unix seconds, `device_id` the first device (nil for an account made otherwise)
    * `:overworld_identities` — `{:overworld_identities, {:email | :custom, value}, user_id,
      secret}` (`secret`: an address's password hash), indexed by user
    * `:overworld_account_state` — `{:overworld_account_state, user_id, generation,
      disabled_at}`: an account without a row is at generation 0 and enabled
    * `:overworld_revoked` — `{:overworld_revoked, sid, expires_at}`: logged-out logins
    * `:overworld_pending` — email codes waiting for confirmation (`Overworld.Accounts.Email`)

  **Tokens** (`Overworld.Auth.Token`) carry the account's generation and their login's id
  (sid); `check_token/1` refuses, on every use (each HTTP call, each WebSocket connection,
  each refresh), a token of a disabled account, of an older generation (`revoke_all/1`:
  logged out everywhere) or of a logged-out login (`logout/2`). Being Mnesia tables, the
  generations and revocations are replicated to every node of a cluster like the accounts.

  Every change is durable before it answers: on disk, fsynced (`Overworld.Accounts.Sync`, a
  group commit of the Mnesia log).

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
  @identities :overworld_identities
  @state :overworld_account_state
  @revoked :overworld_revoked
  @pending :overworld_pending
  @tables [@devices, @users, @shared, @identities, @state, @revoked, @pending]
  @attributes %{
    @devices => [:device_id, :user_id],
    @users => [:user_id, :device_id, :created_at],
    @shared => [:key, :value],
    @identities => [:key, :user_id, :secret],
    @state => [:user_id, :generation, :disabled_at],
    @revoked => [:sid, :expires_at],
    @pending => [:code_hash, :address, :user_id, :secret, :expires_at]
  }
  # Secondary indexes: a user's devices and identities.
  @indexes [{@devices, :user_id}, {@identities, :user_id}]
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
           end),
         :ok <- wait_for(@tables) do
      ensure_indexes()
    end
  end

  # (A data directory of an earlier version has the devices without their index: added.)
  defp ensure_indexes do
    Enum.reduce_while(@indexes, :ok, fn {table, attribute}, :ok ->
      case :mnesia.add_table_index(table, attribute) do
        {:atomic, :ok} -> {:cont, :ok}
        {:aborted, {:already_exists, _, _}} -> {:cont, :ok}
        {:aborted, reason} -> {:halt, {:error, {:add_table_index, table, reason}}}
      end
    end)
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
    if valid_device_id?(device_id),
      do: find_or_create({:device, device_id}),
      else: {:error, :invalid_device_id}
  end

  @doc """
  Finds the user of a custom id (one that a game's auth server vouched for:
  `Overworld.Accounts.CustomAuth`), or creates one the first time; as `authenticate_device/1`.
  """
  @spec authenticate_custom(term) ::
          {:ok, %{user_id: user_id, created: boolean}}
          | {:error, :invalid_custom_id | :no_quorum | {:aborted, term}}
  def authenticate_custom(custom_id) do
    if Overworld.Accounts.CustomAuth.valid_id?(custom_id),
      do: find_or_create({:custom, custom_id}),
      else: {:error, :invalid_custom_id}
  end

  defp find_or_create(identity) do
    # (A node cut off from the majority of its cluster makes no account: the majority's
    # copy wins when the partition heals, and one made here would be lost.)
    if Overworld.Cluster.quorate?() do
      case :mnesia.transaction(fn -> find_or_create_tx(identity) end) do
        {:atomic, {user_id, false}} -> {:ok, %{user_id: user_id, created: false}}
        # (A new account is durable before it is told: on disk, fsynced.)
        {:atomic, {user_id, true}} -> durable(%{user_id: user_id, created: true})
        {:aborted, reason} -> {:error, {:aborted, reason}}
      end
    else
      {:error, :no_quorum}
    end
  end

  defp durable(result) do
    case Overworld.Accounts.Sync.await() do
      :ok -> {:ok, result}
      {:error, reason} -> {:error, {:aborted, reason}}
    end
  end

  defp find_or_create_tx(identity) do
    case owner(identity, :write) do
      nil -> {create_tx(identity, nil), true}
      user_id -> {user_id, false}
    end
  end

  @doc false
  # In a transaction: a new account with `identity` (`secret`: an address's password hash).
  @spec create_tx(tuple, term) :: user_id
  def create_tx(identity, secret) do
    user_id = new_user_id()
    first_device = with {:device, d} <- identity, do: d, else: (_ -> nil)
    :ok = :mnesia.write({@users, user_id, first_device, System.system_time(:second)})
    :ok = put_identity(identity, user_id, secret)
    user_id
  end

  @doc false
  # The user owning an identity (`{:device, id}`, `{:email, address}`, `{:custom, id}`), read
  # from this node's copy (no transaction), or nil.
  @spec owner(tuple) :: user_id | nil
  def owner(identity), do: :mnesia.async_dirty(fn -> owner(identity, :read) end)

  @doc false
  # At most `limit` user ids starting with `prefix`, sorted (a scan of the users' table from
  # this node's copy that stops at `limit` found: for operators, never for players).
  @spec user_ids_starting(binary, pos_integer) :: [user_id]
  def user_ids_starting(prefix, limit) do
    size = byte_size(prefix)
    ms = [{{@users, :"$1", :_, :_}, [{:==, {:binary_part, :"$1", 0, size}, prefix}], [:"$1"]}]

    case :mnesia.activity(:async_dirty, fn -> :mnesia.select(@users, ms, limit, :read) end) do
      {ids, _continuation} -> Enum.sort(ids)
      :"$end_of_table" -> []
    end
  end

  # In a transaction: the user owning an identity, or nil.
  defp owner({:device, d}, lock) do
    case :mnesia.read(@devices, d, lock) do
      [{@devices, ^d, user_id}] -> user_id
      [] -> nil
    end
  end

  defp owner(identity, lock) do
    case :mnesia.read(@identities, identity, lock) do
      [{@identities, ^identity, user_id, _}] -> user_id
      [] -> nil
    end
  end

  defp put_identity({:device, d}, user_id, nil), do: :mnesia.write({@devices, d, user_id})

  defp put_identity(identity, user_id, secret),
    do: :mnesia.write({@identities, identity, user_id, secret})

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
  `device_id` is its first device (nil when it was made with an address or a custom id).
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

  @doc """
  An account's identities and state: `%{user_id, created_at, devices, email, custom_id,
  disabled}` (a dirty read).
  """
  @spec account(user_id) :: {:ok, map} | {:error, :not_found}
  def account(user_id) do
    with {:ok, user} <- get_user(user_id) do
      ids = :mnesia.dirty_index_read(@identities, user_id, :user_id)

      {:ok,
       %{
         user_id: user_id,
         created_at: user.created_at,
         devices:
           Enum.sort(
             for {@devices, d, _} <- :mnesia.dirty_index_read(@devices, user_id, :user_id), do: d
           ),
         email: Enum.find_value(ids, fn {_, {k, v}, _, _} -> k == :email && v end),
         custom_id: Enum.find_value(ids, fn {_, {k, v}, _, _} -> k == :custom && v end),
         disabled: match?({:error, :disabled}, state(user_id))
       }}
    end
  end

  ## Linking

  @doc """
  Links an identity to an account: `{:device, id}` or `{:custom, id}` (an address is linked
  through `Overworld.Accounts.Email`). Linking what the account has already is `:ok`;
  `{:error, :already_linked}` when another account has it, `{:error, :identity_exists}` when
  the account has another custom id (unlink it first).
  """
  @spec link(user_id, {:device | :custom, binary}) ::
          :ok
          | {:error, :not_found | :already_linked | :identity_exists | :invalid_identity | term}
  def link(user_id, identity) do
    if valid_identity?(identity),
      do: change(fn -> link_tx(user_id, identity, nil) end),
      else: {:error, :invalid_identity}
  end

  @doc false
  # In a transaction (aborts with {:refused, reason}).
  @spec link_tx(user_id, tuple, term) :: :ok
  def link_tx(user_id, {kind, _} = identity, secret) do
    if :mnesia.read(@users, user_id, :write) == [], do: :mnesia.abort({:refused, :not_found})

    case owner(identity, :write) do
      ^user_id ->
        :ok

      nil ->
        if kind != :device and kind_of(user_id, kind) != [],
          do: :mnesia.abort({:refused, :identity_exists})

        put_identity(identity, user_id, secret)

      _other ->
        :mnesia.abort({:refused, :already_linked})
    end
  end

  defp kind_of(user_id, kind) do
    for {_, {^kind, _} = id, _, _} <- :mnesia.index_read(@identities, user_id, :user_id), do: id
  end

  @doc """
  Unlinks an identity (`{:device, id}`, `{:custom, id}` or `{:email, address}`) from its
  account. An account keeps at least one: `{:error, :last_identity}`; `{:error, :not_linked}`
  when the account does not have it.
  """
  @spec unlink(user_id, {:device | :custom | :email, binary}) ::
          :ok | {:error, :last_identity | :not_linked | term}
  def unlink(user_id, identity), do: change(fn -> unlink_tx(user_id, identity) end)

  defp unlink_tx(user_id, identity) do
    if owner(identity, :write) != user_id, do: :mnesia.abort({:refused, :not_linked})

    devices = :mnesia.index_read(@devices, user_id, :user_id)
    others = :mnesia.index_read(@identities, user_id, :user_id)
    if length(devices) + length(others) <= 1, do: :mnesia.abort({:refused, :last_identity})

    case identity do
      {:device, d} ->
        :ok = :mnesia.delete({@devices, d})
        # The account's first device, if it was this one: another, or none.
        [{@users, ^user_id, first, created}] = :mnesia.read(@users, user_id, :write)

        if first == d do
          next = Enum.find_value(devices, fn {_, other, _} -> other != d && other end)
          :mnesia.write({@users, user_id, next || nil, created})
        end

        :ok

      _ ->
        :mnesia.delete({@identities, identity})
    end
  end

  defp valid_identity?({:device, d}), do: valid_device_id?(d)
  defp valid_identity?({:custom, c}), do: Overworld.Accounts.CustomAuth.valid_id?(c)
  defp valid_identity?(_), do: false

  @doc false
  # A durable transaction of this node's Mnesia (the accounts', the embedded storage's): on a
  # node that sees its cluster's majority, run, then fsynced (`Overworld.Accounts.Sync`)
  # before the answer. A transaction aborted with {:refused, reason} answers {:error, reason}.
  # `:sync`: it answers once every replica committed it too (mnesia:sync_transaction).
  @spec transaction((() -> term), :async | :sync) :: {:ok, term} | {:error, term}
  def transaction(fun, mode \\ :async) do
    run = if mode == :sync, do: &:mnesia.sync_transaction/1, else: &:mnesia.transaction/1

    if Overworld.Cluster.quorate?() do
      case run.(fun) do
        {:atomic, result} ->
          case Overworld.Accounts.Sync.await() do
            :ok -> {:ok, result}
            {:error, reason} -> {:error, {:aborted, reason}}
          end

        {:aborted, {:refused, reason}} ->
          {:error, reason}

        {:aborted, reason} ->
          {:error, {:aborted, reason}}
      end
    else
      {:error, :no_quorum}
    end
  end

  @doc false
  # A change to the accounts (`transaction/1`) answering what the transaction's fun answers.
  @spec change((() -> term), :async | :sync) :: term
  def change(fun, mode \\ :async) do
    case transaction(fun, mode) do
      {:ok, result} -> result
      error -> error
    end
  end

  ## Tokens: generations, logouts, disabled accounts

  @doc """
  What a new token of `user_id` carries (`Overworld.Auth.Token.sign/5`): the account's
  generation and a login id (`sid`: a new one unless given, as a refresh keeps its login's).
  `{:error, :disabled}` for a disabled account.
  """
  @spec subject(user_id, binary | nil) ::
          {:ok, %{user_id: user_id, generation: non_neg_integer, sid: binary}}
          | {:error, :disabled}
  def subject(user_id, sid \\ nil) do
    with {:ok, generation} <- state(user_id) do
      {:ok,
       %{user_id: user_id, generation: generation, sid: sid || Overworld.Auth.Token.new_sid()}}
    end
  end

  defp state(user_id) do
    case :mnesia.dirty_read(@state, user_id) do
      [] -> {:ok, 0}
      [{@state, _, generation, nil}] -> {:ok, generation}
      [{@state, _, _, _disabled_at}] -> {:error, :disabled}
    end
  end

  @doc """
  Checks a verified token's claims against its account (every use of a token calls it):
  `{:error, :disabled}`, `{:error, :revoked}` (an older generation, or a logged-out login),
  or `:ok`. Two dirty reads of replicated tables: a revocation made on any node of a cluster
  counts here once Mnesia has replicated it (a transaction: before the revoking call answers).
  """
  @spec check_token(Overworld.Auth.Token.claims()) :: :ok | {:error, :disabled | :revoked}
  def check_token(%{user_id: user_id, generation: token_generation, sid: sid}) do
    case state(user_id) do
      {:ok, generation} when token_generation < generation ->
        {:error, :revoked}

      {:ok, _} ->
        if sid != nil and :mnesia.dirty_read(@revoked, sid) != [],
          do: {:error, :revoked},
          else: :ok

      error ->
        error
    end
  end

  @doc """
  Verifies a token (`Overworld.Auth.Token.verify/4` with `keys`) and checks it against its
  account (`check_token/1`).
  """
  @spec verify_token([Overworld.Auth.Token.Key.t()], term, Overworld.Auth.Token.type()) ::
          {:ok, Overworld.Auth.Token.claims()}
          | {:error, Overworld.Auth.Token.error() | :disabled | :revoked}
  def verify_token(keys, token, type) do
    with {:ok, claims} <- Overworld.Auth.Token.verify(keys, token, type),
         :ok <- check_token(claims) do
      {:ok, claims}
    end
  end

  @doc """
  Logs a login of `user_id` out: every token of its `sid` (session and refresh, and those
  refreshed from them) is refused from now on, on every node, and its live sessions are closed. `until`: the unix second after which none of
  them could be valid anyway (the refresh token's expiry), when the revocation is forgotten.
  """
  @spec logout(binary, binary, integer) :: :ok | {:error, term}
  def logout(user_id, sid, until) when is_binary(sid) do
    revoking(user_id, fn -> :mnesia.write({@revoked, sid, until}) end)
  end

  @doc false
  # A login id (`sid`) revoked until `until` (unix seconds), with no account to tell: an
  # operator's logout (`Overworld.Operators`). Replicated before it answers, fsynced; swept
  # with the accounts' logouts.
  @spec revoke_sid(binary, integer) :: :ok | {:error, term}
  def revoke_sid(sid, until) when is_binary(sid),
    do: change(fn -> :mnesia.write({@revoked, sid, until}) end, :sync)

  @doc false
  # Whether a login id was revoked (`logout/3`, `revoke_sid/2`): a dirty read.
  @spec revoked_sid?(binary | nil) :: boolean
  def revoked_sid?(nil), do: false
  def revoked_sid?(sid), do: :mnesia.dirty_read(@revoked, sid) != []

  @doc "Logs an account out everywhere: every token made before is refused (a new generation)."
  @spec revoke_all(user_id) :: :ok | {:error, term}
  def revoke_all(user_id), do: set_state(user_id, fn gen, disabled -> {gen + 1, disabled} end)

  @doc """
  Disables an account: its tokens are refused (a new generation), and it gets no new ones
  until `enable/1`.
  """
  @spec disable(user_id) :: :ok | {:error, term}
  def disable(user_id),
    do: set_state(user_id, fn gen, _ -> {gen + 1, System.system_time(:second)} end)

  @doc "Enables a disabled account (its old tokens stay refused)."
  @spec enable(user_id) :: :ok | {:error, term}
  def enable(user_id), do: set_state(user_id, fn gen, _ -> {gen, nil} end)

  # A revocation: replicated on every node before it answers (a synchronous transaction), then
  # the user's live sessions, on every node, check their tokens again.
  defp revoking(user_id, fun) do
    case change(fun, :sync) do
      :ok ->
        Overworld.Session.revoked(user_id)
        :ok

      error ->
        error
    end
  end

  defp set_state(user_id, fun) do
    revoking(user_id, fn ->
      if :mnesia.read(@users, user_id) == [], do: :mnesia.abort({:refused, :not_found})

      {gen, disabled} =
        case :mnesia.read(@state, user_id, :write) do
          [] -> {0, nil}
          [{@state, _, gen, disabled}] -> {gen, disabled}
        end

      {gen, disabled} = fun.(gen, disabled)
      :mnesia.write({@state, user_id, gen, disabled})
    end)
  end

  @doc false
  # Forgets revocations and pending codes past their expiry (Overworld.Accounts.Sweeper).
  @spec sweep(integer) :: non_neg_integer
  def sweep(now) do
    expired =
      :mnesia.dirty_select(@revoked, [
        {{@revoked, :"$1", :"$2"}, [{:<, :"$2", now}], [{{@revoked, :"$1"}}]}
      ]) ++
        :mnesia.dirty_select(@pending, [
          {{@pending, :"$1", :_, :_, :_, :"$2"}, [{:<, :"$2", now}], [{{@pending, :"$1"}}]}
        ])

    for key <- expired, do: :mnesia.dirty_delete(key)
    length(expired)
  end

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

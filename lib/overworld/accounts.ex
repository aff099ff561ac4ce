defmodule Overworld.Accounts do
  @moduledoc """
  Device accounts, kept in Mnesia on the local disc.

  A client proves nothing but a device id it made up and keeps (for example a random string
  stored on the device); the first time a device id is seen it gets a new user. Two tables hold
  the accounts, both `disc_copies` on this node:

    * `:overworld_devices` — `{:overworld_devices, device_id, user_id}`
    * `:overworld_users` — `{:overworld_users, user_id, device_id, created_at}`, `created_at` in
      unix seconds

  A user id is 16 random bytes written as 32 lowercase hex characters.

  Mnesia is an included application of `:overworld`: it is loaded but not started with it.
  `start/1` starts it in a data directory and makes the tables; call it before the other
  functions. Mnesia has one data directory per node, so every caller on a node must use the same
  one.
  """

  @devices :overworld_devices
  @users :overworld_users
  @tables [@devices, @users]
  @attributes %{@devices => [:device_id, :user_id], @users => [:user_id, :device_id, :created_at]}
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
    :global.trans({{__MODULE__, :start}, self()}, fn -> start_locked(dir) end, [node()])
  end

  defp start_locked(dir) do
    if :mnesia.system_info(:is_running) == :yes do
      current = :mnesia.system_info(:directory) |> to_string() |> Path.expand()
      if current == dir, do: ensure_tables(), else: {:error, {:data_dir_in_use, current}}
    else
      with :ok <- File.mkdir_p(dir),
           :ok <- load_mnesia(),
           :ok <- Application.put_env(:mnesia, :dir, String.to_charlist(dir)),
           # Bursts of first authentications (thousands per second) write the transaction
           # log faster than the default threshold of 1,000 records dumps it.
           :ok <- Application.put_env(:mnesia, :dump_log_write_threshold, 50_000),
           :ok <- create_schema(),
           :ok <- start_mnesia() do
        ensure_tables()
      end
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
    with :ok <- Enum.reduce_while(@tables, :ok, &create_table/2) do
      case :mnesia.wait_for_tables(@tables, @wait_timeout) do
        :ok -> :ok
        {:timeout, tables} -> {:error, {:tables_timeout, tables}}
        {:error, reason} -> {:error, {:wait_for_tables, reason}}
      end
    end
  end

  defp create_table(table, :ok) do
    attributes = Map.fetch!(@attributes, table)

    case :mnesia.create_table(table, attributes: attributes, disc_copies: [node()]) do
      {:atomic, :ok} ->
        {:cont, :ok}

      {:aborted, {:already_exists, ^table}} ->
        case :mnesia.table_info(table, :attributes) do
          ^attributes -> {:cont, :ok}
          other -> {:halt, {:error, {:table_attributes, table, other}}}
        end

      {:aborted, reason} ->
        {:halt, {:error, {:create_table, table, reason}}}
    end
  end

  @doc """
  Finds the user of a device id, or creates one the first time the device id is seen.

  The lookup and the creation are one transaction: concurrent first calls for a device id make
  one account, and all of them answer its user id (`created: true` for exactly one of them).
  `{:error, {:aborted, reason}}` reports a failed transaction (for example, Mnesia not started).
  """
  @spec authenticate_device(term) ::
          {:ok, %{user_id: user_id, created: boolean}}
          | {:error, :invalid_device_id | {:aborted, term}}
  def authenticate_device(device_id) do
    if valid_device_id?(device_id) do
      case :mnesia.transaction(fn -> find_or_create(device_id) end) do
        {:atomic, {user_id, created}} -> {:ok, %{user_id: user_id, created: created}}
        {:aborted, reason} -> {:error, {:aborted, reason}}
      end
    else
      {:error, :invalid_device_id}
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

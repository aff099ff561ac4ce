defmodule Overworld.Operators do
  @moduledoc """
  Operators: the people who run a server, logged in to its operator HTTP API
  (docs/operator-api.md: accounts, zones, sessions, the audit log).

  ## Where operators come from

  1. **The server's configuration** (`Overworld.Server` option `operators:`, validated by
     `Overworld.Operators.Settings`): names, roles and password hashes printed by
     `mix overworld.operator.hash` (the password is read from stdin, never given on a command
     line). Changing them takes a restart.
  2. **The operators table**: a Mnesia table replicated like the accounts
     (`:overworld_operators`, `disc_copies` on every node running the accounts), changed at run
     time with `put/3` (a password, hashed here), `put_hash/3` (the text of a hash) and
     `delete/1`, for example from a release's remote console or `rpc`:

         bin/my_game rpc 'Overworld.Operators.put_hash("alice", "pbkdf2-sha256$600000$...")'

     or, on the data directory of a server that is stopped, `mix overworld.operator.add`.
     Every change is replicated and fsynced before it answers.

  A name in both belongs to the configuration's operator. Passwords are never logged nor
  kept but hashed (PBKDF2-HMAC-SHA256, `Overworld.Accounts.Password`), and are checked in the
  node's bounded hashing pool (`Overworld.Accounts.Hasher`): a full pool answers
  `{:error, {:busy, retry_after}}`.

  ## Roles

  `:operator` may call every route; `:viewer` only reads (the API's `GET` routes).

  ## Tokens

  `login/3` answers an operator token (`Overworld.Auth.Token` of type `:operator`, signed with
  the server's keys) that lives `token_ttl` seconds (default an hour). A player's token is
  never an operator's, nor the reverse (the type is signed). Every use checks it again
  (`verify/2`): the operator must still exist, with the same password hash (the token carries
  a fingerprint of it: a new password refuses the old tokens), and the token must not be
  logged out (`logout/2`). The role is read at each use, so a change of role counts at once.

  An unknown name and a wrong password answer the same `{:error, :invalid_credentials}` after
  the same work: an unknown name is checked against a hash made once with the accounts'
  `password_iterations` (`Overworld.Accounts.Settings`), so hash operators' passwords with
  that count (600,000 by default, as `mix overworld.operator.hash` does).
  """

  alias Overworld.Accounts
  alias Overworld.Accounts.{Hasher, Password}
  alias Overworld.Auth.Token
  alias Overworld.Operators.Settings

  @table :overworld_operators
  @attributes [:name, :hash, :role, :updated_at]
  @max_password_bytes Overworld.Accounts.Email.max_password_bytes()

  @typedoc "An operator as the API sees it."
  @type operator :: %{name: String.t(), role: :operator | :viewer}

  @typedoc "A verified operator token: its operator, login id and expiry."
  @type claims :: %{
          name: String.t(),
          role: :operator | :viewer,
          sid: binary,
          expires_at: integer
        }

  @doc """
  Makes sure the operators table exists in this node's Mnesia (started by
  `Overworld.Accounts.start/1`); `Overworld.Server` calls it when it starts.
  """
  @spec start() :: :ok | {:error, term}
  def start, do: Accounts.ensure_table(@table, @attributes, [])

  @doc """
  Adds an operator to the table, or changes its password or role: the password (8 to 256
  bytes) is hashed in the node's pool with `iterations` (option, default
  #{Password.default_iterations()}). Option `:role`: `:operator` (default) or `:viewer`.
  The operator's earlier tokens are refused from now on (a new hash) and its observer
  connections closed.
  """
  @spec put(String.t(), String.t(), keyword) :: :ok | {:error, term}
  def put(name, password, opts \\ []) do
    iterations = Keyword.get(opts, :iterations, Password.default_iterations())

    with :ok <- check_name(name),
         {:ok, _} <- check_role(opts),
         :ok <- check_password(password),
         {:ok, hash} <- Hasher.hash(password, iterations, 120_000) do
      put_hash(name, hash, opts)
    end
  end

  @doc """
  Adds an operator to the table with a password hash made elsewhere: its text
  (`mix overworld.operator.hash`) or `Overworld.Accounts.Password.hash/2`'s term. Option
  `:role` as for `put/3`.
  """
  @spec put_hash(String.t(), String.t() | Password.hash(), keyword) :: :ok | {:error, term}
  def put_hash(name, hash, opts \\ []) do
    with :ok <- check_name(name),
         {:ok, role} <- check_role(opts),
         {:ok, hash} <- check_hash(hash) do
      row = {@table, name, hash, role, System.system_time(:second)}

      with :ok <- Accounts.change(fn -> :mnesia.write(row) end, :sync),
           do: Overworld.Session.Observer.revoked(name)
    end
  end

  @doc "Removes an operator from the table (its tokens are refused from now on)."
  @spec delete(String.t()) :: :ok | {:error, :not_found | term}
  def delete(name) do
    with :ok <- delete_row(name), do: Overworld.Session.Observer.revoked(name)
  end

  defp delete_row(name) do
    Accounts.change(
      fn ->
        if :mnesia.read(@table, name, :write) == [], do: :mnesia.abort({:refused, :not_found})
        :mnesia.delete({@table, name})
      end,
      :sync
    )
  end

  @doc "The operators of the table (not those of a server's configuration), by name."
  @spec list() :: [%{name: String.t(), role: :operator | :viewer, updated_at: integer}]
  def list do
    @table
    |> :mnesia.dirty_select([{{@table, :"$1", :_, :"$2", :"$3"}, [], [{{:"$1", :"$2", :"$3"}}]}])
    |> Enum.map(fn {n, r, at} -> %{name: n, role: r, updated_at: at} end)
    |> Enum.sort_by(& &1.name)
  end

  @doc """
  The operator `name` of a server (`settings`: its `Overworld.Operators.Settings`): its
  configuration's, else the table's.
  """
  @spec get(Settings.t(), term) :: {:ok, Settings.operator()} | :error
  def get(settings, name) do
    case settings.static do
      %{^name => op} -> {:ok, op}
      _ -> from_table(name)
    end
  end

  defp from_table(name) when is_binary(name) do
    case :mnesia.dirty_read(@table, name) do
      [{@table, ^name, hash, role, _}] -> {:ok, %{name: name, role: role, hash: hash}}
      [] -> :error
    end
  catch
    # (The table is missing only on a node whose server has not started yet.)
    :exit, _ -> :error
  end

  defp from_table(_name), do: :error

  @doc """
  Logs an operator in on the server of `cfg` (an `Overworld.Server` config): `{:ok, %{token,
  expires_in, name, role}}`, or `{:error, :invalid_credentials}` alike for an unknown name and
  a wrong password (same work), `{:error, :invalid_password}` for a password that is not a
  string of at most 256 bytes, `{:error, {:busy, seconds}}` when the hashing pool is full.
  """
  @spec login(map, term, term) ::
          {:ok, %{token: String.t(), expires_in: pos_integer, name: String.t(), role: atom}}
          | {:error, term}
  def login(cfg, name, password) do
    with :ok <- password_string(password) do
      {op, hash} =
        case get(cfg.operators, name) do
          {:ok, op} -> {op, op.hash}
          :error -> {nil, Password.decoy(cfg.accounts.password_iterations)}
        end

      case Hasher.verify(password, hash) do
        {:ok, true} when op != nil -> {:ok, issue(cfg, op)}
        {:ok, _} -> {:error, :invalid_credentials}
        {:error, _} = error -> error
      end
    end
  end

  defp issue(cfg, op) do
    [key | _] = cfg.keys
    ttl = cfg.operators.token_ttl
    subject = %{user_id: op.name, generation: fingerprint(op.hash), sid: Token.new_sid()}

    %{
      token: Token.sign(key, :operator, subject, ttl),
      expires_in: ttl,
      name: op.name,
      role: op.role
    }
  end

  @doc """
  Verifies an operator token for the server of `cfg`: `{:ok, %{name, role, sid,
  expires_at}}`, or `{:error, reason}`: a token's own errors (`Overworld.Auth.Token`:
  `:wrong_type` for a player's token, `:expired`, ...), `:unknown_operator` (removed),
  `:revoked` (logged out, or the password changed since).
  """
  @spec verify(map, term) :: {:ok, claims} | {:error, atom}
  def verify(cfg, token) do
    with {:ok, %{user_id: name, generation: gen, sid: sid, expires_at: exp}} <-
           Token.verify(cfg.keys, token, :operator),
         {:ok, op} <- known(cfg, name),
         :ok <- current(op, gen, sid) do
      {:ok, %{name: name, role: op.role, sid: sid, expires_at: exp}}
    end
  end

  defp known(cfg, name) do
    case get(cfg.operators, name) do
      {:ok, op} -> {:ok, op}
      :error -> {:error, :unknown_operator}
    end
  end

  defp current(op, gen, sid) do
    if gen == fingerprint(op.hash) and not Accounts.revoked_sid?(sid),
      do: :ok,
      else: {:error, :revoked}
  end

  @doc """
  Logs an operator's token out (`verify/2`'s claims): it is refused from now on, and the
  observer connections opened with it are closed (4003).
  """
  @spec logout(claims) :: :ok | {:error, term}
  def logout(%{name: name, sid: sid, expires_at: until}) do
    with :ok <- Accounts.revoke_sid(sid, until), do: Overworld.Session.Observer.revoked(name)
  end

  # A token of an operator carries this of its hash: a new password refuses the old tokens.
  defp fingerprint(hash), do: :erlang.phash2(hash, 0x100000000)

  defp check_name(name) do
    if Settings.valid_name?(name), do: :ok, else: {:error, :invalid_name}
  end

  defp check_role(opts) do
    case Settings.role(Keyword.get(opts, :role, :operator)) do
      {:ok, role} -> {:ok, role}
      :error -> {:error, :invalid_role}
    end
  end

  defp check_password(p) when is_binary(p) and byte_size(p) in 8..@max_password_bytes, do: :ok
  defp check_password(_p), do: {:error, :invalid_password}

  defp password_string(p) when is_binary(p) and byte_size(p) <= @max_password_bytes, do: :ok
  defp password_string(_p), do: {:error, :invalid_password}

  defp check_hash({:pbkdf2_sha256, n, salt, key} = hash)
       when is_integer(n) and n > 0 and is_binary(salt) and is_binary(key),
       do: {:ok, hash}

  defp check_hash(text) when is_binary(text) do
    case Password.decode(text) do
      {:ok, hash} -> {:ok, hash}
      :error -> {:error, :invalid_hash}
    end
  end

  defp check_hash(_other), do: {:error, :invalid_hash}
end

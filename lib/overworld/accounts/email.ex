defmodule Overworld.Accounts.Email do
  @moduledoc """
  Email and password accounts: registration, confirmation, login, and linking an address to an
  existing account (a guest's device account upgraded keeps its id and data).

  Passwords are hashed with PBKDF2-HMAC-SHA256 (`Overworld.Accounts.Password`) in the node's
  bounded pool (`Overworld.Accounts.Hasher`): a call finding the pool full answers
  `{:error, {:busy, retry_after_seconds}}`. Passwords are never logged nor kept but hashed.

  **Nothing tells a stranger whether an address has an account.**

    * `login/3` with an unknown address and with a wrong password answer the same
      `{:error, :invalid_credentials}` after the same work: an unknown address is checked
      against a hash made at start with the same iteration count, so both take one PBKDF2.
    * With confirmation (the default, `Overworld.Accounts.Settings`), `register/3` and
      `link/4` answer `{:ok, :pending}` for any well-formed address after hashing the password,
      taken or not: a new address is mailed a code (`confirm/2` with it makes the account, or
      links the address), a taken one is mailed a notice to its owner
      (`Overworld.Accounts.Mailer`), after the answer.

  Addresses are kept trimmed and lowercased (`normalize/1`).
  """

  alias Overworld.Accounts
  alias Overworld.Accounts.{Hasher, Mailer, Password}

  @pending :overworld_pending
  @identities :overworld_identities
  @max_password_bytes 256

  @type error ::
          :invalid_email
          | :invalid_password
          | :invalid_credentials
          | :invalid_code
          | :email_taken
          | :disabled
          | :no_quorum
          | {:busy, pos_integer}
          | term

  @doc """
  An address as kept: trimmed and lowercased; `:error` unless it looks like one (3 to 254
  bytes of UTF-8 without spaces or control characters, one `@` with something on each side,
  a dot in the domain).

      iex> Overworld.Accounts.Email.normalize("  Goblin@Example.COM ")
      {:ok, "goblin@example.com"}
      iex> Overworld.Accounts.Email.normalize("no-at-sign.example.com")
      :error
      iex> Overworld.Accounts.Email.normalize("two@@example.com")
      :error
      iex> Overworld.Accounts.Email.normalize("a b@example.com")
      :error
  """
  @spec normalize(term) :: {:ok, binary} | :error
  def normalize(address) when is_binary(address) do
    a = address |> String.trim() |> String.downcase()

    with true <- byte_size(a) in 3..254 and String.valid?(a),
         false <- String.match?(a, ~r/[\s[:cntrl:]]/u),
         [local, domain] when local != "" <- String.split(a, "@"),
         [_, _ | _] <- String.split(domain, "."),
         false <- Enum.any?(String.split(domain, "."), &(&1 == "")) do
      {:ok, a}
    else
      _ -> :error
    end
  end

  def normalize(_address), do: :error

  @doc """
  Registers an address with a password. With confirmation: `{:ok, :pending}` (see the module
  doc); without: `{:ok, %{user_id, created: true}}` or `{:error, :email_taken}`.
  """
  @spec register(term, term, Accounts.Settings.t()) ::
          {:ok, :pending | %{user_id: binary, created: true}} | {:error, error}
  def register(address, password, settings), do: add(address, password, nil, settings)

  @doc """
  Links an address to `user_id`'s account (as `register/3`, but the code, or the link without
  confirmation, adds the address to that account). `{:error, :identity_exists}` when the
  account has an address already (unlink it first).
  """
  @spec link(binary, term, term, Accounts.Settings.t()) ::
          {:ok, :pending | %{user_id: binary, created: false}} | {:error, error}
  def link(user_id, address, password, settings), do: add(address, password, user_id, settings)

  defp add(address, password, user_id, s) do
    with {:ok, a} <- address(address),
         :ok <- password(password, s),
         :ok <- no_address(user_id),
         {:ok, hash} <- Hasher.hash(password, s.password_iterations) do
      if s.email_confirmation, do: pending(a, hash, user_id, s), else: add_now(a, hash, user_id)
    end
  end

  # An account links one address: it says so at once (it tells nothing of others' addresses).
  defp no_address(nil), do: :ok

  defp no_address(user_id) do
    case Accounts.account(user_id) do
      {:ok, %{email: nil}} -> :ok
      {:ok, _} -> {:error, :identity_exists}
      {:error, :not_found} -> {:error, :not_found}
    end
  end

  # A taken address costs what a new one does (a pending row written and fsynced, never to be
  # confirmed: its code is mailed to nobody), so the answer's time tells nothing either.
  defp pending(a, hash, user_id, s) do
    taken? = taken?(a)
    code = Base.url_encode64(:crypto.strong_rand_bytes(18), padding: false)
    expires = System.system_time(:second) + s.confirmation_ttl

    row =
      if taken?,
        do: {@pending, digest(code), a, :taken, nil, expires},
        else: {@pending, digest(code), a, user_id, hash, expires}

    with :ok <- Accounts.change(fn -> :mnesia.write(row) end) do
      cond do
        taken? -> Mailer.send_later(s.mailer, :already_registered, a, %{})
        user_id -> Mailer.send_later(s.mailer, :confirm_link, a, %{code: code})
        true -> Mailer.send_later(s.mailer, :confirm_registration, a, %{code: code})
      end

      {:ok, :pending}
    end
  end

  defp add_now(a, hash, nil) do
    Accounts.change(fn ->
      if taken_tx?(a), do: :mnesia.abort({:refused, :email_taken})
      {:ok, %{user_id: Accounts.create_tx({:email, a}, hash), created: true}}
    end)
  end

  defp add_now(a, hash, user_id) do
    Accounts.change(fn ->
      if taken_tx?(a), do: :mnesia.abort({:refused, :email_taken})
      :ok = Accounts.link_tx(user_id, {:email, a}, hash)
      {:ok, %{user_id: user_id, created: false}}
    end)
  end

  @doc """
  Confirms a mailed code: makes the account (`created: true`) or links the address to the
  account that asked, which must be the `requester` (the user id of the caller's session). `{:error, :invalid_code}` for a code unknown, used or expired, or whose
  address another account took meanwhile.
  """
  @spec confirm(term, Accounts.Settings.t(), binary | nil) ::
          {:ok, %{user_id: binary, created: boolean}} | {:error, error}
  def confirm(code, settings, requester \\ nil)

  def confirm(code, _settings, requester) when is_binary(code) and byte_size(code) in 1..128 do
    now = System.system_time(:second)

    Accounts.change(fn ->
      case :mnesia.read(@pending, digest(code), :write) do
        # (A link's code links only for the account that asked, logged in: a code mailed to
        # a mistyped address gives its owner nothing.)
        [{@pending, key, a, user_id, hash, expires}]
        when expires > now and user_id != :taken and (user_id == nil or user_id == requester) ->
          :ok = :mnesia.delete({@pending, key})
          if taken_tx?(a), do: :mnesia.abort({:refused, :invalid_code})

          if user_id do
            :ok = Accounts.link_tx(user_id, {:email, a}, hash)
            {:ok, %{user_id: user_id, created: false}}
          else
            {:ok, %{user_id: Accounts.create_tx({:email, a}, hash), created: true}}
          end

        _ ->
          :mnesia.abort({:refused, :invalid_code})
      end
    end)
  end

  def confirm(_code, _settings, _requester), do: {:error, :invalid_code}

  @doc """
  Logs in with an address and a password: `{:ok, user_id}`, or `{:error,
  :invalid_credentials}` alike for an unknown address and a wrong password (same answer, same
  work), `{:error, :disabled}` for a disabled account (only once the password is right).
  """
  @spec login(term, term, Accounts.Settings.t()) :: {:ok, binary} | {:error, error}
  def login(address, password, s) do
    with {:ok, a} <- address(address),
         :ok <- password(password, s) do
      {user_id, hash} =
        case :mnesia.dirty_read(@identities, {:email, a}) do
          [{_, _, user_id, hash}] -> {user_id, hash}
          [] -> {nil, Password.decoy(s.password_iterations)}
        end

      case Hasher.verify(password, hash) do
        {:ok, true} when user_id != nil ->
          rehash(a, user_id, password, hash, s)
          enabled(user_id)

        {:ok, _} ->
          {:error, :invalid_credentials}

        {:error, _} = error ->
          error
      end
    end
  end

  # A hash of another iteration count than the server's is made again (after the answer): an
  # unknown address is checked against the server's count, so old counts would tell known
  # addresses by their time.
  defp rehash(_a, _user_id, _password, {:pbkdf2_sha256, n, _, _}, %{password_iterations: n}),
    do: :ok

  defp rehash(a, user_id, password, _hash, s) do
    spawn(fn ->
      with {:ok, new} <- Hasher.hash(password, s.password_iterations) do
        Accounts.change(fn ->
          case :mnesia.read(@identities, {:email, a}, :write) do
            [{@identities, key, ^user_id, _}] -> :mnesia.write({@identities, key, user_id, new})
            _ -> :ok
          end
        end)
      end
    end)

    :ok
  end

  defp enabled(user_id) do
    case Accounts.subject(user_id) do
      {:ok, _} -> {:ok, user_id}
      error -> error
    end
  end

  defp taken?(a), do: :mnesia.dirty_read(@identities, {:email, a}) != []
  defp taken_tx?(a), do: :mnesia.read(@identities, {:email, a}, :write) != []

  defp address(address) do
    case normalize(address) do
      {:ok, a} -> {:ok, a}
      :error -> {:error, :invalid_email}
    end
  end

  defp password(p, s) when is_binary(p) and byte_size(p) <= @max_password_bytes do
    if byte_size(p) >= s.min_password_bytes, do: :ok, else: {:error, :invalid_password}
  end

  defp password(_p, _s), do: {:error, :invalid_password}

  @doc false
  # Pending codes are kept as their SHA-256: the table does not give them away.
  def digest(code), do: :crypto.hash(:sha256, code)

  @doc "The longest password accepted, in bytes."
  @spec max_password_bytes() :: pos_integer
  def max_password_bytes, do: @max_password_bytes
end

defmodule Overworld.Accounts.EmailTest do
  # Mnesia is one per node: shared with every other test file.
  use ExUnit.Case, async: false
  doctest Overworld.Accounts.Email

  alias Overworld.Accounts
  alias Overworld.Accounts.{Email, Settings}
  alias Overworld.Test.{DataDir, Mailer}

  setup_all do
    :ok = Accounts.start(DataDir.path())
  end

  setup do
    Mailer.listen()
    %{s: Settings.new(password_iterations: 1_000, mailer: Mailer)}
  end

  defp address, do: "user-#{System.unique_integer([:positive])}@example.com"

  defp code(address) do
    assert_receive {:mail, kind, ^address, %{code: code}}, 2_000
    {kind, code}
  end

  test "register, confirm with the mailed code, then log in", %{s: s} do
    a = address()
    assert Email.register(String.upcase(a), "hunter2hunter2", s) == {:ok, :pending}
    {:confirm_registration, code} = code(a)
    # Nothing yet: the address has no account before the code comes back.
    assert Email.login(a, "hunter2hunter2", s) == {:error, :invalid_credentials}

    assert {:ok, %{user_id: u, created: true}} = Email.confirm(code, s)
    assert Email.confirm(code, s) == {:error, :invalid_code}
    assert {:ok, ^u} = Email.login(a, "hunter2hunter2", s)
    assert {:ok, ^u} = Email.login("  " <> String.upcase(a), "hunter2hunter2", s)
    assert Email.login(a, "hunter3hunter3", s) == {:error, :invalid_credentials}
    assert {:ok, %{email: ^a, devices: []}} = Accounts.account(u)
    # The password is kept hashed only.
    [{_, _, ^u, {:pbkdf2_sha256, 1_000, _, _}}] =
      :mnesia.dirty_read(:overworld_identities, {:email, a})
  end

  test "registering a taken address answers the same, and mails its owner a notice", %{s: s} do
    a = address()
    {:ok, :pending} = Email.register(a, "first password", s)
    {_, code} = code(a)
    {:ok, %{user_id: u}} = Email.confirm(code, s)

    pending = :mnesia.table_info(:overworld_pending, :size)
    assert Email.register(a, "stranger's password", s) == {:ok, :pending}
    assert_receive {:mail, :already_registered, ^a, %{}}, 2_000
    # The same work as for a new address: a pending row written (never to be confirmed).
    assert :mnesia.table_info(:overworld_pending, :size) == pending + 1
    refute_receive {:mail, _, _, _}, 100
    # The owner's password still holds.
    assert {:ok, ^u} = Email.login(a, "first password", s)
  end

  test "two pending registrations of one address: the first confirmed wins", %{s: s} do
    a = address()
    {:ok, :pending} = Email.register(a, "password one", s)
    {:ok, :pending} = Email.register(a, "password two", s)
    {_, c1} = code(a)
    {_, c2} = code(a)
    assert {:ok, %{user_id: u}} = Email.confirm(c2, s)
    assert Email.confirm(c1, s) == {:error, :invalid_code}
    # (The mails may come in either order: one of the passwords is the account's.)
    answers = for p <- ["password one", "password two"], do: Email.login(a, p, s)
    assert Enum.sort(answers) == Enum.sort([{:ok, u}, {:error, :invalid_credentials}])
  end

  test "a guest (device) account linked with an address keeps its id and its data", %{s: s} do
    {:ok, %{user_id: u}} =
      Accounts.authenticate_device("guest-" <> Base.encode16(:crypto.strong_rand_bytes(6)))

    store = :"email_test_store_#{System.unique_integer([:positive])}"
    start_supervised!({Overworld.Storage, name: store})

    {:ok, _} =
      Overworld.Storage.write(store, {:user, u}, [
        %{"collection" => "saves", "key" => "k", "value" => %{"gold" => 7}}
      ])

    a = address()
    assert Email.link(u, a, "upgrade password", s) == {:ok, :pending}
    {:confirm_link, code} = code(a)
    # A link's code links for the account that asked only (a stranger holding it gets nothing).
    assert Email.confirm(code, s) == {:error, :invalid_code}
    assert Email.confirm(code, s, "someone-else") == {:error, :invalid_code}
    assert {:ok, %{user_id: ^u, created: false}} = Email.confirm(code, s, u)

    assert {:ok, ^u} = Email.login(a, "upgrade password", s)

    assert {:ok, [%{value: ~s({"gold":7})}]} =
             Overworld.Storage.read(store, {:user, u}, [
               %{"collection" => "saves", "key" => "k", "user_id" => u}
             ])

    # One address per account.
    assert Email.link(u, address(), "another password", s) == {:error, :identity_exists}
    # Unlinking the address leaves the devices.
    assert :ok = Accounts.unlink(u, {:email, a})
    assert Email.login(a, "upgrade password", s) == {:error, :invalid_credentials}
  end

  test "without confirmation: made at once, and a taken address says so", %{s: s} do
    s = %{s | email_confirmation: false}
    a = address()
    assert {:ok, %{user_id: u, created: true}} = Email.register(a, "no mail needed", s)
    assert Email.register(a, "no mail needed", s) == {:error, :email_taken}
    assert {:ok, ^u} = Email.login(a, "no mail needed", s)
    refute_receive {:mail, _, _, _}, 50
  end

  test "bad input", %{s: s} do
    assert Email.register("not an address", "long enough", s) == {:error, :invalid_email}
    assert Email.register(address(), "short", s) == {:error, :invalid_password}
    assert Email.register(address(), String.duplicate("x", 257), s) == {:error, :invalid_password}
    assert Email.register(address(), 12_345_678, s) == {:error, :invalid_password}
    assert Email.register(nil, "long enough", s) == {:error, :invalid_email}
    assert Email.login(address(), nil, s) == {:error, :invalid_password}
    assert Email.confirm("nope", s) == {:error, :invalid_code}
    assert Email.confirm(%{}, s) == {:error, :invalid_code}
    refute_receive {:mail, _, _, _}, 50
  end

  test "a disabled account cannot log in (told only with the right password)", %{s: s} do
    s = %{s | email_confirmation: false}
    a = address()
    {:ok, %{user_id: u}} = Email.register(a, "soon disabled", s)
    :ok = Accounts.disable(u)
    assert Email.login(a, "soon disabled", s) == {:error, :disabled}
    assert Email.login(a, "wrong password", s) == {:error, :invalid_credentials}
  end

  test "expired codes are refused", %{s: s} do
    a = address()
    {:ok, :pending} = Email.register(a, "patient person", s)
    {_, code} = code(a)
    [{_, key, ^a, nil, hash, _}] = :mnesia.dirty_read(:overworld_pending, Email.digest(code))

    :ok =
      :mnesia.dirty_write(
        {:overworld_pending, key, a, nil, hash, System.system_time(:second) - 1}
      )

    assert Email.confirm(code, s) == {:error, :invalid_code}
  end

  test "a password hashed with another iteration count is hashed again at login", %{s: s} do
    s = %{s | email_confirmation: false}
    a = address()
    {:ok, %{user_id: u}} = Email.register(a, "old hash here", s)
    s2 = %{s | password_iterations: 1_500}
    assert {:ok, ^u} = Email.login(a, "old hash here", s2)

    Overworld.Test.Cluster.eventually(fn ->
      match?(
        [{_, _, ^u, {:pbkdf2_sha256, 1_500, _, _}}],
        :mnesia.dirty_read(:overworld_identities, {:email, a})
      )
    end)

    assert {:ok, ^u} = Email.login(a, "old hash here", s2)
  end
end

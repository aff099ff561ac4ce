defmodule Overworld.Web.AccountsTest do
  # The account routes over real sockets. Mnesia and the hashing pool are the node's.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Accounts.CustomAuth.HMAC
  alias Overworld.Client
  alias Overworld.Test.Mailer

  @secret :binary.copy("c", 32)

  defp world(name, accounts) do
    accounts =
      Keyword.merge(
        [
          password_iterations: 2_000,
          mailer: Mailer,
          custom_auth: {HMAC, secret: @secret},
          login_limit_per_address: {1_000, 60}
        ],
        accounts
      )

    start_world(name, {name, :critters}, critters: 10, accounts: accounts)
  end

  setup do
    Mailer.listen()
    :ok
  end

  defp call(w, method, path, body, token \\ nil) do
    headers = if token, do: [headers: [{"authorization", "Bearer " <> token}]], else: []
    body = if body, do: :jiffy.encode(body), else: ""
    {:ok, status, headers, reply} = Client.request(host(), w.port, method, path, body, headers)
    {status, :jiffy.decode(reply, [:return_maps, {:null_term, nil}]), Map.new(headers)}
  end

  defp post(w, path, body, token \\ nil) do
    {status, json, _} = call(w, "POST", path, body, token)
    {status, json}
  end

  defp address, do: "web-#{System.unique_integer([:positive])}@example.com"

  defp registered(w, password) do
    a = address()
    {202, _} = post(w, "/api/v1/auth/email/register", %{email: a, password: password})
    assert_receive {:mail, :confirm_registration, ^a, %{code: code}}, 2_000

    {200, %{"user_id" => u, "created" => true}} =
      post(w, "/api/v1/auth/email/confirm", %{code: code})

    {a, u}
  end

  # A WebSocket in no zone, past its HANDSHAKE.
  defp live(w, token) do
    conn = connect(w, "/ws?zone=")

    :ok =
      Client.send_msg(conn, %{type: :hello, version: Overworld.Protocol.version(), token: token})

    {%{type: :handshake}, conn} = recv_msg(conn)
    conn
  end

  defp hello(w, token) do
    conn = connect(w)

    :ok =
      Client.send_msg(conn, %{type: :hello, version: Overworld.Protocol.version(), token: token})

    {msg, _} = recv_msg(conn)
    msg
  end

  test "email: register, confirm, login; an unknown address and a wrong password answer alike" do
    w = world(:web_accounts_email, [])
    a = address()

    assert {202, %{"status" => "confirmation_sent"}} =
             post(w, "/api/v1/auth/email/register", %{email: a, password: "s3cret password"})

    assert_receive {:mail, :confirm_registration, ^a, %{code: code}}, 2_000

    assert {200, %{"user_id" => u, "token" => t, "refresh_token" => _, "created" => true}} =
             post(w, "/api/v1/auth/email/confirm", %{code: code})

    assert %{type: :handshake} = hello(w, t)

    assert {200, %{"user_id" => ^u}} =
             post(w, "/api/v1/auth/email/login", %{email: a, password: "s3cret password"})

    # The same registration again: the same answer, a notice to the owner.
    assert {202, %{"status" => "confirmation_sent"}} =
             post(w, "/api/v1/auth/email/register", %{email: a, password: "stranger pass"})

    assert_receive {:mail, :already_registered, ^a, _}, 2_000

    wrong = post(w, "/api/v1/auth/email/login", %{email: a, password: "not the password"})

    unknown =
      post(w, "/api/v1/auth/email/login", %{email: address(), password: "not the password"})

    assert {401, %{"error" => "invalid_credentials"}} = wrong
    assert wrong == unknown

    assert {400, %{"error" => "invalid_email"}} =
             post(w, "/api/v1/auth/email/login", %{email: "nope", password: "long enough"})

    assert {400, %{"error" => "invalid_password"}} =
             post(w, "/api/v1/auth/email/register", %{email: address(), password: "short"})

    assert {400, %{"error" => "invalid_code"}} =
             post(w, "/api/v1/auth/email/confirm", %{code: "x"})

    assert {400, %{"error" => "bad_json"}} = raw(w, "/api/v1/auth/email/login", "{nope")
  end

  defp raw(w, path, body) do
    {:ok, status, _, reply} = Client.request(host(), w.port, "POST", path, body, [])
    {status, :jiffy.decode(reply, [:return_maps])}
  end

  test "no enumeration oracle: logins of an unknown address and with a wrong password take the same time (medians within 10 %)" do
    # Enough iterations that a login's time is the hash's, as in production (2 ms of the
    # 600,000-iteration default's 650 ms would be noise).
    w =
      world(:web_accounts_timing,
        password_iterations: 40_000,
        login_limit_per_account: {1_000, 60}
      )

    {a, _} = registered(w, "the right password")

    time = fn email ->
      {us, {401, _}} =
        :timer.tc(fn ->
          post(w, "/api/v1/auth/email/login", %{email: email, password: "a wrong password"})
        end)

      us
    end

    # Interleaved, so that any drift of the machine falls on both alike.
    samples =
      for i <- 1..41 do
        if rem(i, 2) == 0,
          do: {:known, time.(a)},
          else: {:unknown, time.("nobody-#{i}@example.com")}
      end

    median = fn kind ->
      xs = for({^kind, us} <- samples, do: us) |> Enum.sort()
      Enum.at(xs, div(length(xs), 2))
    end

    {known, unknown} = {median.(:known), median.(:unknown)}
    ratio = abs(known - unknown) / max(known, unknown)

    IO.puts(
      "login medians: wrong password #{known} µs, unknown address #{unknown} µs (#{Float.round(ratio * 100, 1)} % apart; 20 and 21 samples)"
    )

    assert ratio <= 0.10
  end

  test "rate limits: per client address, and failed logins per account" do
    w =
      world(:web_accounts_limits,
        login_limit_per_address: {5, 60},
        login_limit_per_account: {2, 300}
      )

    {a, u} = registered(w, "right password")
    # (registered/2 took 2 of the address's 5.)
    assert {401, _} = post(w, "/api/v1/auth/email/login", %{email: a, password: "wrong password"})
    assert {401, _} = post(w, "/api/v1/auth/email/login", %{email: a, password: "wrong password"})
    # The account's failures are used up: even the right password waits.
    {429, %{"error" => "rate_limited"}, headers} =
      call(w, "POST", "/api/v1/auth/email/login", %{email: a, password: "right password"})

    assert String.to_integer(headers["retry-after"]) in 1..300
    _ = u
    # The address's budget: 5 calls in the minute, then 429 for everything.
    {429, %{"error" => "rate_limited"}, _} =
      call(w, "POST", "/api/v1/auth/email/login", %{email: address(), password: "whatever pass"})

    # Device authentication is not limited this way.
    assert %{"token" => _} = auth(w)
  end

  test "a full hashing pool answers 429 with retry-after" do
    w = world(:web_accounts_busy, password_iterations: 300_000, email_confirmation: false)
    Overworld.Accounts.Hasher.configure(max_queue: 1)
    on_exit(fn -> Overworld.Accounts.Hasher.configure(max_queue: 8) end)

    slow =
      for i <- 1..System.schedulers_online() do
        Task.async(fn ->
          post(w, "/api/v1/auth/email/register", %{
            email: "busy#{i}-#{System.unique_integer([:positive])}@example.com",
            password: "slow password"
          })
        end)
      end

    Process.sleep(50)

    {429, %{"error" => "busy"}, headers} =
      call(w, "POST", "/api/v1/auth/email/login", %{email: address(), password: "any password"})

    assert String.to_integer(headers["retry-after"]) >= 1
    for t <- slow, do: assert({200, %{"created" => true}} = Task.await(t, 30_000))
  end

  test "custom ids vouched for by the game's auth server; 404 where not configured" do
    w = world(:web_accounts_custom, [])
    id = "player-#{System.unique_integer([:positive])}"
    assertion = HMAC.sign(@secret, id, 60)

    assert {200, %{"user_id" => u, "created" => true, "token" => t}} =
             post(w, "/api/v1/auth/custom", %{assertion: assertion})

    assert {200, %{"user_id" => ^u, "created" => false}} =
             post(w, "/api/v1/auth/custom", %{assertion: assertion})

    assert {200, %{"custom_id" => ^id}} =
             call(w, "GET", "/api/v1/account", nil, t) |> Tuple.delete_at(2)

    assert {401, %{"error" => "invalid_assertion"}} =
             post(w, "/api/v1/auth/custom", %{assertion: HMAC.sign(:binary.copy("x", 32), id, 60)})

    assert {401, %{"error" => "invalid_assertion"}} = post(w, "/api/v1/auth/custom", %{id: id})

    plain = start_world(:web_accounts_plain, {:web_accounts_plain, :critters}, critters: 5)
    assert {404, _} = post(plain, "/api/v1/auth/custom", %{assertion: assertion})
  end

  test "logout refuses the login's tokens everywhere: HTTP, WebSocket, refresh; other logins carry on" do
    w = world(:web_accounts_logout, [])
    first = auth(w)
    device = "dev-logout-#{System.unique_integer([:positive])}"
    {:ok, one} = Client.authenticate_device(host(), w.port, device)
    {:ok, two} = Client.authenticate_device(host(), w.port, device)
    assert one["user_id"] == two["user_id"]

    # A live connection of the login that logs out is closed (4003); the other login's stays.
    live = live(w, one["token"])
    other = live(w, first["token"])

    assert {200, %{}} = post(w, "/api/v1/auth/logout", %{}, one["token"])
    assert {%{type: :error, code: 3, message: "token revoked"}, live} = recv_msg(live)
    assert {{:close, 4003, _}, _} = recv_msg(live)
    assert {{:error, :timeout}, _} = recv_msg(other, 200)

    assert {401, %{"error" => "invalid_token", "message" => "revoked"}} =
             post(w, "/api/v1/auth/logout", %{}, one["token"])

    assert {401, %{"message" => "revoked"}} =
             post(w, "/api/v1/auth/refresh", %{refresh_token: one["refresh_token"]})

    assert %{type: :error} = hello(w, one["token"])
    {401, _, _} = call(w, "GET", "/api/v1/storage/list?collection=x", nil, one["token"])

    # The same account's other login, and other accounts, carry on.
    assert %{type: :handshake} = hello(w, two["token"])

    assert {200, %{"token" => t3}} =
             post(w, "/api/v1/auth/refresh", %{refresh_token: two["refresh_token"]})

    assert {200, _} = call(w, "GET", "/api/v1/account", nil, t3) |> Tuple.delete_at(2)
    assert %{type: :handshake} = hello(w, first["token"])
  end

  test "a disabled account: tokens refused, no new ones; enabled again, it logs in" do
    w = world(:web_accounts_disabled, [])
    device = "dev-disabled-#{System.unique_integer([:positive])}"
    {:ok, %{"user_id" => u, "token" => t}} = Client.authenticate_device(host(), w.port, device)
    live = live(w, t)
    :ok = Overworld.Accounts.disable(u)
    assert {%{type: :error, code: 3, message: "token disabled"}, _} = recv_msg(live)
    assert %{type: :error} = hello(w, t)

    assert {403, %{"error" => "account_disabled"}} =
             post(w, "/api/v1/auth/device", %{device_id: device})

    :ok = Overworld.Accounts.enable(u)
    assert {200, %{"user_id" => ^u}} = post(w, "/api/v1/auth/device", %{device_id: device})
  end

  test "an account's identities: link a device and an address (a guest upgraded), unlink, never the last" do
    w = world(:web_accounts_links, [])
    %{"token" => t, "user_id" => u} = auth(w)

    {200, %{"user_id" => ^u, "devices" => [d1], "email" => nil}, _} =
      call(w, "GET", "/api/v1/account", nil, t)

    d2 = "dev-linked-#{System.unique_integer([:positive])}"

    assert {200, %{"devices" => devices}} =
             post(w, "/api/v1/account/link/device", %{device_id: d2}, t)

    assert Enum.sort(devices) == Enum.sort([d1, d2])
    assert {200, %{"user_id" => ^u}} = post(w, "/api/v1/auth/device", %{device_id: d2})

    other = auth(w)

    assert {409, %{"error" => "already_linked"}} =
             post(w, "/api/v1/account/link/device", %{device_id: d2}, other["token"])

    a = address()

    assert {202, _} =
             post(w, "/api/v1/account/link/email", %{email: a, password: "upgraded guest"}, t)

    assert_receive {:mail, :confirm_link, ^a, %{code: code}}, 2_000
    # Only the account that asked confirms its link (logged in).
    assert {400, %{"error" => "invalid_code"}} =
             post(w, "/api/v1/auth/email/confirm", %{code: code})

    assert {200, %{"user_id" => ^u, "created" => false}} =
             post(w, "/api/v1/auth/email/confirm", %{code: code}, t)

    assert {200, %{"user_id" => ^u}} =
             post(w, "/api/v1/auth/email/login", %{email: a, password: "upgraded guest"})

    assert {200, %{"devices" => [^d2]}} =
             post(w, "/api/v1/account/unlink/device", %{device_id: d1}, t)

    assert {200, %{"devices" => []}} =
             post(w, "/api/v1/account/unlink/device", %{device_id: d2}, t)

    assert {409, %{"error" => "last_identity"}} = post(w, "/api/v1/account/unlink/email", %{}, t)
    assert {404, %{"error" => "not_linked"}} = post(w, "/api/v1/account/unlink/custom", %{}, t)
    assert {401, _} = post(w, "/api/v1/account/link/device", %{device_id: d2})
  end
end

defmodule Overworld.Web.OperatorTest do
  # The operator API over real sockets: login, tokens (an operator's and a player's never
  # stand for each other), roles, accounts, the audit log, bad input. Zones and sessions:
  # Overworld.Web.Operator.ZonesTest. Mnesia and the hashing pool are the node's.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Accounts.Password
  alias Overworld.{Client, Operators}

  @iterations 1_000

  defp hash(password), do: Password.encode(Password.hash(password, @iterations))

  defp world(name, opts \\ []) do
    operators = [
      %{name: "alice", password_hash: hash("alice's password")},
      %{name: "victor", password_hash: hash("victor's password"), role: "viewer"}
    ]

    start_world(
      name,
      {name, :critters},
      Keyword.merge(
        [
          critters: 10,
          accounts: [password_iterations: @iterations],
          operators: operators,
          operator_api: [audit_file: audit_file(name)]
        ],
        opts
      )
    )
  end

  defp audit_file(name),
    do:
      Path.join(
        Overworld.Test.DataDir.path(),
        "audit-#{name}-#{System.unique_integer([:positive])}.log"
      )

  defp get(w, path, token), do: w |> api("GET", path, nil, token) |> Tuple.delete_at(2)
  defp post(w, path, body, token), do: w |> api("POST", path, body, token) |> Tuple.delete_at(2)

  test "login: the right password gets a token; a wrong one and an unknown name answer alike" do
    w = world(:op_login)

    assert {200,
            %{"token" => token, "expires_in" => 3600, "name" => "alice", "role" => "operator"}} =
             post(
               w,
               "/api/v1/operator/login",
               %{name: "alice", password: "alice's password"},
               nil
             )

    assert {200, %{"name" => "alice", "role" => "operator"}} =
             get(w, "/api/v1/operator/me", token)

    wrong = post(w, "/api/v1/operator/login", %{name: "alice", password: "not it"}, nil)
    unknown = post(w, "/api/v1/operator/login", %{name: "mallory", password: "not it"}, nil)
    assert {401, %{"error" => "invalid_credentials"}} = wrong
    assert wrong == unknown

    # No token, a token of nobody: 401.
    assert {401, %{"error" => "invalid_token"}} = get(w, "/api/v1/operator/zones", nil)

    assert {401, %{"error" => "invalid_token", "message" => "malformed"}} =
             get(w, "/api/v1/operator/zones", "nonsense")
  end

  test "a player's token is refused on every operator route; an operator's on the player's" do
    w = world(:op_tokens)
    player = auth(w)
    token = operator_login(w, "alice", "alice's password")

    for {method, path} <- [
          {"GET", "/api/v1/operator/me"},
          {"GET", "/api/v1/operator/zones"},
          {"GET", "/api/v1/operator/audit"},
          {"GET", "/api/v1/operator/accounts?q=abcd"},
          {"GET", "/api/v1/operator/accounts/#{player["user_id"]}"},
          {"POST", "/api/v1/operator/accounts/#{player["user_id"]}/disable"},
          {"POST", "/api/v1/operator/sessions/#{player["user_id"]}/kick"},
          {"POST", "/api/v1/operator/zones/start"},
          {"POST", "/api/v1/operator/logout"}
        ] do
      for t <- [player["token"], player["refresh_token"]] do
        assert {401, %{"error" => "invalid_token", "message" => "wrong_type"}, _} =
                 api(w, method, path, "{}", t),
               "#{method} #{path}"
      end
    end

    # (The player was not disabled by any of it.)
    assert {200, %{"disabled" => false}} =
             get(w, "/api/v1/operator/accounts/#{player["user_id"]}", token)

    # The operator's token on the player's routes, its refresh and its WebSocket.
    assert {401, %{"message" => "wrong_type"}} = get(w, "/api/v1/account", token)

    assert {401, %{"message" => "wrong_type"}} =
             get(w, "/api/v1/storage/list?collection=x", token)

    assert {401, %{"message" => "wrong_type"}} =
             post(w, "/api/v1/auth/refresh", %{refresh_token: token}, nil)

    assert {:error, {:status, 401, _}} =
             Client.connect(host(), w.port, "/ws?token=" <> URI.encode_www_form(token))

    # In HELLO it opens an observer connection (no player, no avatar: docs/protocol.md,
    # "Observers"), not a player's session.
    players = Overworld.Zone.info(w.zone).players
    conn = connect(w)

    :ok =
      Client.send_msg(conn, %{type: :hello, version: Overworld.Protocol.version(), token: token})

    assert {%{type: :handshake, entity_id: 0}, _conn} = recv_msg(conn)
    assert Overworld.Zone.info(w.zone).players == players
  end

  test "a viewer reads and may not act; a logout refuses the token from then on" do
    w = world(:op_viewer)
    player = auth(w)
    viewer = operator_login(w, "victor", "victor's password")

    assert {200, %{"role" => "viewer"}} = get(w, "/api/v1/operator/me", viewer)
    assert {200, %{"zones" => [_ | _]}} = get(w, "/api/v1/operator/zones", viewer)

    assert {403, %{"error" => "forbidden"}} =
             post(w, "/api/v1/operator/accounts/#{player["user_id"]}/disable", nil, viewer)

    assert {403, _} = post(w, "/api/v1/operator/sessions/#{player["user_id"]}/kick", nil, viewer)

    assert {200, %{"disabled" => false}} =
             get(w, "/api/v1/operator/accounts/#{player["user_id"]}", viewer)

    assert {200, %{}} = post(w, "/api/v1/operator/logout", nil, viewer)
    assert {401, %{"message" => "revoked"}} = get(w, "/api/v1/operator/me", viewer)
  end

  test "operators of the table: added, their password changed (old tokens refused), removed" do
    w = world(:op_table)
    name = "table-#{System.unique_integer([:positive])}"
    :ok = Operators.put(name, "first password", iterations: @iterations, role: :viewer)
    assert %{name: ^name, role: :viewer} = Enum.find(Operators.list(), &(&1.name == name))

    first = operator_login(w, name, "first password")
    assert {200, %{"role" => "viewer"}} = get(w, "/api/v1/operator/me", first)

    :ok = Operators.put_hash(name, hash("second password"))
    assert {401, %{"message" => "revoked"}} = get(w, "/api/v1/operator/me", first)

    assert {401, _} =
             post(w, "/api/v1/operator/login", %{name: name, password: "first password"}, nil)

    second = operator_login(w, name, "second password")
    assert {200, %{"role" => "operator"}} = get(w, "/api/v1/operator/me", second)

    :ok = Operators.delete(name)
    assert {401, %{"message" => "unknown_operator"}} = get(w, "/api/v1/operator/me", second)
    assert Operators.delete(name) == {:error, :not_found}
    # A configured name belongs to the configuration's operator.
    :ok = Operators.put_hash("alice", hash("the table's alice"))

    assert {401, _} =
             post(
               w,
               "/api/v1/operator/login",
               %{name: "alice", password: "the table's alice"},
               nil
             )

    _ = operator_login(w, "alice", "alice's password")
    :ok = Operators.delete("alice")
  end

  test "accounts: search, view, disable closes the player's WebSocket, enable lets it back" do
    w = world(:op_accounts)
    token = operator_login(w, "alice", "alice's password")
    device = device()

    {:ok, %{"user_id" => user} = first} = Client.authenticate_device(host(), w.port, device)

    # Found by its id, the id's start, its device.
    for q <- [user, String.slice(user, 0, 12), device] do
      assert {200, %{"accounts" => accounts}} =
               get(w, "/api/v1/operator/accounts?q=" <> URI.encode_www_form(q), token)

      assert Enum.any?(accounts, &(&1["user_id"] == user)), q
      assert length(accounts) <= 50
    end

    assert {200, %{"accounts" => []}} =
             get(w, "/api/v1/operator/accounts?q=nobody-has-this", token)

    assert {200, a} = get(w, "/api/v1/operator/accounts/#{user}", token)
    assert %{"devices" => [^device], "email" => nil, "disabled" => false} = a
    assert is_integer(a["created_at"]) and is_integer(a["last_seen_at"])

    assert {404, %{"error" => "not_found"}} =
             get(w, "/api/v1/operator/accounts/#{String.duplicate("0", 32)}", token)

    player = join(w, auth: first)
    player = snapshots(player, 2)

    assert {200, %{"disabled" => true}} =
             post(w, "/api/v1/operator/accounts/#{user}/disable", nil, token)

    assert {4003, [3]} = expect_close(player.conn)
    assert {:error, {403, _}} = Client.authenticate_device(host(), w.port, device)
    eventually(fn -> not Map.has_key?(players(w), user) end)

    assert {200, %{"disabled" => false}} =
             post(w, "/api/v1/operator/accounts/#{user}/enable", nil, token)

    {:ok, again} = Client.authenticate_device(host(), w.port, device)
    assert again["user_id"] == user
    back = join(w, auth: again)
    snapshots(back, 2)

    assert {404, _} =
             post(w, "/api/v1/operator/accounts/#{String.duplicate("0", 32)}/disable", nil, token)

    assert [
             %{"action" => "disable", "result" => "not_found"},
             %{"action" => "enable", "target" => ^user, "result" => "ok", "operator" => "alice"},
             %{"action" => "disable", "target" => ^user, "result" => "ok"} | _
           ] = audit(w, token, 10)
  end

  defp audit(w, token, limit) do
    {200, %{"entries" => entries}} = get(w, "/api/v1/operator/audit?limit=#{limit}", token)
    entries
  end

  test "the audit log: every action and failed login, newest first, bounded by limit" do
    w = world(:op_audit)
    {401, _} = post(w, "/api/v1/operator/login", %{name: "mallory", password: "guess"}, nil)
    token = operator_login(w, "alice", "alice's password")
    {200, _} = post(w, "/api/v1/operator/logout", nil, token)
    token = operator_login(w, "alice", "alice's password")

    assert [
             %{"action" => "login", "operator" => "alice", "result" => "ok"},
             %{"action" => "logout", "operator" => "alice", "result" => "ok"},
             %{"action" => "login", "operator" => "alice", "result" => "ok"},
             %{
               "action" => "login",
               "operator" => "mallory",
               "result" => "invalid_credentials",
               "address" => "127.0.0.1"
             } = failed
           ] = audit(w, token, 100)

    assert {:ok, _, _} = DateTime.from_iso8601(failed["at"])

    # The writer killed: the server starts another, which appends to the same file.
    writer = Overworld.Names.whereis(Overworld.Names.audit(w.name))
    Process.exit(writer, :kill)

    eventually(fn ->
      Overworld.Names.whereis(Overworld.Names.audit(w.name)) not in [nil, writer]
    end)

    {200, _} = post(w, "/api/v1/operator/logout", nil, token)
    token = operator_login(w, "alice", "alice's password")

    assert [%{"action" => "login"}, %{"action" => "logout"}, %{"action" => "login"} | rest] =
             audit(w, token, 100)

    assert length(rest) == 3
    refute inspect(audit(w, token, 100)) =~ "guess"
    assert [%{"action" => "login"}] = audit(w, token, 1)
    assert {400, %{"error" => "invalid_query"}} = get(w, "/api/v1/operator/audit?limit=0", token)
    assert {400, _} = get(w, "/api/v1/operator/audit?limit=many", token)
  end

  test "bad input: clear 4xx" do
    w = world(:op_bad)
    token = operator_login(w, "alice", "alice's password")

    assert {400, %{"error" => "bad_json"}} = post(w, "/api/v1/operator/login", "{not json", nil)
    assert {400, %{"error" => "invalid_body"}} = post(w, "/api/v1/operator/login", "[1]", nil)

    assert {400, %{"error" => "invalid_body"}} =
             post(w, "/api/v1/operator/login", %{name: 1, password: "x"}, nil)

    assert {400, %{"error" => "invalid_query"}} =
             get(w, "/api/v1/operator/accounts?q=" <> String.duplicate("a", 300), token)

    assert {400, %{"error" => "invalid_query"}} = get(w, "/api/v1/operator/accounts", token)

    assert {404, %{"error" => "not_found"}} =
             post(w, "/api/v1/operator/zones/AAAAAAAAAAAAAAAA/stop", nil, token)

    assert {404, _} = post(w, "/api/v1/operator/zones/not-a-ref/snapshot", nil, token)
    assert {404, _} = get(w, "/api/v1/operator/zones/AAAAAAAAAAAAAAAA/history", token)
    assert {404, %{"error" => "not_found"}} = get(w, "/api/v1/operator/nothing", token)
    assert {404, _} = get(w, "/api/v1/operator/accounts//disable", token)

    assert {405, %{"error" => "method_not_allowed"}, %{"allow" => "POST"}} =
             api(w, "GET", "/api/v1/operator/zones/start", nil, token)

    assert {204, _, %{"access-control-allow-methods" => "GET, OPTIONS"} = h} =
             api(w, "OPTIONS", "/api/v1/operator/zones", nil, nil)

    assert h["access-control-allow-origin"] == "*"
    assert {400, %{"error" => "bad_json"}} = post(w, "/api/v1/operator/zones/start", "{", token)

    assert {400, %{"error" => "invalid_body"}} =
             post(w, "/api/v1/operator/zones/start", %{}, token)

    assert {404, _} = post(w, "/api/v1/operator/zones/start", %{name: "nowhere"}, token)

    assert {400, %{"error" => "invalid_body"}} =
             post(
               w,
               "/api/v1/operator/sessions/someone/kick",
               %{reason: String.duplicate("r", 200)},
               token
             )

    assert {404, %{"error" => "not_found"}} =
             post(w, "/api/v1/operator/sessions/someone/kick", nil, token)
  end

  test "logins are rate limited per client address" do
    w =
      world(:op_limit,
        operator_api: [audit_file: audit_file(:op_limit), login_limit_per_address: {3, 60}]
      )

    for _ <- 1..3,
        do: {401, _} = post(w, "/api/v1/operator/login", %{name: "alice", password: "no"}, nil)

    assert {429, %{"error" => "rate_limited"}, %{"retry-after" => _}} =
             api(w, "POST", "/api/v1/operator/login", %{
               name: "alice",
               password: "alice's password"
             })
  end
end

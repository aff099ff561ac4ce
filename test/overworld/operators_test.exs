defmodule Overworld.OperatorsTest do
  # Operators without HTTP: the table's operators, logins (an unknown name costs what a wrong
  # password does), tokens checked at each use. The node's Mnesia (started by a server).
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase, only: [start_world: 3]

  alias Overworld.Accounts.Password
  alias Overworld.Operators
  alias Overworld.Operators.Settings

  # (A server starts the accounts and the operators' table.)
  defp cfg(name, iterations, operators \\ []) do
    w =
      start_world(name, {name, :z},
        critters: 5,
        accounts: [password_iterations: iterations],
        operators: operators
      )

    Overworld.Server.config(w.name)
  end

  test "put, list, delete; bad names, roles, passwords and hashes are refused" do
    _ = cfg(:ops_table, 1_000)
    name = "ops-#{System.unique_integer([:positive])}"
    assert Operators.put(name, "long enough", iterations: 1_000) == :ok
    assert %{role: :operator} = Enum.find(Operators.list(), &(&1.name == name))
    assert Operators.put("bad name", "long enough") == {:error, :invalid_name}
    assert Operators.put(name, "short") == {:error, :invalid_password}
    assert Operators.put(name, "long enough", role: :admin) == {:error, :invalid_role}
    assert Operators.put_hash(name, "pbkdf2-sha256$x$y$z") == {:error, :invalid_hash}
    assert Operators.delete(name) == :ok
    refute Enum.any?(Operators.list(), &(&1.name == name))
  end

  test "login and verify; an unknown name answers as a wrong password, after the same work" do
    n = 40_000
    hash = Password.encode(Password.hash("the password", n))
    cfg = cfg(:ops_login, n, [[name: "olga", password_hash: hash]])

    assert {:ok, %{token: token, name: "olga", role: :operator}} =
             Operators.login(cfg, "olga", "the password")

    assert {:ok, %{name: "olga", role: :operator, sid: sid}} = Operators.verify(cfg, token)
    assert byte_size(sid) == 8
    assert Operators.login(cfg, "olga", "wrong") == {:error, :invalid_credentials}
    assert Operators.login(cfg, "nobody", "wrong") == {:error, :invalid_credentials}
    assert Operators.login(cfg, "olga", :password) == {:error, :invalid_password}

    time = fn name ->
      for(_ <- 1..3, do: elem(:timer.tc(fn -> Operators.login(cfg, name, "wrong") end), 0))
      |> Enum.min()
    end

    {known, unknown} = {time.("olga"), time.("nobody")}
    assert unknown > known * 0.6 and unknown < known * 1.6, inspect({known, unknown})

    # A player's tokens are not an operator's.
    [key | _] = cfg.keys
    player = Overworld.Auth.Token.sign(key, :session, "olga", 60)
    assert Operators.verify(cfg, player) == {:error, :wrong_type}
    assert Operators.verify(cfg, "x") == {:error, :malformed}

    {:ok, claims} = Operators.verify(cfg, token)
    assert Operators.logout(claims) == :ok
    assert Operators.verify(cfg, token) == {:error, :revoked}
  end

  test "settings: operators of the configuration are validated" do
    h = Password.encode(Password.hash("pw", 10))

    s =
      Settings.new(
        [%{name: "a", password_hash: h}, [name: "b", password_hash: h, role: "viewer"]],
        [],
        :srv,
        "/d"
      )

    assert %{"a" => %{role: :operator}, "b" => %{role: :viewer}} = s.static
    assert s.audit_file == "/d/operator-audit.srv.log"

    for {bad, message} <- [
          {[%{name: "a", password_hash: h}, %{name: "a", password_hash: h}], "given twice"},
          {[%{name: "a b", password_hash: h}], "expected an operator :name"},
          {[%{name: "a", password_hash: h, role: "root"}], "expected :role"},
          {[%{name: "a", password_hash: h, extra: 1}], "unknown keys"},
          {[:alice], "map or a keyword list"},
          {%{}, "a list of operators"}
        ] do
      assert_raise ArgumentError, ~r/#{message}/, fn -> Settings.new(bad, [], :srv, "/d") end
    end

    assert_raise ArgumentError, ~r/:token_ttl/, fn ->
      Settings.new([], [token_ttl: 0], :srv, "/d")
    end
  end
end

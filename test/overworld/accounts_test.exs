defmodule Overworld.AccountsTest do
  # Mnesia is one per node: these tests share it (and its directory) with every other test file.
  use ExUnit.Case, async: false
  doctest Overworld.Accounts

  import Overworld.Test.Cluster, only: [eventually: 1]
  alias Overworld.Accounts
  alias Overworld.Test.DataDir

  setup_all do
    :ok = Accounts.start(DataDir.path())
  end

  # Device ids are unique per test and per run: the data directory outlives a test.
  defp device_id, do: "dev-" <> hex(12)
  defp hex(bytes), do: Base.encode16(:crypto.strong_rand_bytes(bytes), case: :lower)

  describe "authenticate_device/1" do
    test "the first call creates a user, later calls find it" do
      id = device_id()
      count = Accounts.count()

      assert {:ok, %{user_id: user_id, created: true}} = Accounts.authenticate_device(id)
      assert user_id =~ ~r/\A[0-9a-f]{32}\z/
      assert Accounts.count() == count + 1

      assert Accounts.authenticate_device(id) == {:ok, %{user_id: user_id, created: false}}
      assert Accounts.count() == count + 1
    end

    test "different devices get different users" do
      assert {:ok, %{user_id: a, created: true}} = Accounts.authenticate_device(device_id())
      assert {:ok, %{user_id: b, created: true}} = Accounts.authenticate_device(device_id())
      assert a != b
    end

    test "invalid device ids are refused and create nothing" do
      count = Accounts.count()

      for bad <- [
            "",
            "short",
            "123456789",
            String.duplicate("x", 129),
            "has a space",
            "control\x01chars",
            "new\nline-device",
            "delete\x7Fdevice",
            "caf\u00e9-device-id",
            <<0xFF, "abcdefghijk">>,
            nil,
            :device_1234567,
            1_234_567_890,
            'charlist-device',
            {"tuple-device"}
          ] do
        assert Accounts.authenticate_device(bad) == {:error, :invalid_device_id}, inspect(bad)
      end

      assert Accounts.count() == count
    end

    test "the bounds of a valid device id" do
      shortest = hex(5)
      longest = String.duplicate("~", 108) <> hex(10)
      extremes = "!~" <> hex(8)

      for id <- [shortest, longest, extremes] do
        assert {:ok, %{created: true}} = Accounts.authenticate_device(id)
      end

      assert byte_size(shortest) == 10 and byte_size(longest) == 128
    end

    test "concurrent first calls make one account" do
      id = device_id()
      count = Accounts.count()

      results =
        1..20
        |> Enum.map(fn _ -> Task.async(fn -> Accounts.authenticate_device(id) end) end)
        |> Enum.map(&Task.await(&1, 15_000))

      assert [user_id] = results |> Enum.map(fn {:ok, %{user_id: u}} -> u end) |> Enum.uniq()
      assert Enum.count(results, &match?({:ok, %{created: true}}, &1)) == 1
      assert Accounts.count() == count + 1

      assert [{:overworld_users, ^user_id, ^id, _}] =
               :mnesia.dirty_match_object({:overworld_users, :_, id, :_})
    end
  end

  describe "get_user/1" do
    test "reads an account" do
      id = device_id()
      before = System.system_time(:second)
      {:ok, %{user_id: user_id}} = Accounts.authenticate_device(id)

      assert {:ok, %{user_id: ^user_id, device_id: ^id, created_at: created_at}} =
               Accounts.get_user(user_id)

      assert created_at >= before and created_at <= System.system_time(:second)
    end

    test "unknown users" do
      assert Accounts.get_user(String.duplicate("0", 32)) == {:error, :not_found}
      assert Accounts.get_user("") == {:error, :not_found}
      assert Accounts.get_user(nil) == {:error, :not_found}
      assert Accounts.get_user(42) == {:error, :not_found}
    end
  end

  describe "start/1" do
    test "is idempotent in the same directory" do
      {:ok, %{user_id: user_id}} = Accounts.authenticate_device(device_id())
      assert Accounts.start(DataDir.path()) == :ok
      # The same directory written another way.
      assert Accounts.start(Path.join(DataDir.path(), "../" <> Path.basename(DataDir.path()))) ==
               :ok

      assert {:ok, _} = Accounts.get_user(user_id)
    end

    test "calls from several processes are harmless" do
      results =
        1..5
        |> Enum.map(fn _ -> Task.async(fn -> Accounts.start(DataDir.path()) end) end)
        |> Enum.map(&Task.await(&1, 15_000))

      assert results == List.duplicate(:ok, 5)
    end

    @tag :tmp_dir
    test "refuses another directory while Mnesia runs", %{tmp_dir: tmp_dir} do
      current = Path.expand(DataDir.path())
      assert Accounts.start(tmp_dir) == {:error, {:data_dir_in_use, current}}
      assert File.ls!(tmp_dir) == []
    end

    test "the tables are kept on disc in the data directory" do
      dir = DataDir.path()
      assert to_string(:mnesia.system_info(:directory)) == Path.expand(dir)
      assert :mnesia.table_info(:schema, :storage_type) == :disc_copies

      for table <- [:overworld_devices, :overworld_users] do
        assert node() in :mnesia.table_info(table, :disc_copies)
      end

      {:ok, _} = Accounts.authenticate_device(device_id())
      :dumped = :mnesia.dump_log()

      assert File.exists?(Path.join(dir, "schema.DAT"))

      for table <- ["overworld_devices", "overworld_users"] do
        assert Enum.any?([".DCD", ".DCL"], &File.exists?(Path.join(dir, table <> &1))),
               "no file of #{table} in #{inspect(File.ls!(dir))}"
      end
    end

    test "accounts survive a restart of Mnesia" do
      {:ok, %{user_id: user_id}} = Accounts.authenticate_device(id = device_id())
      count = Accounts.count()

      :stopped = :mnesia.stop()
      assert Accounts.start(DataDir.path()) == :ok

      assert Accounts.count() == count
      assert {:ok, %{device_id: ^id}} = Accounts.get_user(user_id)
      assert Accounts.authenticate_device(id) == {:ok, %{user_id: user_id, created: false}}
    end

    test "tables have the documented attributes" do
      assert :mnesia.table_info(:overworld_devices, :attributes) == [:device_id, :user_id]

      assert :mnesia.table_info(:overworld_users, :attributes) ==
               [:user_id, :device_id, :created_at]

      assert :mnesia.table_info(:overworld_identities, :attributes) == [:key, :user_id, :secret]

      assert :mnesia.table_info(:overworld_account_state, :attributes) ==
               [:user_id, :generation, :disabled_at]

      assert :mnesia.table_info(:overworld_revoked, :attributes) == [:sid, :expires_at]
      # Indexed by user: a user's devices and identities.
      assert :mnesia.table_info(:overworld_devices, :index) == [3]
      assert :mnesia.table_info(:overworld_identities, :index) == [3]
    end
  end

  describe "custom ids" do
    test "the first call makes an account, later ones find it" do
      id = "steam:" <> hex(6)
      assert {:ok, %{user_id: u, created: true}} = Accounts.authenticate_custom(id)
      assert {:ok, %{user_id: ^u, created: false}} = Accounts.authenticate_custom(id)
      assert {:ok, %{custom_id: ^id, devices: [], email: nil}} = Accounts.account(u)
      assert {:ok, %{device_id: nil}} = Accounts.get_user(u)
      assert Accounts.authenticate_custom("short") == {:error, :invalid_custom_id}
      assert Accounts.authenticate_custom("has space!") == {:error, :invalid_custom_id}
      assert Accounts.authenticate_custom(42) == {:error, :invalid_custom_id}
    end
  end

  describe "link/2 and unlink/2" do
    test "a device account links more devices and a custom id, and unlinks them but the last" do
      {:ok, %{user_id: u}} = Accounts.authenticate_device(d1 = device_id())
      d2 = device_id()
      c = "custom-" <> hex(4)

      assert :ok = Accounts.link(u, {:device, d2})
      assert :ok = Accounts.link(u, {:device, d2})
      assert :ok = Accounts.link(u, {:custom, c})
      # Both devices and the custom id find the same account.
      assert {:ok, %{user_id: ^u, created: false}} = Accounts.authenticate_device(d2)
      assert {:ok, %{user_id: ^u, created: false}} = Accounts.authenticate_custom(c)

      assert {:ok, %{devices: devices, custom_id: ^c}} = Accounts.account(u)
      assert devices == Enum.sort([d1, d2])

      # One custom id per account; another account's identities stay theirs.
      assert Accounts.link(u, {:custom, "custom-" <> hex(4)}) == {:error, :identity_exists}
      {:ok, %{user_id: other}} = Accounts.authenticate_device(d3 = device_id())
      assert Accounts.link(u, {:device, d3}) == {:error, :already_linked}
      assert Accounts.link(other, {:custom, c}) == {:error, :already_linked}
      assert Accounts.link(u, {:device, "bad"}) == {:error, :invalid_identity}
      assert Accounts.link(hex(16), {:device, device_id()}) == {:error, :not_found}

      # Unlinking the first device moves the account's first device to the other one.
      assert :ok = Accounts.unlink(u, {:device, d1})
      assert {:ok, %{device_id: ^d2}} = Accounts.get_user(u)
      assert Accounts.unlink(u, {:device, d1}) == {:error, :not_linked}
      assert Accounts.unlink(u, {:device, d3}) == {:error, :not_linked}
      assert :ok = Accounts.unlink(u, {:custom, c})
      assert Accounts.unlink(u, {:device, d2}) == {:error, :last_identity}
      assert {:ok, %{devices: [^d2], custom_id: nil}} = Accounts.account(u)

      # An unlinked device is free: it makes a new account.
      assert {:ok, %{user_id: new, created: true}} = Accounts.authenticate_device(d1)
      assert new != u
    end
  end

  describe "tokens: generations, logouts, disabled accounts" do
    setup do
      {:ok, %{user_id: u}} = Accounts.authenticate_device(device_id())
      key = Overworld.Auth.Token.key(:crypto.strong_rand_bytes(32))
      sign = fn subject -> Overworld.Auth.Token.sign(key, :session, subject, 600) end
      %{user: u, keys: [key], sign: sign}
    end

    test "a logout refuses its login's tokens only", %{user: u, keys: keys, sign: sign} do
      {:ok, s1} = Accounts.subject(u)
      {:ok, s2} = Accounts.subject(u)
      assert s1.sid != s2.sid and s1.generation == 0
      {t1, t2} = {sign.(s1), sign.(s2)}
      assert {:ok, %{user_id: ^u}} = Accounts.verify_token(keys, t1, :session)

      assert :ok = Accounts.logout(u, s1.sid, System.system_time(:second) + 60)
      assert Accounts.verify_token(keys, t1, :session) == {:error, :revoked}
      # A refresh keeps the sid: what is refreshed from a logged-out login is refused too.
      {:ok, same_login} = Accounts.subject(u, s1.sid)
      assert Accounts.verify_token(keys, sign.(same_login), :session) == {:error, :revoked}
      assert {:ok, _} = Accounts.verify_token(keys, t2, :session)
    end

    test "revoke_all/1 refuses every token made before, and version 1 tokens", %{
      user: u,
      keys: keys,
      sign: sign
    } do
      {:ok, s} = Accounts.subject(u)
      t = sign.(s)
      [key] = keys

      payload =
        <<1, 1, key.kid::32, System.system_time(:second) + 60::64, byte_size(u), u::binary>>

      v1 =
        Base.url_encode64(payload, padding: false) <>
          "." <>
          Base.url_encode64(:crypto.mac(:hmac, :sha256, key.secret, payload), padding: false)

      assert {:ok, %{sid: nil}} = Accounts.verify_token(keys, v1, :session)
      assert :ok = Accounts.revoke_all(u)
      assert Accounts.verify_token(keys, t, :session) == {:error, :revoked}
      assert Accounts.verify_token(keys, v1, :session) == {:error, :revoked}
      assert {:ok, %{generation: 1} = s2} = Accounts.subject(u)
      assert {:ok, _} = Accounts.verify_token(keys, sign.(s2), :session)
    end

    test "a disabled account's tokens are refused and it gets none until enabled", %{
      user: u,
      keys: keys,
      sign: sign
    } do
      {:ok, s} = Accounts.subject(u)
      t = sign.(s)
      assert :ok = Accounts.disable(u)
      assert Accounts.verify_token(keys, t, :session) == {:error, :disabled}
      assert Accounts.subject(u) == {:error, :disabled}
      assert {:ok, %{disabled: true}} = Accounts.account(u)
      assert :ok = Accounts.enable(u)
      # Enabled again: its old tokens stay refused, new ones work.
      assert Accounts.verify_token(keys, t, :session) == {:error, :revoked}
      {:ok, s2} = Accounts.subject(u)
      assert {:ok, _} = Accounts.verify_token(keys, sign.(s2), :session)
      assert Accounts.disable(hex(16)) == {:error, :not_found}
    end

    test "sweep/1 forgets revocations past their time", %{user: u} do
      {:ok, s} = Accounts.subject(u)
      :ok = Accounts.logout(u, s.sid, System.system_time(:second) + 5)
      assert :mnesia.dirty_read(:overworld_revoked, s.sid) != []
      Accounts.sweep(System.system_time(:second))
      assert :mnesia.dirty_read(:overworld_revoked, s.sid) != []
      assert Accounts.sweep(System.system_time(:second) + 10) >= 1
      assert :mnesia.dirty_read(:overworld_revoked, s.sid) == []
    end
  end

  # HELLO with a token on a new WebSocket of 127.0.0.1:port: the server's answer.
  defp hello(port, token) do
    {:ok, conn} = Overworld.Client.connect("127.0.0.1", port, "/ws")

    :ok =
      Overworld.Client.send_msg(conn, %{
        type: :hello,
        version: Overworld.Protocol.version(),
        token: token
      })

    {msg, _conn} = Overworld.Test.ServerCase.recv_msg(conn)
    msg
  end

  describe "a cluster's accounts" do
    @describetag :cluster
    @describetag :tmp_dir

    test "a node joining gets every table on its disc and the accounts made before; a token issued by one node is accepted by another",
         %{tmp_dir: tmp} do
      [{_, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
      config = %Overworld.Cluster.Config{nodes: [a, b]}
      for n <- [a, b], do: {:ok, _} = :erpc.call(n, Overworld.Cluster, :join, [config])
      dir = fn n -> Path.join(tmp, "#{n}") end

      assert :erpc.call(a, Accounts, :start, [dir.(a)]) == :ok
      {:ok, %{user_id: before}} = :erpc.call(a, Accounts, :authenticate_device, [device_id()])

      # b starts with an empty directory: it joins a's accounts.
      assert :erpc.call(b, Accounts, :start, [dir.(b)]) == :ok

      for t <- [:overworld_devices, :overworld_users, :overworld_shared] do
        copies = :erpc.call(b, :mnesia, :table_info, [t, :disc_copies])
        assert Enum.sort(copies) == Enum.sort([a, b]), "#{t}: #{inspect(copies)}"
      end

      assert {:ok, %{user_id: ^before}} = :erpc.call(b, Accounts, :get_user, [before])
      id = device_id()

      {:ok, %{user_id: made_on_b, created: true}} =
        :erpc.call(b, Accounts, :authenticate_device, [id])

      assert :erpc.call(a, Accounts, :authenticate_device, [id]) ==
               {:ok, %{user_id: made_on_b, created: false}}

      # On b's disc too (its own copy, not only a's).
      assert File.exists?(Path.join(dir.(b), "schema.DAT"))

      # Each node's server: a's token opens a session on b.
      ports =
        for n <- [a, b] do
          opts = [
            name: :accounts_cluster_server,
            port: 0,
            acceptors: 1,
            data_dir: dir.(n),
            zones: %{}
          ]

          {n, :erpc.call(n, Overworld.Bench.Peer, :serve, [opts])}
        end
        |> Map.new()

      {:ok, %{"token" => token, "user_id" => user}} =
        Overworld.Client.authenticate_device("127.0.0.1", ports[a], device_id())

      assert %{type: :handshake} = hello(ports[b], token)

      # Logged out everywhere on a: b refuses the token from then on (the generation is
      # replicated before revoke_all/1 answers... on a; b applies it right after).
      :ok = :erpc.call(a, Accounts, :revoke_all, [user])
      keys = :erpc.call(b, Overworld.Server, :config, [:accounts_cluster_server]).keys

      eventually(fn ->
        :erpc.call(b, Accounts, :verify_token, [keys, token, :session]) == {:error, :revoked}
      end)

      assert %{type: :error} = hello(ports[b], token)
    end

    test "a partition heals with the majority's copy: the minority makes no account meanwhile, and reloads",
         %{tmp_dir: tmp} do
      # No connection but those asked for (a partition stays one until it is healed here).
      never = [~c"-connect_all", ~c"false", ~c"-kernel", ~c"dist_auto_connect", ~c"never"]
      [{_, a}, {_, b}, {_, c}] = Overworld.Test.Cluster.start_peers(3, never)
      config = %Overworld.Cluster.Config{nodes: [a, b, c]}

      for n <- [a, b, c],
          do: {:ok, _} = :erpc.call(n, Overworld.Cluster, :join, [config, [retry: 600_000]])

      for n <- [a, b, c], do: :ok = :erpc.call(n, Accounts, :start, [Path.join(tmp, "#{n}")])
      {:ok, %{user_id: u0}} = :erpc.call(c, Accounts, :authenticate_device, [d0 = device_id()])

      # c is cut off from a and b.
      for n <- [a, b], do: true = :erpc.call(c, Node, :disconnect, [n])

      eventually(fn ->
        :erpc.call(c, :mnesia, :system_info, [:running_db_nodes]) == [c] and
          length(:erpc.call(a, :mnesia, :system_info, [:running_db_nodes])) == 2
      end)

      eventually(fn -> not :erpc.call(c, Overworld.Cluster, :quorate?, []) end)
      assert :erpc.call(c, Accounts, :authenticate_device, [device_id()]) == {:error, :no_quorum}
      {:ok, %{user_id: u1}} = :erpc.call(a, Accounts, :authenticate_device, [d1 = device_id()])
      # (What c wrote in the moment before it saw the partition: a write of its own copy.)
      :ok = :erpc.call(c, :mnesia, :dirty_write, [{:overworld_devices, d2 = device_id(), "lost"}])

      # Healed: c takes the majority's copy.
      for n <- [a, b], do: true = :erpc.call(c, Node, :connect, [n])
      eventually(fn -> :erpc.call(c, Overworld.Accounts.Heal, :reloads, []) == 1 end)

      :ok =
        :erpc.call(c, :mnesia, :wait_for_tables, [[:overworld_devices, :overworld_users], 10_000])

      for n <- [a, b, c] do
        assert :erpc.call(n, :mnesia, :dirty_read, [:overworld_devices, d0]) == [
                 {:overworld_devices, d0, u0}
               ]

        assert :erpc.call(n, :mnesia, :dirty_read, [:overworld_devices, d1]) == [
                 {:overworld_devices, d1, u1}
               ]

        assert :erpc.call(n, :mnesia, :dirty_read, [:overworld_devices, d2]) == []
      end

      # The majority kept its copy; one cluster again, every node writing.
      assert :erpc.call(a, Overworld.Accounts.Heal, :reloads, []) == 0

      assert Enum.sort(:erpc.call(c, :mnesia, :system_info, [:running_db_nodes])) ==
               Enum.sort([a, b, c])

      {:ok, %{user_id: u3}} = :erpc.call(c, Accounts, :authenticate_device, [d3 = device_id()])

      # (A transaction returns once committed where it ran; the other copies apply it right
      # after: mnesia:sync_transaction would wait for them.)
      eventually(fn ->
        :erpc.call(a, :mnesia, :dirty_read, [:overworld_devices, d3]) == [
          {:overworld_devices, d3, u3}
        ]
      end)
    end
  end
end

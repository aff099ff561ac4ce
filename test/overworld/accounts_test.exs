defmodule Overworld.AccountsTest do
  # Mnesia is one per node: these tests share it (and its directory) with every other test file.
  use ExUnit.Case, async: false
  doctest Overworld.Accounts

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
    end
  end
end

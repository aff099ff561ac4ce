defmodule Overworld.Accounts.SyncTest do
  # The node's one Mnesia (and its one group commit) is shared with every other test file.
  use ExUnit.Case, async: false

  alias Overworld.Accounts.Sync
  alias Overworld.Test.DataDir

  setup_all do
    :ok = Overworld.Accounts.start(DataDir.path())
  end

  setup do
    on_exit(fn -> Sync.set_delay(0) end)
  end

  test "callers waiting together share a sync: 60 callers, a few syncs of 20 ms" do
    :ok = Sync.set_delay(20)
    {syncs, callers} = Sync.stats()
    t0 = System.monotonic_time(:millisecond)

    results =
      1..60
      |> Task.async_stream(fn _ -> Sync.await() end, max_concurrency: 60)
      |> Enum.map(fn {:ok, r} -> r end)

    ms = System.monotonic_time(:millisecond) - t0
    {syncs2, callers2} = Sync.stats()

    assert Enum.all?(results, &(&1 == :ok))
    assert callers2 - callers == 60
    # One sync at a time, each for everyone waiting when it starts: not 60 of them (1.2 s).
    assert syncs2 - syncs <= 4
    assert ms < 600
  end

  test "a new account and a storage write wait for a sync; a login does not" do
    {_, callers} = Sync.stats()
    device = "sync-test-" <> Base.encode16(:crypto.strong_rand_bytes(8))
    assert {:ok, %{created: true, user_id: u}} = Overworld.Accounts.authenticate_device(device)
    {_, callers1} = Sync.stats()
    assert callers1 - callers == 1

    assert {:ok, %{created: false}} = Overworld.Accounts.authenticate_device(device)
    {_, callers2} = Sync.stats()
    assert callers2 == callers1

    start_supervised!({Overworld.Storage, name: :sync_test_store})

    assert {:ok, _} =
             Overworld.Storage.write(:sync_test_store, {:user, u}, [
               %{collection: "c", key: "k", value: %{}}
             ])

    {_, callers3} = Sync.stats()
    assert callers3 - callers2 == 1
  end
end

defmodule Overworld.Accounts.LegacyTest do
  # A data directory made by the version before email and custom accounts and token
  # revocation (test/fixtures/legacy_accounts, made by commit b3f422e on a node named
  # legacy_accounts@127.0.0.1: Mnesia's schema names its node) loads unchanged.
  use ExUnit.Case, async: false
  @moduletag :cluster
  @moduletag :tmp_dir

  alias Overworld.Accounts

  @fixture Path.expand("../../fixtures/legacy_accounts", __DIR__)

  test "accounts, storage objects and tokens of the earlier version load and work", %{
    tmp_dir: tmp
  } do
    manifest =
      @fixture |> Path.join("MANIFEST.json") |> File.read!() |> :jiffy.decode([:return_maps])

    dir = Path.join(tmp, "data")
    File.mkdir_p!(dir)

    for f <- File.ls!(@fixture),
        Path.extname(f) in [".DAT", ".LOG", ".DCD", ".DCL"],
        do: File.cp!(Path.join(@fixture, f), Path.join(dir, f))

    {_peer, node} = Overworld.Test.Cluster.start_peer(:legacy_accounts)
    assert node == String.to_atom(manifest["node"])
    assert :erpc.call(node, Accounts, :start, [dir]) == :ok

    # Every device finds its account, none is made again.
    count = :erpc.call(node, Accounts, :count, [])
    assert count == map_size(manifest["devices"])

    for {device, user} <- manifest["devices"] do
      assert :erpc.call(node, Accounts, :authenticate_device, [device]) ==
               {:ok, %{user_id: user, created: false}}

      assert {:ok, %{device_id: ^device}} = :erpc.call(node, Accounts, :get_user, [user])
    end

    # A refresh token of the earlier version (format 1) verifies with the cluster's secret.
    {:ok, secret} = :erpc.call(node, Accounts, :shared_secret, [:crypto.strong_rand_bytes(32)])
    keys = [Overworld.Auth.Token.key(secret)]
    [{first_device, first_user} | _] = Enum.sort(manifest["devices"])

    assert {:ok, %{user_id: ^first_user, generation: 0, sid: nil}} =
             :erpc.call(node, Accounts, :verify_token, [keys, manifest["refresh_token"], :refresh])

    # The storage object, with its version.
    o = manifest["storage"]

    {:ok, _} =
      :erpc.call(node, Overworld.Bench.Peer, :hold, [{Overworld.Storage, name: LegacyStore}])

    id = %{"collection" => o["collection"], "key" => o["key"], "user_id" => o["user_id"]}

    {:ok, [object]} = :erpc.call(node, Overworld.Storage, :read, [LegacyStore, :server, [id]])
    assert object.version == o["version"]
    assert :jiffy.decode(object.value, [:return_maps]) == o["value"]

    # The new features work on the old accounts: link, and revocation of old tokens.
    device = "new-device-#{System.unique_integer([:positive])}"
    assert :erpc.call(node, Accounts, :link, [first_user, {:device, device}]) == :ok
    assert {:ok, %{devices: devices}} = :erpc.call(node, Accounts, :account, [first_user])
    assert Enum.sort(devices) == Enum.sort([first_device, device])
    assert :erpc.call(node, Accounts, :revoke_all, [first_user]) == :ok

    assert :erpc.call(node, Accounts, :verify_token, [keys, manifest["refresh_token"], :refresh]) ==
             {:error, :revoked}
  end
end

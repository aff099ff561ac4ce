defmodule Overworld.Web.Operator.ClusterTest do
  # The operator API of one node acting on another's: a disable and a kick close sessions held
  # by the other node, and its zones are listed and stopped from the first.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase, only: [host: 0, expect_close: 1]
  import Overworld.Test.Cluster, only: [eventually: 1]
  @moduletag :cluster
  @moduletag :tmp_dir

  alias Overworld.Accounts.Password
  alias Overworld.{Client, Zone}
  alias Overworld.Operators.Zones
  alias Overworld.Test.Game

  defp request(port, method, path, token, body \\ "") do
    headers = [headers: [{"authorization", "Bearer " <> token}]]
    {:ok, status, _, reply} = Client.request(host(), port, method, path, body, headers)
    {status, :jiffy.decode(reply, [:return_maps, {:null_term, nil}])}
  end

  # A WebSocket in no zone, past its HANDSHAKE.
  defp live(port, token) do
    {:ok, conn} = Client.connect(host(), port, "/ws?zone=")

    :ok =
      Client.send_msg(conn, %{type: :hello, version: Overworld.Protocol.version(), token: token})

    {%{type: :handshake}, conn} = Overworld.Test.ServerCase.recv_msg(conn)
    conn
  end

  defp player(port) do
    id = "dev-" <> Base.encode16(:crypto.strong_rand_bytes(8))
    {:ok, auth} = Client.authenticate_device(host(), port, id)
    auth
  end

  test "disable, kick and zones across nodes", %{tmp_dir: tmp} do
    [{_, a}, {_, b}] = Overworld.Test.Cluster.start_peers(2)
    config = %Overworld.Cluster.Config{nodes: [a, b]}
    for n <- [a, b], do: {:ok, _} = :erpc.call(n, Overworld.Cluster, :join, [config])

    eventually(fn -> b in :erpc.call(a, Overworld.Cluster, :live, []) end)

    hash = Password.encode(Password.hash("alice's password", 1_000))

    ports =
      for n <- [a, b], into: %{} do
        opts = [
          name: :operator_cluster,
          port: 0,
          acceptors: 1,
          data_dir: Path.join(tmp, "#{n}"),
          zones: %{},
          accounts: [password_iterations: 1_000],
          operators: [%{name: "alice", password_hash: hash}]
        ]

        {n, :erpc.call(n, Overworld.Bench.Peer, :serve, [opts])}
      end

    {200, %{"token" => op}} =
      request(
        ports[a],
        "POST",
        "/api/v1/operator/login",
        "",
        :jiffy.encode(%{name: "alice", password: "alice's password"})
      )

    # Two players whose sessions are on b.
    one = player(ports[a])
    two = player(ports[a])
    c1 = live(ports[b], one["token"])
    c2 = live(ports[b], two["token"])

    assert {200, %{"disabled" => true}} =
             request(ports[a], "POST", "/api/v1/operator/accounts/#{one["user_id"]}/disable", op)

    assert {4003, [3]} = expect_close(c1)

    assert {200, %{"kicked" => 1}} =
             request(ports[a], "POST", "/api/v1/operator/sessions/#{two["user_id"]}/kick", op)

    assert {4009, [9]} = expect_close(c2)

    # A zone of b, listed and stopped from a.
    id = {__MODULE__, :on_b}

    {:ok, _} =
      :erpc.call(b, Overworld, :start_zone, [Game, Game.zone_options(20, id: id, clock: :manual)])

    ref = Zones.ref(id)
    {200, %{"zones" => zones}} = request(ports[a], "GET", "/api/v1/operator/zones", op)
    assert %{"node" => node_b} = Enum.find(zones, &(&1["ref"] == ref))
    assert node_b == Atom.to_string(b)

    assert {200, %{"stopped" => ^ref}} =
             request(ports[a], "POST", "/api/v1/operator/zones/#{ref}/stop", op)

    assert :erpc.call(b, Zone, :config, [id]) == nil
  end
end

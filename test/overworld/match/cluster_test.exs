defmodule Overworld.Match.ClusterTest do
  # Matches over a cluster of two nodes (peers, each with its own server): a match runs on one
  # node and players of the other join it; listing and the matchmaker see both nodes.
  use ExUnit.Case, async: false
  import Overworld.Test.MatchCase

  @moduletag :cluster
  @moduletag :tmp_dir

  alias Overworld.Test.Cluster

  test "a match on one node, players through both; listing and matchmaking across the nodes", %{
    tmp_dir: tmp
  } do
    # (c is a member of the cluster without this server: it must get no tickets.)
    [{_, a}, {_, b}, {_, c}] = Cluster.start_peers(3)
    config = %Overworld.Cluster.Config{nodes: [a, b, c]}
    for n <- [a, b, c], do: {:ok, _} = :erpc.call(n, Overworld.Cluster, :join, [config])

    # (One node makes the accounts' database first; the other joins it.)
    ports =
      for n <- [a, b], into: %{} do
        opts = [
          name: :match_cluster_server,
          port: 0,
          acceptors: 1,
          data_dir: Path.join(tmp, "#{n}"),
          zones: %{},
          matches: [handlers: %{"echo" => Overworld.Bench.EchoMatch}],
          matchmaker: [interval: 200, matched: "echo"]
        ]

        {n, :erpc.call(n, Overworld.Bench.Peer, :serve, [opts])}
      end

    on_a = player(%{port: ports[a]})
    on_b = player(%{port: ports[b]})
    # A mode whose tickets' rendezvous would pick c if c had the server's matchmaker.
    mode =
      Stream.repeatedly(fn -> "cluster-#{System.unique_integer([:positive])}" end)
      |> Enum.find(fn m ->
        {:ok, q} = Overworld.Match.Query.parse(%{"mode" => m})
        fixed = Overworld.Match.Query.fixed(q)
        Enum.max_by([a, b, c], &:erlang.phash2({&1, fixed})) == c
      end)

    {on_a, 200, %{"match_id" => id}} =
      request(on_a, "match_create", %{name: "echo", params: %{"mode" => mode}})

    assert node(:erpc.call(b, Overworld.Match, :whereis, [id])) == a

    {on_a, 200, _} = request(on_a, "match_join", %{match_id: id})
    {on_b, 200, %{"presences" => ps}} = request(on_b, "match_join", %{match_id: id})
    assert length(ps) == 2

    # b's player (session on b, match on a): echo and broadcast.
    send_data(on_b, id, 1, "from b")
    {on_b, %{messages: [{1, "", "from b"}]}} = data(on_b)
    send_data(on_b, id, 2, "to all")
    {_on_a, %{messages: [{2, sender, "to all"}]}} = data(on_a)
    assert sender == on_b.user

    # Listed from either node.
    {on_b, 200, %{"matches" => [%{"match_id" => ^id, "size" => 2}]}} =
      request(on_b, "match_list", %{query: %{"mode" => mode}})

    # Tickets from both nodes with the same query meet (their shard is one node's).
    ticket = %{
      query: %{"mode" => mode},
      properties: %{"mode" => mode},
      min_count: 2,
      max_count: 2
    }

    p1 = player(%{port: ports[a]})
    {p1, 200, _} = request(p1, "matchmaker_add", ticket)
    {on_b, 200, _} = request(on_b, "matchmaker_add", ticket)
    {_p1, %{body: b1}} = notify(p1, "matchmaker_matched")
    {_on_b, %{body: b2}} = notify(on_b, "matchmaker_matched")
    m1 = :jiffy.decode(b1, [:return_maps])
    assert m1["match_id"] == :jiffy.decode(b2, [:return_maps])["match_id"]
    assert Enum.sort(m1["users"]) == Enum.sort([p1.user, on_b.user])
  end
end

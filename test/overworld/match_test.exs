defmodule Overworld.MatchTest do
  # Authoritative matches over real WebSockets: players connect without a zone and use the
  # backend messages (REQUEST, MATCH_SEND; RESPONSE, MATCH_DATA, NOTIFY).
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase
  import Overworld.Test.MatchCase

  alias Overworld.{Client, Match}

  @name Overworld.MatchTest.Server

  setup do
    world =
      start_world(@name, {__MODULE__, :critters},
        critters: 5,
        matches: [
          handlers: %{"echo" => Overworld.Bench.EchoMatch},
          grace: 400,
          max_data_bytes: 64,
          empty_timeout: 1_500
        ],
        rpc: %{
          "add" => fn %{user_id: u}, %{"a" => a, "b" => b} ->
            {:ok, %{"sum" => a + b, "user" => u}}
          end,
          "refuse" => fn _, _ -> {:error, :permission_denied, "not you"} end,
          "raise" => fn _, _ -> raise "boom" end,
          "exits" => fn _, _ -> exit(:gone) end,
          "not_json" => fn _, _ -> {:ok, %{"pid" => self(), "bytes" => <<255, 254>>}} end
        }
      )

    {:ok, world: world}
  end

  test "create, join, echo to the sender, broadcast to all in one frame per tick, presences", %{
    world: w
  } do
    {a, id} = create(player(w))
    {a, 200, joined} = request(a, "match_join", %{match_id: id})
    assert joined["presences"] == [a.user] and joined["tick_rate"] == 10
    assert joined["label"] == %{"mode" => "echo", "round" => 0}

    b = player(w)
    {b, 200, %{"presences" => ps}} = request(b, "match_join", %{match_id: id})
    assert Enum.sort(ps) == Enum.sort([a.user, b.user])
    {a, %{body: body}} = notify(a, "match_presence")

    assert :jiffy.decode(body, [:return_maps]) == %{
             "match_id" => id,
             "joins" => [%{"user_id" => b.user}],
             "leaves" => []
           }

    # Echo: only its sender gets it.
    send_data(a, id, 1, "ping")
    {a, %{match_id: ^id, messages: [{1, "", "ping"}]}} = data(a)

    # Three broadcasts sent at once reach b in one frame (the tick's), in order, sender named.
    for x <- ["x", "y", "z"], do: send_data(b, id, 2, x)
    {b, %{messages: ms}} = data(b)
    {_a, %{messages: ms_a}} = data(a)
    assert ms == [{2, b.user, "x"}, {2, b.user, "y"}, {2, b.user, "z"}]
    assert ms_a == ms

    # b leaves: a is told.
    {_b, 200, _} = request(b, "match_leave", %{match_id: id})
    {_a, %{body: body}} = notify(a, "match_presence")
    assert %{"leaves" => [%{"user_id" => u}]} = :jiffy.decode(body, [:return_maps])
    assert u == b.user
    assert {:ok, [_]} = Match.signal(id, "players")
  end

  test "a join attempt rejected with a reason; unknown matches and handlers", %{world: w} do
    {a, id} = create(player(w), "echo", %{"max" => 1})
    {a, 200, _} = request(a, "match_join", %{match_id: id})
    b = player(w)

    assert {b, 403, %{"error" => "match_join_rejected", "message" => "full"}} =
             request(b, "match_join", %{match_id: id})

    {b, 403, %{"message" => "not now"}} =
      request(b, "match_join", %{match_id: id, metadata: %{"refuse" => "not now"}})

    {b, 404, %{"error" => "match_not_found"}} = request(b, "match_join", %{match_id: "nope"})
    {b, 404, %{"error" => "unknown_handler"}} = request(b, "match_create", %{name: "chess"})

    {b, 400, %{"error" => "match_create_failed", "message" => "asked to fail"}} =
      request(b, "match_create", %{name: "echo", params: %{"fail" => true}})

    {b, 400, %{"error" => "bad_json"}} = raw_request(b, "match_join", "{nope")
    {_b, 404, %{"error" => "unknown_method"}} = request(b, "teleport", %{})
    _ = a
  end

  test "data for a match the player is not in, or too large: a clear error, the connection carries on",
       %{world: w} do
    {a, id} = create(player(w))
    send_data(a, id, 1, "not joined yet")
    {a, %{body: body}} = notify(a, "error")
    assert %{"error" => "not_in_match"} = :jiffy.decode(body, [:return_maps])
    {a, 200, _} = request(a, "match_join", %{match_id: id})
    send_data(a, id, 1, String.duplicate("x", 65))
    {a, %{body: body}} = notify(a, "error")
    assert %{"error" => "match_data_too_large"} = :jiffy.decode(body, [:return_maps])
    send_data(a, id, 1, "fine")
    {_a, %{messages: [{1, "", "fine"}]}} = data(a)
  end

  test "a handler that raises: its players get match_error, other matches carry on", %{world: w} do
    {a, bad} = create(player(w))
    {a, good} = create(a)
    {a, 200, _} = request(a, "match_join", %{match_id: bad})
    {a, 200, _} = request(a, "match_join", %{match_id: good})
    send_data(a, bad, 99, "")
    {a, %{body: body}} = notify(a, "match_error")
    assert %{"match_id" => ^bad} = :jiffy.decode(body, [:return_maps])
    assert Match.whereis(bad) == nil
    send_data(a, good, 1, "still here")
    {_a, %{match_id: ^good, messages: [{1, "", "still here"}]}} = data(a)
  end

  test "a dropped player rejoins within the grace unseen; after it, it leaves", %{world: w} do
    {a, id} = create(player(w))
    {a, 200, _} = request(a, "match_join", %{match_id: id})
    b = player(w)
    {b, 200, _} = request(b, "match_join", %{match_id: id})
    {a, _} = notify(a, "match_presence")

    # b's connection is lost; b reconnects and joins again within the grace (400 ms).
    :gen_tcp.close(b.conn.sock)
    b2 = player_again(w, b)
    {b2, 200, %{"rejoined" => true}} = request(b2, "match_join", %{match_id: id})
    send_data(b2, id, 2, "back")
    {a, %{messages: [{2, u, "back"}]}} = data(a)
    assert u == b.user
    refute Enum.any?(Map.get(a, :seen, []), &match?(%{kind: "match_presence"}, &1))

    # Lost again, for good: a sees it leave once the grace is over.
    :gen_tcp.close(b2.conn.sock)
    {_a, %{body: body}} = notify(a, "match_presence")
    assert %{"leaves" => [%{"user_id" => ^u}]} = :jiffy.decode(body, [:return_maps])
  end

  test "listing by label over the WebSocket and HTTP; labels change", %{world: w} do
    a = player(w)
    {a, duel} = create(a, "echo", %{"mode" => "duel-#{System.unique_integer([:positive])}"})
    {a, 200, _} = request(a, "match_join", %{match_id: duel})

    mode =
      Match.list(limit: 100)
      |> elem(1)
      |> Enum.find(&(&1.match_id == duel))
      |> get_in([:label, "mode"])

    {a, 200, %{"matches" => [m]}} = request(a, "match_list", %{query: %{"mode" => mode}})

    assert m["match_id"] == duel and m["size"] == 1 and
             m["handler"] == "Overworld.Bench.EchoMatch"

    send_data(a, duel, 98, "3")
    Process.sleep(250)

    {a, 200, %{"matches" => [_]}} =
      request(a, "match_list", %{query: %{"mode" => mode, "round" => %{"gte" => 3}}})

    {a, 200, %{"matches" => []}} =
      request(a, "match_list", %{query: %{"mode" => mode}, min_size: 2})

    {_a, 400, %{"error" => "invalid_query"}} =
      request(a, "match_list", %{query: %{"round" => %{"near" => 3}}})

    {:ok, 200, _, body} =
      Client.request(
        host(),
        w.port,
        "POST",
        "/api/v1/matches/list",
        :jiffy.encode(%{query: %{"mode" => mode}}),
        headers: [{"authorization", "Bearer " <> a.token}]
      )

    assert %{"matches" => [%{"match_id" => ^duel}]} = :jiffy.decode(body, [:return_maps])
  end

  test "server code: signal, kick, shutdown with a grace", %{world: w} do
    {a, id} = create(player(w))
    {a, 200, _} = request(a, "match_join", %{match_id: id})
    assert Match.signal(id, "players") == {:ok, [a.user]}
    assert Match.signal("nope", "players") == {:error, :not_found}
    :ok = Match.shutdown(id, 0)
    {a, %{messages: [{7, "", "bye in 0"}]}} = data(a)
    {_a, _} = notify(a, "match_end")
  end

  test "RPC in Elixir over HTTP and the WebSocket, with errors", %{world: w} do
    a = player(w)

    {a, 200, %{"payload" => %{"sum" => 5, "user" => u}}} =
      request(a, "rpc", %{id: "add", payload: %{a: 2, b: 3}})

    assert u == a.user

    {a, 403, %{"error" => "permission_denied", "message" => "not you"}} =
      request(a, "rpc", %{id: "refuse"})

    {a, 500, %{"error" => "rpc_failed"}} = request(a, "rpc", %{id: "raise"})
    {_a, 404, %{"error" => "unknown_rpc"}} = request(a, "rpc", %{id: "nope"})

    post = fn path, body, token ->
      headers = if token, do: [headers: [{"authorization", "Bearer " <> token}]], else: []
      {:ok, status, _, reply} = Client.request(host(), w.port, "POST", path, body, headers)
      {status, :jiffy.decode(reply, [:return_maps])}
    end

    assert {200, %{"payload" => %{"sum" => 9}}} =
             post.("/api/v1/rpc/add", ~s({"a":4,"b":5}), a.token)

    assert {401, _} = post.("/api/v1/rpc/add", ~s({"a":4,"b":5}), nil)
    assert {404, %{"error" => "unknown_rpc"}} = post.("/api/v1/rpc/nope", "", a.token)
    assert {400, %{"error" => "bad_json"}} = post.("/api/v1/rpc/add", "{", a.token)

    assert {405, _} =
             (fn ->
                {:ok, s, _, r} =
                  Client.request(host(), w.port, "GET", "/api/v1/rpc/add", "",
                    headers: [{"authorization", "Bearer " <> a.token}]
                  )

                {s, r}
              end).()
  end

  test "RPC answers that fail or are not JSON: 500, and the server counts its connections right",
       %{world: w} do
    a = player(w)
    {a, 500, %{"error" => "rpc_failed"}} = request(a, "rpc", %{id: "exits"})
    {a, 500, %{"error" => "rpc_failed"}} = request(a, "rpc", %{id: "not_json"})
    {_a, 200, _} = request(a, "rpc", %{id: "add", payload: %{a: 1, b: 1}})
    before = Overworld.Server.stats(w.name).connections

    for id <- ["exits", "not_json"] do
      {:ok, 500, _, _} =
        Client.request(host(), w.port, "POST", "/api/v1/rpc/#{id}", "",
          headers: [{"authorization", "Bearer " <> a.token}]
        )
    end

    Process.sleep(100)
    assert Overworld.Server.stats(w.name).connections == before
  end

  test "a connection creates 16 matches at most; matches without players end", %{world: w} do
    a = player(w)

    {a, ids} =
      Enum.reduce(1..16, {a, []}, fn _, {a, ids} ->
        {a, id} = create(a)
        {a, [id | ids]}
      end)

    {_a, 429, %{"error" => "too_many_matches"}} = request(a, "match_create", %{name: "echo"})
    # (empty_timeout: 1.5 s here.)
    Overworld.Test.Cluster.eventually(fn -> Enum.all?(ids, &(Match.whereis(&1) == nil)) end)
  end

  test "bad input is logged once, with its code", %{world: w} do
    a = player(w)
    # (The suite logs warnings and worse; refusals are info lines.)
    Logger.configure(level: :info)
    on_exit(fn -> Logger.configure(level: :warning) end)

    log =
      ExUnit.CaptureLog.capture_log(fn ->
        {_a, 400, %{"error" => "bad_json"}} = raw_request(a, "rpc", "{nope")

        {:ok, 400, _, _} =
          Client.request(host(), w.port, "POST", "/api/v1/matches/list", "{nope",
            headers: [{"authorization", "Bearer " <> a.token}]
          )
      end)

    assert length(String.split(log, "bad_json")) == 3, log
  end
end

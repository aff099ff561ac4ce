defmodule Overworld.Match.LuaTest do
  # Match handlers and RPC functions in Lua, over real WebSockets and HTTP.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase
  import Overworld.Test.MatchCase

  alias Overworld.{Client, Match}

  @name Overworld.Match.LuaTest.Server

  setup do
    world =
      start_world(@name, {__MODULE__, :critters},
        critters: 5,
        lua: [dir: Path.expand("../../fixtures/lua/server", __DIR__), workers: 2, timeout: 300]
      )

    {:ok, world: world}
  end

  test "a Lua match: join attempts, echo, broadcast, label, signal, terminate", %{world: w} do
    {a, id} = create(player(w), "arena", %{"max" => 2, "mode" => "lua-arena"})
    {a, 200, joined} = request(a, "match_join", %{match_id: id})
    assert joined["tick_rate"] == 20
    b = player(w)
    {b, 200, _} = request(b, "match_join", %{match_id: id})
    c = player(w)
    {_c, 403, %{"message" => "arena full"}} = request(c, "match_join", %{match_id: id})

    send_data(a, id, 1, "ping")
    {a, %{messages: [{1, "", "ping"}]}} = data(a)
    send_data(b, id, 2, "hello all")
    {a, %{messages: [{2, sender, "hello all"}]}} = data(a)
    assert sender == b.user

    assert {:ok, 2} = Match.signal(id, "count")
    {:ok, listed} = Match.list(query: %{"mode" => "arena", "count" => 2}, limit: 100)
    assert [%{handler: "arena"}] = Enum.filter(listed, &(&1.match_id == id))

    :ok = Match.shutdown(id, 0)
    {_a, %{messages: [{7, "", "bye"}]}} = data(a)
  end

  test "a Lua match that raises or runs past its time: its players get match_error, others carry on",
       %{world: w} do
    a = player(w)
    {a, raising} = create(a, "arena")
    {a, spinning} = create(a, "arena")
    {a, good} = create(a, "arena")

    a =
      Enum.reduce([raising, spinning, good], a, fn id, a ->
        {a, 200, _} = request(a, "match_join", %{match_id: id})
        a
      end)

    send_data(a, raising, 3, "")
    {a, %{body: b1}} = notify(a, "match_error")
    send_data(a, spinning, 4, "")
    {a, %{body: b2}} = notify(a, "match_error")
    ids = for b <- [b1, b2], do: :jiffy.decode(b, [:return_maps])["match_id"]
    assert Enum.sort(ids) == Enum.sort([raising, spinning])

    send_data(a, good, 1, "alive")
    {a, %{match_id: ^good, messages: [{1, "", "alive"}]}} = data(a)

    # A loop answering nil ends the match.
    send_data(a, good, 5, "")
    {_a, _} = notify(a, "match_end")
  end

  test "an unknown Lua handler", %{world: w} do
    {_a, 404, %{"error" => "unknown_handler"}} =
      request(player(w), "match_create", %{name: "nope"})
  end

  test "Lua RPC: the caller's id, the server API, errors and runaways", %{world: w} do
    a = player(w)

    {a, 200, %{"payload" => %{"user" => u, "payload" => %{"x" => 1}}}} =
      request(a, "rpc", %{id: "whoami", payload: %{"x" => 1}})

    assert u == a.user

    {a, 200, %{"payload" => %{"n" => 7}}} =
      request(a, "rpc", %{id: "save_and_read", payload: %{"n" => 7}})

    {a, 500, %{"error" => "rpc_failed", "message" => message}} = request(a, "rpc", %{id: "fails"})
    assert message =~ "this rpc always fails"
    {a, 504, %{"error" => "rpc_timeout"}} = request(a, "rpc", %{id: "spins"})
    # The pool carries on.
    {_a, 200, _} = request(a, "rpc", %{id: "whoami"})

    {:ok, 200, _, body} =
      Client.request(host(), w.port, "POST", "/api/v1/rpc/whoami", ~s({"a":[null,1]}),
        headers: [{"authorization", "Bearer " <> a.token}]
      )

    assert %{"payload" => %{"payload" => %{"a" => _}}} = :jiffy.decode(body, [:return_maps])
  end

  test "a Lua script that does not load: the server does not start, with the reason" do
    Process.flag(:trap_exit, true)
    bad = Path.expand("../../fixtures/lua/syntax_error.lua", __DIR__)

    assert {:error, reason} =
             Overworld.Server.start_link(
               name: :lua_bad_server,
               port: 0,
               data_dir: Overworld.Test.DataDir.path(),
               lua: [files: [bad]]
             )

    assert inspect(reason) =~ "lua_load"
  end
end

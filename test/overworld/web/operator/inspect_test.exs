defmodule Overworld.Web.Operator.InspectTest do
  # The visualizer's operator routes over HTTP: a zone's ref from the list, an entity's whole
  # state, the history's range and a past tick, a rewind (audited); a player's token refused.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Accounts.Password

  @iterations 1_000

  setup do
    hash = Password.encode(Password.hash("ida's password", @iterations))

    audit =
      Path.join(
        Overworld.Test.DataDir.path(),
        "audit-inspect-#{System.unique_integer([:positive])}.log"
      )

    world =
      start_world(:inspect_server, {:inspect_zone, make_ref()},
        critters: 50,
        zone_opts: [debug: true, history: 100, keyframe_ticks: 10],
        accounts: [password_iterations: @iterations],
        operators: [%{name: "ida", password_hash: hash}],
        operator_api: [audit_file: audit]
      )

    {:ok, world: Map.put(world, :token, operator_login(world, "ida", "ida's password"))}
  end

  defp call(w, method, path, body, token),
    do: w |> api(method, path, body, token) |> Tuple.delete_at(2)

  test "entity, history and rewind of a debug zone, by its ref", %{world: w} do
    # (Zones of other tests may run on this node too: ours by its id.)
    {200, %{"zones" => zones}} = call(w, "GET", "/api/v1/operator/zones", nil, w.token)
    zone = Enum.find(zones, &(&1["id"] == inspect(w.zone, limit: 20, printable_limit: 200)))
    assert zone["watch"] == "critters"
    ref = zone["ref"]
    base = "/api/v1/operator/zones/#{ref}"

    assert {200, %{"id" => 3, "state" => %{"x" => x}, "cell" => cell}} =
             call(w, "GET", base <> "/entities/3", nil, w.token)

    assert is_float(x) and is_integer(cell)
    assert {404, _} = call(w, "GET", base <> "/entities/123456", nil, w.token)

    eventually(fn ->
      match?(
        {200, %{"newest" => n}} when n > 12,
        call(w, "GET", base <> "/history/range", nil, w.token)
      )
    end)

    {200, %{"oldest" => oldest, "newest" => newest}} =
      call(w, "GET", base <> "/history/range", nil, w.token)

    assert {200, %{"tick" => ^newest, "entities" => es}} =
             call(w, "GET", base <> "/history/state?tick=#{newest}", nil, w.token)

    assert length(es) == 50

    assert {200, %{"tick" => ^oldest}} =
             call(w, "POST", base <> "/rewind", %{tick: oldest}, w.token)

    {200, %{"entries" => [last | _]}} =
      call(w, "GET", "/api/v1/operator/audit?limit=5", nil, w.token)

    assert last["action"] == "zone_rewind" and last["operator"] == "ida"
    assert last["result"] == "ok"

    # A refused rewind is audited with its reason's code.
    assert {409, %{"error" => "out_of_range"}} =
             call(w, "POST", base <> "/rewind", %{tick: 1_000_000}, w.token)

    {200, %{"entries" => [refused | _]}} =
      call(w, "GET", "/api/v1/operator/audit?limit=5", nil, w.token)

    assert refused["action"] == "zone_rewind" and refused["result"] == "out_of_range"

    # A player's token is no operator's.
    player = auth(w)
    assert {401, _} = call(w, "GET", base <> "/entities/3", nil, player["token"])

    assert {404, _} =
             call(w, "GET", "/api/v1/operator/zones/nosuchref0000000/entities/3", nil, w.token)
  end
end

defmodule Overworld.Web.InspectTest do
  # The visualizer's routes' answers (Overworld.Web.Inspect): an entity's whole state, a debug
  # zone's history range and past states equal to Overworld.Zone.state_at/2, its rewind.
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Test.Game
  alias Overworld.Web.Inspect
  alias Overworld.Zone

  defp start(opts) do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(
        Game,
        Game.zone_options(300, [id: id, clock: :manual, workers: 2, keyframe_ticks: 10] ++ opts)
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  defp body({status, _headers, body}), do: {status, :jiffy.decode(body, [:return_maps])}

  test "an entity: every field in metres and printed terms, its cell; unknown ids 404" do
    zone = start([])
    {:ok, _} = Zone.tick_now(zone, 3)
    e = Zone.entity(zone, 7)

    assert {200, json} = body(Inspect.show_entity(zone, "7"))
    assert json["id"] == 7
    # (No wire: the template is the kind.)
    assert json["template"] == Atom.to_string(entity(e, :kind))
    assert json["kind"] == json["template"]
    assert json["state"]["x"] == entity(e, :x) / 1024
    assert json["state"]["y"] == entity(e, :y) / 1024

    assert json["cell"] ==
             Overworld.Spatial.Grid.key(Zone.config(zone).grid, entity(e, :x), entity(e, :y))

    assert json["zone"] == inspect(zone)

    assert {404, %{"error" => "not_found"}} = body(Inspect.show_entity(zone, "999999"))
    assert {400, %{"error" => "invalid_request"}} = body(Inspect.show_entity(zone, "x7"))
    assert {400, _} = body(Inspect.show_entity(zone, "0"))
  end

  test "with a wire, an entity's template is its kind's template (as the handshake names it), and its kind" do
    zone = start(wire: Overworld.Test.Game.Wire, history: 100)
    {:ok, 5} = Zone.tick_now(zone, 5)

    # Critters of both kinds are one template, `critter` (kinds beetle and mouse).
    assert {200, %{"template" => "critter", "kind" => "mouse"}} =
             body(Inspect.show_entity(zone, "4"))

    assert {200, %{"template" => "critter", "kind" => "beetle"}} =
             body(Inspect.show_entity(zone, "7"))

    assert {200, %{"tick" => 5, "entities" => list}} =
             body(Inspect.history_state(zone, %{"tick" => "5"}))

    assert length(list) == 300

    for e <- list do
      kind = if rem(e["id"], 4) == 0, do: "mouse", else: "beetle"
      assert {e["template"], e["kind"]} == {"critter", kind}
    end
  end

  test "the history's range and a past tick's entities, as state_at/2 replays them" do
    zone = start(debug: true, history: 100)
    {:ok, 40} = Zone.tick_now(zone, 40)

    assert {200, %{"oldest" => oldest, "newest" => 40, "debug" => true}} =
             body(Inspect.history_range(zone))

    assert oldest <= 30

    assert {200, %{"tick" => 33, "entities" => list}} =
             body(Inspect.history_state(zone, %{"tick" => "33"}))

    {:ok, cells, _} = Zone.state_at(zone, 33)

    replayed =
      for {_, es} <- cells,
          e <- es,
          do: {entity(e, :id), entity(e, :x) / 1024, entity(e, :y) / 1024}

    assert Enum.sort(for e <- list, do: {e["id"], e["x"], e["y"]}) == Enum.sort(replayed)
    assert length(list) == 300

    assert {409, %{"error" => "out_of_range"}} =
             body(Inspect.history_state(zone, %{"tick" => "4000"}))

    assert {400, _} = body(Inspect.history_state(zone, %{"tick" => "-1"}))
    assert {400, _} = body(Inspect.history_state(zone, %{}))
  end

  test "rewind: a debug zone goes back; others are refused with the reason" do
    zone = start(debug: true, history: 100)
    {:ok, 30} = Zone.tick_now(zone, 30)
    hash = Zone.state_hash(zone)
    {:ok, 40} = Zone.tick_now(zone, 10)

    ExUnit.CaptureLog.capture_log(fn ->
      assert {200, %{"tick" => 30}} = body(Inspect.rewind(zone, %{"tick" => 30}))
    end)

    assert Zone.state_hash(zone) == hash

    plain = start(history: 100)
    {:ok, 20} = Zone.tick_now(plain, 20)
    assert {409, %{"error" => "not_debug"}} = body(Inspect.rewind(plain, %{"tick" => 15}))
    assert {400, _} = body(Inspect.rewind(plain, %{"tick" => "soon"}))

    none = start(history: 0)
    assert {409, %{"error" => "no_history"}} = body(Inspect.history_range(none))
  end
end

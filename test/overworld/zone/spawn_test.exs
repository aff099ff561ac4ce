defmodule Overworld.Zone.SpawnTest do
  use ExUnit.Case, async: true
  doctest Overworld.Zone.Spawn

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone.{Config, Spawn}

  setup do
    {:ok, config: Config.new!(Overworld.Test.ProbeZone, id: :spawn_test, size: {10, 10}, seed: 5)}
  end

  test "defaults, clamping and the entity's generator", %{config: config} do
    {:ok, e} = Spawn.build(config, %{x: 1, y: 20_000, heading: -1, data: {1, 2}}, 3, "ann")
    assert entity(e, :y) == 10 * 1024
    assert entity(e, :heading) == 65535
    assert entity(e, :rng) == Overworld.Random.seed_for(5, 3)
    assert entity(e, :owner) == "ann"
    assert entity(e, :data) == {1, 2}
    {:ok, e} = Spawn.build(config, [x: 1, y: 1, rng: 0], 3, nil)
    assert entity(e, :rng) == Overworld.Random.seed_for(5, 3)
    {:ok, e} = Spawn.build(config, [x: 1, y: 1, rng: 42], 3, nil)
    assert entity(e, :rng) == 42
  end

  test "bad specs are errors, never crashes", %{config: config} do
    for spec <- [:nope, [1, 2], [x: "1", y: 1], %{"x" => 1, "y" => 2}, [x: 1, y: 1, id: 9]] do
      assert {:error, _} = Spawn.build(config, spec, 1, nil)
    end
  end

  test "with a wire, an entity that it cannot encode is refused with the error" do
    config =
      Config.new!(Overworld.Test.ProbeZone,
        id: :spawn_wire_test,
        size: {10, 10},
        wire: Overworld.Template.Test.Wire
      )

    assert {:ok, _} = Spawn.build(config, [kind: :walker, x: 1, y: 1, state: :idle], 1, nil)
    # Kinds without a template are not replicated: anything goes.
    assert {:ok, _} = Spawn.build(config, [kind: :rock, x: 1, y: 1, state: 1.5], 1, nil)

    assert Spawn.build(config, [kind: :walker, x: 1, y: 1], 1, nil) ==
             {:error,
              {:invalid_field,
               "template :walker, field :state: expected one of [:idle, :wander, :flee, :chase], got: nil"}}

    assert Spawn.build(config, [kind: :thing, x: 1, y: 1, state: 1, data: {1.5, 2}], 1, nil) ==
             {:error,
              {:invalid_field,
               "template :everything, field :level: expected an integer, got: 1.5"}}
  end
end

defmodule Overworld.World.ShadowsTest do
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  alias Overworld.Test.Prop
  alias Overworld.World.{Layout, Shadows}

  doctest Overworld.World.Shadows

  test "split: an entity goes to exactly the neighbours within the margin, as Layout.near says" do
    l = Layout.new!(size: {300, 300}, cell_size: 12, zones: {3, 3})

    Prop.check(
      :proper.forall(
        :proper_types.list(
          {:proper_types.integer(0, 300 * 1024), :proper_types.integer(0, 300 * 1024)}
        ),
        fn points ->
          es = for {{x, y}, i} <- Enum.with_index(points, 1), do: entity(id: i, x: x, y: y)
          margin = 14.2
          split = Shadows.split(l, {1, 1}, es, margin)

          Enum.all?(es, fn e ->
            expected = Layout.near(l, {1, 1}, entity(e, :x) / 1024, entity(e, :y) / 1024, margin)
            got = for {n, list} <- split, e in list, do: n
            Enum.sort(got) == Enum.sort(expected)
          end) and Enum.all?(split, fn {_, list} -> list != [] end)
        end
      ),
      100
    )
  end

  test "decode refuses payloads that are not shadows" do
    for bad <- [
          :erlang.term_to_binary({:shadows, -1, []}),
          :erlang.term_to_binary({:shadows, 3, [:not_an_entity]}),
          :erlang.term_to_binary({:other, 3, []}),
          <<131, 100, 0>>
        ] do
      assert Shadows.decode(bad) == {:error, :bad_shadows}
    end
  end
end

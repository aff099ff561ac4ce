defmodule Overworld.Operators.ZonesTest do
  use ExUnit.Case, async: true
  alias Overworld.Operators.Zones
  doctest Zones

  test "refs: stable, URL-safe, 16 characters, one per id" do
    ids = [:arena, {:world, "w", {0, 1}}, "a string", 42, {:arena, make_ref()}]
    refs = Enum.map(ids, &Zones.ref/1)
    assert refs == Enum.map(ids, &Zones.ref/1)
    assert Enum.all?(refs, &Zones.ref?/1)
    assert length(Enum.uniq(refs)) == length(ids)
    refute Zones.ref?("../../etc/passwd")
    refute Zones.ref?(:arena)
  end
end

defmodule Overworld.Cluster.PlacementTest do
  use ExUnit.Case, async: true
  doctest Overworld.Cluster.Placement

  alias Overworld.Cluster.Placement
  alias Overworld.Test.Prop

  @zones for c <- 0..5, r <- 0..5, do: {"world", {c, r}}

  defp nodes(n), do: for(i <- 1..n, do: :"overworld#{i}@host")

  # A set of 1..8 nodes out of 12 (names may repeat in the list: they count once).
  defp node_set do
    :proper_types.non_empty(:proper_types.list(:proper_types.integer(1, 12)))
  end

  defp as_nodes(ints), do: Enum.map(ints, &:"overworld#{&1}@host")

  test "a node joining takes only the zones for which it weighs most; one leaving gives only its own" do
    property =
      :proper.forall({node_set(), :proper_types.integer(13, 20)}, fn {ints, extra} ->
        before = Enum.uniq(as_nodes(ints))
        joined = :"overworld#{extra}@host"
        after_join = before ++ [joined]
        moved = Placement.moves(@zones, before, after_join)

        # Every zone that moved went to the new node; every zone it now homes moved.
        joins_ok =
          Enum.all?(moved, fn {_z, _from, to} -> to == joined end) and
            length(moved) == length(Placement.homed_on(@zones, joined, after_join))

        # It leaves again: exactly those zones go back where they were.
        back = Placement.moves(@zones, after_join, before)

        leave_ok = Enum.sort(for {z, from, to} <- back, do: {z, to, from}) == Enum.sort(moved)

        joins_ok and leave_ok
      end)

    Prop.check(property, 300)
  end

  test "the order is the same whatever the order of the list, home first and no node twice" do
    property =
      :proper.forall(node_set(), fn ints ->
        nodes = as_nodes(ints)

        Enum.all?(@zones, fn z ->
          order = Placement.order(z, nodes)

          order == Placement.order(z, Enum.shuffle(nodes)) and
            order == Enum.uniq(order) and Enum.sort(order) == Enum.sort(Enum.uniq(nodes)) and
            hd(order) == Placement.home(z, nodes) and
            Placement.replica(z, nodes) == Enum.at(order, 1)
        end)
      end)

    Prop.check(property, 200)
  end

  test "zones spread over the nodes" do
    zones = for c <- 0..29, r <- 0..29, do: {"big", {c, r}}
    counts = Enum.frequencies(Enum.map(zones, &Placement.home(&1, nodes(6))))
    assert map_size(counts) == 6
    # 900 zones over 6 nodes: 150 each on average; none far from it.
    assert Enum.all?(Map.values(counts), &(&1 in 100..200)), inspect(counts)
  end

  test "a node leaving moves its zones to the next in each zone's order, nothing else" do
    six = nodes(6)
    gone = Enum.at(six, 2)
    five = six -- [gone]

    for {z, from, to} <- Placement.moves(@zones, six, five) do
      assert from == gone
      assert to == Placement.replica(z, six)
    end

    assert Placement.moves(@zones, six, five) != []
  end
end

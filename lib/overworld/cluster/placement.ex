defmodule Overworld.Cluster.Placement do
  @moduledoc """
  Where a zone runs in a cluster: rendezvous (highest random weight) hashing of the zone's id
  over the live nodes.

  Every node computes the same answer from the same list of nodes, with no process to ask:
  each node gets a weight for the zone (a hash of the pair, the same on every machine and
  OTP release: `:erlang.phash2/2`), and the zone's **home** is the node of the highest weight;
  the order of the others is the order of its replicas (the first is where its snapshots and
  journal are copied). A node joining takes the zones for which it weighs most, and only
  those; a node leaving gives each of its zones to the node next in that zone's order. Ties
  (equal weights) go to the smaller node name, so the order is total.

      iex> nodes = [:"a@h", :"b@h", :"c@h"]
      iex> home = Overworld.Cluster.Placement.home({"goblins", {0, 0}}, nodes)
      iex> home in nodes
      true
      iex> Overworld.Cluster.Placement.home({"goblins", {0, 0}}, Enum.reverse(nodes)) == home
      true
      iex> Overworld.Cluster.Placement.home({"goblins", {0, 0}}, [])
      nil
  """

  @range 4_294_967_296

  @doc """
  The nodes in the zone's order: its home first, then its replicas. The order of `nodes` does
  not matter; duplicates count once.

      iex> Overworld.Cluster.Placement.order(:z, [:"b@h", :"a@h"]) |> Enum.sort()
      [:"a@h", :"b@h"]
  """
  @spec order(term, [node]) :: [node]
  def order(zone, nodes) do
    nodes
    |> Enum.uniq()
    |> Enum.map(&{-weight(zone, &1), &1})
    |> Enum.sort()
    |> Enum.map(&elem(&1, 1))
  end

  @doc "The zone's home node among `nodes` (nil when there is none)."
  @spec home(term, [node]) :: node | nil
  def home(_zone, []), do: nil

  def home(zone, nodes) do
    {_, node} = nodes |> Enum.map(&{-weight(zone, &1), &1}) |> Enum.min()
    node
  end

  @doc """
  The zone's replica: the node after its home in its order (nil on a node of its own).

      iex> Overworld.Cluster.Placement.replica(:z, [:"a@h"])
      nil
  """
  @spec replica(term, [node]) :: node | nil
  def replica(zone, nodes) do
    case order(zone, nodes) do
      [_home, next | _] -> next
      _ -> nil
    end
  end

  @doc """
  The zones whose home differs between two lists of live nodes, `[{zone, from, to}]` (`from`
  or `to` nil when there was, or is, no node at all).

      iex> Overworld.Cluster.Placement.moves([:z], [:"a@h"], [:"a@h"])
      []
      iex> Overworld.Cluster.Placement.moves([:z], [], [:"a@h"])
      [{:z, nil, :"a@h"}]
  """
  @spec moves([term], [node], [node]) :: [{term, node | nil, node | nil}]
  def moves(zones, before, now) do
    for zone <- zones,
        {from, to} <- [{home(zone, before), home(zone, now)}],
        from != to,
        do: {zone, from, to}
  end

  @doc """
  The zones of `zones` whose home is `node` among `nodes`.

      iex> Overworld.Cluster.Placement.homed_on([:x, :y], :"a@h", [:"a@h"])
      [:x, :y]
  """
  @spec homed_on([term], node, [node]) :: [term]
  def homed_on(zones, node, nodes), do: Enum.filter(zones, &(home(&1, nodes) == node))

  # The weight of a node for a zone: a 32-bit hash of the pair, portable across machines and
  # releases.
  defp weight(zone, node), do: :erlang.phash2({zone, node}, @range)
end

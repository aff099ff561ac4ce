defmodule Overworld.Zone.Players do
  @moduledoc false
  # Which player controls which entity (its avatar). Workers report avatars that game code
  # despawned: their players leave.

  defstruct by_player: %{}, by_entity: %{}

  @type t :: %__MODULE__{by_player: map, by_entity: map}

  @doc """
  Adds a player controlling entity `id`.

      iex> alias Overworld.Zone.Players
      iex> p = Players.add(%Players{}, "ann", 7)
      iex> {Players.joined?(p, "ann"), Players.entity(p, "ann"), Players.player(p, 7)}
      {true, 7, "ann"}
  """
  @spec add(t, term, pos_integer) :: t
  def add(%__MODULE__{} = p, player, id) do
    %{
      p
      | by_player: Map.put(p.by_player, player, id),
        by_entity: Map.put(p.by_entity, id, player)
    }
  end

  @spec joined?(t, term) :: boolean
  def joined?(%__MODULE__{by_player: m}, player), do: is_map_key(m, player)

  @doc "The entity of a player, or nil."
  @spec entity(t, term) :: pos_integer | nil
  def entity(%__MODULE__{by_player: m}, player), do: Map.get(m, player)

  @doc "The player of an entity, or nil."
  @spec player(t, pos_integer) :: term | nil
  def player(%__MODULE__{by_entity: m}, id), do: Map.get(m, id)

  @doc """
  Removes a player (by player).

      iex> alias Overworld.Zone.Players
      iex> p = Players.add(%Players{}, "ann", 7) |> Players.remove("ann")
      iex> {Players.joined?(p, "ann"), Players.player(p, 7)}
      {false, nil}
  """
  @spec remove(t, term) :: t
  def remove(%__MODULE__{} = p, player) do
    id = Map.get(p.by_player, player)
    %{p | by_player: Map.delete(p.by_player, player), by_entity: Map.delete(p.by_entity, id)}
  end

  @doc """
  Applies a worker's report of avatars that are gone (despawned by game code): their players
  are removed, and returned.

      iex> alias Overworld.Zone.Players
      iex> p = %Players{} |> Players.add("ann", 7) |> Players.add("bob", 8)
      iex> {gone, p} = Players.report(p, [8])
      iex> {gone, Players.joined?(p, "ann"), Players.joined?(p, "bob")}
      {["bob"], true, false}
  """
  @spec report(t, [pos_integer]) :: {[term], t}
  def report(p, []), do: {[], p}

  def report(%__MODULE__{} = p, gone) do
    players = for id <- gone, player = Map.get(p.by_entity, id), player != nil, do: player
    {players, Enum.reduce(players, p, &remove(&2, &1))}
  end

  @doc "The number of players."
  @spec count(t) :: non_neg_integer
  def count(%__MODULE__{by_player: m}), do: map_size(m)

  @doc "The players, as a map player => entity id."
  @spec to_map(t) :: map
  def to_map(%__MODULE__{by_player: m}), do: m
end

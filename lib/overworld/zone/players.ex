defmodule Overworld.Zone.Players do
  @moduledoc false
  # Which player controls which entity, and which bucket worker holds that entity (so the
  # server routes each input to one worker). Workers report player entities that move to
  # another worker or disappear.

  defstruct by_player: %{}, by_entity: %{}, worker: %{}

  @type t :: %__MODULE__{by_player: map, by_entity: map, worker: map}

  @doc """
  Adds a player controlling entity `id`, held by `worker`.

      iex> alias Overworld.Zone.Players
      iex> p = Players.add(%Players{}, "ann", 7, 1)
      iex> {Players.joined?(p, "ann"), Players.entity(p, "ann"), Players.worker(p, 7)}
      {true, 7, 1}
  """
  @spec add(t, term, pos_integer, non_neg_integer) :: t
  def add(%__MODULE__{} = p, player, id, worker) do
    %{
      p
      | by_player: Map.put(p.by_player, player, id),
        by_entity: Map.put(p.by_entity, id, player),
        worker: Map.put(p.worker, id, worker)
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

  @doc "The worker holding a player's entity, or nil."
  @spec worker(t, pos_integer) :: non_neg_integer | nil
  def worker(%__MODULE__{worker: m}, id), do: Map.get(m, id)

  @doc """
  Removes a player (by player).

      iex> alias Overworld.Zone.Players
      iex> p = Players.add(%Players{}, "ann", 7, 1) |> Players.remove("ann")
      iex> {Players.joined?(p, "ann"), Players.worker(p, 7)}
      {false, nil}
  """
  @spec remove(t, term) :: t
  def remove(%__MODULE__{} = p, player) do
    id = Map.get(p.by_player, player)

    %{
      p
      | by_player: Map.delete(p.by_player, player),
        by_entity: Map.delete(p.by_entity, id),
        worker: Map.delete(p.worker, id)
    }
  end

  @doc """
  Applies a worker's report: entities that moved to another worker, and entities that are gone
  (despawned by game code), whose players are removed. Returns the removed players too.

      iex> alias Overworld.Zone.Players
      iex> p = %Players{} |> Players.add("ann", 7, 0) |> Players.add("bob", 8, 0)
      iex> {gone, p} = Players.report(p, [{7, 1}], [8])
      iex> {gone, Players.worker(p, 7), Players.joined?(p, "bob")}
      {["bob"], 1, false}
  """
  @spec report(t, [{pos_integer, non_neg_integer}], [pos_integer]) :: {[term], t}
  def report(p, [], []), do: {[], p}

  def report(%__MODULE__{} = p, moves, gone) do
    worker =
      Enum.reduce(moves, p.worker, fn {id, w}, acc ->
        if is_map_key(acc, id), do: Map.put(acc, id, w), else: acc
      end)

    players = for id <- gone, player = Map.get(p.by_entity, id), player != nil, do: player
    {players, Enum.reduce(players, %{p | worker: worker}, &remove(&2, &1))}
  end

  @doc "The number of players."
  @spec count(t) :: non_neg_integer
  def count(%__MODULE__{by_player: m}), do: map_size(m)

  @doc "The players, as a map player => entity id."
  @spec to_map(t) :: map
  def to_map(%__MODULE__{by_player: m}), do: m
end

defmodule Overworld.Match.Relay do
  @moduledoc """
  The relayed match (what a client creates without naming a handler, and what the
  matchmaker makes when no handler is set): the server runs no game logic, it passes each
  player's messages on to every other player, batched per tick (30 a second). Params:
  `"max_size"` (players at most, 1..64, default 16; more are rejected with "full").
  """
  @behaviour Overworld.Match

  @impl true
  def init(params) do
    max = Map.get(params, "max_size", 16)

    if is_integer(max) and max in 1..64,
      do: {:ok, %{max: max, players: MapSet.new()}, 30, %{"relayed" => true}},
      else: {:error, "max_size: expected an integer in 1..64"}
  end

  @impl true
  def join_attempt(_p, _meta, s) do
    if MapSet.size(s.players) < s.max, do: {:accept, s}, else: {:reject, "full", s}
  end

  @impl true
  def join(ps, s),
    do: {:ok, %{s | players: Enum.reduce(ps, s.players, &MapSet.put(&2, &1.user_id))}}

  @impl true
  def leave(ps, s),
    do: {:ok, %{s | players: Enum.reduce(ps, s.players, &MapSet.delete(&2, &1.user_id))}}

  @impl true
  def loop(_tick, messages, s) do
    {:ok, s,
     for(
       m <- messages,
       do:
         {:broadcast, m.op, m.data, MapSet.to_list(MapSet.delete(s.players, m.sender)), m.sender}
     )}
  end

  @impl true
  def terminate(_grace, s), do: {:ok, s}

  @impl true
  def signal(_data, s), do: {:reply, nil, s}
end

defmodule Overworld.Zone.Rewind do
  @moduledoc false
  # Debug zones going back in ticks (`Overworld.Zone.rewind/2`), as functions over the zone
  # server's state (`Overworld.Zone.State`): the workers start over from a past state that
  # `Overworld.Zone.History` replayed from its keyframe; players whose avatar did not exist
  # then leave; the history starts again and observers start over from a keyframe. A rewind
  # asked for while a tick runs waits for the tick's end (`pending/1`).

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Zone.{Dispatch, Joins, Memory, Players, Recovery, Server, State}

  @doc "Goes back to `tick` (entities and game state of that tick) and answers `from`."
  @spec run(State.t(), GenServer.from(), non_neg_integer, [Overworld.Entity.t()], term) ::
          State.t()
  def run(st, from, tick, entities, game) do
    st = %{st | epoch: :erlang.unique_integer([:positive, :monotonic])}
    Recovery.attach(st, false)
    ids = MapSet.new(entities, &entity(&1, :id))

    st =
      Enum.reduce(Players.to_map(st.players), st, fn {player, id}, st ->
        if MapSet.member?(ids, id), do: st, else: Joins.drop(st, player, id)
      end)

    players =
      Enum.reduce(entities, st.players, fn e, acc ->
        case entity(e, :owner) do
          nil -> acc
          owner -> Players.add(acc, owner, entity(e, :id))
        end
      end)

    Memory.forget_history(st.memory)
    State.forget_wire_ticks(st)
    # Inputs sent before the rewind do not apply to the past; the players it brings back are
    # remembered (their inputs find them again, a restarted server keeps them).
    State.forget_inputs(st, false)

    for {player, id} <- Players.to_map(players),
        do: Memory.put_player(st.memory, player, id, Map.get(st.sessions, player))

    st = %{st | tick: tick, game: game, players: players, spawns: entities, despawns: []}
    st = st |> Dispatch.tick(tick, false) |> Server.await_load()

    Logger.warning(
      "zone #{inspect(st.config.id)} rewound to tick #{tick} (#{length(entities)} entities)"
    )

    # Observers start over: the ticks went back.
    for pid <- Map.keys(st.subscribers), do: send(pid, {:overworld_rewound, st.config.id})
    GenServer.reply(from, {:ok, tick})
    st
  end

  @doc """
  Rewinds asked for during the tick that just ended: the first one runs, the later ones are
  answered `{:error, :superseded}`.
  """
  @spec pending(State.t()) :: State.t()
  def pending(%State{rewinds: []} = st), do: st

  def pending(st) do
    [{from, {:rewind, tick, entities, game}} | rest] = Enum.reverse(st.rewinds)
    for {f, _} <- rest, do: GenServer.reply(f, {:error, :superseded})
    run(%{st | rewinds: []}, from, tick, entities, game)
  end
end

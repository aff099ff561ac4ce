defmodule Overworld.Zone.Actions do
  @moduledoc false
  # What the zone server's game callbacks answer, applied to the server's state
  # (`Overworld.Zone.State`): the common result shapes `{:ok, state}` and
  # `{:ok, state, actions}`, and the actions (spawn, despawn, durable, send). Calls into game
  # code go through `Overworld.Zone.Callbacks`, which catches their failures; an invalid
  # answer is reported the same way and the zone keeps its previous game state.

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone.{Callbacks, Durable, Players, Spawn, State}

  @doc "Runs a server-side callback of the zone module and applies its common result."
  @spec run(State.t(), atom, [term]) :: State.t()
  def run(st, callback, args), do: result(st, callback, Callbacks.call(st, callback, args))

  @doc "Applies a callback's common result (see `Overworld.Zone.Callbacks.call/3`)."
  @spec result(State.t(), atom, {:ok, term} | {:error, atom, term, list}) :: State.t()
  def result(st, callback, result) do
    case result do
      {:ok, {:ok, game}} ->
        %{st | game: game}

      {:ok, {:ok, game, actions}} when is_list(actions) ->
        perform(%{st | game: game}, actions, callback)

      {:ok, other} ->
        bad_return(st, callback, other)

      {:error, _, _, _} ->
        st
    end
  end

  @doc "Applies a callback's actions, in order."
  @spec perform(State.t(), list, atom) :: State.t()
  def perform(st, actions, callback) do
    Enum.reduce(actions, st, fn
      {:spawn, specs}, st ->
        case build_all(st, Spawn.specs(specs), nil) do
          {:ok, _entities, st} -> st
          {:error, reason} -> failed(st, callback, {:bad_spawn, reason})
        end

      {:despawn, ids}, st ->
        %{st | despawns: Enum.reverse(List.wrap(ids), st.despawns)}

      {:durable, event}, st ->
        Durable.events(st, State.next_tick(st), [event])

      {:send, player, payload}, st when is_binary(payload) ->
        # (A player whose avatar crossed into a neighbour zone still gets what we send it:
        # a durable event acknowledged after it left, say.)
        case st.sessions do
          %{^player => pid} -> send(pid, {:overworld_send, payload})
          _ -> Overworld.Zone.Crossings.send_moved(st, player, payload)
        end

        st

      other, st ->
        failed(st, callback, {:bad_action, other})
    end)
  end

  @doc """
  `init/1`'s actions. In a world of zones every zone runs `init/1`, which describes the whole
  world: the k-th entity its spawns list (counting every `{:spawn, ...}` action in order) gets
  id k in every zone, and each zone keeps those standing in its region. So the zones agree on
  ids without a word (unique world-wide, the same as one zone covering the map would give), and
  each zone's own ids start past them, in its id space.
  """
  #
  # With `spawns?` false (a zone of a world that lost its entities and starts again), none is
  # spawned: only the game state and the other actions.
  @spec perform_init(State.t(), list, boolean) :: State.t()
  def perform_init(st, actions, spawns? \\ true)

  def perform_init(%State{config: %{world: nil}} = st, actions, _spawns?),
    do: perform(st, actions, :init)

  def perform_init(%State{config: c} = st, actions, spawns?) do
    {actions, total} =
      Enum.map_reduce(actions, 0, fn
        {:spawn, specs}, k ->
          specs = Spawn.specs(specs)
          numbered = Enum.with_index(specs, k + 1)
          ours = if spawns?, do: Enum.filter(numbered, &ours?(c, elem(&1, 0))), else: []
          {{:spawn_ids, ours}, k + length(specs)}

        other, k ->
          {other, k}
      end)

    st = %{st | next_id: max(st.next_id, Overworld.Zone.Ids.from(c.id_space, total + 1))}

    Enum.reduce(actions, st, fn
      {:spawn_ids, numbered}, st ->
        {specs, ids} = Enum.unzip(numbered)

        case build_with(st, specs, ids, nil, st.next_id) do
          {:ok, _entities, st} -> st
          {:error, reason} -> failed(st, :init, {:bad_spawn, reason})
        end

      action, st ->
        perform(st, [action], :init)
    end)
  end

  # Whether a spec of init/1 stands in the zone's region (a spec without integer coordinates is
  # the first region's, which reports it).
  defp ours?(%{world: place, grid: g}, spec) do
    fields = if is_map(spec) or Keyword.keyword?(spec), do: Map.new(spec), else: %{}

    case fields do
      %{x: x, y: y} when is_integer(x) and is_integer(y) ->
        col = x |> max(0) |> min(g.width) |> div(g.cell)
        row = y |> max(0) |> min(g.height) |> div(g.cell)
        Overworld.World.Place.inside?(place, col, row)

      _ ->
        Overworld.World.Layout.region(place.layout, place.id).index == 0
    end
  end

  @doc """
  Builds entities from specs and queues them (visible after the next tick); all or nothing.
  With an `owner` (a joining player), the entities are that player's avatars.
  """
  @spec build_all(State.t(), [term], term) ::
          {:ok, [Overworld.Entity.t()], State.t()} | {:error, term}
  def build_all(st, specs, owner) do
    {ids, next_id} = Overworld.Zone.Ids.take(st.config.id_space, st.next_id, length(specs))
    build_with(st, specs, ids, owner, next_id)
  end

  defp build_with(st, specs, ids, owner, next_id) do
    if st.entity_count + length(st.spawns) + length(specs) > st.config.max_entities do
      {:error, :max_entities}
    else
      specs
      |> Enum.zip(ids)
      |> Enum.reduce_while({:ok, []}, fn {spec, id}, {:ok, acc} ->
        case Spawn.build(st.config, spec, id, owner) do
          {:ok, e} -> {:cont, {:ok, [e | acc]}}
          {:error, _} = err -> {:halt, err}
        end
      end)
      |> case do
        {:ok, rev} -> {:ok, Enum.reverse(rev), queue_spawns(st, rev, owner, next_id)}
        err -> err
      end
    end
  end

  defp queue_spawns(st, rev, owner, next_id) do
    players =
      if owner == nil,
        do: st.players,
        else: Enum.reduce(rev, st.players, &Players.add(&2, owner, entity(&1, :id)))

    %{st | spawns: rev ++ st.spawns, next_id: next_id, players: players}
  end

  @doc "Reports an invalid answer of game code; the state stays as it was."
  @spec bad_return(State.t(), atom, term) :: State.t()
  def bad_return(st, callback, value) do
    Callbacks.bad_return(st, callback, value)
    st
  end

  @doc "Reports a failed action of game code; the state stays as it was."
  @spec failed(State.t(), atom, term) :: State.t()
  def failed(st, callback, reason) do
    Callbacks.failed(st, callback, :error, reason, nil)
    st
  end
end

defmodule Overworld.Test.Counter do
  @moduledoc false
  # A zone that counts: one entity (kind `:counter`) whose `data` goes up by one every tick,
  # each step a durable event `{:count, zone, n}`. Once journaled (replicated: on both
  # copies), `c:handle_durable/2` tells the process given as `args: [to: pid]`
  # `{:acked, zone, n, node}`. Replaying sets the counter to at least `n`: a recovered zone
  # whose counter is below an acknowledged `n` lost an acknowledged event.
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]

  @impl true
  def init(args) do
    # (In the middle of the zone's world.)
    {:ok, %{to: Keyword.get(args, :to)}, [{:spawn, [[kind: :counter, x: 512, y: 512, data: 0]]}]}
  end

  @impl true
  def handle_entity(entity(kind: :counter) = e, _view, ctx) do
    n = entity(e, :data) + 1
    {:ok, entity(e, data: n), [{:count, ctx.zone, n}]}
  end

  def handle_entity(e, _view, _ctx), do: {:ok, e}

  @impl true
  def handle_durable({:count, zone, n}, %{to: to} = state) do
    if to, do: send(to, {:acked, zone, n, node()})
    {:ok, state}
  end

  @impl true
  def replay_durable({:count, _zone, n}, entities) do
    Map.new(entities, fn
      {id, entity(kind: :counter) = e} -> {id, entity(e, data: max(entity(e, :data), n))}
      other -> other
    end)
  end

  @doc "The counter of a zone's entities (nil when it has none)."
  def count(entities) do
    Enum.find_value(entities, fn
      entity(kind: :counter) = e -> entity(e, :data)
      _ -> nil
    end)
  end
end

defmodule Overworld.Test.ProbeZone do
  @moduledoc false
  # A zone for tests: it reports its callbacks to the process in `args[:report]` and can be told
  # to fail. Entities move by their velocity; a controlled entity takes its velocity from its
  # input `{vx, vy}`.
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  @impl true
  def init(args) do
    args = Map.new(args)
    report(args, {:init, args[:id]})
    {:ok, args, List.wrap(args[:spawn] && {:spawn, args[:spawn]})}
  end

  @impl true
  def handle_join(player, meta, state) do
    report(state, {:join, player, meta})

    case meta do
      :reject -> {:reject, :no_room, state}
      %{x: x, y: y} -> {:ok, [kind: :player, x: x, y: y], state}
      _ -> {:ok, [kind: :player, x: 0, y: 0], state}
    end
  end

  @impl true
  def handle_leave(player, reason, state) do
    report(state, {:leave, player, reason})
    {:ok, state}
  end

  @impl true
  def handle_event(player, payload, state) do
    report(state, {:event, player, payload})

    case payload do
      "raise" -> raise "event blew up"
      "spawn" -> {:ok, state, [{:spawn, [kind: :rock, x: 1, y: 1]}]}
      _ -> {:ok, state}
    end
  end

  @impl true
  def handle_tick(ctx, state) do
    report(state, {:tick, ctx.tick})

    cond do
      state[:raise_at] == ctx.tick -> raise "tick #{ctx.tick} blew up"
      state[:sleep] -> Process.sleep(state[:sleep])
      true -> :ok
    end

    case Map.get(state[:actions_at] || %{}, ctx.tick) do
      nil -> {:ok, state}
      actions -> {:ok, state, actions}
    end
  end

  @impl true
  def handle_info(msg, state) do
    report(state, {:info, msg})
    {:ok, state}
  end

  @impl true
  def handle_entity(e, _view, ctx) do
    if entity(e, :kind) == :reporter,
      do: report_pid(entity(e, :data), {:entity, ctx.tick, self()})

    case entity(e, :kind) do
      :bomb when ctx.tick >= 3 -> raise "entity #{entity(e, :id)} blew up"
      :mortal -> :despawn
      :sleeper when ctx.tick >= 2 -> Process.sleep(:infinity)
      :liar -> {:ok, :not_an_entity}
      _ -> {:ok, move(e, ctx)}
    end
  end

  defp move(e, ctx) do
    {vx, vy} =
      case entity(e, :input) do
        {vx, vy} -> {vx, vy}
        _ -> {entity(e, :vx), entity(e, :vy)}
      end

    entity(e,
      vx: vx,
      vy: vy,
      x: entity(e, :x) + div(vx, ctx.tick_rate),
      y: entity(e, :y) + div(vy, ctx.tick_rate)
    )
  end

  defp report(state, msg), do: report_pid(state[:report], msg)
  defp report_pid(pid, msg) when is_pid(pid), do: send(pid, {:probe, msg})
  defp report_pid(_, _), do: :ok
end

defmodule Overworld.Bench.EchoMatch do
  @moduledoc false
  # The match handler of Nakama's match workload (mix overworld.bench.backend) and of the
  # tests: op 1 is an echo (back to its sender), op 2 a broadcast (to every player, the sender
  # named); op 98 sets the label's "round", op 99 raises. Params: "mode" (the label's), "max"
  # players (then "full"), "rate" (ticks a second, default 10).
  @behaviour Overworld.Match

  @impl true
  def init(%{"fail" => true}), do: {:error, "asked to fail"}

  def init(params) do
    label = %{"mode" => Map.get(params, "mode", "echo"), "round" => 0}

    state = %{max: Map.get(params, "max", 10), players: [], ticks: 0, mode: label["mode"]}
    {:ok, state, Map.get(params, "rate", 10), label}
  end

  @impl true
  def join_attempt(_p, %{"refuse" => reason}, s), do: {:reject, reason, s}

  def join_attempt(_p, _meta, s),
    do: if(length(s.players) < s.max, do: {:accept, s}, else: {:reject, "full", s})

  @impl true
  def join(ps, s), do: {:ok, %{s | players: s.players ++ Enum.map(ps, & &1.user_id)}}

  @impl true
  def leave(ps, s), do: {:ok, %{s | players: s.players -- Enum.map(ps, & &1.user_id)}}

  @impl true
  def loop(_tick, messages, s) do
    actions =
      Enum.flat_map(messages, fn
        %{op: 1, data: d, sender: u} -> [{:broadcast, 1, d, [u]}]
        %{op: 2, data: d, sender: u} -> [{:broadcast, 2, d, nil, u}]
        %{op: 98, data: d} -> [{:label, %{"mode" => s.mode, "round" => String.to_integer(d)}}]
        %{op: 99} -> raise "asked to raise"
        _ -> []
      end)

    {:ok, %{s | ticks: s.ticks + 1}, actions}
  end

  @impl true
  def terminate(grace, s), do: {:ok, s, [{:broadcast, 7, "bye in #{grace}"}]}

  @impl true
  def signal("players", s), do: {:reply, s.players, s}
  def signal("stop", s), do: {:reply, :ok, s, [{:kick, s.players}]}
end

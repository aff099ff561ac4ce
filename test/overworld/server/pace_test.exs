defmodule Overworld.Server.PaceTest do
  # The send interval over real sockets: sessions spread their snapshots over the ticks, each
  # snapshot after skipped ticks carries them, the client is told the interval once, inputs
  # are still acknowledged; back to every tick when the interval falls.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Server.Pace

  doctest Overworld.Server.Pace

  setup do
    # The controller off (a huge window): the test sets the interval itself.
    world = start_world(:pace_server, {__MODULE__, :zone}, critters: 200, pace_window: 3_600_000)
    %{world: world, cfg: Overworld.Server.config(:pace_server)}
  end

  # Snapshots of a player until `n` arrived: [{tick, send_interval}].
  defp ticks(player, n, acc \\ [])
  defp ticks(player, 0, acc), do: {Enum.reverse(acc), player}

  defp ticks(player, n, acc) do
    p = snapshots(player, 1)
    ticks(p, n - 1, [{p.view.tick, p.view.send_interval} | acc])
  end

  defp gaps(seen) do
    seen
    |> Enum.map(&elem(&1, 0))
    |> Enum.chunk_every(2, 1, :discard)
    |> Enum.map(fn [a, b] -> b - a end)
  end

  # Past a change (a snapshot may have been on its way), `n` snapshots come `k` ticks apart,
  # each view saying the interval is `k`. Answers the player.
  defp every(p, k, n) do
    p = until_tick(p, p.view.tick + 4)
    {seen, p} = ticks(p, n)
    assert gaps(seen) |> Enum.all?(&(&1 == k)), "ticks #{inspect(seen)}"
    assert Enum.all?(seen, fn {_, i} -> i == k end)
    p
  end

  test "at interval 2 every player gets every other tick, told once; at 1 every tick again",
       %{world: world, cfg: cfg} do
    players = for _ <- 1..12, do: join(world)
    players = Enum.map(players, &snapshots(&1, 3))
    assert Pace.interval(cfg) == 1

    Pace.put(cfg, 2)
    assert Pace.stats(cfg) == %{interval: 2, changes: 1, saturated: false}

    players = Enum.map(players, &every(&1, 2, 12))

    # The sessions spread over both parities (12 users: all on one has odds of 1 in 2,048).
    players = Enum.map(players, &snapshots(&1, 1))
    parities = players |> Enum.map(&rem(&1.view.tick, 2)) |> Enum.uniq()
    assert length(parities) == 2

    Pace.put(cfg, 1)

    Enum.each(players, &every(&1, 1, 6))
  end

  test "at interval 3 a new player is told at once, its view applies every snapshot, its inputs are acknowledged",
       %{world: world, cfg: cfg} do
    Pace.put(cfg, 3)
    p = world |> join() |> snapshots(4)
    assert p.view.send_interval == 3

    # An input (the test game's: raw bytes) is acknowledged in a later snapshot.
    :ok =
      Overworld.Client.send_msg(p.conn, %{
        type: :input,
        seq: 1,
        ack: p.view.tick,
        payload: <<1, 0>>
      })

    p =
      Enum.reduce_while(1..30, p, fn _, p ->
        p = snapshots(p, 1)
        if p.view.input_ack >= 1, do: {:halt, p}, else: {:cont, p}
      end)

    assert p.view.input_ack == 1
    {seen, _} = ticks(p, 5)

    assert gaps(seen) |> Enum.all?(&(&1 == 3)), "ticks #{inspect(seen)}"
  end
end

defmodule Overworld.Server.AdmissionTest do
  # New players are refused at the door (4008, ERROR 8 with the time to wait) when the zone
  # is full or the server saturated; a player resuming its avatar never is.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Server}
  alias Overworld.Server.Pace

  setup do
    world =
      start_world(:admission_server, {__MODULE__, :zone},
        critters: 100,
        max_players: 2,
        retry_after: 7,
        pace_window: 3_600_000
      )

    %{world: world, cfg: Server.config(:admission_server)}
  end

  # HELLO on a new connection of a new (or given) user: the HANDSHAKE, or the refusal.
  defp hello(world, auth \\ nil) do
    auth = auth || auth(world)
    conn = connect(world)

    :ok =
      Client.send_msg(conn, %{
        type: :hello,
        version: Overworld.Protocol.version(),
        token: auth["token"]
      })

    case recv_msg(conn) do
      {%{type: :handshake}, conn} -> {:in, conn, auth}
      {%{type: :error, code: 8, message: m}, conn} -> {:refused, m, expect_close(conn)}
    end
  end

  defp wait_players(zone, n) do
    Enum.reduce_while(1..200, nil, fn _, _ ->
      if Overworld.Zone.metrics(zone).players >= n,
        do: {:halt, :ok},
        else: Process.sleep(10) && {:cont, nil}
    end)
  end

  test "beyond max_players a new player gets 4008 and retry_after; a reconnect within the grace period gets in",
       %{world: world, cfg: cfg} do
    {:in, a, auth_a} = hello(world)
    {:in, _b, _} = hello(world)
    :ok = wait_players(world.zone, 2)

    assert {:refused, "retry_after=7; the zone holds 2 players (at most 2)", {4008, []}} =
             hello(world)

    assert Server.stats(:admission_server).refused_joins == 1

    # The first player's connection drops (no close frame): its avatar waits for it.
    Client.close(a)
    Process.sleep(100)
    assert {:in, _a2, _} = hello(world, auth_a)
    assert Server.stats(:admission_server).refused_joins == 1
    assert Pace.admit(cfg, world.zone) != :ok
  end

  test "a saturated server refuses new players until it is not", %{world: world, cfg: cfg} do
    Pace.saturate(cfg, true)
    assert {:refused, "retry_after=7; the server is saturated" <> _, {4008, []}} = hello(world)
    assert Pace.stats(cfg).saturated
    Pace.saturate(cfg, false)
    assert {:in, _, _} = hello(world)
  end

  test "the longer the server stays saturated, the longer a refused player is told to wait", %{
    world: world,
    cfg: cfg
  } do
    Pace.saturate(cfg, true)
    assert {:refused, "retry_after=7;" <> _, _} = hello(world)
    # Saturated for 25 s without a break: twice doubled.
    Pace.saturate(cfg, true, 25_000)
    assert {:refused, "retry_after=28;" <> _, _} = hello(world)
    # Still saturated: the time it began is kept.
    Pace.saturate(cfg, true)
    assert Pace.retry_after(cfg) == 28
    # A break starts over.
    Pace.saturate(cfg, false)
    Pace.saturate(cfg, true)
    assert Pace.retry_after(cfg) == 7
  end
end

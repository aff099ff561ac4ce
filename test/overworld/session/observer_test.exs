defmodule Overworld.Session.ObserverTest do
  # An operator's observer connection: the whole zone (or world) in view over the players'
  # protocol, at most `observers: [max: n]` at once, watching only.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Accounts.Password
  alias Overworld.Protocol.Snapshot

  @critters 2_000
  @iterations 1_000

  # (`@tag server: [...]`: more options of the server.)
  setup context do
    hash = Password.encode(Password.hash("olga's password", @iterations))
    oleg = Password.encode(Password.hash("oleg's password", @iterations))

    world =
      [
        critters: @critters,
        accounts: [password_iterations: @iterations],
        observers: [max: 2],
        operators: [%{name: "olga", password_hash: hash}, %{name: "oleg", password_hash: oleg}],
        operator_api: [
          audit_file:
            Path.join(
              Overworld.Test.DataDir.path(),
              "audit-observer-#{System.unique_integer([:positive])}.log"
            )
        ]
      ]
      |> Keyword.merge(context[:server] || [])
      |> then(&start_world(:observer_server, {:observer_zone, make_ref()}, &1))

    {:ok, world: Map.put(world, :token, login(world, "olga"))}
  end

  defp login(world, name), do: operator_login(world, name, "#{name}'s password")

  defp observe(world), do: join(world, auth: %{"token" => world.token, "user_id" => "operator"})

  defp seen(player), do: player.view |> Snapshot.View.entities() |> map_size()

  test "an observer sees every entity of the zone; a player only those near it", %{world: world} do
    obs = observe(world)
    assert obs.entity == 0
    player = join(world)

    obs = until_all(obs, @critters + 1, 90)
    player = snapshots(player, 10)
    assert seen(player) < @critters / 2

    # Every entity the zone has.
    assert seen(obs) == Overworld.Zone.count(world.zone)
  end

  test "at most `max` observers at once; a slot frees when its observer goes", %{world: world} do
    a = observe(world)
    _b = observe(world)
    c = connect(world)
    hello(c, world.token)
    assert {4008, _} = expect_close(c)

    Overworld.Client.close(a.conn)

    eventually(fn ->
      d = connect(world)
      hello(d, world.token)
      match?({%{type: :handshake}, _}, recv_msg(d))
    end)
  end

  test "an observer only watches: inputs dropped, events close it with 4002", %{world: world} do
    obs = observe(world)
    dropped = Overworld.Server.stats(world.name).inputs_dropped
    :ok = Overworld.Client.send_msg(obs.conn, %{type: :input, seq: 1, ack: 0, payload: <<0>>})
    eventually(fn -> Overworld.Server.stats(world.name).inputs_dropped == dropped + 1 end)
    obs = snapshots(obs, 2)

    :ok = Overworld.Client.send_msg(obs.conn, %{type: :client_event, seq: 1, payload: "x"})
    assert {4002, [2]} = expect_close(obs.conn)
    # The zone has no player of it, and carries on.
    assert Overworld.Zone.info(world.zone).players == %{}
    player = join(world)
    snapshots(player, 3)
  end

  test "the zone server restarts: the observer goes on from keyframes", %{world: world} do
    obs = observe(world) |> until_all(@critters, 90)
    pid = Overworld.Zone.whereis(world.zone)
    Process.exit(pid, :kill)
    obs = until_tick(obs, obs.view.tick + 5)
    assert seen(until_all(obs, @critters, 90)) == @critters
  end

  test "its operator logs out: the observer is closed (4003), another operator's carries on",
       %{world: world} do
    olga = observe(world) |> snapshots(2)
    oleg = observe(Map.put(world, :token, login(world, "oleg"))) |> snapshots(2)

    {:ok, 200, _, _} =
      Overworld.Client.request(host(), world.port, "POST", "/api/v1/operator/logout", "",
        headers: [{"authorization", "Bearer " <> world.token}]
      )

    assert {4003, [3]} = expect_close(olga.conn)
    snapshots(oleg, 5)

    # The token is refused from then on, for an observer connection too.
    c = connect(world)
    hello(c, world.token)
    assert {4003, [3]} = expect_close(c)
  end

  test "a new password for its operator closes the observer", %{world: world} do
    name = "otto#{System.unique_integer([:positive])}"
    :ok = Overworld.Operators.put(name, "#{name}'s password", iterations: @iterations)
    on_exit(fn -> Overworld.Operators.delete(name) end)
    otto = observe(Map.put(world, :token, login(world, name))) |> snapshots(2)
    :ok = Overworld.Operators.put(name, "a new password", iterations: @iterations)
    assert {4003, [3]} = expect_close(otto.conn)
  end

  # The players' bound (`max_outbound`, 4 KiB here) is below one whole-zone frame (some 8 KB
  # of deltas for 2,000 critters; a 40,000-entity world's keyframe is a megabyte, over the
  # default 256 KiB): the observer has a bound of its own (`observers: [max_outbound: ...]`, default 8 MiB) and is not too slow.
  @tag server: [max_outbound: 4_096]
  test "a whole zone's frames exceed the players' outbound bound: not too slow",
       %{world: world} do
    obs = observe(world) |> until_all(@critters, 90)
    # Reads nothing for a while (a browser busy drawing): the kernel's buffers fill, frames
    # wait in the port, then are skipped; a player would have been closed as too slow.
    Process.sleep(1_500)
    obs = snapshots(obs, 30)
    assert seen(obs) == Overworld.Zone.count(world.zone)
    assert Overworld.Server.stats(world.name).closed_slow == 0
  end

  defp hello(conn, token) do
    :ok =
      Overworld.Client.send_msg(conn, %{
        type: :hello,
        version: Overworld.Protocol.version(),
        token: token
      })
  end

  # Snapshots until the view holds `n` entities (within `tries` snapshots).
  defp until_all(player, n, tries) do
    cond do
      seen(player) >= n -> player
      tries == 0 -> flunk("the observer sees #{seen(player)} entities, expected #{n}")
      true -> player |> snapshots(1) |> until_all(n, tries - 1)
    end
  end
end

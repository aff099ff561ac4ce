defmodule Overworld.SessionTest do
  # Sessions over real sockets: HELLO, snapshots, inputs, reconnects, and every way a client
  # can misbehave at the protocol level. Each misbehaviour test has a witness, a player
  # connected before the bad client, that must keep receiving snapshots that apply.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Server}
  alias Overworld.Auth.Token
  alias Overworld.Protocol.Snapshot.View
  alias Overworld.Test.Game

  @name Overworld.SessionTest.Server

  setup_all do
    log_info()
    :ok
  end

  setup do
    world =
      start_world(@name, {__MODULE__, :critters},
        critters: 400,
        grace_period: 300,
        hello_timeout: 300
      )

    {:ok, world: world, witness: join(world)}
  end

  defp send_hello(conn, token, version \\ Overworld.Protocol.version()),
    do: :ok = Client.send_msg(conn, %{type: :hello, version: version, token: token})

  # The player's own entity in its view: the x value (quantized), or nil.
  defp my_x(p) do
    case View.entities(p.view) do
      %{} = es when is_map_key(es, p.entity) -> es |> Map.fetch!(p.entity) |> elem(1) |> elem(0)
      _ -> nil
    end
  end

  describe "a connection" do
    test "HELLO gets the HANDSHAKE, then a snapshot after every tick", %{world: w} do
      p = join(w)
      assert p.entity > 0
      assert p.handshake.version == 2
      assert p.handshake.tick_rate == 30
      # Sizes in units (1/1024 m); the grid the cell keys count in.
      assert p.handshake.width == Game.side(400)
      assert p.handshake.cell_size == 12 * 1024
      assert p.handshake.cols == div(Game.side(400), 12 * 1024) + 1
      assert p.handshake.rows == p.handshake.cols
      assert length(p.templates) == 2
      assert Enum.map(p.templates, & &1.name) |> Enum.sort() == ["critter", "player"]

      p = snapshots(p, 20)
      # Every snapshot applied on the previous one (checked by `snapshots/2`); the player sees
      # itself and some critters.
      assert my_x(p) != nil
      assert map_size(View.entities(p.view)) > 1
      assert players(w)[p.user] == p.entity
      assert Server.stats(@name).sessions >= 2
    end

    test "inputs are acknowledged and the player walks", %{world: w} do
      p = w |> join() |> snapshots(3)
      x0 = my_x(p)
      assert x0 != nil

      p =
        Enum.reduce(1..15, p, fn seq, p ->
          :ok =
            Client.send_msg(p.conn, %{
              type: :input,
              seq: seq,
              ack: p.view.tick,
              payload: <<127, 0>>
            })

          snapshots(p, 1)
        end)

      p =
        Enum.reduce_while(1..30, p, fn _, p ->
          if p.view.input_ack >= 15, do: {:halt, p}, else: {:cont, snapshots(p, 1)}
        end)

      assert p.view.input_ack == 15
      assert my_x(p) > x0
    end

    test "PING gets PONG with the client's time", %{world: w} do
      p = w |> join() |> snapshots(2)
      :ok = Client.send_msg(p.conn, %{type: :ping, client_time: 987_654_321})
      assert {%{type: :pong, client_time: 987_654_321, server_tick: tick}, p} = next_msg(p)
      assert tick > 0
      # The snapshots around the PONG still apply one after the other.
      snapshots(p, 2)
    end

    test "RESYNC: the next snapshot has baseline 0 and applies on an empty view", %{world: w} do
      p = w |> join() |> snapshots(3)
      :ok = Client.send_msg(p.conn, %{type: :resync, reason: 1, last_tick: p.view.tick})
      # Snapshots already sent still apply; one with baseline 0 arrives soon after.
      fresh =
        Enum.reduce_while(1..20, p, fn _, p ->
          {{:snapshot, snap}, conn} = recv(p.conn)
          <<0x02, rest::binary>> = snap
          {:ok, _tick, rest} = Overworld.Protocol.Codec.read_varint(rest)
          {:ok, baseline, _} = Overworld.Protocol.Codec.read_varint(rest)
          {:ok, view} = Overworld.Protocol.Snapshot.apply(p.view, snap, p.templates)
          p = %{p | conn: conn, view: view}
          if baseline == 0, do: {:halt, {:resynced, p}}, else: {:cont, p}
        end)

      assert {:resynced, p} = fresh
      snapshots(p, 3)
    end

    test "the token may come in the URL, with an empty HELLO token", %{world: w} do
      a = auth(w)
      conn = connect(w, "/ws?token=" <> a["token"])
      send_hello(conn, "")
      assert {%{type: :handshake, entity_id: id}, conn} = recv_msg(conn)
      assert id > 0
      assert players(w)[a["user_id"]] == id
      Client.close(conn)
    end

    test "zone= empty joins nothing: entity 0, no snapshots, PING still answered", %{world: w} do
      a = auth(w)
      conn = connect(w, "/ws?zone=")
      send_hello(conn, a["token"])
      assert {%{type: :handshake, entity_id: 0, templates: []}, conn} = recv_msg(conn)
      refute Map.has_key?(players(w), a["user_id"])
      :ok = Client.send_msg(conn, %{type: :ping, client_time: 5})
      assert {%{type: :pong, client_time: 5}, conn} = recv(conn)
      Client.close(conn)
    end

    test "zone=critters names the zone; an unknown zone answers 404", %{world: w} do
      p = join(w, path: "/ws?zone=critters")
      assert p.entity > 0

      assert {:error, {:status, 404, body}} = Client.connect(host(), w.port, "/ws?zone=elves")
      assert %{"error" => "not_found"} = :jiffy.decode(body, [:return_maps])
    end
  end

  describe "reconnects and endings" do
    test "a reconnect within the grace period resumes the same entity", %{world: w} do
      p = w |> join() |> snapshots(2)
      Client.close(p.conn)
      Process.sleep(50)
      assert players(w)[p.user] == p.entity

      again = join(w, auth: p.auth) |> snapshots(3)
      assert again.entity == p.entity
      assert players(w)[p.user] == p.entity
      # Still there after the first connection's grace period would have ended.
      Process.sleep(400)
      assert players(w)[p.user] == p.entity
      snapshots(again, 2)
    end

    test "reliable messages due while the connection was lost reach the reconnected player, " <>
           "and the zone sends later ones to the new session",
         %{world: w} do
      p = w |> join() |> snapshots(2)
      [{old, _}] = Registry.lookup(Overworld.Registry, {:session, @name, p.user})
      # One on the first connection: seq 1 there.
      send(old, {:overworld_send, "before"})
      assert {%{type: :event, seq: 1, payload: "before"}, p} = next_msg(p)
      Client.close(p.conn)
      eventually(fn -> :sys.get_state(old).phase == :detached end)
      # What the zone sends the player (`{:send, player, payload}`) while nobody is connected.
      send(old, {:overworld_send, "while away 1"})
      send(old, {:overworld_send, "while away 2"})

      again = join(w, auth: p.auth)
      assert again.entity == p.entity
      # Numbered on the new connection, from 1.
      assert {%{type: :event, seq: 1, payload: "while away 1"}, again} = next_msg(again)
      assert {%{type: :event, seq: 2, payload: "while away 2"}, _again} = next_msg(again)

      [{new, _}] = Registry.lookup(Overworld.Registry, {:session, @name, p.user})
      assert new != old
      assert :sys.get_state(Overworld.Zone.whereis(w.zone)).sessions[p.user] == new
    end

    test "a second connection of the user replaces the first (4004) and keeps the entity",
         %{world: w} do
      first = w |> join() |> snapshots(2)
      second = join(w, auth: first.auth)
      assert second.entity == first.entity
      assert {4004, [4]} = expect_close(first.conn)
      snapshots(second, 3)
      assert players(w)[first.user] == first.entity
    end

    test "a connection being closed is replaced too; the counters stay right", %{world: w} do
      # Connections of the tests before this one may still be lingering (1 s after their
      # close): counted from when they are gone.
      Process.sleep(1_100)
      before = Server.stats(@name)
      p = w |> join() |> snapshots(1)

      capture_log(fn ->
        :ok = Client.send_raw(p.conn, Client.frame(2, <<0xEE>>))
        # The close is read but the socket kept open: the server lingers, waiting for it.
        assert {%{type: :error, code: 2}, conn} = recv_msg(p.conn)
        assert {{:close, 4002, _}, _conn} = recv_msg(conn)
        again = join(w, auth: p.auth) |> snapshots(2)
        assert again.entity == p.entity
        send(self(), {:again, again})
      end)

      assert_received {:again, again}
      Process.sleep(1_100)
      s = Server.stats(@name)
      assert s.sessions == before.sessions + 1
      assert s.connections == before.connections + 1
      snapshots(again, 2)
      Client.close(p.conn)
    end

    test "close 1000 from the client: the player leaves the zone at once", %{world: w} do
      p = w |> join() |> snapshots(2)
      assert Map.has_key?(players(w), p.user)
      :ok = Client.send_raw(p.conn, Client.frame(8, <<1000::16>>))
      assert {1000, []} = expect_close(p.conn)
      eventually(fn -> not Map.has_key?(players(w), p.user) end, 200)
    end

    test "a lost connection: the player stays for the grace period, then leaves",
         %{world: w} do
      p = w |> join() |> snapshots(2)
      Client.close(p.conn)
      Process.sleep(100)
      assert Map.has_key?(players(w), p.user)
      eventually(fn -> not Map.has_key?(players(w), p.user) end, 1_000)
    end

    test "no HELLO within hello_timeout: closed with 1008", %{world: w, witness: witness} do
      log =
        capture_log(fn ->
          conn = connect(w)
          assert {1008, []} = expect_close(conn)
        end)

      assert log =~ "no HELLO within 300 ms"
      alive!(witness, w)
    end
  end

  # The close code and the last ERROR code before it, waiting up to `ms` for them.
  defp close_within(conn, ms, error \\ nil) do
    case recv(conn, ms) do
      {{:close, code, _}, conn} -> Client.close(conn) && {code, error}
      {%{type: :error, code: c}, conn} -> close_within(conn, ms, c)
      {{:error, reason}, _} -> flunk("no close frame: #{inspect(reason)}")
      {_other, conn} -> close_within(conn, ms, error)
    end
  end

  describe "the zone stops" do
    test "its players are closed with 4006; inputs sent meanwhile are dropped, no session crashes",
         %{world: w, witness: witness} do
      p = w |> join() |> snapshots(2)
      {:ok, slot} = Overworld.Zone.input_slot(w.zone, p.user)

      log =
        capture_log(fn ->
          stop_supervised!({Overworld.Zone, w.zone})
          # The slot's tables went with the zone: writing answers, never raises.
          assert :ok = Overworld.Zone.put_input(slot, {1, 1}, 99)
          :ok = Client.send_msg(p.conn, %{type: :input, seq: 1, ack: 0, payload: <<1, 1>>})
          # (A session looks for a restarted zone server for 5 s before it gives up: longer on a
          # loaded machine.)
          assert {4006, 6} = close_within(p.conn, 15_000)
          assert {4006, 6} = close_within(witness.conn, 15_000)
        end)

      # (Other tests log crashes of their own processes meanwhile: only ours count.)
      refute log =~ "Overworld.Zone.Inputs.put"
      refute log =~ "Overworld.Session.forward_input"
    end
  end

  describe "bad clients (the witness keeps its snapshots)" do
    test "a garbage binary message: ERROR 2, close 4002", %{world: w, witness: witness} do
      p = join(w)

      log =
        capture_log(fn ->
          :ok = Client.send_raw(p.conn, Client.frame(2, <<0xEE, 1, 2, 3>>))
          assert {4002, [2]} = expect_close(p.conn)
        end)

      assert log =~ "closing with 4002: undecodable message"
      alive!(witness, w)
    end

    test "an empty binary message: ERROR 2, close 4002", %{world: w, witness: witness} do
      p = join(w)

      capture_log(fn ->
        :ok = Client.send_raw(p.conn, Client.frame(2, <<>>))
        assert {4002, [2]} = expect_close(p.conn)
      end)

      alive!(witness, w)
    end

    test "a message before HELLO: ERROR 2, close 4002", %{world: w, witness: witness} do
      conn = connect(w)

      log =
        capture_log(fn ->
          :ok = Client.send_msg(conn, %{type: :input, seq: 1, ack: 0, payload: <<1, 1>>})
          assert {4002, [2]} = expect_close(conn)
        end)

      assert log =~ "expected HELLO first"
      alive!(witness, w)
    end

    test "a server message from the client, HELLO twice: 4002", %{world: w, witness: witness} do
      capture_log(fn ->
        p = join(w)
        :ok = Client.send_msg(p.conn, %{type: :pong, client_time: 1, server_tick: 2})
        assert {4002, [2]} = expect_close(p.conn)

        p = join(w)
        send_hello(p.conn, p.token)
        assert {4002, [2]} = expect_close(p.conn)
      end)

      alive!(witness, w)
    end

    test "an unknown protocol version: ERROR 1, close 4001", %{world: w, witness: witness} do
      a = auth(w)
      conn = connect(w)

      log =
        capture_log(fn ->
          send_hello(conn, a["token"], 1)
          assert {%{type: :error, code: 1, message: msg}, conn} = recv_msg(conn)
          assert msg == "unsupported protocol version 1, this server speaks 2"
          assert {4001, []} = expect_close(conn)
        end)

      assert log =~ "closing with 4001"
      refute Map.has_key?(players(w), a["user_id"])
      alive!(witness, w)
    end

    test "no token at all: 4003", %{world: w, witness: witness} do
      conn = connect(w)

      log =
        capture_log(fn ->
          send_hello(conn, "")
          assert {4003, [3]} = expect_close(conn)
        end)

      assert log =~ "unauthorized: no token"
      alive!(witness, w)
    end

    test "an expired token: 4003", %{world: w, witness: witness} do
      [key | _] = Server.config(@name).keys
      a = auth(w)
      now = System.system_time(:second)
      expired = Token.sign(key, :session, a["user_id"], 1, now - 10)
      conn = connect(w)

      log =
        capture_log(fn ->
          send_hello(conn, expired)
          assert {4003, [3]} = expect_close(conn)
        end)

      assert log =~ "unauthorized: expired"
      refute Map.has_key?(players(w), a["user_id"])
      alive!(witness, w)
    end

    test "a tampered token: 4003 in HELLO, 401 in the URL", %{world: w, witness: witness} do
      a = auth(w)
      [payload, mac] = String.split(a["token"], ".")
      <<first, rest::binary>> = payload
      other = if first == ?A, do: ?B, else: ?A
      tampered = <<other, rest::binary>> <> "." <> mac
      conn = connect(w)

      log =
        capture_log(fn ->
          send_hello(conn, tampered)
          assert {4003, [3]} = expect_close(conn)

          assert {:error, {:status, 401, body}} =
                   Client.connect(host(), w.port, "/ws?token=" <> URI.encode_www_form(tampered))

          assert %{"error" => "invalid_token"} = :jiffy.decode(body, [:return_maps])
        end)

      assert log =~ "closing with 4003"
      assert log =~ "upgrade refused with 401"
      alive!(witness, w)
    end

    test "a token signed with another secret: 4003", %{world: w, witness: witness} do
      key = Token.key(:crypto.strong_rand_bytes(32))
      a = auth(w)
      forged = Token.sign(key, :session, a["user_id"], 3600)
      conn = connect(w)

      log =
        capture_log(fn ->
          send_hello(conn, forged)
          assert {4003, [3]} = expect_close(conn)
        end)

      assert log =~ "unauthorized: unknown_key"
      alive!(witness, w)
    end

    test "a refresh token in HELLO: 4003", %{world: w, witness: witness} do
      a = auth(w)
      conn = connect(w)

      capture_log(fn ->
        send_hello(conn, a["refresh_token"])
        assert {4003, [3]} = expect_close(conn)
      end)

      alive!(witness, w)
    end

    test "an input flood: dropped and counted, the connection stays", %{
      world: w,
      witness: witness
    } do
      p = w |> join() |> snapshots(2)
      before = Server.stats(@name)

      flood =
        for seq <- 1..2_000,
            do:
              Client.frame(
                2,
                Overworld.Protocol.encode(%{type: :input, seq: seq, ack: 0, payload: <<0, 100>>})
              )

      :ok = Client.send_raw(p.conn, flood)

      stats =
        eventually(fn ->
          s = Server.stats(@name)
          s.inputs - before.inputs >= 2_000 && s
        end)

      dropped = stats.inputs_dropped - before.inputs_dropped
      # At most a second's worth (60) and a little refill get through.
      assert dropped >= 1_900 and dropped <= 2_000

      # The connection is still open and served.
      :ok = Client.send_msg(p.conn, %{type: :ping, client_time: 42})
      assert {%{type: :pong, client_time: 42}, p} = next_msg(p)
      snapshots(p, 3)
      alive!(witness, w)
    end

    test "RELIABLE messages reach the zone's handle_event/3 in order; a gap closes with 4002",
         %{world: w, witness: witness} do
      p = w |> join() |> snapshots(1)
      :ok = Client.send_msg(p.conn, %{type: :client_event, seq: 1, payload: "hi"})
      :ok = Client.send_msg(p.conn, %{type: :client_event, seq: 2, payload: "there"})
      p = snapshots(p, 2)

      eventually(fn ->
        mine =
          for {u, payload} <- Overworld.Zone.info(w.zone).state[:events] || [],
              u == p.user,
              do: payload

        mine == ["there", "hi"]
      end)

      log =
        capture_log(fn ->
          :ok = Client.send_msg(p.conn, %{type: :client_event, seq: 4, payload: "gap"})
          assert {4002, [2]} = expect_close(p.conn)
        end)

      assert log =~ "reliable_seq 4 after 2"
      alive!(witness, w)
    end

    test "a zone without a wire cannot serve players: ERROR 6 saying so, close 4006",
         %{witness: witness, world: w} do
      id = {__MODULE__, :no_wire}
      start_supervised!({Overworld.Zone, {Overworld.Test.ProbeZone, id: id, args: []}})
      name = Overworld.SessionTest.NoWire

      start_supervised!(
        {Overworld.Server,
         name: name,
         port: 0,
         acceptors: 1,
         data_dir: Overworld.Test.DataDir.path(),
         zones: %{"plain" => id}},
        id: name
      )

      conn = connect(%{port: Server.port(name)}, "/ws?zone=plain")

      log =
        capture_log(fn ->
          send_hello(conn, auth(w)["token"])
          assert {%{type: :error, code: 6, message: message}, conn} = recv_msg(conn)
          assert message =~ "has no wire: it cannot serve players over the network"
          assert {4006, []} = expect_close(conn)
        end)

      assert log =~ "has no wire"
      alive!(witness, w)
    end

    test "bad input payloads are dropped, not fatal", %{world: w, witness: witness} do
      p = w |> join() |> snapshots(1)
      before = Server.stats(@name).inputs_dropped
      :ok = Client.send_msg(p.conn, %{type: :input, seq: 1, ack: 0, payload: <<1, 2, 3, 4>>})
      :ok = Client.send_msg(p.conn, %{type: :input, seq: 2, ack: 0, payload: <<-128, 0>>})
      eventually(fn -> Server.stats(@name).inputs_dropped >= before + 2 end)
      snapshots(p, 3)
      alive!(witness, w)
    end
  end

  describe "timeouts and slow clients (own servers)" do
    test "nothing from the client for idle_timeout: ERROR 7, close 4007" do
      w = start_world(Overworld.SessionTest.Idle, {__MODULE__, :idle}, idle_timeout: 500)
      witness = join(w)
      # The witness pings from its own process every 100 ms from now on, however long the
      # silent player's join takes (a slow join under load once left the witness silent for
      # 500 ms too).
      pinger = spawn_link(fn -> ping_every(witness.conn, 100) end)
      # Before the silent player's HELLO: its idle timeout runs from then on.
      t0 = System.monotonic_time(:millisecond)

      log =
        capture_log(fn ->
          p = join(w)
          assert {4007, [7]} = expect_close(p.conn)
          assert System.monotonic_time(:millisecond) - t0 >= 400
        end)

      assert log =~ "heartbeat timeout"
      alive!(witness, w)
      Process.unlink(pinger)
      Process.exit(pinger, :kill)
    end

    test "a client that stops reading: snapshots skipped, then closed as too slow" do
      w =
        start_world(Overworld.SessionTest.Slow, {__MODULE__, :slow},
          critters: 500,
          max_outbound: 16_384,
          slow_timeout: 1_000,
          grace_period: 300,
          interest: [radius: 400, budget: 2_000_000]
        )

      witness = join(w)
      a = auth(w)
      conn = connect(w)
      :ok = :inet.setopts(conn.sock, recbuf: 4096)
      send_hello(conn, a["token"])

      log =
        capture_log(fn ->
          # The witness reads all along; the slow client never does.
          witness = read_until(witness, fn -> Server.stats(w.name).frames_skipped > 0 end, 5_000)

          # Stalled: what the server holds for the client stays bounded.
          [{pid, _}] = Registry.lookup(Overworld.Registry, {:session, w.name, a["user_id"]})
          %{sock: sock} = :sys.get_state(pid)
          {:queue_size, queued} = :erlang.port_info(sock, :queue_size)
          assert queued <= 16_384
          {:memory, mem} = Process.info(pid, :memory)
          assert mem < 4_000_000

          witness = read_until(witness, fn -> Server.stats(w.name).closed_slow >= 1 end, 5_000)
          stats = Server.stats(w.name)
          assert stats.frames_skipped > 0
          assert stats.closed_slow == 1
          # The socket is dropped even though the client still does not read.
          eventually(fn -> Port.info(sock) == nil end, 1_000)
          send(self(), {:witness, witness})
        end)

      assert log =~ "closed as too slow"
      assert_received {:witness, witness}
      alive!(witness, w)
      assert Server.stats(w.name).sessions == 1
      eventually(fn -> not Map.has_key?(players(w), a["user_id"]) end, 2_000)
      :gen_tcp.close(conn.sock)
    end
  end

  # Reads the witness's snapshots until `done?` holds (or fails after `timeout` ms).
  defp read_until(p, done?, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    Stream.repeatedly(fn -> nil end)
    |> Enum.reduce_while(p, fn _, p ->
      cond do
        done?.() -> {:halt, p}
        System.monotonic_time(:millisecond) > deadline -> flunk("condition not met in time")
        true -> {:cont, snapshots(p, 1)}
      end
    end)
  end

  defp ping_every(conn, ms) do
    :ok = Client.send_msg(conn, %{type: :ping, client_time: 1})
    Process.sleep(ms)
    ping_every(conn, ms)
  end

  test "a tick notice read after its zone's tables went (the zone stopped) is no crash: the session waits for the zone",
       %{world: world} do
    p = join(world) |> snapshots(2)
    session = Overworld.Names.whereis(Overworld.Names.session(world.name, p.user))
    assert is_pid(session)
    ref = Process.monitor(session)

    # The notice comes before the zone goes (its tables with it), and is read after.
    :ok = :sys.suspend(session)
    send(session, {:overworld_tick, world.zone, p.view.tick + 1, System.monotonic_time()})
    zone_sup = Overworld.Names.whereis(Overworld.Names.zone_sup(world.zone))
    Process.exit(zone_sup, :kill)
    :ok = :sys.resume(session)

    refute_receive {:DOWN, ^ref, :process, _, _}, 500
  end
end

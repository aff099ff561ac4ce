defmodule Overworld.ServerTest do
  # The server as a whole: options, port and counters, the connection limit, several servers
  # on one node, stopping with players connected, a session that crashes.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Server}
  alias Overworld.Test.DataDir

  setup_all do
    log_info()
    :ok
  end

  describe "start_link/1" do
    test "invalid options raise, naming the option" do
      base = [name: Overworld.ServerTest.Invalid, port: 0, data_dir: DataDir.path()]

      assert_raise ArgumentError, ~r/expected :port to be a port number, got: "4000"/, fn ->
        Server.start_link(Keyword.put(base, :port, "4000"))
      end

      assert_raise ArgumentError,
                   ~r/unknown option :max_conections .* did you mean :max_connections/,
                   fn ->
                     Server.start_link([max_conections: 3] ++ base)
                   end

      assert_raise ArgumentError, ~r/:default_zone "elves" is not one of :zones/, fn ->
        Server.start_link([zones: %{"critters" => :g}, default_zone: "elves"] ++ base)
      end

      assert_raise ArgumentError, ~r/secret/, fn ->
        Server.start_link([secret: "short"] ++ base)
      end

      assert_raise ArgumentError, ~r/zones/, fn ->
        Server.start_link([zones: %{critters: :g}] ++ base)
      end
    end

    test "a port in use: the server does not start" do
      w = start_world(Overworld.ServerTest.First, {__MODULE__, :first}, critters: 300)
      Process.flag(:trap_exit, true)

      capture_log(fn ->
        assert {:error, _} =
                 Server.start_link(
                   name: Overworld.ServerTest.Second,
                   port: w.port,
                   data_dir: DataDir.path()
                 )
      end)
    end
  end

  describe "a running server" do
    setup do
      w = start_world(Overworld.ServerTest.Main, {__MODULE__, :main}, critters: 300)
      {:ok, world: w}
    end

    test "port/1 answers the port picked, stats/1 the counters", %{world: w} do
      assert is_integer(w.port) and w.port > 0
      s = Server.stats(w.name)

      assert Map.keys(s) |> Enum.sort() ==
               Enum.sort([
                 :connections,
                 :sessions,
                 :bytes_out,
                 :frames_out,
                 :inputs,
                 :inputs_dropped,
                 :frames_skipped,
                 :frames_late,
                 :refused_joins,
                 :closed_slow,
                 :accepted,
                 :refused
               ])

      p = w |> join() |> snapshots(5)
      s2 = Server.stats(w.name)
      assert s2.sessions == s.sessions + 1
      assert s2.connections == s.connections + 1
      assert s2.accepted >= s.accepted + 2
      # Counted just after the frame is handed to the socket: maybe after the client has it.
      s2 = eventually(fn -> (st = Server.stats(w.name)).frames_out >= s.frames_out + 5 && st end)
      assert s2.bytes_out > s.bytes_out
      Client.close(p.conn)
      eventually(fn -> Server.stats(w.name).sessions == s.sessions end)
      eventually(fn -> Server.stats(w.name).connections == s.connections end)
    end

    test "two servers on one node serve their own zones and sessions", %{world: w} do
      other = start_world(Overworld.ServerTest.Other, {__MODULE__, :other}, critters: 300)
      assert other.port != w.port
      # One user on both servers: two sessions, one player in each zone.
      a = auth(w)
      p1 = w |> join(auth: a) |> snapshots(2)
      p2 = other |> join(auth: a) |> snapshots(2)
      assert players(w)[a["user_id"]] == p1.entity
      assert players(other)[a["user_id"]] == p2.entity
      snapshots(p1, 2)
    end

    test "stopping the server: sessions closed with 1001, players leave the zone",
         %{world: w} do
      p = w |> join() |> snapshots(2)
      q = w |> join() |> snapshots(2)
      assert Map.has_key?(players(w), p.user)

      capture_log(fn -> :ok = stop_supervised(Overworld.ServerTest.Main) end)

      assert {1001, []} = expect_close(p.conn)
      assert {1001, []} = expect_close(q.conn)
      refute Map.has_key?(players(w), p.user)
      refute Map.has_key?(players(w), q.user)
      assert {:error, :econnrefused} = :gen_tcp.connect(~c"127.0.0.1", w.port, [])
      # Its config went with it (no term left behind in :persistent_term).
      assert :persistent_term.get({Overworld.Server, w.name}, :gone) == :gone
    end

    test "a session that crashes frees its slot and its player", %{world: w} do
      witness = join(w)
      p = w |> join() |> snapshots(2)
      before = Server.stats(w.name)
      [{pid, _}] = Registry.lookup(Overworld.Registry, {:session, w.name, p.user})

      log =
        capture_log(fn ->
          catch_exit(GenServer.call(pid, :no_such_call))
          assert {1011, []} = expect_close(p.conn)
        end)

      assert log =~ "no_such_call"
      refute Map.has_key?(players(w), p.user)
      s = Server.stats(w.name)
      assert s.sessions == before.sessions - 1
      assert s.connections == before.connections - 1
      alive!(witness, w)
    end
  end

  describe "max_connections" do
    test "the connection past the limit gets 503 and a log line; a freed slot is reused" do
      w =
        start_world(Overworld.ServerTest.Limited, {__MODULE__, :limited},
          critters: 300,
          max_connections: 3
        )

      witness = join(w)
      # Accounts first: each request is a connection.
      [a2, a3, a4] = for _ <- 1..3, do: auth(w)
      p2 = join(w, auth: a2)
      p3 = join(w, auth: a3)
      assert Server.stats(w.name).connections == 3

      log =
        capture_log(fn ->
          assert {:error, {:status, 503, body}} = Client.connect(host(), w.port, "/ws")
          assert %{"error" => "unavailable"} = :jiffy.decode(body, [:return_maps])
          assert {:ok, 503, headers, _} = Client.request(host(), w.port, "GET", "/healthz")
          assert headers["retry-after"] == "5"
        end)

      assert log =~ "connection limit (3) reached"
      assert Server.stats(w.name).refused >= 2
      witness = alive!(witness, w)
      _ = p3

      Client.close(p2.conn)
      eventually(fn -> Server.stats(w.name).connections == 2 end)
      p4 = w |> join(auth: a4) |> snapshots(2)
      assert p4.entity > 0
      alive!(witness, w)
    end
  end
end

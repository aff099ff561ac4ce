defmodule Overworld.Web.Operator.ZonesTest do
  # The operator API's zones and sessions over real sockets: the list, stop and start again,
  # a snapshot now, the history dump (which replays), a zone's sessions, a kick.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase

  alias Overworld.Accounts.Password
  alias Overworld.Operators.Zones
  alias Overworld.Test.Game
  alias Overworld.Zone
  alias Overworld.Zone.History

  @iterations 1_000

  setup do
    dir =
      Path.join(Overworld.Test.DataDir.path(), "opzones-#{System.unique_integer([:positive])}")

    on_exit(fn -> File.rm_rf(dir) end)
    %{dir: dir}
  end

  defp world(name, zones, dir) do
    w =
      start_world(name, {name, :critters},
        critters: 10,
        accounts: [password_iterations: @iterations],
        operators: [
          %{
            name: "alice",
            password_hash: Password.encode(Password.hash("alice's password", @iterations))
          }
        ],
        operator_api: [audit_file: Path.join(dir, "audit.log")],
        zones: Map.put(zones, "critters", {name, :critters})
      )

    Map.put(w, :token, operator_login(w, "alice", "alice's password"))
  end

  defp get(w, path), do: w |> api("GET", path, nil, w.token) |> Tuple.delete_at(2)
  defp post(w, path, body, token), do: w |> api("POST", path, body, token) |> Tuple.delete_at(2)
  defp post(w, path, body \\ nil), do: post(w, path, body, w.token)

  defp zones(w) do
    {200, %{"zones" => zones, "stopped" => stopped}} = get(w, "/api/v1/operator/zones")
    {zones, stopped}
  end

  defp started(id, opts) do
    {:ok, _} =
      Overworld.start_zone(
        Game,
        Game.zone_options(30, [id: id, coins: false, wire: Game.Wire] ++ opts)
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  test "zones: listed, a snapshot now, the history dumped (it replays), stopped and started again",
       %{dir: dir} do
    arena =
      started({__MODULE__, :arena},
        data_dir: dir,
        clock: :manual,
        debug: true,
        snapshot_ticks: 1_000
      )

    quiet = started({__MODULE__, :quiet}, clock: :manual, history: 0)
    w = world(:op_zones, %{"arena" => arena, "quiet" => quiet}, dir)
    {:ok, 40} = Zone.tick_now(arena, 40)

    {zones, []} = zones(w)
    ref = Zones.ref(arena)
    a = Enum.find(zones, &(&1["ref"] == ref))

    assert %{
             "name" => "arena",
             "id" => "{Overworld.Web.Operator.ZonesTest, :arena}",
             "module" => "Overworld.Test.Game",
             "world" => nil,
             "tick" => 40,
             "players" => 0,
             "entities" => 30,
             "debug" => true,
             "history" => 300,
             "persistent" => true
           } = a

    assert a["node"] == Atom.to_string(node())
    assert is_integer(a["tick_p50_us"]) and is_integer(a["tick_p99_us"])
    assert Enum.find(zones, &(&1["name"] == "critters"))["persistent"] == false

    assert {200, %{"tick" => 40}} = post(w, "/api/v1/operator/zones/#{ref}/snapshot")

    # The history, as `mix overworld.replay` reads it.
    assert {200, bytes, headers} =
             api(w, "GET", "/api/v1/operator/zones/#{ref}/history", nil, w.token)

    assert headers["content-type"] == "application/octet-stream"
    assert headers["content-disposition"] =~ ~s(filename="history-#{ref}-40.owh")
    file = Path.join(dir, "downloaded.owh")
    File.write!(file, bytes)
    assert {:ok, dump} = History.read(file)
    assert dump.zone == arena and History.last_tick(dump) == 40
    replayed = History.replay(dump)
    assert replayed.mismatches == [] and replayed.checked > 0 and replayed.tick == 40

    # A zone without files, without history; one the game supervises itself.
    q = Zones.ref(quiet)
    assert {409, %{"error" => "no_data_dir"}} = post(w, "/api/v1/operator/zones/#{q}/snapshot")
    assert {409, %{"error" => "no_history"}} = get(w, "/api/v1/operator/zones/#{q}/history")
    c = Zones.ref({:op_zones, :critters})
    assert {409, %{"error" => "not_managed"}} = post(w, "/api/v1/operator/zones/#{c}/stop")

    # Stopped, and started again from its files.
    assert {200, %{"stopped" => ^ref}} = post(w, "/api/v1/operator/zones/#{ref}/stop")
    assert Zone.whereis(arena) == nil
    {zones, ["arena"]} = zones(w)
    refute Enum.any?(zones, &(&1["ref"] == ref))
    assert {404, _} = post(w, "/api/v1/operator/zones/#{ref}/stop")

    assert {200, %{"zone" => %{"ref" => ^ref, "name" => "arena"}}} =
             post(w, "/api/v1/operator/zones/start", %{name: "arena"})

    # (Recovered from its snapshot of tick 40.)
    assert Zone.info(arena).tick == 40

    assert {409, %{"error" => "already_running"}} =
             post(w, "/api/v1/operator/zones/start", %{name: "arena"})

    assert {404, _} = post(w, "/api/v1/operator/zones/start", %{name: "elsewhere"})

    {200, %{"entries" => entries}} = get(w, "/api/v1/operator/audit?limit=20")

    assert [
             %{"action" => "zone_start", "target" => "elsewhere", "result" => "not_found"},
             %{"action" => "zone_start", "target" => "arena", "result" => "already_running"},
             %{"action" => "zone_start", "result" => "ok"},
             %{"action" => "zone_stop", "target" => ^ref, "result" => "not_found"},
             %{"action" => "zone_stop", "result" => "ok"} = stop,
             %{"action" => "zone_stop", "result" => "not_managed"},
             %{"action" => "history_download", "result" => "no_history"},
             %{"action" => "zone_snapshot", "result" => "no_data_dir"},
             %{"action" => "history_download", "result" => "ok"},
             %{"action" => "zone_snapshot", "result" => "ok", "operator" => "alice"},
             %{"action" => "login"} | _
           ] = entries

    assert stop["target"] == "#{ref} {Overworld.Web.Operator.ZonesTest, :arena}"
  end

  test "a zone's obstacles, for the visualizer: counted in the list, listed in metres", %{
    dir: dir
  } do
    map = [boxes: [{2, 3, 4, 10.5}], circles: [{20, 20, 1.5}]]
    walled = started({__MODULE__, :walled}, clock: :manual, physics: :elixir, map: map)
    plain = started({__MODULE__, :plain}, clock: :manual)
    w = world(:op_obstacles, %{"walled" => walled, "plain" => plain}, dir)

    {zones, _} = zones(w)
    assert Enum.find(zones, &(&1["name"] == "walled"))["obstacles"] == 2
    assert Enum.find(zones, &(&1["name"] == "plain"))["obstacles"] == 0

    assert {200, %{"boxes" => [[2.0, 3.0, 4.0, 10.5]], "circles" => [[20.0, 20.0, 1.5]]} = got} =
             get(w, "/api/v1/operator/zones/#{Zones.ref(walled)}/obstacles")

    assert_in_delta got["width"], :math.sqrt(30 * 50), 0.01

    assert {200, %{"boxes" => [], "circles" => []}} =
             get(w, "/api/v1/operator/zones/#{Zones.ref(plain)}/obstacles")

    assert {404, _} = get(w, "/api/v1/operator/zones/nosuchzonexxxxxx/obstacles")
  end

  test "sessions: listed per zone; a kick closes one, the zone and the other carry on", %{
    dir: dir
  } do
    w = world(:op_sessions, %{}, dir)
    one = join(w) |> snapshots(2)
    two = join(w) |> snapshots(2)
    ref = Zones.ref(w.zone)

    assert {200, %{"sessions" => sessions, "total" => 2}} =
             get(w, "/api/v1/operator/zones/#{ref}/sessions")

    assert Enum.sort(Enum.map(sessions, & &1["user_id"])) == Enum.sort([one.user, two.user])

    for s <- sessions do
      assert %{"connected" => true, "address" => "127.0.0.1:" <> _, "node" => _} = s
      assert is_integer(s["connected_at"]) and s["bytes_out"] > 0 and is_integer(s["entity"])
      # What the session measured of its frames (two read at least), and the kernel's RTT.
      assert s["frames"] >= 2 and s["frame_interval_ms"] > 0
      assert is_number(s["frame_jitter_ms"]) and s["frame_jitter_ms"] >= 0
      assert is_integer(s["deferred"]) and s["deferred"] >= 0
      assert is_number(s["rtt_ms"]) and s["rtt_ms"] >= 0
    end

    assert {200, %{"sessions" => [_], "total" => 2}} =
             get(w, "/api/v1/operator/zones/#{ref}/sessions?limit=1")

    # A player's view: where it stands, its radii, the cells its client holds (around it).
    assert {200, view} = get(w, "/api/v1/operator/sessions/#{one.user}/interest")
    assert %{"radius_m" => r, "leave_m" => leave, "held" => [_ | _] = held} = view
    assert r > 0 and leave > r and view["entity"] == one.entity
    cell = Overworld.Zone.config(w.zone).cell_size

    for [row, a, b, tick] <- held, col <- a..b do
      assert tick > 0
      # The cell's nearest point lies within the leave radius (cells are `cell` metres).
      dx = max(0, max(col * cell - view["x"], view["x"] - (col + 1) * cell))
      dy = max(0, max(row * cell - view["y"], view["y"] - (row + 1) * cell))
      assert :math.sqrt(dx * dx + dy * dy) <= leave
    end

    assert {404, _} = get(w, "/api/v1/operator/sessions/nobody/interest")

    assert {200, %{"kicked" => 1}} =
             post(w, "/api/v1/operator/sessions/#{one.user}/kick", %{reason: "spamming the chat"})

    assert {4009, [9]} = expect_close(one.conn)
    eventually(fn -> not Map.has_key?(players(w), one.user) end)
    assert Map.has_key?(players(w), two.user)
    alive!(two, w)

    assert {404, _} = post(w, "/api/v1/operator/sessions/#{one.user}/kick")

    assert {200, %{"sessions" => [%{"user_id" => u}], "total" => 1}} =
             get(w, "/api/v1/operator/zones/#{ref}/sessions")

    assert u == two.user
    {200, %{"entries" => [last | _]}} = get(w, "/api/v1/operator/audit")
    assert %{"action" => "kick", "result" => "not_found"} = last
  end
end

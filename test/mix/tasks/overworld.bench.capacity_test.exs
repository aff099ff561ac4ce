defmodule Mix.Tasks.Overworld.Bench.CapacityTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  alias Mix.Tasks.Overworld.Bench.Capacity, as: Task

  @moduletag timeout: 240_000

  # The test game's server (compiled in the test environment) as the OS process each step
  # starts afresh.
  @server "MIX_ENV=test mix overworld.server --zone Overworld.Test.Game --wire Overworld.Test.Game.Wire " <>
            "--name critters --arg critters=500 --size 158,158 --cell-size 12"

  test "each step starts the server, runs the native clients against it, and reports both sides" do
    dir = Path.join(System.tmp_dir!(), "capacity-#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(dir) end)
    json = Path.join(dir, "capacity.json")

    out =
      capture_io(fn ->
        Task.run(
          ["--server", @server] ++
            ~w(--bots 0,12 --seconds 2 --warmup 1 --ramp 50 --nice 5 --json #{json})
        )
      end)

    assert out =~ "Capacity: "

    assert out =~
             ~r/^\s+0 clients: 0 in \(0 at the window.s start\), 0 failed, 0 refused \(0 refusals\), 0 closed/m

    assert out =~
             ~r/^\s+12 clients: 12 in \(12 at the window.s start\), 0 failed, 0 refused \(0 refusals\), 0 closed/m

    assert out =~ "knee (every client ≥ 28 snapshots/s, ack p99 ≤ 3 ticks): "

    r = json |> File.read!() |> :jiffy.decode([:return_maps, {:null_term, nil}])
    assert r["nice"] == 5 and r["server"] == @server
    assert [idle, busy] = r["steps"]

    # Without clients: the zone ticks, nothing is sent, no CPU per frame.
    assert idle["clients"] == 0 and idle["zone_ticks"] >= 40 and idle["frames_out"] == 0
    assert idle["cpu_us_per_frame"] == nil

    # With 12: each a fresh player of a fresh server; frames, CPU per frame beyond the idle
    # server's, and the generator's own figures.
    assert busy["players"] == 12
    assert busy["snapshots_median"] >= 25
    assert busy["frames_per_second"] > 12 * 20
    assert is_float(busy["cpu_us_per_frame"])
    assert busy["generator_cpu"] > 0 and is_number(busy["generator_lag_p50_ms"])
    assert r["knee"] in [nil, 12]

    svg = File.read!(Path.join(dir, "capacity.svg"))
    assert svg =~ "<svg" and svg =~ "<polyline" and svg =~ "snapshots/s per client, median"
  end

  test "every invalid option ends the task with one line that says what to do" do
    Overworld.Test.TaskCase.assert_one_line_errors(&Task.run/1, [
      {[], "--server is required"},
      {~w(--server x --bots 1,a), "--bots must be a comma-separated list"},
      {~w(--server x --bots -5), "--bots must be a comma-separated list"},
      {~w(--server x --seconds 0), "--seconds must be a positive integer"},
      {~w(--server x --nice 40), "--nice must be an integer in 0..19"},
      {~w(--server x --taskset one), "--taskset must be a CPU list"},
      {~w(--server x --typo 1), "invalid arguments"}
    ])
  end

  test "a server command that exits says so" do
    error =
      assert_raise Mix.Error, fn ->
        capture_io(fn -> Task.run(["--server", "false", "--bots", "0", "--seconds", "1"]) end)
      end

    assert error.message =~ "the server exited (status"
  end
end

defmodule Overworld.Bench.LoadgenTest do
  # The native load generator (bench/loadgen, an OS process of its own) against a real server
  # of the test game: its clients connect, send inputs and count snapshots, and what it reports
  # matches what the server saw.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase, only: [start_world: 3]

  alias Overworld.Bench.{Capacity, Loadgen}

  @moduletag timeout: 120_000

  setup_all do
    %{bin: Loadgen.build!()}
  end

  defp run_loadgen(bin, opts) do
    {out, status, result} = Loadgen.run(bin, opts)
    assert status == 0, out
    {out, result}
  end

  test "N clients connect, send inputs, get every snapshot and their acknowledgements", %{
    bin: bin
  } do
    world = start_world(:loadgen_server, {__MODULE__, :zone}, critters: 400)
    clients = 20

    {out, r} =
      run_loadgen(bin,
        url: "ws://127.0.0.1:#{world.port}/ws",
        clients: clients,
        input_hz: 10,
        ramp: 100,
        warmup: 1,
        seconds: 3,
        procs: 1
      )

    assert out =~ "owload: #{clients} clients, #{clients} connected, 0 failed"
    assert %{"connected" => ^clients, "failed" => 0, "closed" => 0, "tick_rate" => 30} = r
    # Every client gets the zone's 30 snapshots a second (the window is measured: allow the
    # ends of the window and the machine's jitter).
    rates = r["snapshots_per_second"]
    assert rates["clients"] == clients
    assert rates["min"] >= 20 and rates["median"] >= 27 and rates["median"] <= 31.5
    # Inputs go out at 10 a second and come back acknowledged within a few ticks.
    assert r["inputs_sent"] >= clients * 10 * 2
    assert r["ack_ms"]["samples"] >= clients * 10 * 2
    assert r["ack_ticks"]["p50"] > 0 and r["ack_ticks"]["p50"] < 10
    # No p99 on fewer than 10,000 acknowledgements.
    refute Map.has_key?(r["ack_ms"], "p99")
    assert r["bytes_per_second_per_client"] > 0
    # The generator measured itself.
    g = r["generator"]
    assert g["cpu_seconds"] > 0 and g["lag_ms"]["samples"] > 100
    assert g["procs"] == 1

    # The server's side of the same window, from its status route read around it.
    step = Capacity.step(r)
    assert step.zone == "critters"
    assert step.players == clients
    assert step.zone_ticks >= 80 and step.zone_ticks <= 100
    assert step.tick_p50_us > 0 and step.tick_p50_us <= step.tick_max_us
    # The frames the server sent over the window: about one per client per tick.
    assert_in_delta step.frames_per_second, clients * 30, clients * 30 * 0.2
    assert step.scheduler_utilization > 0 and step.scheduler_utilization <= 1
    assert step.busy_us_per_second > 0
  end

  test "clients refused at the door are counted as failures with their reason", %{bin: bin} do
    # A server without the test's zone: the upgrade goes through, but a token the server
    # cannot verify (another secret) would be refused; simplest refusal: the connection limit.
    world = start_world(:loadgen_full, {__MODULE__, :full}, critters: 50, max_connections: 3)

    {out, r} =
      run_loadgen(bin,
        url: "ws://127.0.0.1:#{world.port}/ws",
        clients: 6,
        input_hz: 10,
        ramp: 100,
        warmup: 0,
        seconds: 1,
        procs: 1
      )

    assert r["connected"] + r["failed"] == 6
    assert r["failed"] >= 3, out
    assert Enum.sum(Map.values(r["failures"])) == r["failed"]
  end

  test "clients refused as full (4008) are counted apart, and try again after the retry_after they were told",
       %{bin: bin} do
    # A zone of at most 3 players (counted at its last tick: clients come 100 ms apart, so the
    # count is up to date for each), one fresh world per run.
    opts = fn name ->
      world = start_world(name, {__MODULE__, name}, critters: 50, max_players: 3, retry_after: 1)

      [
        url: "ws://127.0.0.1:#{world.port}/ws",
        clients: 6,
        input_hz: 10,
        ramp: 10,
        warmup: 0,
        seconds: 3,
        procs: 1
      ]
    end

    # Without retries: three in, three refused once each, none a failure.
    {out, r} = run_loadgen(bin, Keyword.put(opts.(:loadgen_max), :retry, false))
    assert %{"connected" => 3, "refused" => 3, "refusals" => 3, "failed" => 0} = r, out

    # With them (the default), each refused client comes back every second while the zone
    # stays full: more refusals than clients, still three in.
    {out, r} = run_loadgen(bin, opts.(:loadgen_max_retry))
    assert %{"connected" => 3, "refused" => 3, "failed" => 0} = r, out
    assert r["refusals"] >= 9, out
  end

  test "with no clients it still reads the server's status around its window", %{bin: bin} do
    world = start_world(:loadgen_idle, {__MODULE__, :idle}, critters: 50)

    {_out, r} =
      run_loadgen(bin,
        url: "ws://127.0.0.1:#{world.port}/ws",
        clients: 0,
        warmup: 0,
        seconds: 1,
        procs: 1
      )

    step = Capacity.step(r)
    assert step.clients == 0 and step.zone_ticks >= 20 and step.frames_out == 0
  end
end

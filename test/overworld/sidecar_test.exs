defmodule Overworld.SidecarTest do
  # A zone with `physics: :sidecar` against the real sidecar executable: the same bits as the
  # Elixir physics, tick for tick; and whatever the sidecar does wrong (killed, garbled, late,
  # hung, truncated, the wrong tick: its fault-injecting mode, docs/sidecar.md "Faults"), the
  # zone computes those ticks with the fallback, loses nothing, restarts the sidecar and goes
  # back to it.
  # (Not async: its sidecars' rayon threads would compete for the 2 cores with the timing of
  # the async tests, such as the realtime world replays of Overworld.Zone.HistoryTest.)
  use ExUnit.Case, async: false

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Bench.Sidecar.Zone, as: Wanderers
  alias Overworld.Sidecar
  alias Overworld.Zone

  @moduletag timeout: 120_000

  setup_all do
    exe = Overworld.Test.SidecarFrames.build_sidecar!()
    {side, walls, specs} = Overworld.Bench.Sidecar.scene(1_500, 3)
    # The Elixir zone's positions after each of 40 ticks: what every sidecar zone must match.
    {id, _} = start(:elixir, [], {side, walls, specs}, exe)
    expected = for _ <- 1..40, do: step(id)
    Overworld.stop_zone(id)
    %{exe: exe, scene: {side, walls, specs}, expected: expected}
  end

  # A zone of the scene (stopped when the test exits) and its physics.
  defp start(mode, sidecar, {side, walls, specs}, exe, transport \\ :socket) do
    id =
      Overworld.Test.SidecarFrames.start_zone!(Wanderers,
        args: specs,
        clock: :manual,
        size: {side, side},
        workers: 2,
        physics: mode,
        transport: transport,
        map: walls,
        # (A deadline far above a step's time: a healthy sidecar's answers are never late,
        # even on a loaded machine; the fault tests set a short one.)
        sidecar: Keyword.merge([executable: exe, restart_ms: 20, deadline_ms: 1_000], sidecar)
      )

    {id, Zone.config(id).physics}
  end

  # One tick; the entities' positions after it (sorted by id).
  defp step(id) do
    {:ok, _} = Zone.tick_now(id)

    id
    |> Zone.entities()
    |> Enum.map(&{entity(&1, :id), entity(&1, :x), entity(&1, :y)})
    |> Enum.sort()
  end

  defp ready(p), do: Overworld.Test.SidecarFrames.ready!(p)

  # Ticks the zone through the expected states, waiting `pause` ms before each of the ticks in
  # `pauses` (a restarted sidecar is back after a pause).
  defp run(id, expected, pauses \\ []) do
    for {want, n} <- Enum.with_index(expected, 1) do
      if n in pauses, do: Process.sleep(150)
      assert step(id) == want, "tick #{n} differs from the Elixir physics"
    end
  end

  test "a healthy sidecar computes every tick after the first: the Elixir physics' bits", ctx do
    {id, p} = start(:sidecar, [], ctx.scene, ctx.exe)
    ready(p)
    run(id, ctx.expected)
    c = Sidecar.counters(p)
    # Two workers: the first tick (nothing was sent before it) is the fallback's.
    assert c.fallback == 2
    assert c.sidecar == 2 * 39
    assert c.failures == 0 and c.starts == 1 and c.exits == 0
  end

  test "without the pipeline (bodies sent as the tick starts): the same bits", ctx do
    {id, p} = start(:sidecar, [pipeline: false], ctx.scene, ctx.exe)
    ready(p)
    run(id, ctx.expected)
    c = Sidecar.counters(p)
    # Every tick's step is the sidecar's, the first one too (nothing is sent ahead).
    assert c.sidecar == 2 * 40 and c.fallback == 0 and c.failures == 0
  end

  test "SIGKILL mid-run: the fallback computes at once, the sidecar restarts and answers", ctx do
    {id, p} = start(:sidecar, [], ctx.scene, ctx.exe)
    ready(p)
    {first, rest} = Enum.split(ctx.expected, 10)
    run(id, first)
    os_pid = :sys.get_state(Overworld.Names.whereis(Overworld.Names.sidecar(id))).os_pid
    t = System.monotonic_time(:millisecond)
    {_, 0} = System.cmd("kill", ["-KILL", Integer.to_string(os_pid)])

    # The port's exit is seen at once (the answers already written may still be read: a
    # kill mid-compute is the fault kill:5 below).
    Enum.find(1..100, fn _ -> Sidecar.counters(p).exits == 1 || (Process.sleep(1) && false) end)
    assert Sidecar.counters(p).exits == 1
    assert System.monotonic_time(:millisecond) - t < 100
    assert Sidecar.generation(p) == 0

    run(id, rest, [5])
    c = Sidecar.counters(p)
    assert c.starts == 2
    assert c.generation == 2
    # Back on the sidecar after the restart.
    assert c.sidecar > 2 * 10
    assert Zone.count(id) == 1_500
  end

  for {fault, why} <- [
        {"kill:5", "aborts mid-compute"},
        {"garble:5", "answers a wrong magic"},
        {"late:200:5", "answers past the deadline"},
        {"hang:5", "never answers"},
        {"truncate:5", "writes half a frame and closes"},
        {"wrong-tick:5", "answers another tick"}
      ] do
    test "a sidecar that #{why} (#{fault}): the fallback's tick, the same bits", ctx do
      {id, p} = start(:sidecar, [fault: unquote(fault), deadline_ms: 20], ctx.scene, ctx.exe)
      ready(p)
      run(id, ctx.expected, [10, 20, 30])
      c = Sidecar.counters(p)
      assert c.failures >= 1, inspect(c)
      assert c.starts >= 2, inspect(c)
      # Every tick computed once by one of them (per worker), and the sidecar used again.
      assert c.fallback + c.sidecar == 2 * 40
      assert c.sidecar > 2 * 5
      assert Zone.count(id) == 1_500
    end
  end

  describe "over the shared segment (transport: :shm)" do
    test "the same bits, every record through the stripes' regions", ctx do
      {id, p} = start(:sidecar, [], ctx.scene, ctx.exe, :shm)
      ready(p)
      run(id, ctx.expected)
      c = Sidecar.counters(p)
      assert c.fallback == 2 and c.sidecar == 2 * 39 and c.failures == 0
      # Each worker wrote 40 requests in its region (the last one's answer is pending) and read
      # 39 answers from its answer region: their seqs say so.
      {shm, l} = segment(id)

      for stripe <- 0..1 do
        base = 64 + stripe * (l.request + l.answer)
        assert {:ok, <<80::little-64>>} = Sidecar.Shm.read(shm, base, 8)
        {:ok, <<answer_seq::little-64>>} = Sidecar.Shm.read(shm, base + l.request, 8)
        assert answer_seq in [78, 80]
      end
    end

    test "requests larger than the region go in their frames: the same bits", ctx do
      # 1,500 bodies over 2 stripes, room for 100 per stripe.
      {id, p} = start(:sidecar, [max_bodies: 100], ctx.scene, ctx.exe, :shm)
      ready(p)
      run(id, ctx.expected)
      c = Sidecar.counters(p)
      assert c.sidecar == 2 * 39 and c.failures == 0
    end

    for {fault, why} <- [
          {"kill:5", "aborts mid-compute"},
          {"half:5", "leaves an answer region half written (odd seq)"},
          {"wrong-seq:5", "announces another seq than its region's"},
          {"shrink:5", "truncates the segment"},
          {"grow:5", "grows the segment"}
        ] do
      test "a sidecar that #{why} (#{fault}): the fallback's tick, the same bits", ctx do
        {id, p} =
          start(:sidecar, [fault: unquote(fault), deadline_ms: 20], ctx.scene, ctx.exe, :shm)

        ready(p)
        {shm, _} = segment(id)
        run(id, ctx.expected, [10, 20, 30])
        c = Sidecar.counters(p)
        assert c.failures >= 1 or unquote(fault) == "kill:5", inspect(c)
        assert c.starts >= 2, inspect(c)
        assert c.fallback + c.sidecar == 2 * 40
        assert c.sidecar > 2 * 5
        assert Zone.count(id) == 1_500
        # A new segment for the new process; the first one's file is gone.
        {shm2, _} = segment(id)
        assert shm2 != shm
      end
    end
  end

  defp segment(id) do
    st = :sys.get_state(Overworld.Names.whereis(Overworld.Names.sidecar(id)))
    {st.shm, Sidecar.layout(st.physics)}
  end

  test "a missing executable: the Elixir physics, and the zone runs", ctx do
    {id, p} = start(:sidecar, [executable: "/nonexistent/overworld-sidecar"], ctx.scene, ctx.exe)
    run(id, Enum.take(ctx.expected, 5))
    assert Sidecar.counters(p).fallback == 10
  end
end

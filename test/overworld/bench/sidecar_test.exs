defmodule Overworld.Bench.SidecarTest do
  # `mix overworld.bench.sidecar`'s measurements, tiny: the crossover's workers go through
  # the zone's own links (both transports) and the kills through a real zone, so a change of
  # the links or the zone's physics that the bench does not follow fails here, not in a
  # benchmark run. (Not async: real sidecars, see Overworld.SidecarTest.)
  use ExUnit.Case, async: false

  alias Overworld.Bench.Sidecar

  doctest Overworld.Bench.Sidecar

  @moduletag timeout: 120_000

  setup_all do
    %{exe: Overworld.Test.SidecarFrames.build_sidecar!()}
  end

  test "the crossover: Elixir and the sidecar over both transports, every tick sampled", %{
    exe: exe
  } do
    [row] = Sidecar.crossover([300], ticks: 4, executable: exe)
    assert %{bodies: 300, ticks: 4} = row
    assert row.elixir.tick_ms.samples == 4

    for transport <- [:socket, :shm] do
      s = row[transport]
      assert s.tick_ms.samples == 4 and s.in_ms.samples == 4 and s.out_ms.samples == 4
      assert s.tick_ms.p50 > 0, inspect({transport, s})
    end
  end

  test "paths: Elixir and the sidecar give the same answers, every tick sampled", %{exe: exe} do
    r = Sidecar.paths(q: 3, ticks: 3, bodies: 2_000, executable: exe)
    assert r.same, inspect(r)
    assert r.elixir_ms.samples == 3 and r.sidecar_ms.samples == 3 and r.shm_ms.samples == 3
    # Between neighbouring rooms, through a door: found.
    assert r.answers[:ok] > 0, inspect(r.answers)
  end

  test "kills: the zone keeps its entities and sees the kill", %{exe: exe} do
    r = Sidecar.kills(bodies: 300, kills: 1, warmup: 0, executable: exe)
    assert r.entities_before == 300 and r.entities_after == 300
    assert r.undetected == 0 and r.exits >= 1, inspect(r)
  end
end

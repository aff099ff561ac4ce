defmodule Overworld.Session.StatsTest do
  use ExUnit.Case, async: true
  alias Overworld.Session.Stats
  doctest Stats

  test "steady intervals: no jitter; alternating ones: the jitter tends to their difference" do
    steady = Stats.new()
    for i <- 0..100, do: Stats.frame(steady, 0, i * 33_333)
    assert %{frames: 101, frame_jitter_ms: +0.0, deferred: 0} = Stats.read(steady)
    assert_in_delta Stats.read(steady).frame_interval_ms, 33.333, 0.001

    # 20 ms, 40 ms, 20 ms, ...: |D| = 20 ms each frame, J converges to it.
    alternating = Stats.new()

    Enum.reduce(0..300, 0, fn i, t ->
      Stats.frame(alternating, 1, t) && t + 20_000 + rem(i, 2) * 20_000
    end)

    %{frame_jitter_ms: j, deferred: 301} = Stats.read(alternating)
    assert_in_delta j, 20.0, 0.1
  end
end

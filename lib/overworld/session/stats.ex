defmodule Overworld.Session.Stats do
  @moduledoc """
  What a player's session measures of its snapshots, for operators (`Overworld.Operators.Sessions`):
  frames sent, the interval between them and its jitter, and the runs and keyframes its
  interest deferred for lack of byte budget. One `:atomics` array per session, written by
  the session as it sends a frame (a few atomic writes, no message), read by anyone holding it
  (the session registers it: `Overworld.Names.session_of/1`).

  The jitter is RFC 3550's interarrival jitter applied to the send intervals: on each frame,
  `J += (|interval - previous interval| - J) / 16`.

      iex> s = Overworld.Session.Stats.new()
      iex> Overworld.Session.Stats.frame(s, 2, 1_000_000)
      iex> Overworld.Session.Stats.frame(s, 0, 1_033_000)
      iex> Overworld.Session.Stats.frame(s, 1, 1_066_000)
      iex> Overworld.Session.Stats.frame(s, 0, 1_109_000)
      iex> Overworld.Session.Stats.read(s)
      %{frames: 4, deferred: 3, frame_interval_ms: 43.0, frame_jitter_ms: 0.625}
  """

  @opaque t :: :atomics.atomics_ref()

  # Slots: last frame (µs), last interval (µs), jitter × 16 (µs), frames, deferred.
  @last 1
  @interval 2
  @jitter16 3
  @frames 4
  @deferred 5

  @doc "A session's statistics, all zero."
  @spec new() :: t
  def new, do: :atomics.new(5, signed: true)

  @doc "A frame sent at `now_us` (monotonic microseconds) with `deferred` runs and keyframes deferred."
  @spec frame(t, non_neg_integer, integer) :: :ok
  def frame(s, deferred, now_us \\ System.monotonic_time(:microsecond)) do
    last = :atomics.get(s, @last)
    :atomics.put(s, @last, now_us)
    :atomics.add(s, @frames, 1)
    if deferred > 0, do: :atomics.add(s, @deferred, deferred)

    if :atomics.get(s, @frames) > 1 do
      interval = now_us - last
      previous = :atomics.get(s, @interval)
      :atomics.put(s, @interval, interval)

      if previous > 0 do
        j16 = :atomics.get(s, @jitter16)
        # J16 += |D| - J16 / 16 (J16 = 16 J: integer steps keep the fraction)
        :atomics.put(s, @jitter16, j16 + abs(interval - previous) - div(j16, 16))
      end
    end

    :ok
  end

  @doc "The figures: frames, deferred, the last frame interval and the jitter (ms)."
  @spec read(t) :: %{
          frames: non_neg_integer,
          deferred: non_neg_integer,
          frame_interval_ms: float,
          frame_jitter_ms: float
        }
  def read(s) do
    %{
      frames: :atomics.get(s, @frames),
      deferred: :atomics.get(s, @deferred),
      frame_interval_ms: :atomics.get(s, @interval) / 1000,
      frame_jitter_ms: :atomics.get(s, @jitter16) / 16 / 1000
    }
  end
end

defmodule Overworld.Server.Pace do
  @moduledoc """
  The snapshot pace of a server: how many ticks lie between two snapshots of each of its
  sessions (the *send interval*: 1 is every tick, 2 every other, 3 every third; 30, 15 and
  10 snapshots a second at 30 Hz). It is the same for every session of the server, so that an
  overloaded node shares what it can send evenly instead of leaving some players with almost
  nothing.

  The sessions of a server spread their snapshots over the ticks (each sends on the ticks
  `n` where `rem(n + phase, interval) == 0`, `phase` fixed per session), so the frame work of
  a tick is a share of the sessions, not all of them every `interval` ticks; a session that
  missed its turn (it was busy) sends on the next tick. A snapshot after skipped ticks carries
  everything since (and `Overworld.Interest` gives it the budget of those ticks). Inputs are
  still applied every tick, and acknowledged in the next snapshot. The client is told the
  interval in the snapshot (extension 1, docs/protocol.md) so its interpolation spaces
  samples right.

  ## The controller

  A process at high priority (it must run when the node is saturated) looks every
  `:pace_window` ms (default 500) at the frames the sessions built in the window and how many
  of them were **late** (the next tick's notice was already waiting when the session built
  its frame: the sessions as a whole are more than a tick behind), and at the schedulers'
  utilization:

  * more than 5 % of the frames late in two windows in a row, the schedulers 80 % busy or more
    in both: the interval goes up by one (up to `:max_send_interval`, default 3) at once (a
    single bad window, a pause of the machine, does not count, nor do frames late while the
    schedulers had room: fewer frames would not make them earlier; a real overload is met
    within a second per step);
  * none late for 6 windows in a row, and the schedulers would stay below 80 % busy at the
    shorter interval: the interval goes down by one. The utilization at the shorter interval
    is predicted from the window's: the zones' own work (their ticks' busy time, which does not
    depend on the interval) stays, the rest (the sessions' frames) grows by `k / (k - 1)`. So
    the interval does not swing: it comes down when the load fell enough for the extra frames,
    and not before.

  `interval/1` reads the interval from an `:atomics` (no message); `stats/1` says how often it
  changed. With `pace: false` the interval stays 1.

  ## Admission

  At the largest interval, and late or above 70 % busy (no room left: one more player would take
  everyone below the slowest rate), the server is **saturated**, and stays so until it has had
  room for 2 s (4 windows under 60 % busy, or at a shorter interval): admitting again the moment
  the load dips would let a wave of waiting players in at once. New players are then refused (`admit/2`: close code
  4008 with ERROR 8, whose message starts with `retry_after=N;`, docs/protocol.md), and so
  are players beyond `:max_players` in a zone; a player resuming its avatar is never refused.
  The wait a refused player is told (`retry_after/1`) is `:retry_after` seconds, doubled for
  every 10 s the server has been saturated without a break, up to 8 times as long: players
  refused and trying again do not keep a saturated node busy refusing them.
  """
  use GenServer

  alias Overworld.Server

  # atomics: 1 the interval in force, 2 changes so far, 3 saturated (1: at the largest interval,
  # late or no room left, in the last window: new players are refused, see `admit/2`).
  @interval 1
  @changes 2
  @saturated 3
  # 4: since when the server has been saturated without a break (monotonic ms; read while 3 is 1).
  @saturated_since 4

  @late_share 0.05
  @late_windows 2
  @calm_windows 6
  # The most the schedulers may be busy at a shorter interval (predicted) to step down to it.
  @busy_limit 0.8
  # The most they may be busy at the largest interval to admit new players (the zones' ticks
  # must stay on time there: a skipped tick is a snapshot fewer for everyone), and how long
  # (windows) and how far below it the load stays before a saturated server admits again.
  @admit_limit 0.7
  @room_limit 0.6
  @room_windows 4

  @doc false
  @spec new() :: :atomics.atomics_ref()
  def new do
    ref = :atomics.new(4, signed: true)
    :atomics.put(ref, @interval, 1)
    ref
  end

  @doc "The send interval in force (ticks between two snapshots of a session)."
  @spec interval(Server.Config.t()) :: pos_integer
  def interval(%{pace: ref}), do: :atomics.get(ref, @interval)

  @doc false
  # Sets the interval (tests; the controller, when it runs, goes on from there).
  @spec put(Server.Config.t(), pos_integer) :: :ok
  def put(%{pace: ref}, k) when is_integer(k) and k >= 1 do
    if :atomics.exchange(ref, @interval, k) != k, do: :atomics.add(ref, @changes, 1)
    :ok
  end

  @doc """
  The interval in force, how many times it changed since the server started, and whether the
  server is saturated (at the largest interval, late or with no room left).
  """
  @spec stats(Server.Config.t()) :: %{
          interval: pos_integer,
          changes: non_neg_integer,
          saturated: boolean
        }
  def stats(%{pace: ref}),
    do: %{
      interval: :atomics.get(ref, @interval),
      changes: :atomics.get(ref, @changes),
      saturated: :atomics.get(ref, @saturated) == 1
    }

  @doc """
  Whether a new player may join `zone` now: not when the server is saturated (lowering the
  snapshot rate further would leave everyone below the slowest rate allowed), nor when the
  zone holds `:max_players` players already. Answers `:ok` or `{:full, why}`. Players
  resuming their avatar (a reconnect within the grace period) are not asked.
  """
  @spec admit(Server.Config.t(), term) :: :ok | {:full, String.t()}
  def admit(%{pace: ref} = cfg, zone) do
    cond do
      :atomics.get(ref, @saturated) == 1 ->
        {:full,
         "the server is saturated (a snapshot every #{:atomics.get(ref, @interval)} ticks: " <>
           "frames late or no room left)"}

      cfg.max_players != nil ->
        full(players(zone), cfg.max_players)

      true ->
        :ok
    end
  end

  defp full(players, max) when players >= max,
    do: {:full, "the zone holds #{players} players (at most #{max})"}

  defp full(_players, _max), do: :ok

  defp players(nil), do: 0

  defp players(zone) do
    case Overworld.Zone.metrics_ref(zone) do
      nil -> 0
      m -> Overworld.Zone.Metrics.get(m, :players)
    end
  end

  @doc false
  # Sets or clears the saturated flag (the controller; tests); a server saturated already keeps
  # the time it became so (`ago`: ms it has been saturated, for tests).
  @spec saturate(Server.Config.t(), boolean, non_neg_integer) :: :ok
  def saturate(%{pace: ref}, on?, ago \\ 0) do
    now = System.monotonic_time(:millisecond)

    cond do
      not on? ->
        :atomics.put(ref, @saturated, 0)

      :atomics.exchange(ref, @saturated, 1) == 0 or ago > 0 ->
        :atomics.put(ref, @saturated_since, now - ago)

      true ->
        :ok
    end

    :ok
  end

  @doc """
  The seconds a player refused now is told to wait: `:retry_after`, longer the longer the
  server has been saturated (`backoff/2`).
  """
  @spec retry_after(Server.Config.t()) :: pos_integer
  def retry_after(%{pace: ref} = cfg) do
    if :atomics.get(ref, @saturated) == 1 do
      since = :atomics.get(ref, @saturated_since)
      backoff(cfg.retry_after, max(0, System.monotonic_time(:millisecond) - since))
    else
      cfg.retry_after
    end
  end

  @doc """
  A wait of `base` seconds doubled for every 10 s of `saturated_ms` (the time the server has
  been saturated without a break), at most 8 times `base`.

      iex> alias Overworld.Server.Pace
      iex> Enum.map([0, 9_999, 10_000, 25_000, 600_000], &Pace.backoff(5, &1))
      [5, 5, 10, 20, 40]
  """
  @spec backoff(pos_integer, non_neg_integer) :: pos_integer
  def backoff(base, saturated_ms), do: base * Bitwise.bsl(1, min(3, div(saturated_ms, 10_000)))

  @doc """
  The next interval from the current one and a window's figures: `built` frames, `late` ones,
  the schedulers' `utilization` (0..1) and `base`, the share of it that is the zones' own work
  (0..1), and the controller's memory `{calm, late}` (windows in a row without late frames, and
  with too many). Answers `{interval, {calm, late}}`.

      iex> alias Overworld.Server.Pace
      iex> late = %{built: 1000, late: 80, utilization: 0.99, base: 0.3}
      iex> Pace.next(1, 3, late, {0, 0})
      {1, {0, 1}}
      iex> Pace.next(1, 3, late, {0, 1})
      {2, {0, 0}}
      iex> Pace.next(3, 3, late, {0, 1})
      {3, {0, 2}}
      iex> # late, but the schedulers had room: not an overload
      iex> Pace.next(1, 3, %{late | utilization: 0.6}, {0, 1})
      {1, {0, 0}}
      iex> # calm: at interval 1 the frames would take 2 x 0.2 beside the zones' 0.3
      iex> Pace.next(2, 3, %{built: 1000, late: 0, utilization: 0.5, base: 0.3}, {5, 0})
      {1, {0, 0}}
      iex> # no late frames, but at interval 1 the schedulers would be 0.3 + 2 x 0.3 busy
      iex> Pace.next(2, 3, %{built: 1000, late: 0, utilization: 0.6, base: 0.3}, {5, 0})
      {2, {6, 0}}
      iex> # at interval 3 with 0.6 busy, 2 would be 0.3 + 1.5 x 0.3: down to 2
      iex> Pace.next(3, 3, %{built: 1000, late: 0, utilization: 0.6, base: 0.3}, {5, 0})
      {2, {0, 0}}
  """
  @spec next(pos_integer, pos_integer, map, {non_neg_integer, non_neg_integer}) ::
          {pos_integer, {non_neg_integer, non_neg_integer}}
  def next(k, max, window, {calm, lates}) do
    # (Late while the schedulers had room is no overload: the machine paused, or another
    # process had the cores; fewer frames would not bring them on time.)
    lates = if late?(window) and window.utilization >= @busy_limit, do: lates + 1, else: 0
    calm = if window.late == 0, do: calm + 1, else: 0

    cond do
      lates >= @late_windows and k < max ->
        {k + 1, {0, 0}}

      k > 1 and calm >= @calm_windows and busy_at(k - 1, k, window) < @busy_limit ->
        {k - 1, {0, 0}}

      true ->
        {k, {calm, lates}}
    end
  end

  @doc """
  The schedulers' utilization predicted at interval `k2` from a window at interval `k`: the
  zones' own share (`base`) stays, the frames' share scales with the frames sent.

      iex> Overworld.Server.Pace.busy_at(1, 2, %{utilization: 0.5, base: 0.3})
      0.7
  """
  @spec busy_at(pos_integer, pos_integer, map) :: float
  def busy_at(k2, k, %{utilization: util, base: base}) do
    base = base |> max(0.0) |> min(util)
    Float.round(base + (util - base) * k / k2, 6)
  end

  @doc false
  def child_spec(name),
    do: %{id: __MODULE__, start: {GenServer, :start_link, [__MODULE__, name]}}

  @impl true
  def init(name) do
    Process.flag(:priority, :high)
    cfg = Server.config(name)
    schedule(cfg.pace_window)

    {:ok,
     %{
       cfg: cfg,
       sample: Overworld.Metrics.CPU.sample(),
       counts: counts(cfg),
       zones: zones_busy(),
       at: System.monotonic_time(:microsecond),
       memory: {0, 0},
       room: 0
     }}
  end

  @impl true
  def handle_info(:window, %{cfg: cfg} = st) do
    schedule(cfg.pace_window)
    sample = Overworld.Metrics.CPU.sample()
    counts = counts(cfg)
    util = Overworld.Metrics.CPU.compare(st.sample, sample).scheduler
    zones = zones_busy()
    at = System.monotonic_time(:microsecond)

    window = %{
      built: counts.built - st.counts.built,
      late: counts.late - st.counts.late,
      utilization: util,
      base: base(st.zones, zones, at - st.at)
    }

    k = :atomics.get(cfg.pace, @interval)
    {k2, memory} = next(k, cfg.max_send_interval, window, st.memory)

    put(cfg, k2)
    # At the largest interval, late or no room left: saturated (new players are refused) until
    # there has been room for a while.
    was? = :atomics.get(cfg.pace, @saturated) == 1
    {sat?, room} = admission(was?, k2, cfg.max_send_interval, window, st.room)
    saturate(cfg, sat?)

    {:noreply,
     %{st | sample: sample, counts: counts, zones: zones, at: at, memory: memory, room: room}}
  end

  # The busy time of each running zone so far (µs): its workers' phases (systems and grid, run
  # by its workers side by side, on at most as many schedulers) and its server's (input and
  # the rest).
  defp zones_busy do
    schedulers = System.schedulers_online()

    for zone <- Overworld.zones(),
        %{shared: m, workers: w} <- [Overworld.Zone.config(zone)],
        into: %{} do
      g = &Overworld.Zone.Metrics.get(m, &1)

      {zone,
       (g.(:systems_us) + g.(:grid_us)) * min(w, schedulers) + g.(:input_us) + g.(:other_us)}
    end
  end

  # The zones' share of the schedulers in a window of `us` microseconds (zones that started or
  # restarted in it count from what they did since).
  defp base(before, now, us) when us > 0 do
    busy =
      Enum.reduce(now, 0, fn {zone, b}, acc ->
        case before do
          %{^zone => a} when a <= b -> acc + b - a
          _ -> acc + b
        end
      end)

    busy / (us * System.schedulers_online())
  end

  defp base(_before, _now, _us), do: 0.0

  @doc """
  Whether a window leaves the server saturated: at the largest interval, frames late or the
  schedulers above 70 % busy (no room left for another player's frames).

      iex> alias Overworld.Server.Pace
      iex> Pace.saturated?(3, 3, %{built: 1000, late: 0, utilization: 0.75})
      true
      iex> Pace.saturated?(3, 3, %{built: 1000, late: 300, utilization: 0.6})
      true
      iex> Pace.saturated?(1, 3, %{built: 1000, late: 300, utilization: 0.6})
      false
      iex> Pace.saturated?(2, 3, %{built: 1000, late: 0, utilization: 0.9})
      false
      iex> Pace.saturated?(3, 3, %{built: 1000, late: 10, utilization: 0.6})
      false
  """
  @spec saturated?(pos_integer, pos_integer, map) :: boolean
  def saturated?(k, max, window),
    do: k == max and (late?(window) or window.utilization > @admit_limit)

  @doc """
  Whether the server is saturated after a window, from whether it was and the windows in a
  row it has had room (answered beside): saturated by `saturated?/3`; once saturated, until 4
  windows in a row had room (a shorter interval than the largest, or under 60 % busy and none
  late).

      iex> alias Overworld.Server.Pace
      iex> busy = %{built: 1000, late: 0, utilization: 0.75}
      iex> room = %{built: 1000, late: 0, utilization: 0.5}
      iex> Pace.admission(false, 3, 3, busy, 0)
      {true, 0}
      iex> Pace.admission(true, 3, 3, room, 0)
      {true, 1}
      iex> Pace.admission(true, 3, 3, room, 3)
      {false, 0}
      iex> Pace.admission(true, 3, 3, %{room | utilization: 0.65}, 2)
      {true, 0}
      iex> Pace.admission(true, 2, 3, busy, 3)
      {false, 0}
      iex> Pace.admission(false, 3, 3, %{room | utilization: 0.65}, 0)
      {false, 0}
  """
  @spec admission(boolean, pos_integer, pos_integer, map, non_neg_integer) ::
          {boolean, non_neg_integer}
  def admission(was?, k, max, window, room) do
    room? = k < max or (not late?(window) and window.utilization < @room_limit)

    cond do
      saturated?(k, max, window) -> {true, 0}
      not was? -> {false, 0}
      room? and room + 1 >= @room_windows -> {false, 0}
      room? -> {true, room + 1}
      true -> {true, 0}
    end
  end

  defp late?(%{built: built, late: late}), do: built > 0 and late / built > @late_share

  defp counts(cfg) do
    c = cfg.counters

    %{
      built: :counters.get(c, Server.counter(:frames_out)),
      late: :counters.get(c, Server.counter(:frames_late))
    }
  end

  defp schedule(ms), do: Process.send_after(self(), :window, ms)
end

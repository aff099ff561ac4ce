defmodule Overworld.Bench.Inputs do
  @moduledoc false
  # What players' inputs cost a zone's server process. The zone runs with `players` joined
  # avatars (no sockets); the rounds alternate between no inputs and every player sending `hz`
  # inputs per second, spread evenly over time by `injectors` processes (each owns a share of
  # the players and sends, every 10 ms, the inputs of its share that are due). Per tick:
  #
  #   * the server process's CPU time: the time it was scheduled in (`:erlang.trace/3`
  #     `:running` events with monotonic timestamps) between the start of the tick and the
  #     start of the next, so the inputs received between ticks count;
  #   * the tick's lateness: how long after its deadline it started (`tick.stop`'s `lateness`);
  #   * the tick's duration.
  #
  # The injection is a function (`inject`), so the same scenario measures any way of handing
  # inputs to a zone (the current one: `Overworld.Zone.input_slot/2` + `put_input/3`).

  alias Overworld.Bench.{Running, Stats}

  @type opts :: %{
          zone: term,
          players: [term],
          hz: pos_integer,
          rounds: pos_integer,
          seconds: pos_integer,
          injectors: pos_integer,
          prepare: (term -> term),
          inject: (term, non_neg_integer, non_neg_integer -> any)
        }

  @doc """
  Runs the rounds and answers the per-tick figures of each mode (`:off`, `:on`) and their
  differences. `prepare.(player)` runs once per player in its injector (e.g. to look up an
  input slot); `inject.(prepared, seq, i)` sends input number `seq` (`i` varies the input).
  """
  @spec run(opts) :: map
  def run(o) do
    server = Overworld.Zone.whereis(o.zone) || raise "zone #{inspect(o.zone)} is not running"
    shares = shares(o.players, o.injectors)
    cpu0 = Overworld.Metrics.CPU.sample()

    rounds =
      for r <- 1..o.rounds, mode <- if(rem(r, 2) == 1, do: [:off, :on], else: [:on, :off]) do
        round(o, server, shares, mode)
      end

    cpu = Overworld.Metrics.CPU.compare(cpu0, Overworld.Metrics.CPU.sample())
    off = merge(for {:off, t} <- rounds, do: t)
    on = merge(for {:on, t} <- rounds, do: t)

    %{
      players: length(o.players),
      hz: o.hz,
      rounds: o.rounds,
      seconds_per_round: o.seconds,
      injectors: o.injectors,
      off: summarize(off),
      on: summarize(on),
      inputs_per_second: rate(on),
      scheduler_utilization: Float.round(cpu.scheduler, 3),
      os_cpu: cpu.os_cpu && Float.round(cpu.os_cpu, 3)
    }
  end

  defp shares(players, n) do
    players
    |> Enum.with_index()
    |> Enum.group_by(fn {_p, i} -> rem(i, n) end, fn {p, _} -> p end)
    |> Map.values()
  end

  # One round of `seconds` in one mode: the ticks it saw and the inputs it sent.
  defp round(o, server, shares, mode) do
    me = self()
    injectors = if mode == :on, do: Enum.map(shares, &start_injector(o, &1, me)), else: []
    # Let the injectors reach their rate before the window opens.
    Process.sleep(500)
    handler = {__MODULE__, make_ref()}

    :ok =
      Overworld.Telemetry.attach(
        handler,
        [:overworld, :zone, :tick, :stop],
        fn _e, m, meta, {pid, zone} ->
          if meta.zone == zone do
            now = System.monotonic_time()
            send(pid, {:tick, meta.tick, now - m.duration, m.duration, m.lateness})
          end
        end,
        {me, o.zone}
      )

    sent0 = count_sent(injectors)
    Running.trace(server)
    t_end = System.monotonic_time(:millisecond) + o.seconds * 1000
    {ticks, runs} = collect(server, t_end, [], [])
    Running.untrace(server)
    Overworld.Telemetry.detach(handler)
    sent = count_sent(injectors) - sent0
    Enum.each(injectors, fn {pid, _} -> send(pid, :stop) end)
    flush()
    {mode, %{ticks: per_tick(Enum.reverse(ticks), runs), sent: sent, s: o.seconds}}
  end

  # The ticks (newest first) and the server's running intervals (in order) until `t_end`.
  defp collect(server, t_end, ticks, events) do
    left = t_end - System.monotonic_time(:millisecond)

    receive do
      {:tick, n, start, duration, lateness} ->
        collect(server, t_end, [{n, start, duration, lateness} | ticks], events)

      {:trace_ts, ^server, inout, _mfa, ts} ->
        collect(server, t_end, ticks, Running.event(events, inout, ts))
    after
      max(left, 0) -> {ticks, Running.intervals(events)}
    end
  end

  # Each tick's server CPU: the running intervals between its start and the next tick's start
  # (the last tick of the window has no next: left out).
  defp per_tick(ticks, runs) do
    pairs = Enum.chunk_every(ticks, 2, 1, :discard)
    windows = for [{_, start, _, _}, {_, next, _, _}] <- pairs, do: {start, next}

    cpu = Running.on_cpu(windows, runs)

    for {[{_n, _, duration, lateness}, _], cpu} <- Enum.zip(pairs, cpu) do
      %{cpu: us(cpu), lateness: us(lateness), duration: us(duration)}
    end
  end

  defp us(native), do: System.convert_time_unit(native, :native, :microsecond)

  defp merge(parts) do
    %{
      ticks: Enum.flat_map(parts, & &1.ticks),
      sent: Enum.sum(Enum.map(parts, & &1.sent)),
      s: Enum.sum(Enum.map(parts, & &1.s))
    }
  end

  defp rate(%{sent: sent, s: s}) when s > 0, do: round(sent / s)
  defp rate(_), do: 0

  defp summarize(%{ticks: ticks}) do
    %{
      ticks: length(ticks),
      server_cpu_us: Stats.summary(Enum.map(ticks, & &1.cpu)),
      lateness_us: Stats.summary(Enum.map(ticks, & &1.lateness)),
      tick_us: Stats.summary(Enum.map(ticks, & &1.duration))
    }
  end

  ## Injectors

  defp start_injector(o, players, parent) do
    spawn_link(fn ->
      prepared = players |> Enum.map(o.prepare) |> List.to_tuple()
      counter = :counters.new(1, [:write_concurrency])
      send(parent, {:injector, self(), counter})
      inject_loop(o, prepared, counter, 0, System.monotonic_time(:millisecond), 1)
    end)
    |> then(fn pid ->
      receive do
        {:injector, ^pid, counter} -> {pid, counter}
      end
    end)
  end

  # Every 10 ms, the players whose input is due: player i of n sends at phase i/n of each
  # 1/hz period, so the share's inputs are spread evenly.
  defp inject_loop(o, prepared, counter, next, t0, seq) do
    receive do
      :stop -> :ok
    after
      0 ->
        n = tuple_size(prepared)
        period = 1000 / o.hz
        now = System.monotonic_time(:millisecond) - t0
        # Inputs due up to now: floor(now / period * n) in all (an injector more than a
        # period behind skips ahead rather than bursting).
        due = trunc(now / period * n)
        next = max(next, due - n)

        for k <- next..(due - 1)//1 do
          i = rem(k, n)
          o.inject.(elem(prepared, i), div(k, n) + seq, k)
        end

        :counters.add(counter, 1, max(due - next, 0))
        Process.sleep(10)
        inject_loop(o, prepared, counter, max(due, next), t0, seq)
    end
  end

  defp count_sent(injectors),
    do: Enum.sum(for({_pid, c} <- injectors, do: :counters.get(c, 1)))

  defp flush do
    receive do
      {:tick, _, _, _, _} -> flush()
      {:trace_ts, _, _, _, _} -> flush()
    after
      50 -> :ok
    end
  end
end

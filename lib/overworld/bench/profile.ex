defmodule Overworld.Bench.Profile do
  @moduledoc """
  Where a running node's time goes, over a window: the schedulers' time by state
  (`:msacc`: emulator, garbage collection, ports, ...), the reductions of its processes by
  kind (their initial call's module: the zones' bucket workers, the connections, ...), and
  optionally `:eprof` on the processes of one kind (function by function; it slows them, so
  it runs after the other two, in a window of its own).

      iex> r = Overworld.Bench.Profile.sample(100)
      iex> Enum.all?(r.kinds, &(&1.reductions >= 0 and &1.processes > 0))
      true
      iex> is_map(r.msacc["scheduler"]) and r.ms >= 100
      true
  """

  @typedoc """
  `ms`: the window measured; `msacc`: thread type => state => share of that type's threads'
  time (0..1, averaged over the threads of the type); `kinds`: the reductions per process kind
  in the window, most first; `eprof`: function => `{calls, µs}` of the profiled kind, most time
  first (nil when none was asked).
  """
  @type t :: %{
          ms: non_neg_integer,
          msacc: %{optional(String.t()) => %{optional(String.t()) => float}},
          kinds: [%{kind: String.t(), processes: non_neg_integer, reductions: non_neg_integer}],
          eprof: [%{function: String.t(), calls: non_neg_integer, us: non_neg_integer}] | nil
        }

  @doc """
  Samples `ms` milliseconds of the whole node (msacc, reductions by kind), then, with
  `eprof: kind` (a module name as `kinds/0` names them, e.g. `"Overworld.Transport.Conn"`),
  `:eprof` on that kind's processes for `:eprof_ms` (default 3000).
  """
  @spec sample(pos_integer, keyword) :: t
  def sample(ms, opts \\ []) do
    :msacc.start()
    before = reductions()
    t0 = System.monotonic_time(:millisecond)
    Process.sleep(ms)
    after_ = reductions()
    took = System.monotonic_time(:millisecond) - t0
    stats = :msacc.stats()
    :msacc.stop()

    %{
      ms: took,
      msacc: by_type(stats),
      kinds: kinds(before, after_),
      eprof: if(kind = opts[:eprof], do: eprof(kind, Keyword.get(opts, :eprof_ms, 3000)))
    }
  end

  @doc "A process's kind: the module of its initial call (`:proc_lib` processes' own)."
  @spec kind(pid) :: String.t()
  def kind(pid) do
    case :proc_lib.translate_initial_call(pid) do
      {m, _, _} -> inspect(m)
      _ -> "unknown"
    end
  end

  defp reductions do
    for p <- Process.list(), info = Process.info(p, :reductions), info != nil, into: %{} do
      {:reductions, r} = info
      {p, r}
    end
  end

  defp kinds(before, after_) do
    after_
    |> Enum.reduce(%{}, fn {p, r}, acc ->
      d = r - Map.get(before, p, 0)
      Map.update(acc, kind(p), {d, 1}, fn {x, n} -> {x + d, n + 1} end)
    end)
    |> Enum.map(fn {k, {r, n}} -> %{kind: k, processes: n, reductions: r} end)
    |> Enum.sort_by(&(-&1.reductions))
  end

  # msacc's counters summed per thread type, as shares of the type's time.
  defp by_type(stats) do
    stats
    |> Enum.group_by(& &1.type)
    |> Map.new(fn {type, threads} ->
      counters =
        Enum.reduce(threads, %{}, fn t, acc ->
          Map.merge(acc, t.counters, fn _, a, b -> a + b end)
        end)

      total = counters |> Map.values() |> Enum.sum()

      {to_string(type),
       Map.new(counters, fn {state, n} ->
         {to_string(state), if(total > 0, do: Float.round(n / total, 4), else: 0.0)}
       end)}
    end)
  end

  @doc """
  `:eprof` on the processes of `kind` for `ms` milliseconds: function => calls and µs of own
  time, most time first (see `t:t/0`).
  """
  @spec eprof(String.t(), pos_integer) :: [
          %{function: String.t(), calls: non_neg_integer, us: non_neg_integer}
        ]
  def eprof(kind, ms) do
    pids = for p <- Process.list(), kind(p) == kind, do: p
    {:ok, _} = :eprof.start()

    try do
      :eprof.start_profiling(pids)
      Process.sleep(ms)
      :eprof.stop_profiling()
      # eprof's results: [{pid, [{{m, f, a}, {calls, µs}}]}] per process, or merged.
      :eprof.dump()
      |> Enum.flat_map(fn {_pid, funs} -> funs end)
      |> Enum.reduce(%{}, fn {mfa, {calls, us}}, acc ->
        Map.update(acc, mfa, {calls, us}, fn {c, u} -> {c + calls, u + us} end)
      end)
      |> Enum.map(fn {{m, f, a}, {calls, us}} ->
        %{function: "#{inspect(m)}.#{f}/#{a}", calls: calls, us: us}
      end)
      |> Enum.sort_by(&(-&1.us))
    after
      :eprof.stop()
    end
  end

  @doc "The report as lines of text (the `top` heaviest kinds and functions)."
  @spec format(t, pos_integer) :: [String.t()]
  def format(r, top \\ 12) do
    states = ~w(emulator gc port check_io aux other sleep)

    msacc =
      for type <- ["scheduler", "dirty_cpu_scheduler", "dirty_io_scheduler"],
          shares = r.msacc[type],
          shares != nil do
        cols = Enum.map_join(states, "  ", &"#{&1} #{pct(shares[&1] || 0.0)}")
        "  #{String.pad_trailing(type, 20)} #{cols}"
      end

    total = r.kinds |> Enum.map(& &1.reductions) |> Enum.sum() |> max(1)

    kinds =
      for k <- Enum.take(r.kinds, top) do
        "  #{String.pad_trailing(k.kind, 40)} #{String.pad_leading(to_string(k.processes), 6)} processes " <>
          "#{String.pad_leading(to_string(k.reductions), 12)} reductions  #{pct(k.reductions / total)}"
      end

    eprof =
      case r.eprof do
        nil ->
          []

        funs ->
          all = funs |> Enum.map(& &1.us) |> Enum.sum() |> max(1)

          ["eprof (the kind's processes, function by function; own time):"] ++
            for f <- Enum.take(funs, top) do
              "  #{String.pad_trailing(f.function, 60)} #{String.pad_leading(to_string(f.calls), 9)} calls " <>
                "#{String.pad_leading(to_string(f.us), 9)} µs  #{pct(f.us / all)}"
            end
      end

    ["schedulers by state over #{r.ms} ms (share of each type's threads' time):"] ++
      msacc ++ ["reductions by process kind over #{r.ms} ms:"] ++ kinds ++ eprof
  end

  defp pct(x), do: "#{:erlang.float_to_binary(x * 100.0, decimals: 1)} %"
end

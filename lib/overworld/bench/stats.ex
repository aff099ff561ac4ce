defmodule Overworld.Bench.Stats do
  @moduledoc false
  # Exact statistics over raw samples, for the benchmarks and the tests that print figures:
  # nearest-rank percentiles, the median, and the text that says what a percentile rests on.

  @doc """
  Summary of samples: count, avg, median, p50, p90, p99, p99.9 and max (nil when empty).

  The percentiles are **nearest-rank**: `pN` is the smallest sample with at least N % of the
  samples at or below it, so it is always one of the samples (as the percentiles of
  `Overworld.Metrics.Histogram` are, and as the `*_p50_*` keys of the benchmarks' JSON have
  always been). For an even count, `p50` is therefore the lower of the two middle samples;
  `median` is the true median, the mean of the two (the middle sample for an odd count).

      iex> Overworld.Bench.Stats.summary(Enum.to_list(1..1000))
      %{count: 1000, avg: 500.5, median: 500.5, p50: 500, p90: 900, p99: 990, p999: 999, max: 1000}
      iex> Overworld.Bench.Stats.summary([4, 1, 3, 2])
      %{count: 4, avg: 2.5, median: 2.5, p50: 2, p90: 4, p99: 4, p999: 4, max: 4}
      iex> Overworld.Bench.Stats.summary([30, 10, 20])
      %{count: 3, avg: 20.0, median: 20, p50: 20, p90: 30, p99: 30, p999: 30, max: 30}
      iex> Overworld.Bench.Stats.summary([])
      %{count: 0, avg: nil, median: nil, p50: nil, p90: nil, p99: nil, p999: nil, max: nil}
  """
  @spec summary([number]) :: map
  def summary([]),
    do: %{count: 0, avg: nil, median: nil, p50: nil, p90: nil, p99: nil, p999: nil, max: nil}

  def summary(samples) do
    sorted = samples |> Enum.sort() |> List.to_tuple()
    n = tuple_size(sorted)
    at = fn p -> elem(sorted, max(ceil(p * n / 100) - 1, 0)) end

    %{
      count: n,
      avg: Enum.sum(samples) / n,
      median: middle(sorted, n),
      p50: at.(50),
      p90: at.(90),
      p99: at.(99),
      p999: at.(99.9),
      max: elem(sorted, n - 1)
    }
  end

  @doc """
  The median of samples: the middle one, or the mean of the two middle ones for an even count
  (nil when empty).

      iex> Overworld.Bench.Stats.median([5, 1, 3])
      3
      iex> Overworld.Bench.Stats.median([4, 1, 3, 2])
      2.5
      iex> Overworld.Bench.Stats.median([-1.5, 2.5])
      0.5
      iex> Overworld.Bench.Stats.median([])
      nil
  """
  @spec median([number]) :: number | nil
  def median([]), do: nil

  def median(samples) do
    sorted = samples |> Enum.sort() |> List.to_tuple()
    middle(sorted, tuple_size(sorted))
  end

  defp middle(sorted, n) when rem(n, 2) == 1, do: elem(sorted, div(n, 2))
  defp middle(sorted, n), do: (elem(sorted, div(n, 2) - 1) + elem(sorted, div(n, 2))) / 2

  @doc """
  How much a percentile of `n` samples can be trusted: "ok", or a warning.

      iex> Overworld.Bench.Stats.confidence(99, 20_000)
      "rests on 200 samples above it"
      iex> Overworld.Bench.Stats.confidence(99, 1_800)
      "only 18 samples above it: needs 10000 samples"
      iex> Overworld.Bench.Stats.confidence(99.9, 2_000)
      "only 2 samples above it: needs 100000 samples"
  """
  @spec confidence(number, non_neg_integer) :: String.t()
  def confidence(p, n) do
    above = above(p, n)
    needed = needed(p)

    if n >= needed,
      do: "rests on #{above} samples above it",
      else: "only #{above} samples above it: needs #{needed} samples"
  end

  # DESIGN.md: a p99 needs at least 10,000 samples, i.e. 100 above it; so does any percentile.
  defp needed(p), do: round(10_000 / (100 - p))
  defp above(p, n), do: round(n * (100 - p) / 100)

  @doc """
  The percentiles `ps` of a summary as text that says what they rest on; every print-out of
  percentiles goes through it. `summary` is `summary/1`'s or
  `Overworld.Metrics.Histogram.summary/1`'s: a map with `count`, `max` and the percentiles'
  keys (50 is `median` where the summary has one, else `p50`; 90 `p90`; 99 `p99`; 99.9
  `p999`).

  `ps` are 50 and percentiles above it. The median (or p50) is printed with the count it
  rests on. A percentile above it is printed
  only when at least 100 samples lie above it (a p99 needs 10,000 samples: `confidence/2`);
  otherwise it is left out, the text says how many samples it would need, and the maximum and
  the count say what the samples can. Options: `unit` (after each value, e.g. `" µs"`), `of`
  (what the samples are, default `"samples"`).

      iex> s = Overworld.Bench.Stats.summary(Enum.to_list(1..100))
      iex> Overworld.Bench.Stats.describe(s, [50, 99], unit: " µs")
      "median 50.5 µs, max 100 µs (100 samples; a p99 needs 10000)"
      iex> s = Overworld.Bench.Stats.summary(Enum.to_list(1..20_000))
      iex> Overworld.Bench.Stats.describe(s, [50, 90, 99, 99.9], of: "ticks")
      "median 10000.5, p90 18000, p99 19800, max 20000 (20000 ticks; 200 above the p99; a p99.9 needs 100000)"
      iex> Overworld.Bench.Stats.describe(%{count: 1, p50: 7, p99: 7, max: 7}, [50, 99])
      "p50 7, max 7 (1 sample; a p99 needs 10000)"
      iex> Overworld.Bench.Stats.describe(Overworld.Bench.Stats.summary([]), [50, 99])
      "no samples"
  """
  @spec describe(map, [number], keyword) :: String.t()
  def describe(summary, ps, opts \\ [])

  def describe(%{count: 0}, _ps, opts), do: "no " <> Keyword.get(opts, :of, "samples")

  def describe(%{count: n, max: max} = summary, ps, opts) do
    unit = Keyword.get(opts, :unit, "")
    of = Keyword.get(opts, :of, "samples")
    of = if n == 1, do: String.trim_trailing(of, "s"), else: of
    {tails, middles} = Enum.split_with(ps, &(&1 > 50))
    {shown, missing} = Enum.split_with(tails, &(n >= needed(&1)))

    middle =
      for 50 <- middles do
        case summary do
          %{median: m} -> "median #{value(m)}#{unit}"
          %{p50: m} -> "p50 #{value(m)}#{unit}"
        end
      end

    values = for p <- shown, do: "#{label(p)} #{value(Map.fetch!(summary, key(p)))}#{unit}"
    # The highest percentile shown: how many samples lie above it.
    rests = for p <- Enum.take(Enum.sort(shown), -1), do: "#{above(p, n)} above the #{label(p)}"
    needs = for p <- missing, do: "a #{label(p)} needs #{needed(p)}"

    Enum.join(middle ++ values ++ ["max #{value(max)}#{unit}"], ", ") <>
      " (" <> Enum.join(["#{n} #{of}" | rests ++ needs], "; ") <> ")"
  end

  defp label(p), do: "p" <> value(p)
  defp key(p), do: String.to_existing_atom("p" <> String.replace(value(p), ".", ""))

  defp value(v) when is_float(v), do: v |> Float.round(3) |> Float.to_string()
  defp value(v), do: to_string(v)

  @doc """
  Starts the application for a benchmark or the demo server, with the schedulers bound to CPUs
  (see `Overworld.bind_schedulers/0`).
  """
  @spec start_node() :: :ok
  def start_node do
    Mix.Task.run("app.start")

    case Overworld.bind_schedulers() do
      :ok ->
        :ok

      {:error, reason} ->
        Mix.shell().error("could not bind schedulers (#{inspect(reason)}); ticks may be slower")
    end
  end

  @doc "The machine and runtime the figures were measured on."
  @spec machine() :: map
  def machine do
    cpu =
      case File.read("/proc/cpuinfo") do
        {:ok, text} ->
          Regex.run(~r/model name\s*:\s*(.+)/, text, capture: :all_but_first)
          |> List.wrap()
          |> List.first()

        _ ->
          nil
      end

    %{
      cpu: cpu || "unknown",
      cores:
        :erlang.system_info(:logical_processors_available)
        |> then(&if(is_integer(&1), do: &1, else: System.schedulers_online())),
      schedulers: System.schedulers_online(),
      otp: System.otp_release(),
      erts: :erlang.system_info(:version) |> to_string(),
      elixir: System.version(),
      jit: :erlang.system_info(:emu_flavor) == :jit,
      open_files_limit: open_files_limit()
    }
  end

  defp open_files_limit do
    case System.cmd("sh", ["-c", "ulimit -n"], stderr_to_stdout: true) do
      {out, 0} -> String.trim(out)
      _ -> "unknown"
    end
  end

  @doc "The line that names the machine (`machine/0`) in a benchmark's header."
  @spec machine_line(map) :: String.t()
  def machine_line(m) do
    "Machine: #{m.cpu}, #{m.schedulers} schedulers, OTP #{m.otp} (erts #{m.erts}, JIT #{m.jit}), Elixir #{m.elixir}"
  end

  @doc """
  Writes a benchmark's result for `--json PATH` (nothing when `path` is nil), with the machine's
  CPU, OTP and Elixir versions, and says so.
  """
  @spec write_result(Path.t() | nil, map, map) :: :ok
  def write_result(nil, _result, _machine), do: :ok

  def write_result(path, result, machine) do
    write_json(
      path,
      Map.merge(result, %{machine_cpu: machine.cpu, otp: machine.otp, elixir: machine.elixir})
    )

    Mix.shell().info("wrote #{path}")
  end

  @doc "Writes a map as one JSON object (creating the directory); `nil` is JSON's `null`."
  @spec write_json(Path.t(), map) :: :ok
  def write_json(path, map) do
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, [:jiffy.encode(map, [:pretty, :use_nil]), "\n"])
  end
end

defmodule Overworld.Bench.Stats do
  @moduledoc false
  # Exact statistics over raw samples, for the benchmarks (nearest-rank percentiles).

  @doc """
  Summary of samples: count, avg, p50, p90, p99, p99.9 and max (nil when empty).

      iex> Overworld.Bench.Stats.summary(Enum.to_list(1..1000))
      %{count: 1000, avg: 500.5, p50: 500, p90: 900, p99: 990, p999: 999, max: 1000}
  """
  @spec summary([number]) :: map
  def summary([]), do: %{count: 0, avg: nil, p50: nil, p90: nil, p99: nil, p999: nil, max: nil}

  def summary(samples) do
    sorted = samples |> Enum.sort() |> List.to_tuple()
    n = tuple_size(sorted)
    at = fn p -> elem(sorted, max(ceil(p * n / 100) - 1, 0)) end

    %{
      count: n,
      avg: Enum.sum(samples) / n,
      p50: at.(50),
      p90: at.(90),
      p99: at.(99),
      p999: at.(99.9),
      max: elem(sorted, n - 1)
    }
  end

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
    # DESIGN.md: a p99 needs at least 10,000 samples, i.e. 100 above it.
    above = round(n * (100 - p) / 100)
    needed = round(10_000 / (100 - p))

    if n >= needed,
      do: "rests on #{above} samples above it",
      else: "only #{above} samples above it: needs #{needed} samples"
  end

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

  @doc "Writes a flat map as one JSON object (creating the directory)."
  @spec write_json(Path.t(), map) :: :ok
  def write_json(path, map) do
    File.mkdir_p!(Path.dirname(path))
    File.write!(path, [:jiffy.encode(map, [:pretty]), "\n"])
  end
end

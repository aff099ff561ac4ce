defmodule Overworld.Metrics.CPU do
  @moduledoc """
  CPU use of the node, reported two ways side by side.

  * **Scheduler utilization** (`:scheduler.sample/0`): the share of wall time the normal
    schedulers spent doing work. This is what the BEAM really used.
  * **OS CPU** (`/proc/self/stat`): user + system time of the OS process, as a share of all
    cores. The BEAM's schedulers busy-wait for a while before sleeping, so this figure is
    inflated compared to the work done; never quote it alone.

  Take a `sample/0`, do the work, take another, then `compare/2`.
  """

  @enforce_keys [:scheduler, :os_ticks, :wall]
  defstruct @enforce_keys

  @type t :: %__MODULE__{scheduler: term, os_ticks: non_neg_integer | nil, wall: integer}

  @doc "A sample of scheduler wall time and OS CPU time (enables scheduler wall-time accounting)."
  @spec sample() :: t
  def sample do
    %__MODULE__{
      scheduler: :scheduler.sample(),
      os_ticks: os_ticks(),
      wall: System.monotonic_time(:microsecond)
    }
  end

  @doc """
  Utilization between two samples: `scheduler` (0.0..1.0, mean over normal schedulers),
  `per_scheduler` (list), `os_cpu` (0.0..1.0 of all cores, nil where /proc is missing) and the
  interval in seconds.
  """
  @spec compare(t, t) :: %{
          scheduler: float,
          per_scheduler: [float],
          os_cpu: float | nil,
          seconds: float
        }
  def compare(%__MODULE__{} = a, %__MODULE__{} = b) do
    util = :scheduler.utilization(a.scheduler, b.scheduler)
    per = for {:normal, _id, u, _} <- util, do: u
    total = if per == [], do: 0.0, else: Enum.sum(per) / length(per)
    seconds = (b.wall - a.wall) / 1_000_000

    os_cpu =
      if a.os_ticks && b.os_ticks && seconds > 0 do
        (b.os_ticks - a.os_ticks) / clock_ticks_per_second() / seconds /
          System.schedulers_online()
      end

    %{scheduler: total, per_scheduler: per, os_cpu: os_cpu, seconds: seconds}
  end

  @doc """
  Cumulative CPU counters of the node, for a tool that reads them at two instants and takes
  the difference (the status route's `cpu`): the OS process's CPU time in microseconds (user +
  system; nil where /proc is missing), and the normal schedulers' active and total wall time
  summed (in the VM's own unit: only their ratio means something; nil unless
  `scheduler_wall_time` is on). Busy scheduler time over an interval is
  `Δactive / Δtotal × interval × schedulers`.
  """
  @spec counters() :: %{
          os_cpu_us: non_neg_integer | nil,
          scheduler_active: non_neg_integer | nil,
          scheduler_total: non_neg_integer | nil,
          schedulers: pos_integer
        }
  def counters do
    n = :erlang.system_info(:schedulers)

    {active, total} =
      case :erlang.statistics(:scheduler_wall_time) do
        list when is_list(list) ->
          normal = for {id, a, t} <- list, id <= n, do: {a, t}

          {normal |> Enum.map(&elem(&1, 0)) |> Enum.sum(),
           normal |> Enum.map(&elem(&1, 1)) |> Enum.sum()}

        _ ->
          {nil, nil}
      end

    ticks = os_ticks()

    %{
      os_cpu_us: ticks && div(ticks * 1_000_000, clock_ticks_per_second()),
      scheduler_active: active,
      scheduler_total: total,
      schedulers: System.schedulers_online()
    }
  end

  # utime + stime of this OS process in clock ticks, from /proc/self/stat.
  defp os_ticks do
    with {:ok, stat} <- File.read("/proc/self/stat"),
         [_, rest] <- String.split(stat, ") ", parts: 2),
         fields <- String.split(rest, " "),
         {utime, ""} <- Integer.parse(Enum.at(fields, 11, "")),
         {stime, ""} <- Integer.parse(Enum.at(fields, 12, "")) do
      utime + stime
    else
      _ -> nil
    end
  end

  # USER_HZ is 100 on every Linux that matters; `getconf CLK_TCK` would need a shell.
  defp clock_ticks_per_second, do: 100
end

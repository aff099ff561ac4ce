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

  # (/proc is read with :prim_file: File.read/1 would ask the node's file server, a process
  # every file open of the node goes through; `GET /metrics` reads it on every scrape.)

  # utime + stime of this OS process in clock ticks, from /proc/self/stat.
  defp os_ticks do
    case :prim_file.read_file("/proc/self/stat") do
      {:ok, stat} -> stat_ticks(stat, :own)
      _ -> nil
    end
  end

  @doc false
  # CPU seconds of an OS process (its pid, or "self") from /proc: its own (user + system), or
  # those of its children it waited for (`:children`). Nil when unreadable.
  @spec os_seconds(integer | String.t(), :own | :children) :: float | nil
  def os_seconds(os_pid \\ "self", which \\ :own) do
    case :prim_file.read_file("/proc/#{os_pid}/stat") do
      {:ok, stat} -> stat_seconds(stat, which)
      _ -> nil
    end
  end

  @doc false
  # The same from the text of a /proc/PID/stat line.
  @spec stat_seconds(String.t(), :own | :children) :: float | nil
  def stat_seconds(stat, which) do
    case stat_ticks(stat, which) do
      nil -> nil
      ticks -> ticks / clock_ticks_per_second()
    end
  end

  # Fields after the command's ")": utime, stime at 11, 12; cutime, cstime at 13, 14.
  defp stat_ticks(stat, which) do
    at = if which == :own, do: 11, else: 13

    with [_, rest] <- String.split(stat, ") ", parts: 2),
         fields <- String.split(rest, " "),
         {user, ""} <- Integer.parse(Enum.at(fields, at, "")),
         {system, ""} <- Integer.parse(Enum.at(fields, at + 1, "")) do
      user + system
    else
      _ -> nil
    end
  end

  # USER_HZ is 100 on every Linux that matters; `getconf CLK_TCK` would need a shell.
  defp clock_ticks_per_second, do: 100
end

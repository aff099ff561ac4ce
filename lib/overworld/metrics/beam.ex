defmodule Overworld.Metrics.Beam do
  @moduledoc false
  # The node's families of `GET /metrics` (docs/metrics.md): memory, processes, ports, run
  # queues, scheduler time and the OS process's CPU time. Every figure is read as it is, with
  # no state kept between scrapes and no global flag changed (several scrapers may scrape at
  # once): utilization is the rate of the schedulers' active time over the rate of their wall
  # time, which Prometheus computes. (`:erlang.statistics/1`'s `reductions` and `wall_clock`
  # are not used: each call resets their "since last call" part for every caller.)
  #
  # Scheduler time needs `scheduler_wall_time` on, as a running `Overworld.Server` keeps it;
  # without it those two families are left out.

  alias Overworld.Metrics.Prometheus, as: P

  @memory P.spec(
            "overworld_beam_memory_bytes",
            :gauge,
            "Memory allocated by the VM, by kind (:erlang.memory/0)."
          )
  @processes P.spec("overworld_beam_processes", :gauge, "Processes alive.")
  @process_limit P.spec("overworld_beam_process_limit", :gauge, "Processes allowed at most.")
  @ports P.spec("overworld_beam_ports", :gauge, "Ports open (sockets, files, programs).")
  @run_queue P.spec(
               "overworld_beam_run_queue_length",
               :gauge,
               "Processes and ports ready to run, per run queue (normal schedulers by " <>
                 "number, then dirty_cpu and dirty_io)."
             )
  @schedulers P.spec("overworld_beam_schedulers", :gauge, "Normal schedulers online.")
  @active P.spec(
            "overworld_beam_scheduler_active_seconds_total",
            :counter,
            "Time each scheduler spent working (scheduler_wall_time); utilization is its " <>
              "rate over the rate of overworld_beam_scheduler_wall_seconds_total."
          )
  @wall P.spec(
          "overworld_beam_scheduler_wall_seconds_total",
          :counter,
          "Wall time of each scheduler since scheduler_wall_time was turned on."
        )
  @gc P.spec("overworld_beam_gc_runs_total", :counter, "Garbage collections.")
  @io P.spec(
        "overworld_beam_io_bytes_total",
        :counter,
        "Bytes received (in) and sent (out) through ports."
      )
  @cpu P.spec(
         "overworld_os_cpu_seconds_total",
         :counter,
         "User and system CPU time of the OS process (inflated by the schedulers' busy " <>
           "waiting: read it beside the scheduler utilization)."
       )

  @doc false
  # The node's families, as iodata.
  @spec families() :: iodata
  def families do
    {memory, memory_h} = @memory

    [
      memory_h,
      for({kind, bytes} <- :erlang.memory(), do: P.sample(memory, kind(kind), bytes)),
      P.family(@processes, [], :erlang.system_info(:process_count)),
      P.family(@process_limit, [], :erlang.system_info(:process_limit)),
      P.family(@ports, [], :erlang.system_info(:port_count)),
      P.family(@schedulers, [], :erlang.system_info(:schedulers_online)),
      run_queues(),
      scheduler_time(),
      gc_and_io(),
      cpu()
    ]
  end

  defp kind(kind), do: ["kind=\"", Atom.to_string(kind), "\""]

  # Normal run queues first, then the dirty CPU and dirty IO queues.
  defp run_queues do
    lengths = :erlang.statistics(:run_queue_lengths_all)
    n = length(lengths) - 2
    names = Enum.map(1..n//1, &Integer.to_string/1) ++ ["dirty_cpu", "dirty_io"]

    {name, header} = @run_queue

    [
      header,
      Enum.zip_with(names, lengths, fn q, len -> P.sample(name, ["queue=\"", q, "\""], len) end)
    ]
  end

  # Normal schedulers 1..n, then the dirty CPU ones; the VM counts in its perf-counter unit.
  defp scheduler_time do
    case :erlang.statistics(:scheduler_wall_time) do
      list when is_list(list) ->
        normal = :erlang.system_info(:schedulers)

        samples =
          for {id, active, total} <- Enum.sort(list) do
            type = if id <= normal, do: "normal", else: "dirty_cpu"
            labels = ["scheduler=\"", Integer.to_string(id), "\",type=\"", type, "\""]
            {labels, seconds(active), seconds(total)}
          end

        {{active, active_h}, {wall, wall_h}} = {@active, @wall}

        [
          active_h,
          for({l, a, _} <- samples, do: P.sample(active, l, a)),
          wall_h,
          for({l, _, t} <- samples, do: P.sample(wall, l, t))
        ]

      _ ->
        []
    end
  end

  defp seconds(perf), do: P.seconds(:erlang.convert_time_unit(perf, :perf_counter, :microsecond))

  defp gc_and_io do
    {gcs, _words, _} = :erlang.statistics(:garbage_collection)
    {{:input, input}, {:output, output}} = :erlang.statistics(:io)

    {io, io_h} = @io

    [
      P.family(@gc, [], gcs),
      io_h,
      P.sample(io, "direction=\"in\"", input),
      P.sample(io, "direction=\"out\"", output)
    ]
  end

  defp cpu do
    case Overworld.Metrics.CPU.os_seconds() do
      nil -> []
      s -> P.family(@cpu, [], s)
    end
  end
end

defmodule Overworld.Sidecar do
  @moduledoc """
  The sidecar of a zone with `physics: :sidecar` (docs/sidecar.md): the `overworld-sidecar`
  executable, a separate OS process (a crash in native code never takes the node down), started
  as a port by this process, which the zone's supervisor runs beside the zone's workers.

  It starts the executable (`serve --socket PATH --stripes N`), waits for its ready line (the
  protocol version: another version is refused and logged), then publishes a new
  **generation** in the zone's physics state; the zone server reads it at every tick, and the
  bucket workers connect to that generation's socket and send it their bodies. When the
  sidecar exits (killed, crashed) or a worker reports a failed answer (late, garbled, wrong
  tick), the generation goes back to 0 (the workers compute with the Elixir fallback), the
  process is killed if it still runs, and a new one is started after `restart_ms` (doubling
  while new ones keep failing before they are ready, up to 5 s). Each switch is logged and
  counted (`counters/1`).

  The executable: the option `sidecar: [executable: path]`, else the one built with the
  framework (`executable/0`). The sidecar exits when its standard input closes, so it never
  outlives the node.
  """

  # (shutdown: 2 s for terminate/2, which kills the OS process and removes the socket and
  # segment files.)
  use GenServer, shutdown: 2_000
  require Logger

  alias Overworld.Zone.Physics

  @protocol 1
  @max_backoff 5_000

  @doc """
  The sidecar executable built with the framework: the newer of `priv/native/overworld-sidecar`
  (the `overworld_sidecar` Mix compiler's, and a release's) and
  `sidecar/target/release/overworld-sidecar` (`make deps-rust`) that exists; that last path
  when neither does.
  """
  @spec executable() :: Path.t()
  def executable do
    built = Path.expand("../../sidecar/target/release/overworld-sidecar", __DIR__)

    [Application.app_dir(:overworld, "priv/native/overworld-sidecar"), built]
    |> Enum.flat_map(fn path ->
      case File.stat(path, time: :posix) do
        {:ok, stat} -> [{stat.mtime, path}]
        {:error, _} -> []
      end
    end)
    |> Enum.max(fn -> {0, built} end)
    |> elem(1)
  end

  @doc false
  # Atomics of a zone's sidecar state: 1 generation ready (0: none), 2 starts, 3 exits,
  # 4 failures reported by workers, 5 ticks computed by the fallback, 6 ticks by the sidecar;
  # the last failure: 7 when a worker saw it, 8 since when it had been waiting for the
  # answer (monotonic µs); 9 when this process last saw the sidecar go (its exit, or after a
  # failure).
  @spec new_ref() :: :atomics.atomics_ref()
  def new_ref, do: :atomics.new(9, signed: true)

  @doc "The generation of the sidecar ready to answer (0: none)."
  @spec generation(Physics.t() | nil) :: non_neg_integer
  def generation(%Physics{mode: :sidecar, ref: ref}) when ref != nil, do: :atomics.get(ref, 1)
  def generation(_), do: 0

  @doc """
  Waits up to `timeout` ms for a sidecar of the zone's physics `p` to be ready: its
  generation, or nil (none became ready in time: the zone computes in Elixir meanwhile).
  For tools and tests; a zone never waits for its sidecar.
  """
  @spec await(Physics.t(), non_neg_integer) :: pos_integer | nil
  def await(p, timeout) do
    case generation(p) do
      0 when timeout <= 0 ->
        nil

      0 ->
        Process.sleep(2)
        await(p, timeout - 2)

      g ->
        g
    end
  end

  @doc """
  The sidecar's counters: `starts`, `exits` (the process ended: killed, crashed, or stopped by
  us after a failure), `failures` (answers the workers could not use), and the ticks whose
  physics the `fallback` (Elixir) and the `sidecar` computed (counted per worker).
  """
  @spec counters(Physics.t()) :: %{atom => non_neg_integer}
  def counters(%Physics{ref: ref}) do
    %{
      generation: :atomics.get(ref, 1),
      starts: :atomics.get(ref, 2),
      exits: :atomics.get(ref, 3),
      failures: :atomics.get(ref, 4),
      fallback: :atomics.get(ref, 5),
      sidecar: :atomics.get(ref, 6)
    }
  end

  @doc false
  # A worker's answer for a tick was unusable (`reason`; it had been waiting since `waiting`,
  # monotonic µs): the sidecar of `generation` goes.
  @spec failed(Physics.t(), non_neg_integer, term, integer | nil) :: :ok
  def failed(%Physics{ref: ref} = p, generation, reason, waiting \\ nil) do
    now = System.monotonic_time(:microsecond)
    :atomics.put(ref, 7, now)
    :atomics.put(ref, 8, waiting || now)
    :atomics.add(ref, 4, 1)

    if :atomics.compare_exchange(ref, 1, generation, 0) == :ok do
      case Overworld.Names.whereis(Overworld.Names.sidecar(p.zone)) do
        nil -> :ok
        pid -> send(pid, {:failed, generation, reason})
      end
    end

    :ok
  end

  @doc false
  # The shared segment of the sidecar of `generation` (transport :shm), for a worker that
  # connects to it: one segment per sidecar process, made before it starts.
  @spec segment(Physics.t(), pos_integer) ::
          {:ok, Overworld.Sidecar.Shm.t(), map} | {:error, term}
  def segment(%Physics{zone: zone}, generation) do
    GenServer.call(
      Overworld.Names.via(Overworld.Names.sidecar(zone)),
      {:segment, generation},
      200
    )
  catch
    :exit, reason -> {:error, {:segment, reason}}
  end

  @doc false
  # The layout of a zone's shared segment (docs/sidecar.md, "The shared segment"): per stripe
  # a request region for `max_bodies` body records and an answer region for as many results
  # and 64 KiB of path answers (larger requests and answers go in the frames).
  @spec layout(Physics.t()) :: map
  def layout(%Physics{stripes: stripes, sidecar: %{max_bodies: max}}) do
    request = 64 + 64 * max
    answer = 64 + 64 * div(32 * max + 63, 64) + 64 * 1024

    %{
      stripes: stripes,
      request: request,
      answer: answer,
      total: 64 + stripes * (request + answer)
    }
  end

  @doc false
  @spec count(Physics.t(), :fallback | :sidecar) :: :ok
  def count(%Physics{ref: ref}, :fallback), do: :atomics.add(ref, 5, 1)
  def count(%Physics{ref: ref}, :sidecar), do: :atomics.add(ref, 6, 1)

  @spec start_link(Physics.t()) :: GenServer.on_start()
  def start_link(%Physics{} = physics) do
    GenServer.start_link(__MODULE__, physics,
      name: Overworld.Names.via(Overworld.Names.sidecar(physics.zone))
    )
  end

  @impl true
  def init(physics) do
    Process.flag(:trap_exit, true)
    Logger.metadata(zone: inspect(physics.zone))

    st = %{
      physics: physics,
      port: nil,
      os_pid: nil,
      buffer: "",
      generation: 0,
      # transport :shm: the segment of the running process, and its file.
      shm: nil,
      shm_path: nil,
      backoff: physics.sidecar.restart_ms,
      timer: nil
    }

    {:ok, start(st)}
  end

  @impl true
  def handle_info({port, {:data, data}}, %{port: port} = st), do: {:noreply, ready(st, data)}

  def handle_info({port, {:exit_status, status}}, %{port: port} = st) do
    {:noreply, gone(st, "exited with status #{status}")}
  end

  def handle_info({:EXIT, port, reason}, %{port: port} = st),
    do: {:noreply, gone(st, "port closed: #{inspect(reason)}")}

  def handle_info({:EXIT, _other, _reason}, st), do: {:noreply, st}

  def handle_info({:failed, generation, reason}, %{generation: generation, port: port} = st)
      when port != nil do
    Logger.warning(
      "sidecar generation #{generation}: a worker could not use its answer " <>
        "(#{inspect(reason)}); the Elixir fallback computes the physics until a new one answers"
    )

    kill(st)
    {:noreply, gone(st, "stopped after a failed answer")}
  end

  def handle_info({:failed, _generation, _reason}, st), do: {:noreply, st}
  def handle_info(:start, st), do: {:noreply, start(%{st | timer: nil})}
  def handle_info(_other, st), do: {:noreply, st}

  @impl true
  def handle_call({:segment, generation}, _from, %{generation: generation, shm: shm} = st)
      when shm != nil and generation > 0,
      do: {:reply, {:ok, shm, layout(st.physics)}, st}

  def handle_call({:segment, _generation}, _from, st),
    do: {:reply, {:error, :no_segment}, st}

  @impl true
  def terminate(_reason, st) do
    :atomics.put(st.physics.ref, 1, 0)
    kill(st)
    File.rm(st.physics.socket)
    drop_segment(st)
    :ok
  end

  defp start(%{physics: p} = st) do
    exe = p.sidecar.executable || executable()

    args =
      ["serve", "--socket", p.socket, "--stripes", Integer.to_string(p.stripes)] ++
        if(p.sidecar.threads, do: ["--threads", Integer.to_string(p.sidecar.threads)], else: []) ++
        if(p.sidecar.fault, do: ["--fault", p.sidecar.fault], else: [])

    with true <- File.exists?(exe) || {:error, :no_executable},
         {:ok, st, shm_args} <- new_segment(st) do
      port =
        Port.open({:spawn_executable, exe}, [
          :binary,
          :exit_status,
          :use_stdio,
          args: args ++ shm_args
        ])

      {:os_pid, os_pid} = Port.info(port, :os_pid)
      :atomics.add(p.ref, 2, 1)
      %{st | port: port, os_pid: os_pid, buffer: ""}
    else
      {:error, :no_executable} ->
        Logger.error(
          "the sidecar executable #{exe} does not exist (build it: make deps-rust, or " <>
            "sidecar/cargo.sh build --release); the zone's physics runs in Elixir"
        )

        retry(st)

      {:error, reason} ->
        Logger.error(
          "the sidecar's shared segment could not be made (#{inspect(reason)}); the zone's " <>
            "physics runs in Elixir"
        )

        retry(st)
    end
  end

  # transport :shm: a new segment for each process (its file in /dev/shm, sized and its header
  # written), the last one's file removed (its mappings go with the last worker's link to it).
  defp new_segment(%{physics: %Physics{transport: :shm} = p} = st) do
    drop_segment(st)
    l = layout(p)
    dir = if File.dir?("/dev/shm"), do: "/dev/shm", else: System.tmp_dir!()
    path = Path.join(dir, Path.basename(p.socket, ".sock") <> "-#{:atomics.get(p.ref, 2)}.shm")

    header =
      <<"OWSS", 1::little-32, l.stripes::little-64, l.request::little-64, l.answer::little-64,
        l.total::little-64, 0::size(24)-unit(8)>>

    with {:ok, shm} <- Overworld.Sidecar.Shm.create(path, l.total),
         :ok <- Overworld.Sidecar.Shm.write(shm, 0, header) do
      {:ok, %{st | shm: shm, shm_path: path}, ["--shm", path]}
    else
      {:error, _} = error ->
        File.rm(path)
        error
    end
  end

  defp new_segment(st), do: {:ok, st, []}

  defp drop_segment(%{shm_path: nil}), do: :ok
  defp drop_segment(%{shm_path: path}), do: File.rm(path)

  # The ready line: `overworld-sidecar ready 1`.
  defp ready(%{generation: 0} = st, data) do
    buffer = st.buffer <> data

    case String.split(buffer, "\n", parts: 2) do
      ["overworld-sidecar ready " <> version, _] ->
        if version == Integer.to_string(@protocol) do
          generation = :atomics.get(st.physics.ref, 2)
          :atomics.put(st.physics.ref, 1, generation)
          Logger.info("sidecar generation #{generation} ready (OS process #{st.os_pid})")
          %{st | generation: generation, buffer: ""}
        else
          Logger.error(
            "the sidecar speaks protocol #{inspect(version)}, the zone #{@protocol}: not used"
          )

          kill(st)
          st
        end

      [_partial] when byte_size(buffer) < 256 ->
        %{st | buffer: buffer}

      _ ->
        Logger.error("the sidecar did not say it was ready: #{inspect(buffer)}")
        kill(st)
        st
    end
  end

  # Anything the sidecar writes later is ignored.
  defp ready(st, _data), do: st

  defp gone(st, why) do
    :atomics.put(st.physics.ref, 9, System.monotonic_time(:microsecond))
    :atomics.put(st.physics.ref, 1, 0)
    :atomics.add(st.physics.ref, 3, 1)

    Logger.warning(
      "sidecar generation #{st.generation} (OS process #{st.os_pid}) #{why}; the Elixir " <>
        "fallback computes the physics until a new one answers"
    )

    if st.port do
      try do
        Port.close(st.port)
      rescue
        ArgumentError -> :ok
      end
    end

    retry(%{st | port: nil, os_pid: nil, generation: 0}, st.generation > 0)
  end

  # A sidecar that failed before it was ready (or could not start) makes the next start wait
  # longer; one that answered restarts after `restart_ms`.
  defp retry(st, was_ready? \\ false) do
    backoff =
      if was_ready?,
        do: st.physics.sidecar.restart_ms,
        else: min(st.backoff * 2, @max_backoff)

    if st.timer, do: Process.cancel_timer(st.timer)
    %{st | backoff: backoff, timer: Process.send_after(self(), :start, backoff)}
  end

  defp kill(%{os_pid: nil}), do: :ok

  defp kill(%{os_pid: os_pid}) do
    System.cmd("kill", ["-KILL", Integer.to_string(os_pid)], stderr_to_stdout: true)
    :ok
  end
end

defmodule Overworld.Bench.PostgresServer do
  @moduledoc false
  # A real PostgreSQL server for the tests and benches: `start!/1` makes a cluster with `initdb` in a fresh
  # temporary directory, runs `postgres` on a free TCP port of 127.0.0.1 (no Unix socket), with
  # SCRAM-SHA-256 password authentication, creates a database, and returns where it is;
  # `stop/1` stops it and removes the directory. A second or two in all.
  #
  # Options: `durable: true` keeps PostgreSQL's defaults (fsync on, synchronous commit: a
  # commit answers once its WAL is flushed), for benches; the tests' default is false (fsync
  # and synchronous commit off). `cpu: n` pins the server's processes to CPU n (taskset).
  #
  # PostgreSQL refuses to run as root: under root the binaries run as the `postgres` OS user
  # (`runuser -u postgres --`), which owns the directory; any other user runs them directly.
  #
  # The server runs under `sh` (`Overworld.Bench.External`), which stops it when its standard
  # input closes: on `stop/1`, or when this VM exits however it exits, so no server outlives
  # the test run. A process of ours owns that port, drains the server's log and keeps its last
  # lines for error messages.

  use GenServer
  alias Overworld.Bench.External

  # (`pid` is the process that owns the server.)
  @type server :: %{
          host: String.t(),
          port: :inet.port_number(),
          database: String.t(),
          user: String.t(),
          password: String.t(),
          dir: Path.t(),
          pid: pid
        }

  @user "postgres"
  @database "overworld_test"
  @ready "database system is ready to accept connections"
  @start_timeout 30_000

  @doc "Starts a server; raises with the reason (and the server's log) when it cannot."
  @spec start!(keyword) :: server
  def start!(opts \\ []) do
    bin = bin_dir!()
    as = run_as!()

    dir = External.tmp_dir("overworld-pg")
    password = Base.encode16(:crypto.strong_rand_bytes(12), case: :lower)
    # (Those of test runs that ended without stop/1: their VM halted.)
    External.remove_stale_dirs("overworld-pg")
    File.mkdir_p!(dir)
    pwfile = Path.join(dir, "pwfile")
    File.write!(pwfile, password <> "\n")
    if as == :runuser, do: cmd!("chown", ["-R", "#{@user}:#{@user}", dir])

    try do
      initdb!(bin, as, dir, pwfile)
      File.rm!(pwfile)
    rescue
      e ->
        File.rm_rf(dir)
        reraise e, __STACKTRACE__
    end

    {:ok, pid} = GenServer.start(__MODULE__, {bin, as, dir, opts})

    server = %{
      host: "127.0.0.1",
      port: nil,
      database: @database,
      user: @user,
      password: password,
      dir: dir,
      pid: pid
    }

    try do
      case GenServer.call(pid, :port, :infinity) do
        {:ok, port} ->
          server = %{server | port: port}
          create_database!(server)
          server

        {:error, message} ->
          raise message
      end
    rescue
      e ->
        stop(server)
        reraise e, __STACKTRACE__
    end
  end

  @doc "Stops the server and removes its directory."
  @spec stop(server) :: :ok
  def stop(%{pid: pid, dir: dir}) do
    if Process.alive?(pid) do
      try do
        GenServer.call(pid, :stop, @start_timeout)
      catch
        :exit, _ -> :ok
      end
    end

    File.rm_rf(dir)
    :ok
  end

  defp bin_dir! do
    candidates =
      Enum.sort_by(Path.wildcard("/usr/lib/postgresql/*/bin"), &version/1, :desc) ++
        Enum.map(List.wrap(System.find_executable("initdb")), &Path.dirname/1)

    Enum.find(candidates, fn d ->
      File.exists?(Path.join(d, "initdb")) and File.exists?(Path.join(d, "postgres"))
    end) ||
      raise "PostgreSQL's server binaries (initdb, postgres) were not found in /usr/lib/postgresql/*/bin " <>
              "nor on the PATH: install them (`apt-get install -y postgresql`, or `make deps`)"
  end

  defp version(dir) do
    case Integer.parse(dir |> Path.dirname() |> Path.basename()) do
      {n, _} -> n
      :error -> 0
    end
  end

  # :runuser under root (PostgreSQL will not run as root), :direct otherwise.
  defp run_as! do
    {uid, 0} = System.cmd("id", ["-u"])

    cond do
      String.trim(uid) != "0" ->
        :direct

      System.find_executable("runuser") == nil ->
        raise "the tests run as root and PostgreSQL refuses to: `runuser` (util-linux) is " <>
                "needed to run it as the #{@user} user"

      match?({_, 0}, System.cmd("id", ["-u", @user], stderr_to_stdout: true)) ->
        :runuser

      true ->
        raise "the tests run as root and PostgreSQL refuses to: there is no #{@user} OS user " <>
                "to run it as (the postgresql package makes it)"
    end
  end

  # What runs a command as `as`.
  defp prefix(:direct), do: []
  defp prefix(:runuser), do: [System.find_executable("runuser"), "-u", @user, "--"]

  defp command(as, exe, args) do
    [exe | args] = prefix(as) ++ [exe | args]
    {exe, args}
  end

  defp initdb!(bin, as, dir, pwfile) do
    {exe, args} =
      command(as, Path.join(bin, "initdb"), [
        "-D",
        Path.join(dir, "data"),
        "-U",
        @user,
        "--pwfile=#{pwfile}",
        "--auth-host=scram-sha-256",
        "--auth-local=trust",
        "-E",
        "UTF8",
        "--locale=C",
        "--no-sync",
        "--no-instructions"
      ])

    cmd!(exe, args)
  end

  defp cmd!(exe, args) do
    case System.cmd(exe, args, stderr_to_stdout: true) do
      {_, 0} ->
        :ok

      {out, status} ->
        raise "#{Path.basename(exe)} #{Enum.join(args, " ")} failed (exit status #{status}):\n#{out}"
    end
  end

  defp create_database!(server) do
    {:ok, _} = Application.ensure_all_started(:stringprep)
    o = %{server | database: "postgres"} |> Map.put(:timeout, 10_000)

    case Overworld.Postgres.Wire.connect(o) do
      {:ok, pg} ->
        result = Overworld.Postgres.Wire.simple(pg, "CREATE DATABASE #{@database}", 10_000)
        Overworld.Postgres.Wire.close(pg)
        result == :ok || raise "CREATE DATABASE failed: #{inspect(result)}"

      {:error, reason} ->
        raise "cannot connect to the test PostgreSQL server: #{inspect(reason, limit: 10)}"
    end
  end

  ## The process that owns the server's port

  @impl true
  def init({bin, as, dir, opts}) do
    {:ok,
     %{
       bin: bin,
       as: as,
       dir: dir,
       durable: Keyword.get(opts, :durable, false),
       cpu: Keyword.get(opts, :cpu),
       port: nil,
       tcp: nil,
       log: [],
       waiting: nil,
       tries: 0
     }}
  end

  @impl true
  def handle_call(:port, from, s), do: {:noreply, launch(%{s | waiting: from})}

  def handle_call(:stop, from, %{port: port} = s) do
    :ok = External.stop(port, @start_timeout)
    GenServer.reply(from, :ok)
    {:stop, :normal, s}
  end

  @impl true
  def handle_info({port, {:data, {_, line}}}, %{port: port} = s) do
    s = %{s | log: Enum.take([line | s.log], 100)}

    if s.waiting && String.contains?(line, @ready) do
      GenServer.reply(s.waiting, {:ok, s.tcp})
      {:noreply, %{s | waiting: nil}}
    else
      {:noreply, s}
    end
  end

  def handle_info({port, {:exit_status, status}}, %{port: port} = s) do
    log = s.log |> Enum.reverse() |> Enum.join("\n")

    cond do
      s.waiting && s.tries < 3 && log =~ "could not bind" ->
        # The free port was taken meanwhile: another one.
        {:noreply, launch(%{s | log: []})}

      s.waiting ->
        message = "the test PostgreSQL server exited (status #{status}) while starting:\n#{log}"
        GenServer.reply(s.waiting, {:error, message})
        {:stop, :normal, s}

      true ->
        {:stop, :normal, s}
    end
  end

  def handle_info(:start_timeout, %{waiting: nil} = s), do: {:noreply, s}

  def handle_info(:start_timeout, s) do
    log = s.log |> Enum.reverse() |> Enum.join("\n")
    message = "the test PostgreSQL server did not start in #{@start_timeout} ms:\n#{log}"
    GenServer.reply(s.waiting, {:error, message})
    {:stop, :normal, s}
  end

  defp launch(s) do
    tcp = External.free_port()

    settings =
      [
        "listen_addresses=127.0.0.1",
        "unix_socket_directories=",
        "shared_buffers=16MB",
        "max_connections=50"
      ] ++
        if s.durable,
          do: [],
          else: ["fsync=off", "synchronous_commit=off", "full_page_writes=off"]

    postgres =
      [Path.join(s.bin, "postgres"), "-D", Path.join(s.dir, "data"), "-p", "#{tcp}"] ++
        Enum.flat_map(settings, &["-c", &1])

    pinned = if s.cpu, do: [System.find_executable("taskset"), "-c", "#{s.cpu}"], else: []

    # (Fast shutdown on stop.)
    port = External.open(pinned ++ postgres, signal: "INT", prefix: prefix(s.as))

    if s.tries == 0, do: Process.send_after(self(), :start_timeout, @start_timeout)
    %{s | port: port, tcp: tcp, tries: s.tries + 1}
  end
end

defmodule Overworld.Bench.External do
  @moduledoc false
  # An external server run for the tests and benches (`Overworld.Bench.PostgresServer`,
  # the dashboard test's Prometheus), under `sh`, which stops it when its standard input
  # closes: on `stop/2`, or when the port's owner or the VM goes, however it goes. No server
  # outlives the VM that started it. Each caller checks its server's readiness its own way
  # (a log line, an HTTP route): the port delivers the server's output (stdout and stderr)
  # as `{port, {:data, {:eol | :noeol, line}}}` and its end as `{port, {:exit_status, n}}`.
  #
  # Its files go to a directory of `tmp_dir/1`, named after the VM's OS pid, so that a later
  # run can tell those of a VM that halted without stopping its servers (`remove_stale_dirs/1`).

  # Runs the server (the arguments after the signal) in the background, and stops it with the
  # signal on a line or at the end of its input.
  @runner ~S"""
  sig=$1
  shift
  "$@" &
  pid=$!
  read -r _line
  kill -"$sig" "$pid" 2>/dev/null
  wait "$pid"
  """

  @doc false
  # Starts `argv` (the executable's path and its arguments) under `sh`; the caller owns the
  # port. Options: `signal` what stops the server (default "TERM"), `prefix` the words that
  # run `sh` itself (e.g. `runuser -u postgres --`; the first is an executable's path).
  @spec open([String.t()], keyword) :: port
  def open(argv, opts \\ []) do
    sh = [System.find_executable("sh"), "-c", @runner, "sh", Keyword.get(opts, :signal, "TERM")]
    [exe | args] = Keyword.get(opts, :prefix, []) ++ sh ++ argv

    Port.open({:spawn_executable, exe}, [
      :binary,
      :exit_status,
      :stderr_to_stdout,
      line: 4096,
      args: args
    ])
  end

  @doc false
  # Stops the server of `port` (a line on the runner's input) and waits at most `timeout` ms
  # for it to be gone, then closes the port (which ends the runner's input). Its output lines
  # stay in the caller's mailbox.
  @spec stop(port, timeout) :: :ok
  def stop(port, timeout) do
    try do
      Port.command(port, "stop\n")

      receive do
        {^port, {:exit_status, _}} -> :ok
      after
        timeout -> Port.close(port)
      end
    rescue
      ArgumentError -> :closed
    end

    :ok
  end

  @doc false
  # A TCP port of 127.0.0.1 free now (another process may take it before the server does).
  @spec free_port() :: :inet.port_number()
  def free_port do
    {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1}, reuseaddr: true)
    {:ok, port} = :inet.port(socket)
    :gen_tcp.close(socket)
    port
  end

  @doc false
  # A new directory path under the system's temporary directory: `<prefix>-<OS pid>-<n>`.
  @spec tmp_dir(String.t()) :: Path.t()
  def tmp_dir(prefix),
    do:
      Path.join(
        System.tmp_dir!(),
        "#{prefix}-#{System.pid()}-#{System.unique_integer([:positive])}"
      )

  @doc false
  # Removes the directories of `tmp_dir(prefix)` whose VM is gone (it halted without stopping
  # its servers: they went with it, their files stayed).
  @spec remove_stale_dirs(String.t()) :: :ok
  def remove_stale_dirs(prefix) do
    for dir <- Path.wildcard(Path.join(System.tmp_dir!(), prefix <> "-*")),
        [_, os_pid] <- [Regex.run(~r/-(\d+)-\d+$/, dir)],
        File.dir?("/proc/self") and not File.exists?("/proc/#{os_pid}"),
        do: File.rm_rf(dir)

    :ok
  end
end

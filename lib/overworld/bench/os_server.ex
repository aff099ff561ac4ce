defmodule Overworld.Bench.OsServer do
  @moduledoc false
  # A server run as an OS process of its own (`mix overworld.server`, a game's server task, or
  # any command printing the same lines): started, waited for until it prints
  # `os pid N` and `listening on http://127.0.0.1:PORT`, and stopped with a signal. Used by
  # `mix overworld.bench.capacity` and the tests that need a real OS process.

  defstruct [:port, :os_pid, :http_port]

  @type t :: %__MODULE__{port: port, os_pid: pos_integer | nil, http_port: :inet.port_number()}

  @doc """
  Runs `exe` with `args` (`:cd`, `:env` as for `Port.open/2`) and waits up to `:timeout` ms
  (default 180,000) for it to listen. Answers `{:ok, server}`, or `{:error, {:exited,
  status, output}}` / `{:error, {:timeout, output}}` with the lines it printed.
  """
  @spec start(String.t(), [String.t()], keyword) ::
          {:ok, t} | {:error, {:exited, integer, String.t()} | {:timeout, String.t()}}
  def start(exe, args, opts \\ []) do
    port =
      Port.open(
        {:spawn_executable, exe},
        [:binary, :exit_status, :stderr_to_stdout, {:line, 16_384}, args: args] ++
          Keyword.take(opts, [:cd, :env])
      )

    deadline = System.monotonic_time(:millisecond) + Keyword.get(opts, :timeout, 180_000)
    await(%__MODULE__{port: port}, deadline, [])
  end

  defp await(%{port: port} = s, deadline, out) do
    receive do
      {^port, {:data, {:eol, "os pid " <> pid}}} ->
        await(%{s | os_pid: String.to_integer(pid)}, deadline, out)

      {^port, {:data, {:eol, "listening on http://127.0.0.1:" <> p}}} ->
        {:ok, %{s | http_port: String.to_integer(p)}}

      {^port, {:data, {_, line}}} ->
        await(s, deadline, [line | out])

      {^port, {:exit_status, status}} ->
        {:error, {:exited, status, output(out)}}
    after
      max(deadline - System.monotonic_time(:millisecond), 0) ->
        stop(s)
        {:error, {:timeout, output(out)}}
    end
  end

  defp output(out), do: out |> Enum.reverse() |> Enum.join("\n")

  @doc "The lines the server printed since it listened (or since the last call)."
  @spec lines(t) :: [String.t()]
  def lines(%{port: port}), do: collect(port, [])

  defp collect(port, acc) do
    receive do
      {^port, {:data, {_, line}}} -> collect(port, [line | acc])
    after
      0 -> Enum.reverse(acc)
    end
  end

  @doc """
  Sends `signal` ("TERM", "KILL", ...) to the server (its printed OS pid, else the port's)
  and waits up to `wait` ms for it to exit: `:exited`; past that it is killed: `:killed`.
  """
  @spec stop(t, String.t(), non_neg_integer) :: :exited | :killed
  def stop(%{port: port} = s, signal \\ "TERM", wait \\ 10_000) do
    pid = s.os_pid || port_pid(port)
    if pid, do: signal(pid, signal)

    how =
      receive do
        {^port, {:exit_status, _}} ->
          :exited
      after
        wait ->
          if pid, do: signal(pid, "KILL")
          catch_close(port)
          :killed
      end

    collect(port, [])
    receive(do: ({^port, {:exit_status, _}} -> :ok), after: (0 -> :ok))
    how
  end

  defp port_pid(port) do
    case Port.info(port, :os_pid) do
      {:os_pid, pid} -> pid
      _ -> nil
    end
  end

  @doc """
  Sends `signal` ("KILL", "STOP", "CONT", "0", ...) to OS process `pid` with the shell's own
  kill (/bin/kill, from procps, is not on every minimal machine): `:ok`, or `{:error,
  output}` (no such process, say).
  """
  @spec signal(pos_integer | String.t(), String.t()) :: :ok | {:error, String.t()}
  def signal(pid, signal) do
    case System.cmd("sh", ["-c", "kill -#{signal} #{pid}"], stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, _} -> {:error, out}
    end
  end

  defp catch_close(port) do
    Port.close(port)
  rescue
    ArgumentError -> :ok
  end
end

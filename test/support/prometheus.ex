defmodule Overworld.Test.Prometheus do
  @moduledoc false
  # A real Prometheus server (Debian's /usr/bin/prometheus) for the dashboard's test:
  # `start!/1` runs it on a free port of 127.0.0.1 with the given configuration (YAML text)
  # and a fresh storage directory, and waits until it is ready; `query/2` evaluates PromQL
  # through its HTTP API; `stop/1` stops it and removes the directory.
  #
  # It runs under `sh` (`Overworld.Bench.External`), which stops it when its standard input
  # closes: on `stop/1`, or when the port's owner (the test process) or the VM goes, however
  # it goes. It never outlives the test run.

  alias Overworld.Bench.External

  @ready_timeout 20_000

  @doc "Starts Prometheus with the configuration `yaml`; raises with its log if it cannot."
  def start!(yaml) do
    bin =
      System.find_executable("prometheus") ||
        raise "prometheus not found: apt-get install -y prometheus (make deps)"

    dir = External.tmp_dir("overworld-prom")
    File.mkdir_p!(Path.join(dir, "data"))
    config = Path.join(dir, "prometheus.yml")
    File.write!(config, yaml)
    port = External.free_port()

    os =
      External.open([
        bin,
        "--config.file=" <> config,
        "--storage.tsdb.path=" <> Path.join(dir, "data"),
        "--web.listen-address=127.0.0.1:#{port}",
        "--log.level=warn"
      ])

    server = %{port: port, os: os, dir: dir}

    deadline = System.monotonic_time(:millisecond) + @ready_timeout

    case await_ready(server, deadline) do
      :ok ->
        server

      {:error, why} ->
        log = drain([])
        stop(server)
        raise "prometheus did not start (#{why}):\n#{log}"
    end
  end

  defp await_ready(server, deadline) do
    case Overworld.Client.request("127.0.0.1", server.port, "GET", "/-/ready", "", timeout: 1_000) do
      {:ok, 200, _, _} ->
        :ok

      _ ->
        receive do
          {os, {:exit_status, status}} when os == server.os -> {:error, "exit status #{status}"}
        after
          0 ->
            if System.monotonic_time(:millisecond) > deadline do
              {:error, "not ready in #{@ready_timeout} ms"}
            else
              Process.sleep(100)
              await_ready(server, deadline)
            end
        end
    end
  end

  defp drain(acc) do
    receive do
      {_os, {:data, {_, line}}} -> drain([line | acc])
    after
      0 -> acc |> Enum.reverse() |> Enum.take(-40) |> Enum.join("\n")
    end
  end

  @doc "Evaluates `expr` now: `{:ok, result}` (the API's result list) or `{:error, why}`."
  def query(server, expr) do
    path = "/api/v1/query?" <> URI.encode_query(%{"query" => expr})

    with {:ok, 200, _, body} <- Overworld.Client.request("127.0.0.1", server.port, "GET", path),
         %{"status" => "success", "data" => %{"result" => result}} <-
           :jiffy.decode(body, [:return_maps]) do
      {:ok, result}
    else
      {:ok, status, _, body} -> {:error, {status, body}}
      other -> {:error, other}
    end
  end

  @doc "Stops the server (waits for it) and removes its directory."
  def stop(%{os: os, dir: dir}) do
    External.stop(os, 10_000)
    drain([])
    File.rm_rf(dir)
    :ok
  end
end

defmodule Mix.Tasks.Overworld.Bench.Profile do
  @shortdoc "Where a server's time goes under N native clients (msacc, reductions, eprof)"
  @moduledoc """
  Runs a game's server task in this node (`--serve`, a Mix task and its arguments, with
  `--port 0` appended), connects `--clients` native clients to it (`bench/loadgen`, as an OS
  process, niced), and once they are all in and `--warmup` seconds passed, samples where the
  node's time goes for `--seconds` (`Overworld.Bench.Profile`): the schedulers' time by state
  (`:msacc`), the reductions by process kind and, with `--eprof KIND` (e.g.
  `Overworld.Transport.Conn`, the connections; `Overworld.Zone.Bucket`, the zone's workers),
  `:eprof` on that kind's processes for `--eprof-seconds` after it (eprof slows what it
  profiles: its window comes last).

      mix overworld.bench.profile --serve "goblins.server --no-persist" --clients 500
                                  [--warmup 10] [--seconds 8] [--eprof KIND]
                                  [--eprof-seconds 3] [--input-hz 10] [--ramp 100]
                                  [--nice 10] [--json PATH]

  Prints the report and the generator's summary, and writes the report with `--json`.
  """
  use Mix.Task

  alias Overworld.Bench.{Args, Loadgen, Profile, Stats}

  @switches [
    serve: :string,
    clients: :integer,
    warmup: :integer,
    seconds: :integer,
    eprof: :string,
    eprof_seconds: :integer,
    input_hz: :integer,
    ramp: :integer,
    nice: :integer,
    json: :string
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.bench.profile")

    [task | args] =
      String.split(opts[:serve] || Mix.raise("--serve is required, e.g. \"goblins.server\""))

    o = Args.positive!(opts, warmup: 10, seconds: 8, eprof_seconds: 3, input_hz: 10, ramp: 100)

    clients = Keyword.get(opts, :clients, 0)
    Args.at_least!([clients: clients], [:clients], 0)
    nice = Keyword.get(opts, :nice, 10)

    unless nice in 0..19, do: Mix.raise("--nice must be in 0..19, got: #{nice}")

    bin = Loadgen.build!()
    machine = Stats.machine()
    Mix.shell().info(Stats.machine_line(machine))
    data = Path.join(System.tmp_dir!(), "overworld-profile-#{System.unique_integer([:positive])}")
    # Linked: a server task that fails ends this one with its error.
    Kernel.spawn_link(fn -> Mix.Task.run(task, args ++ ["--port", "0", "--data-dir", data]) end)
    port = await_port(180_000)
    eprof_s = if opts[:eprof], do: o.eprof_seconds, else: 0

    generator =
      Task.async(fn ->
        Loadgen.run!(bin,
          url: "ws://127.0.0.1:#{port}/ws",
          clients: clients,
          input_hz: o.input_hz,
          ramp: o.ramp,
          warmup: o.warmup,
          seconds: o.seconds + eprof_s + 10,
          procs: 1,
          nice: nice
        )
      end)

    await_sessions(clients, 60_000 + div(clients * 1000, o.ramp))
    Process.sleep(o.warmup * 1000)

    Mix.shell().info(
      "profiling #{clients} clients: #{o.seconds} s" <>
        if(opts[:eprof], do: ", then eprof on #{opts[:eprof]} for #{eprof_s} s", else: "")
    )

    # The frames sent in the sampling window (not in eprof's, which slows the sessions).
    frames0 = Overworld.Server.stats().frames_out
    report = Profile.sample(o.seconds * 1000)
    frames = Overworld.Server.stats().frames_out - frames0
    per_second = Float.round(frames * 1000 / max(report.ms, 1), 1)
    report = %{report | eprof: opts[:eprof] && Profile.eprof(opts[:eprof], eprof_s * 1000)}
    pace = Overworld.Server.Pace.stats(Overworld.Server.config())

    Enum.each(Profile.format(report), &Mix.shell().info/1)

    Mix.shell().info(
      "frames sent in the window: #{per_second} a second; a snapshot every #{pace.interval} tick(s) at the end"
    )

    {out, _result} = Task.await(generator, :infinity)
    File.rm_rf(data)
    # The generator's summary: from its first line on (warnings and the silent clients'
    # line come only sometimes, so a fixed count of last lines could lose the first).
    summary =
      out |> String.split("\n", trim: true) |> Enum.drop_while(&(not (&1 =~ ~r/^owload: /)))

    Mix.shell().info(Enum.join(summary, "\n"))

    if path = opts[:json] do
      Stats.write_json(
        path,
        Map.merge(report, %{
          clients: clients,
          serve: opts[:serve],
          frames_per_second: per_second,
          send_interval: pace.interval,
          machine: machine
        })
      )

      Mix.shell().info("wrote #{path}")
    end
  end

  # Until `n` sessions are live (the generator's clients are in).
  defp await_sessions(n, ms) do
    cond do
      Overworld.Server.stats().sessions >= n -> :ok
      ms <= 0 -> Mix.raise("fewer than #{n} clients connected within the time allowed")
      true -> await_sessions_again(n, ms)
    end
  end

  defp await_sessions_again(n, ms) do
    Process.sleep(200)
    await_sessions(n, ms - 200)
  end

  defp await_port(ms) when ms <= 0, do: Mix.raise("the server did not listen within 180 s")

  defp await_port(ms) do
    Overworld.Server.port()
  catch
    _, _ ->
      Process.sleep(200)
      await_port(ms - 200)
  end
end

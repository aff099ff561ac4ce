defmodule Mix.Tasks.Overworld.Cluster do
  @shortdoc "Starts a local cluster of server nodes (OS processes) serving one world"
  @moduledoc """
  Starts a cluster of `--nodes` server nodes on this machine, each an OS process of its own
  running `mix overworld.server` (with a node name, its own port and data directory, the
  scheduler busy-wait off since several BEAMs share the cores), all configured with the same
  node list (`OVERWORLD_NODES`) and cookie (a file of mode 0600 in the data directory), and
  serving one world of `--zones` spread over them (docs/cluster.md). For development and
  benchmarks. Run it in the game's Mix project:

      mix overworld.cluster --zone MODULE --wire MODULE --zones CxR --entities-per-zone N
                            [--nodes 3] [--port 4000] [--data-dir ./data/cluster]
                            [--name NAME] [--arg KEY=VALUE ...] [--interval 5] [--seconds S]
                            [--tls]

  * `--zone`, `--wire`, `--zones`, `--entities-per-zone`, `--name`, `--arg`, `--interval` go
    to every node's `mix overworld.server` (the zone module must export
    `zone_options(entities, extra)`).
  * `--nodes N` (default 3): node `i` (1..N) is `overworld<i>@127.0.0.1`, listens on
    `--port` + i (default 4000: 4001, 4002, ...; `--port 0`: each picks a free one) and keeps
    its files in `<data-dir>/node<i>/`.
  * `--tls`: the nodes' distribution runs over TLS (`Overworld.Cluster.TLS`), with the
    certificates of `OVERWORLD_TLS_CERT`, `OVERWORLD_TLS_KEY`, `OVERWORLD_TLS_CA` if set, else
    a CA and a certificate for 127.0.0.1 made with `openssl` in `<data-dir>/tls/`.

  It prints each node's name, address and OS pid once it listens, then the nodes' statistics
  lines, each prefixed with its node's number. It stops every node when `--seconds` are over
  or when it is stopped itself (Ctrl-C): the nodes also exit when this task's process goes
  away (each watches its standard input, `OVERWORLD_STDIN_LIFELINE`).
  """
  use Mix.Task

  alias Overworld.Bench.{Args, OsServer}

  @switches [
    zone: :string,
    wire: :string,
    zones: :string,
    entities_per_zone: :integer,
    name: :string,
    arg: :keep,
    nodes: :integer,
    port: :integer,
    data_dir: :string,
    interval: :integer,
    seconds: :integer,
    tls: :boolean
  ]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.cluster")
    o = Args.positive!(opts, nodes: 3, interval: 5)
    if opts[:seconds], do: Args.at_least!(opts, [:seconds])
    port = Keyword.get(opts, :port, 4000)

    unless port in 0..65_000,
      do: Mix.raise("--port must be 0 or a port number below 65000, got: #{port}")

    for k <- [:zone, :zones, :entities_per_zone], opts[k] == nil do
      Mix.raise(
        "--#{String.replace(to_string(k), "_", "-")} is required (a world over the cluster)"
      )
    end

    elixir = System.find_executable("elixir") || Mix.raise("no elixir executable on the PATH")

    # Compiled once here: the nodes start on a compiled project.
    Mix.Task.run("compile")
    dir = Path.expand(Keyword.get(opts, :data_dir, "./data/cluster"))
    File.mkdir_p!(dir)
    cookie = cookie_file!(dir)

    vm =
      "+sbwt none +sbwtdcpu none +sbwtdio none #{Overworld.Cluster.vm_flags()}" <>
        if(opts[:tls], do: " " <> tls!(dir), else: "")

    names = for i <- 1..o.nodes, do: "overworld#{i}@127.0.0.1"

    env = [
      {~c"OVERWORLD_NODES", String.to_charlist(Enum.join(names, ","))},
      {~c"OVERWORLD_COOKIE_FILE", String.to_charlist(cookie)},
      {~c"OVERWORLD_STDIN_LIFELINE", ~c"1"},
      {~c"MIX_ENV", String.to_charlist(to_string(Mix.env()))}
    ]

    passed =
      Enum.flat_map([:zone, :wire, :zones, :entities_per_zone, :name, :interval], fn k ->
        if opts[k],
          do: ["--" <> String.replace(to_string(k), "_", "-"), to_string(opts[k])],
          else: []
      end) ++ Enum.flat_map(Keyword.get_values(opts, :arg), &["--arg", &1])

    Mix.shell().info(
      "Overworld cluster: #{o.nodes} nodes on this machine (#{System.schedulers_online()} cores), " <>
        "data in #{dir}"
    )

    # One after the other, by this process (which owns their ports: a node exits when its
    # port closes).
    servers =
      for {name, i} <- Enum.with_index(names, 1) do
        args =
          ["--name", name, "--erl", vm] ++
            ["-S", "mix", "overworld.server" | passed] ++
            ["--port", to_string(if port == 0, do: 0, else: port + i)] ++
            ["--data-dir", Path.join(dir, "node#{i}")]

        {i, name, OsServer.start(elixir, args, cd: File.cwd!(), env: env)}
      end

    started = for {i, name, {:ok, s}} <- servers, do: {i, name, s}

    failed = for {i, name, {:error, why}} <- servers, do: {i, name, why}

    if failed != [] do
      Enum.each(started, fn {_, _, s} -> OsServer.stop(s) end)

      Mix.raise(
        "#{length(failed)} of #{o.nodes} nodes did not start: " <>
          Enum.map_join(failed, "; ", fn {i, name, why} -> "#{i} #{name}: #{describe(why)}" end)
      )
    end

    for {i, name, s} <- started do
      IO.puts(
        "node #{i} #{name} listening on http://127.0.0.1:#{s.http_port} (os pid #{s.os_pid})"
      )
    end

    deadline = opts[:seconds] && System.monotonic_time(:millisecond) + opts[:seconds] * 1000

    try do
      follow(started, deadline)
    after
      Enum.each(started, fn {_, _, s} -> OsServer.stop(s) end)
      IO.puts("cluster stopped: #{length(started)} nodes")
    end
  end

  # TLS distribution: the options file of the configured certificates, or of a CA and a
  # certificate made here for 127.0.0.1; the VM flags that use it.
  defp tls!(dir) do
    tls = Path.join(dir, "tls")

    files =
      case Overworld.Cluster.TLS.from_env() do
        {:ok, nil} -> Overworld.Cluster.TLS.dev_certs!(tls)
        {:ok, files} -> files
        {:error, message} -> Mix.raise(message)
      end

    optfile =
      Overworld.Cluster.TLS.optfile!(Path.join(tls, "dist.conf"), files.cert, files.key, files.ca)

    Overworld.Cluster.TLS.vm_args(optfile)
  end

  # The cookie every node reads (`OVERWORLD_COOKIE_FILE`): made once, mode 0600.
  defp cookie_file!(dir) do
    path = Path.join(dir, "cookie")

    unless File.exists?(path) do
      File.write!(path, Base.encode32(:crypto.strong_rand_bytes(20), padding: false))
    end

    File.chmod!(path, 0o600)
    path
  end

  defp describe({:exited, status, out}), do: "exited with #{status}: #{last_lines(out)}"
  defp describe({:timeout, out}), do: "did not listen in time: #{last_lines(out)}"

  defp last_lines(out), do: out |> String.split("\n") |> Enum.take(-12) |> Enum.join("\n")

  # The nodes' lines, prefixed, every 200 ms until the deadline (or forever); a node that
  # exits ends the run.
  defp follow(started, deadline) do
    for {i, _, s} <- started, line <- OsServer.lines(s), do: IO.puts("#{i} | #{line}")

    cond do
      deadline && System.monotonic_time(:millisecond) >= deadline ->
        :ok

      (gone = Enum.find(started, fn {_, _, s} -> Port.info(s.port) == nil end)) != nil ->
        {i, name, _} = gone
        IO.puts("node #{i} #{name} exited: stopping the others")

      true ->
        Process.sleep(200)
        follow(started, deadline)
    end
  end
end

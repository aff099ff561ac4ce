defmodule Overworld.Bench.Loadgen do
  @moduledoc false
  # The native load generator (`bench/loadgen`, Go, standard library only): where its source
  # is, building it, and its command line. Used by `mix overworld.bench.capacity`,
  # `mix overworld.bench.profile` and the tests; the generator itself is documented in bench/loadgen/main.go.

  # This file is lib/overworld/bench/loadgen.ex: the repository's root is three levels up.
  @root Path.expand("../../..", __DIR__)
  @source Path.join(@root, "bench/loadgen")

  @doc "The generator's source directory."
  @spec source() :: String.t()
  def source, do: @source

  @doc """
  Builds the generator if its binary is missing or older than a source file, and answers the
  binary's path. Raises `Mix.Error` with what to do when Go or the source is missing or the
  build fails.
  """
  @spec build!() :: String.t()
  def build! do
    unless File.exists?(Path.join(@source, "go.mod")),
      do: Mix.raise("the load generator's source is missing (#{@source})")

    bin = Path.join([@root, "_build", "owload"])
    sources = Path.wildcard(Path.join(@source, "*.go")) ++ [Path.join(@source, "go.mod")]

    if stale?(bin, sources) do
      go = go!()
      File.mkdir_p!(Path.dirname(bin))

      case System.cmd(go, ["build", "-o", bin, "."],
             cd: @source,
             stderr_to_stdout: true,
             env: [{"CGO_ENABLED", "0"}]
           ) do
        {_, 0} -> :ok
        {out, _} -> Mix.raise("building the load generator failed:\n" <> out)
      end
    end

    bin
  end

  defp stale?(bin, sources) do
    case File.stat(bin, time: :posix) do
      {:ok, %{mtime: built}} ->
        Enum.any?(sources, fn s ->
          String.ends_with?(s, "_test.go") == false and File.stat!(s, time: :posix).mtime > built
        end)

      _ ->
        true
    end
  end

  @doc "The `go` command: on the PATH, else Go's usual install place. Raises when neither."
  @spec go!() :: String.t()
  def go! do
    cond do
      path = System.find_executable("go") ->
        path

      File.exists?("/usr/local/go/bin/go") ->
        "/usr/local/go/bin/go"

      File.exists?("/usr/lib/go/bin/go") ->
        "/usr/lib/go/bin/go"

      true ->
        Mix.raise(
          "the load generator needs Go: `make deps` installs it (apt-get install golang-go)"
        )
    end
  end

  @doc """
  The command line (a program and its arguments) that runs the generator with `opts`: `:url`,
  `:clients`, `:input_hz`, `:ramp`, `:warmup`, `:seconds`, `:procs`, `:json`, `retry: false`
  (clients refused as full give up instead of trying again), and, to keep it off the server's
  CPU, `:nice` (0..19, through `nice`) and `:taskset` (a CPU list, through
  `taskset -c`).

      iex> Overworld.Bench.Loadgen.command("owload", url: "ws://127.0.0.1:4000/ws", clients: 10,
      ...>   input_hz: 10, ramp: 100, warmup: 2, seconds: 5, procs: 1, json: "r.json", nice: 10, taskset: "1")
      {"nice", ["-n", "10", "taskset", "-c", "1", "owload", "-url", "ws://127.0.0.1:4000/ws",
        "-clients", "10", "-input-hz", "10", "-ramp", "100", "-warmup", "2", "-seconds", "5",
        "-procs", "1", "-json", "r.json"]}
  """
  @spec command(String.t(), keyword) :: {String.t(), [String.t()]}
  def command(bin, opts) do
    args =
      [bin] ++
        Enum.flat_map(
          [:url, :clients, :input_hz, :ramp, :warmup, :seconds, :procs, :ips, :json],
          fn k ->
            case opts[k] do
              nil -> []
              v -> ["-" <> String.replace(to_string(k), "_", "-"), to_string(v)]
            end
          end
        )

    # Refused clients try again unless told not to.
    args = if opts[:retry] == false, do: args ++ ["-retry=false"], else: args
    args = if cpus = opts[:taskset], do: ["taskset", "-c", cpus | args], else: args
    args = if (n = opts[:nice] || 0) > 0, do: ["nice", "-n", to_string(n) | args], else: args
    {hd(args), tl(args)}
  end

  @doc """
  Runs the generator (`command/2`'s options, `:json` aside) and answers `{output, exit status,
  result}`: its printed lines, and its JSON result decoded (`nil` for `null`; the result is nil
  when it wrote none).
  """
  @spec run(String.t(), keyword) :: {String.t(), non_neg_integer, map | nil}
  def run(bin, opts) do
    json = Path.join(System.tmp_dir!(), "owload-#{System.unique_integer([:positive])}.json")

    {prog, args} = command(bin, Keyword.put(opts, :json, json))
    {out, status} = System.cmd(prog, args, stderr_to_stdout: true)

    result =
      case File.read(json) do
        {:ok, body} -> :jiffy.decode(body, [:return_maps, {:null_term, nil}])
        {:error, _} -> nil
      end

    File.rm(json)
    {out, status, result}
  end

  @doc """
  `run/2` for tasks: `{output, result}`, or a `Mix.Error` when the generator failed (a non-zero
  exit, or no result written).
  """
  @spec run!(String.t(), keyword) :: {String.t(), map}
  def run!(bin, opts) do
    case run(bin, opts) do
      {out, 0, %{} = result} -> {out, result}
      {out, status, _} -> Mix.raise("the load generator failed (exit #{status}):\n" <> out)
    end
  end
end

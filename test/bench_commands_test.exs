defmodule Overworld.BenchCommandsTest do
  # `make bench-full` runs exactly the benchmark commands docs/benchmarks.md quotes for its
  # figures (the commands of its ```sh blocks, in the directory the doc says), and `make bench`
  # runs every one of their tasks, short, writing its JSON under bench/results/short/. Both
  # sides are read from the files themselves: the doc's blocks, and the recipes as `make -n`
  # expands them. A command changed on one side only fails here.
  use ExUnit.Case, async: true

  @doc_file "docs/benchmarks.md"
  @game "examples/goblins"
  @tasks ~S"goblins\.bench(?:\.\w+)?|overworld\.bench\.\w+|overworld\.bots"

  # `{dir, command}` for every benchmark command in `text`: `command` from `mix` to the end of
  # the shell command (`;`, `&`, `|`, `)` or the line's end); `dir` the directory of a
  # `cd DIR && ` right before it, "." without one.
  defp commands(text, tasks \\ @tasks) do
    ~r/(?:cd (\S+) && )?(mix (?:#{tasks})(?=\s|$)[^;&|)\n]*)/
    |> Regex.scan(text, capture: :all_but_first)
    |> Enum.map(fn
      [dir, cmd] -> {if(dir == "", do: ".", else: dir), String.trim(cmd)}
    end)
  end

  defp task({_dir, "mix " <> rest}), do: rest |> String.split() |> hd()

  # The goblin world's tasks run in its project, the framework's from the root, but for the
  # capacity and profile benches, which start the game's server (`--server "mix
  # goblins.server"`, `--serve goblins.server`) and so run in the game's project.
  defp dir_of(command) do
    t = task(command)

    if String.starts_with?(t, "goblins.") or
         t in [
           "overworld.bench.capacity",
           "overworld.bench.profile",
           "overworld.bench.world",
           "overworld.bench.cluster"
         ],
       do: @game,
       else: "."
  end

  # The ```sh blocks of the doc that quote a benchmark command.
  defp doc_blocks do
    ~r/^```sh\n(.*?)^```$/ms
    |> Regex.scan(File.read!(@doc_file), capture: :all_but_first)
    |> Enum.map(&hd/1)
    |> Enum.filter(&(commands(&1) != []))
  end

  defp doc_commands do
    for block <- doc_blocks(), {_, cmd} = c <- commands(block), do: {dir_of(c), cmd}
  end

  # The recipe of `target` (and its prerequisites') as make expands it, not run.
  defp recipe(target) do
    env = for v <- ~w(MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES), do: {v, nil}
    {out, 0} = System.cmd("make", ["-n", "--no-print-directory", target], env: env)
    out
  end

  # The `--json` path of a command, from the repository root.
  defp json!({dir, cmd} = c) do
    case Regex.run(~r/--json (\S+)/, cmd, capture: :all_but_first) do
      [path] -> Path.relative_to(Path.expand(path, dir), File.cwd!())
      nil -> flunk("#{inspect(c)} writes no --json")
    end
  end

  test "make bench-full runs exactly the benchmark commands of docs/benchmarks.md" do
    doc = doc_commands()
    full = commands(recipe("bench-full"))
    assert length(doc) >= 10, "too few benchmark commands found in #{@doc_file}"

    assert Enum.sort(full) == Enum.sort(doc), """
    the benchmark commands of #{@doc_file} and of `make bench-full` differ.
    Only in the doc:
    #{Enum.map_join(doc -- full, "\n", &inspect/1)}
    Only in bench-full:
    #{Enum.map_join(full -- doc, "\n", &inspect/1)}
    """

    for c <- full do
      assert String.starts_with?(json!(c), "bench/results/") and
               not String.starts_with?(json!(c), "bench/results/short/"),
             "#{inspect(c)} should write its JSON in bench/results/"
    end
  end

  test "make bench-full starts the goblin server the doc starts for the bots" do
    servers = fn text -> commands(text, ~S"goblins\.server") |> Enum.uniq() |> Enum.sort() end
    doc = Enum.flat_map(doc_blocks(), servers)
    assert doc != [], "no `mix goblins.server` beside the bots in #{@doc_file}"
    assert servers.(recipe("bench-full")) == doc
  end

  test "make bench runs every task of bench-full, short, writing to bench/results/short/" do
    full = commands(recipe("bench-full"))
    short = commands(recipe("bench"))

    assert short |> Enum.map(&task/1) |> Enum.uniq() |> Enum.sort() ==
             full |> Enum.map(&task/1) |> Enum.uniq() |> Enum.sort()

    for c <- short do
      assert elem(c, 0) == dir_of(c), "#{inspect(c)} should run in #{dir_of(c)}"
      assert String.starts_with?(json!(c), "bench/results/short/"), inspect(c)
    end
  end

  test "in both recipes the bots play against the server started beside them" do
    for target <- ["bench", "bench-full"], line <- String.split(recipe(target), "\n") do
      for {_, bots} <- commands(line, ~S"overworld\.bots") do
        [port] = Regex.run(~r{--url ws://127\.0\.0\.1:(\d+)/}, bots, capture: :all_but_first)

        # (The server may have options after its port.)
        assert [{@game, "mix goblins.server --port " <> rest}] =
                 commands(line, ~S"goblins\.server"),
               "#{target}: #{bots} has no server beside it"

        assert hd(String.split(rest)) == port,
               "#{target}: #{bots} has no server on port #{port} beside it"
      end
    end
  end
end

defmodule Mix.Tasks.Overworld.Bench.BackendTest do
  use ExUnit.Case, async: false

  alias Mix.Tasks.Overworld.Bench.Backend, as: Task

  @moduletag timeout: 120_000
  @moduletag :tmp_dir

  test "the storage workload against a PostgreSQL it starts: writes and reads answered, reported",
       %{tmp_dir: tmp} do
    json = Path.join(tmp, "storage.json")
    {affinity, 0} = System.cmd("taskset", ["-c", "-p", System.pid()])

    # (The shell's lines come as messages: the server's node, a peer, needs a real stdio.)
    Mix.shell(Mix.Shell.Process)
    on_exit(fn -> Mix.shell(Mix.Shell.IO) end)
    Task.run(~w(--workload storage --storage postgres --seconds 2 --connections 8 --json #{json}))
    out = shell_lines()

    assert out =~ "storage: PostgreSQL (port "
    assert out =~ ~r/\d+ storage calls \(half writes, half reads\)\/s over 2 s/

    r = json |> File.read!() |> :jiffy.decode([:return_maps, {:null_term, nil}])
    assert r["workload"] == "storage" and r["storage"] == "postgres"
    assert r["requests"] > 20
    assert r["non_2xx"] == 0 and r["socket_errors"] == nil
    assert r["p99_ms"] > 0
    assert r["server_cpu"] > 0 and r["generator_cpu"] > 0

    # This node ran the load on CPU 1, and has its CPUs back.
    assert System.cmd("taskset", ["-c", "-p", System.pid()]) == {affinity, 0}
  end

  test "invalid options are refused before anything starts" do
    assert_raise Mix.Error, ~r/--storage must be embedded or postgres/, fn ->
      Task.run(~w(--workload storage --storage sqlite))
    end

    assert_raise Mix.Error, ~r/--workload must be/, fn -> Task.run(~w(--workload bogus)) end
  end

  defp shell_lines(acc \\ []) do
    receive do
      {:mix_shell, :info, [line]} -> shell_lines([line | acc])
    after
      0 -> acc |> Enum.reverse() |> Enum.join("\n")
    end
  end
end

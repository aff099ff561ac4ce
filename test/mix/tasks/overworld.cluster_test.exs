defmodule Mix.Tasks.Overworld.ClusterTest do
  # `mix overworld.cluster`: real OS processes (each `mix overworld.server` with a node name),
  # joined into one cluster that spreads a world over them; all gone when it stops.
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  @moduletag :cluster
  @moduletag :tmp_dir
  @moduletag timeout: 180_000

  alias Mix.Tasks.Overworld.Cluster, as: Task

  @game ~w(--zone Overworld.Test.Game --wire Overworld.Test.Game.Wire)

  for tls <- [false, true] do
    @tag tls: tls
    test "starts the nodes, spreads the world's zones over them, and stops every node#{if tls, do: " (TLS distribution)"}",
         %{tmp_dir: tmp, tls: tls} do
      out =
        capture_io(fn ->
          Task.run(
            @game ++
              ~w(--zones 2x1 --entities-per-zone 200 --nodes 2 --port 0 --seconds 8 --interval 2) ++
              ~w(--data-dir #{tmp}) ++ if(tls, do: ["--tls"], else: [])
          )
        end)

      check(out, tmp, if(tls, do: "TLS", else: "plain TCP"))
    end
  end

  defp check(out, tmp, distribution) do
    pids =
      for i <- 1..2 do
        assert [_, pid] =
                 Regex.run(
                   ~r/node #{i} overworld#{i}@127.0.0.1 listening on http:\/\/127.0.0.1:\d+ \(os pid (\d+)\)/,
                   out
                 )

        pid
      end

    # Each node reports the zones running on it; together, the world's two (the last report
    # of each node that saw both members).
    counts =
      for i <- 1..2 do
        lines =
          Regex.scan(
            ~r/^#{i} \| node overworld#{i}@127.0.0.1 \| (\d) of 2 zones of the world here \| 2 nodes in the cluster \| #{distribution} distribution/m,
            out
          )

        assert lines != [], "node #{i} never saw both members:\n#{out}"
        lines |> List.last() |> Enum.at(1) |> String.to_integer()
      end

    assert Enum.sum(counts) == 2
    assert out =~ ~r/^\d \| zone \d,0 \| tick \d+ \| \d+ entities/m
    assert out =~ "cluster stopped: 2 nodes"

    # The cookie file is the owner's only; no node outlives the task.
    assert File.stat!(Path.join(tmp, "cookie")).mode |> Bitwise.band(0o777) == 0o600

    for pid <- pids do
      assert {:error, _} = Overworld.Bench.OsServer.signal(pid, "0"),
             "node with os pid #{pid} still runs"
    end
  end

  test "bad options are one-line errors" do
    Overworld.Test.TaskCase.assert_one_line_errors(&Task.run/1, [
      {@game ++ ~w(--entities-per-zone 10), "--zones is required"},
      {@game ++ ~w(--zones 2x1 --entities-per-zone 10 --nodes 0), "--nodes must be a positive"},
      {@game ++ ~w(--zones 2x1 --entities-per-zone 10 --port 70000), "--port must be 0 or"},
      {~w(--zones 2x1 --entities-per-zone 10 --typo x), "invalid arguments"}
    ])
  end
end

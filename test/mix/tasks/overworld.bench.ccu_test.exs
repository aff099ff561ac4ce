defmodule Mix.Tasks.Overworld.Bench.CcuTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @tag timeout: 120_000
  test "client OS processes open and hold authenticated sessions; the server reports their cost" do
    path = Path.join(System.tmp_dir!(), "ccu-#{System.unique_integer([:positive])}.json")

    # (200 sessions: their memory, about 1 MB, stands well above the rest of this test node's
    # churn between the two readings; 60 once measured below the lower bound.)
    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Bench.Ccu.run(
          ~w(--count 200 --clients 2 --hold 1 --json) ++
            [path, "--data-dir", Overworld.Test.DataDir.path()]
        )
      end)

    assert out =~ "opened 200 sessions"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert r["sessions_held"] == 200
    assert r["failed"] == 0
    assert r["accept_rate_per_second"] > 0
    # Measured in the server node: some bytes per session, far below 100 KB.
    assert r["bytes_per_session"] > 500 and r["bytes_per_session"] < 100_000
    assert r["open_file_limit"] > 0
    File.rm(path)
  end
end

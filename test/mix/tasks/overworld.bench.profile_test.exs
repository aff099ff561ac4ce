defmodule Mix.Tasks.Overworld.Bench.ProfileTest do
  use ExUnit.Case, async: false

  @moduletag timeout: 240_000

  test "profiles a game's server under native clients, in a node of its own" do
    json = Path.join(System.tmp_dir!(), "profile-#{System.unique_integer([:positive])}.json")
    on_exit(fn -> File.rm(json) end)

    serve =
      "overworld.server --zone Overworld.Test.Game --wire Overworld.Test.Game.Wire " <>
        "--name critters --arg critters=300 --size 158,158 --cell-size 12 --no-persist"

    # Its own OS process: the task starts a server in the node it runs in.
    {out, status} =
      System.cmd(
        "mix",
        ~w(overworld.bench.profile --serve) ++
          [serve] ++
          ~w(--clients 8 --warmup 1 --seconds 1 --eprof Overworld.Transport.Conn --eprof-seconds 1 --nice 5 --json #{json}),
        env: [{"MIX_ENV", "test"}],
        stderr_to_stdout: true
      )

    assert status == 0, out
    assert out =~ "profiling 8 clients"
    assert out =~ "reductions by process kind"
    assert out =~ "owload: 8 clients, 8 connected"

    r = json |> File.read!() |> :jiffy.decode([:return_maps])
    assert r["clients"] == 8
    assert r["frames_per_second"] > 8 * 20 and r["send_interval"] == 1
    kinds = Map.new(r["kinds"], &{&1["kind"], &1})
    assert kinds["Overworld.Transport.Conn"]["processes"] >= 8
    assert kinds["Overworld.Zone.Bucket"]["reductions"] > 0
    assert Enum.any?(r["eprof"], &(&1["function"] =~ "Overworld.Session"))
  end

  test "bad options end the task with one line" do
    Overworld.Test.TaskCase.assert_one_line_errors(&Mix.Tasks.Overworld.Bench.Profile.run/1, [
      {[], "--serve is required"},
      {~w(--serve x --clients -1), "--clients must be a non-negative integer"},
      {~w(--serve x --nice 40), "--nice must be in 0..19"},
      {~w(--serve x --typo 1), "invalid arguments"}
    ])
  end
end

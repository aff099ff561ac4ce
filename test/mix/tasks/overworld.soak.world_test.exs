defmodule Mix.Tasks.Overworld.Soak.WorldTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @moduletag timeout: 120_000

  test "a world persisted on disk survives its zones' servers, workers and supervisors killed during crossings" do
    path = Path.join(System.tmp_dir!(), "soak-#{System.unique_integer([:positive])}.json")
    dir = Path.join(Overworld.Test.DataDir.path(), "soak-#{System.unique_integer([:positive])}")

    out =
      capture_io(fn ->
        ExUnit.CaptureLog.capture_log(fn ->
          Mix.Tasks.Overworld.Soak.World.run(
            ~w(--zone Overworld.Test.Game --zones 2x1 --entities-per-zone 200 --seconds 4) ++
              ~w(--kills 3 --warmup 1 --data-dir) ++ [dir, "--json", path]
          )
        end)
      end)

    assert out =~ "kill 3/3"
    r = path |> File.read!() |> :jiffy.decode([:return_maps])
    assert r["kills"] == 3
    assert r["kills_by_kind"] == %{"server" => 1, "worker" => 1, "zone" => 1}
    assert r["entities"] == 400
    assert {r["lost"], r["duplicated"], r["extra"]} == {0, 0, 0}
    assert r["checks"] == 4
    assert r["crossings"] > 0
    assert Enum.all?(r["per_kill"], &(&1["entities"] == 400 and &1["recover_ms"] >= 0))
    File.rm(path)
  end

  test "a data directory in use is refused" do
    dir = Path.join(Overworld.Test.DataDir.path(), "soak-#{System.unique_integer([:positive])}")
    File.mkdir_p!(Path.join(dir, "zone-0"))

    assert_raise Mix.Error, ~r/is not empty/, fn ->
      Mix.Tasks.Overworld.Soak.World.run(
        ~w(--zone Overworld.Test.Game --zones 2x1 --data-dir) ++ [dir]
      )
    end
  end
end

defmodule Mix.Tasks.Goblins.Bench.EncodeTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  @tag timeout: 120_000
  test "measures the wire of a small goblin world with observers and writes the JSON" do
    path =
      Path.join(System.tmp_dir!(), "overworld-encode-#{System.unique_integer([:positive])}.json")

    on_exit(fn -> File.rm(path) end)

    out =
      capture_io(fn ->
        Mix.Tasks.Goblins.Bench.Encode.run(
          ~w(--entities 1000 --observers 20 --seconds 2 --warmup 1 --radius 40 --decoders 2 --json #{path})
        )
      end)

    assert out =~ "keyframe bytes per entity"
    json = path |> File.read!() |> :jiffy.decode([:return_maps])

    for key <-
          ~w(keyframe_bytes_per_entity delta_bytes_per_changed_entity observer_bytes_per_second observer_bytes_per_second_p99 full_world_bytes_per_second tick_p99_us zone_tick_p99_us encode_us_per_observer visible_entities),
        do: assert(is_number(json[key]), "missing #{key}")

    # Bytes per entity are properties of the template and the world, not of the machine.
    assert json["keyframe_bytes_per_entity"] > 5 and json["keyframe_bytes_per_entity"] < 15

    assert json["delta_bytes_per_changed_entity"] > 1 and
             json["delta_bytes_per_changed_entity"] < 8

    # 20 observers for 2 s at 30 Hz, and the frames decode.
    assert json["frames"] >= 20 * 50
    assert json["decode_errors"] == 0
    assert json["visible_entities"] > 0
    assert json["full_world_bytes_per_second"] > json["observer_bytes_per_second"]
    assert json["tick_p99_us"] >= json["tick_p50_us"]
  end

  test "bad arguments are refused with a message" do
    assert_raise Mix.Error, ~r/positive integer/, fn ->
      Mix.Tasks.Goblins.Bench.Encode.run(~w(--entities 0))
    end

    assert_raise Mix.Error, ~r/invalid arguments/, fn ->
      Mix.Tasks.Goblins.Bench.Encode.run(~w(--observer 10))
    end
  end
end

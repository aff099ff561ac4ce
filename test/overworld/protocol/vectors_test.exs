defmodule Overworld.Protocol.VectorsTest do
  # The checked-in vectors (protocol/vectors/*.json) are what the encoder produces, byte for byte;
  # the TypeScript tests decode the same files.
  use ExUnit.Case, async: true
  alias Overworld.Protocol.Vectors
  alias Overworld.Template

  @path "protocol/vectors/templates.json"

  setup_all do
    {:ok, json: @path |> File.read!() |> :jiffy.decode([:return_maps])}
  end

  test "the files on disk are up to date (mix overworld.vectors)" do
    for {name, map} <- Vectors.files() do
      on_disk =
        "protocol/vectors" |> Path.join(name) |> File.read!() |> :jiffy.decode([:return_maps])

      assert on_disk == map |> :jiffy.encode() |> :jiffy.decode([:return_maps])
    end
  end

  defp template(id), do: Enum.find(Vectors.Wire.__templates__(), &(&1.id == id))
  defp q(values), do: values |> Enum.map(& &1["q"]) |> List.to_tuple()

  defp bits(%{"hex" => hex, "bits" => n}) do
    <<b::bitstring-size(n), _pad::bitstring>> = Base.decode16!(hex, case: :lower)
    b
  end

  test "keyframes encode to the exact bytes and decode back", %{json: json} do
    assert length(json["keyframes"]) >= 10

    for case <- json["keyframes"] do
      t = template(case["template"])
      assert Template.encode_keyframe(t, q(case["values"])) == bits(case)
      assert Template.decode_keyframe(t, bits(case)) == {:ok, q(case["values"]), <<>>}

      assert Template.to_map(t, q(case["values"])) |> Map.values() |> length() ==
               length(case["values"])
    end
  end

  test "deltas encode to the exact bytes and decode back", %{json: json} do
    assert length(json["deltas"]) >= 10

    for case <- json["deltas"] do
      t = template(case["template"])
      assert Template.encode_delta(t, q(case["old"]), q(case["new"])) == bits(case)
      assert Template.decode_delta(t, q(case["old"]), bits(case)) == {:ok, q(case["new"]), <<>>}
    end
  end

  test "the vectors cover every field type and both delta forms", %{json: json} do
    types = for t <- json["templates"], f <- t["fields"], uniq: true, do: f["type"]
    assert Enum.sort(types) == ~w(angle bool enum fixed int uint)
    # Some delta carries a short difference (flag 1) and some a full value (flag 0): small nudges
    # are much shorter than the fields' full widths.
    sizes = Enum.map(json["deltas"], & &1["bits"])
    assert Enum.min(sizes) < Enum.max(sizes)
  end
end

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

  test "typed inputs: values encode to the exact payload and decode back; every type", %{
    json: json
  } do
    t = Vectors.Wire.__input__()
    assert json["input"]["id"] == t.id

    assert Enum.map(json["input"]["fields"], & &1["type"]) |> Enum.sort() ==
             ~w(angle bool enum fixed int int uint)

    assert length(json["inputs"]) >= 6

    values = fn json ->
      Map.new(t.fields, fn f ->
        v = json[to_string(f.name)]
        {f.name, if(f.type == :enum, do: Enum.find(f.values, &(to_string(&1) == v)), else: v)}
      end)
    end

    inexact =
      for case <- json["inputs"], reduce: 0 do
        n ->
          bin = Base.decode16!(case["hex"], case: :lower)
          assert Template.encode_input(t, values.(case["values"])) == bin
          assert Template.decode_input(t, bin) == {:ok, values.(case["decoded"])}
          if case["values"] == case["decoded"], do: n, else: n + 1
      end

    # Some cases are values the wire or the declared range does not hold exactly.
    assert inexact >= 3
  end

  test "the vectors cover every field type and both delta forms", %{json: json} do
    types = for t <- json["templates"], f <- t["fields"], uniq: true, do: f["type"]
    assert Enum.sort(types) == ~w(angle bool enum fixed int uint)
    # More than two templates (indexes of 2 bits), an enum of integers, a number of diff_bits 0.
    assert length(json["templates"]) >= 3
    enums = for t <- json["templates"], f <- t["fields"], f["type"] == "enum", do: f["values"]

    assert Enum.any?(enums, fn vs -> Enum.all?(vs, &is_integer/1) and Enum.any?(vs, &(&1 < 0)) end)

    assert Enum.any?(json["templates"], fn t ->
             Enum.any?(t["fields"], &(&1["type"] not in ~w(enum bool) and &1["diff_bits"] == 0))
           end)

    # Both ends of a difference's range: -2^(d-1) fits, +2^(d-1) does not.
    by_id = Map.new(Vectors.Wire.__templates__(), &{&1.id, &1})

    ends =
      for case <- json["deltas"],
          {f, o, n} <- Enum.zip([by_id[case["template"]].fields, case["old"], case["new"]]),
          f.values == nil and f.type != :angle and f.diff_bits > 0,
          do: {f.diff_bits, n["q"] - o["q"]}

    assert Enum.any?(ends, fn {d, diff} -> diff == -Bitwise.bsl(1, d - 1) end)
    assert Enum.any?(ends, fn {d, diff} -> diff == Bitwise.bsl(1, d - 1) end)
    # Some delta carries a short difference (flag 1) and some a full value (flag 0): small nudges
    # are much shorter than the fields' full widths.
    sizes = Enum.map(json["deltas"], & &1["bits"])
    assert Enum.min(sizes) < Enum.max(sizes)
  end
end

defmodule Overworld.Protocol.MessageVectorsTest do
  use ExUnit.Case, async: true
  alias Overworld.Protocol
  alias Overworld.Protocol.Vectors

  @path "protocol/vectors/messages.json"

  # The names used in the vectors (an explicit table: no atoms from file contents).
  @names Map.new(
           ~w(type hello input client_event ping resync handshake event pong error version token
              seq ack payload client_time reason last_tick tick_rate entity_id width height
              cell_size cols rows templates extensions server_tick code message request
              match_send response match_data notify id method body match_id op status messages
              kind)a,
           &{Atom.to_string(&1), &1}
         )

  defp message(json) do
    Map.new(json, fn
      {"type", t} ->
        {:type, Map.fetch!(@names, t)}

      {"templates", ids} ->
        {:templates,
         Enum.map(ids, fn id -> Enum.find(Vectors.Wire.__templates__(), &(&1.id == id)) end)}

      {"input", :null} ->
        {:input, nil}

      {"input", id} ->
        {:input, %{Vectors.Wire.__input__() | id: id}}

      {"messages", list} ->
        {:messages,
         for(
           m <- list,
           do: {m["op"], m["sender"], Base.decode16!(m["payload_hex"], case: :lower)}
         )}

      {"extensions", list} ->
        {:extensions, for(e <- list, do: {e["type"], Base.decode16!(e["hex"], case: :lower)})}

      {k, v} ->
        if String.ends_with?(k, "_hex"),
          do:
            {Map.fetch!(@names, String.trim_trailing(k, "_hex")), Base.decode16!(v, case: :lower)},
          else: {Map.fetch!(@names, k), v}
    end)
  end

  test "every message encodes to its exact bytes and decodes back" do
    cases = @path |> File.read!() |> :jiffy.decode([:return_maps]) |> Map.fetch!("messages")
    assert length(cases) >= 15

    for c <- cases do
      m = message(c["message"])
      bytes = Base.decode16!(c["hex"], case: :lower)
      assert Protocol.encode(m) == bytes

      assert {:ok, decoded} = Protocol.decode(bytes)
      assert decoded.type == m.type

      if m.type == :handshake do
        assert Enum.map(decoded.templates, & &1.name) ==
                 Enum.map(m.templates, &to_string(&1.name))

        assert (decoded.input && decoded.input.name) == (m.input && to_string(m.input.name))
        assert decoded.extensions == m.extensions
        assert {decoded.cols, decoded.rows} == {m.cols, m.rows}
        assert Protocol.encode(%{decoded | templates: m.templates, input: m.input}) == bytes
      else
        assert decoded == m
      end
    end
  end
end

defmodule Overworld.Protocol.SnapshotVectorsTest do
  use ExUnit.Case, async: true
  alias Overworld.Protocol.Snapshot
  alias Overworld.Protocol.Vectors

  test "the snapshot vectors apply in order to the expected views" do
    json = "protocol/vectors/snapshots.json" |> File.read!() |> :jiffy.decode([:return_maps])

    ts =
      Enum.map(json["templates"], fn id ->
        Enum.find(Vectors.Wire.__templates__(), &(&1.id == id))
      end)

    index = ts |> Enum.with_index() |> Map.new(fn {t, i} -> {t.id, i} end)

    Enum.reduce(json["snapshots"], %Snapshot.View{}, fn s, view ->
      {:ok, view} = Snapshot.apply(view, Base.decode16!(s["hex"], case: :lower), ts)

      expected =
        Map.new(s["view"], fn c ->
          {c["cell"],
           Enum.map(c["entities"], &{&1["id"], index[&1["template"]], List.to_tuple(&1["q"])})}
        end)

      assert view.cells == expected
      assert view.tick == s["tick"]
      assert Enum.sort(view.ticks) == Enum.map(s["ticks"], &List.to_tuple/1)

      assert for({id, {ti, q}} <- Enum.sort(Snapshot.View.entities(view)), do: {id, ti, q}) ==
               for(e <- s["entities"], do: {e["id"], index[e["template"]], List.to_tuple(e["q"])})

      view
    end)
  end

  test "protocol 2's cases in the snapshot vectors are what they say" do
    json = "protocol/vectors/snapshots.json" |> File.read!() |> :jiffy.decode([:return_maps])
    [s1, s2, s3, s4, s5] = Enum.take(json["snapshots"], -5)

    cells = fn s ->
      Map.new(s["view"], &{&1["cell"], Enum.map(&1["entities"], fn e -> e["id"] end)})
    end

    # A delta for a cell never held: it arrives with its arrivals only.
    assert cells.(s1)[50] == [60]
    # Entity 1 in two cells, the one sent (13, newer) current: its values are 13's.
    assert 1 in cells.(s2)[11] and 1 in cells.(s2)[13]
    assert Map.new(s2["ticks"], &List.to_tuple/1)[11] < s2["tick"]
    e1 = Enum.find(s2["entities"], &(&1["id"] == 1))
    in13 = Enum.find(Enum.find(s2["view"], &(&1["cell"] == 13))["entities"], &(&1["id"] == 1))
    assert e1 == in13
    # The extension (type 99) is in the bytes, and skipped.
    assert s2["hex"] |> String.ends_with?("0163030102" <> "03")
    # The runs name cells 95..96 too, which the client does not hold: ignored.
    refute Map.has_key?(cells.(s2), 95) or Map.has_key?(cells.(s2), 96)
    # Cell 11 caught up: one copy of 1 again.
    refute 1 in cells.(s3)[11]
    assert Enum.all?(s3["ticks"], fn [_k, t] -> t == s3["tick"] end)
    # An empty keyframe of cell 12 (header 12 * 4, count 0): the cell is no longer held.
    assert Map.has_key?(cells.(s3), 12) and not Map.has_key?(cells.(s4), 12)
    assert s4["hex"] =~ "3000"
    # Two ticks later, the send interval 2 (extension 1, after an unknown one: count 2, type 99
    # of no bytes, type 1 of one byte, 2); the views before hold 1.
    assert s5["tick"] == s4["tick"] + 2
    assert String.ends_with?(s5["hex"], "02" <> "6300" <> "010102")
    assert s5["send_interval"] == 2 and Enum.all?([s1, s2, s3, s4], &(&1["send_interval"] == 1))
  end

  test "frames.json: a client view applying a real observer's frames holds what the file says" do
    json = "protocol/vectors/frames.json" |> File.read!() |> :jiffy.decode([:return_maps])
    templates = Vectors.Wire.__templates__()
    frames = json["frames"]

    # The sequence covers what it claims to.
    assert Enum.any?(frames, &(&1["left"] != []))
    assert Enum.any?(frames, &(&1["deferred"] > 0))
    assert Enum.any?(frames, &(&1["behind"] != []))
    # The grid the keys are on: every key held is a cell of it.
    %{"cols" => cols, "rows" => rows} = json["grid"]

    for f <- frames, k <- f["cells"] do
      {row, col} = {div(k, cols + 2) - 1, rem(k, cols + 2) - 1}
      assert row in 0..(rows - 1) and col in 0..(cols - 1), "key #{k}"
    end

    assert Enum.any?(
             tl(frames),
             &match?(<<2, _::binary>>, Base.decode16!(&1["hex"], case: :lower))
           )

    Enum.reduce(frames, %Overworld.Protocol.Snapshot.View{}, fn f, view ->
      view = apply_frame!(view, f, templates)
      assert Enum.sort(view.ticks) == Enum.map(f["ticks"], &List.to_tuple/1)
      view
    end)
  end

  # Applies a frame of frames.json or world.json to a view: it must decode, and leave the view
  # at its tick with exactly its cells and its entities.
  defp apply_frame!(view, f, templates) do
    assert {:ok, view} =
             Overworld.Protocol.Snapshot.apply(
               view,
               Base.decode16!(f["hex"], case: :lower),
               templates
             )

    assert view.tick == f["tick"]
    assert view.cells |> Map.keys() |> Enum.sort() == f["cells"]

    held =
      for {id, {ti, q}} <- Enum.sort(Overworld.Protocol.Snapshot.View.entities(view)),
          do: %{"id" => id, "template" => Enum.at(templates, ti).id, "q" => Tuple.to_list(q)}

    assert held == f["entities"]
    view
  end

  test "world.json: a client view applying a corner observer's frames of four zones holds what the file says" do
    json = "protocol/vectors/world.json" |> File.read!() |> :jiffy.decode([:return_maps])
    templates = Vectors.Wire.__templates__()
    frames = json["frames"]
    %{"cols" => cols, "rows" => rows} = json["grid"]
    space = (cols + 2) * (rows + 2)

    # The sequence covers what it claims to: band keys, both orders of a handoff, and cells of
    # the four zones (the quarters of the grid) in one frame.
    assert Enum.any?(frames, &(&1["handed"] != []))
    assert Enum.any?(frames, &(&1["both"] != []))
    assert Enum.any?(frames, fn f -> Enum.any?(f["cells"], &(&1 >= space)) end)

    quarters =
      for k <- List.last(frames)["cells"], k < space, uniq: true do
        {div(rem(k, cols + 2) - 1, div(cols, 2) + 1), div(div(k, cols + 2) - 1, div(rows, 2) + 1)}
      end

    assert length(quarters) == 4

    Enum.reduce(frames, %Overworld.Protocol.Snapshot.View{space: space}, fn f, view ->
      view = apply_frame!(view, f, templates)
      assert view.handed |> Map.keys() |> Enum.sort() == f["handed"]
      view
    end)
  end

  test "frames.json: a frame whose baseline the view does not hold is refused" do
    json = "protocol/vectors/frames.json" |> File.read!() |> :jiffy.decode([:return_maps])
    templates = Vectors.Wire.__templates__()
    [f1, f2, _f3, f4 | _] = Enum.map(json["frames"], &Base.decode16!(&1["hex"], case: :lower))

    {:ok, view} =
      Overworld.Protocol.Snapshot.apply(%Overworld.Protocol.Snapshot.View{}, f1, templates)

    {:ok, view} = Overworld.Protocol.Snapshot.apply(view, f2, templates)
    assert Overworld.Protocol.Snapshot.apply(view, f4, templates) == {:error, :unknown_baseline}
  end
end

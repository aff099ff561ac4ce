defmodule Overworld.World.CopiesTest do
  # A copy's ownership epoch (the file `epoch` in a zone's directory) and what a node says
  # it holds of a zone (the survey before a start: test/overworld/zone/replica_test.exs).
  use ExUnit.Case, async: true
  @moduletag :tmp_dir

  alias Overworld.World.{Copies, Handover}

  test "the epoch is written durably, read back, and 0 when missing or unreadable", %{
    tmp_dir: tmp
  } do
    dir = Path.join(tmp, "zone")
    assert Copies.epoch(dir) == 0
    assert :ok = Copies.put_epoch(dir, 7)
    assert Copies.epoch(dir) == 7
    assert File.ls!(dir) == ["epoch"]
    :ok = Copies.put_epoch(dir, 8)
    assert Copies.epoch(dir) == 8

    File.write!(Path.join(dir, "epoch"), "not a number")
    assert Copies.epoch(dir) == 0
  end

  test "the epoch travels with the zone's files in a hand-over", %{tmp_dir: tmp} do
    from = Path.join(tmp, "from")
    :ok = Copies.put_epoch(from, 3)
    File.write!(Path.join(from, "snapshot"), "s")
    File.write!(Path.join(from, "journal.00000001"), "j")
    File.write!(Path.join(from, "unrelated"), "u")
    refute Copies.copy?(Path.join(tmp, "none"))
    assert Copies.copy?(from)

    {:ok, chunks} = Handover.chunks(from)
    to = Path.join(tmp, "to")
    :ok = Handover.install(to, Enum.reduce(chunks, %{}, &Handover.add(&2, &1)))
    assert Copies.epoch(to) == 3
    assert Enum.sort(File.ls!(to)) == ["epoch", "journal.00000001", "snapshot"]
  end

  test "a node describes its copy of a zone of a world it does not run as :unknown" do
    assert Copies.describe({__MODULE__, make_ref()}, :zone) == :unknown
  end
end

defmodule Overworld.World.CopiesSurveyTest do
  # The survey before a zone starts on its home (Overworld.World.Copies.survey/3), against a
  # peer whose world this node's `:pg` groups do not show yet (as just after it connected).
  use ExUnit.Case
  @moduletag :cluster
  @moduletag :tmp_dir

  alias Overworld.Names
  alias Overworld.World.Copies

  test "every connected node is asked, not only those whose placer this node has heard of", %{
    tmp_dir: tmp
  } do
    [{_, a}] = Overworld.Test.Cluster.start_peers(1)
    name = {__MODULE__, make_ref()}
    id = {name, {0, 0}}
    here = Path.join(tmp, "here")
    there = Path.join(tmp, "there")
    :ok = Copies.put_epoch(here, 2)
    File.write!(Path.join(here, "snapshot"), "s")

    # The peer knows the world's directories, and runs the zone; no placer of it is in :pg.
    :ok = :erpc.call(a, :persistent_term, :put, [{Overworld.World.Placer, name}, %{id => there}])
    assert :pg.get_members(Overworld.Cluster.scope(), {:placer, name}) == []
    zone = :erpc.call(a, Overworld.Test.Cluster, :hold_names, [[Names.zone(id)]])
    assert Copies.survey(name, id, here) == :elsewhere

    # The zone stops there, its copy newer than ours: fetched from there.
    send(zone, :stop)
    Overworld.Test.Cluster.eventually(fn -> not :erpc.call(a, Copies, :busy?, [id]) end)
    :ok = Copies.put_epoch(there, 5)
    File.write!(Path.join(there, "snapshot"), "s")
    assert Copies.survey(name, id, here) == {:fetch, a, 5}
  end
end

defmodule Overworld.Zone.IdsTest do
  # A zone's entity ids stay in its id space: at start, for spawns and joins, and after a
  # restart from disk.
  use ExUnit.Case, async: true
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Zone
  alias Overworld.Zone.Ids

  doctest Overworld.Zone.Ids

  test "ids from any point are the space's, in order, never skipping one of its" do
    for c <- 1..7, i <- 0..(c - 1), n <- -3..40 do
      id = Ids.from({i, c}, n)
      assert Ids.member?({i, c}, id) and id >= n
      # No id of the space between n and it.
      assert Enum.all?(max(n, 1)..(id - 1)//1, &(not Ids.member?({i, c}, &1)))
      {ids, next} = Ids.take({i, c}, id, 5)
      assert Enum.all?(ids, &Ids.member?({i, c}, &1)) and Ids.member?({i, c}, next)
    end

    refute Ids.valid?({3, 3}) or Ids.valid?({-1, 2}) or Ids.valid?({0, 0}) or Ids.valid?(:x)
  end

  test "a zone with an id space makes only its ids, also after a restart from disk" do
    dir = Path.join(Overworld.Test.DataDir.path(), "ids-#{System.unique_integer([:positive])}")
    on_exit(fn -> File.rm_rf(dir) end)
    id = {__MODULE__, make_ref()}
    space = {2, 5}

    opts = [id: id, id_space: space, clock: :manual, data_dir: dir, size: {200, 200}]
    {:ok, _} = Overworld.start_zone(Overworld.Test.Walkers, opts)
    {:ok, _} = Zone.spawn(id, [[kind: :walker, x: 1000, y: 1000, state: :idle]])
    {:ok, _} = Zone.tick_now(id, 40)

    before = id |> Zone.entities() |> Enum.map(&entity(&1, :id))
    assert length(before) > 300

    assert Enum.all?(before, &Ids.member?(space, &1)),
           inspect(Enum.reject(before, &Ids.member?(space, &1)))

    # Stopped and started again on its files (recovered: its initial world and what the
    # journal holds): the ids it makes next are still its own, and none it holds.
    :ok = Overworld.stop_zone(id)
    {:ok, _} = Overworld.start_zone(Overworld.Test.Walkers, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    {:ok, _} = Zone.tick_now(id, 1)
    held = id |> Zone.entities() |> Enum.map(&entity(&1, :id))
    assert held != [] and Enum.all?(held, &Ids.member?(space, &1))
    {:ok, [new]} = Zone.spawn(id, [[kind: :walker, x: 2000, y: 2000, state: :idle]])
    assert Ids.member?(space, new) and new not in held
    {:ok, _} = Zone.tick_now(id, 20)

    after_ = id |> Zone.entities() |> Enum.map(&entity(&1, :id))
    assert new in after_
    assert Enum.all?(after_, &Ids.member?(space, &1))
    assert after_ == Enum.uniq(after_)
  end
end

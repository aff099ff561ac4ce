defmodule Goblins.RoomsTest do
  # The goblin world with walls: goblins walk from room to room through the doors on the
  # zone's paths, never end inside a wall, and the native sidecar's physics and paths give
  # the Elixir zone's bits.
  use ExUnit.Case, async: false
  doctest Goblins.Rooms

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Zone

  @moduletag timeout: 120_000

  defp start(n, opts) do
    id = {__MODULE__, make_ref()}
    opts = Goblins.Rooms.zone_options(n, [id: id, clock: :manual, workers: 2] ++ opts)
    {:ok, _} = Overworld.start_zone(Goblins.Rooms, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    {id, opts}
  end

  defp positions(id) do
    id
    |> Zone.entities()
    |> Map.new(&{entity(&1, :id), {entity(&1, :x), entity(&1, :y), entity(&1, :data)}})
  end

  test "goblins go through the doors to other rooms, around the walls, never into them" do
    {id, opts} = start(300, [])
    before = positions(id)
    {:ok, _} = Zone.tick_now(id, 240)
    later = positions(id)

    boxes =
      for {x0, y0, x1, y1} <- opts[:map][:boxes], do: Enum.map([x0, y0, x1, y1], &(&1 * 1024))

    for {gid, {x, y, _}} <- later, [x0, y0, x1, y1] <- boxes do
      refute x > x0 and x < x1 and y > y0 and y < y1, "goblin #{gid} inside a wall at #{x}, #{y}"
    end

    {_, rs} = Goblins.Rooms.rooms(Zone.config(id).width)
    room = fn {x, y, _} -> {div(x, rs), div(y, rs)} end
    moved = Enum.count(later, fn {gid, p} -> room.(p) != room.(before[gid]) end)
    assert moved >= 30, "#{moved} of 300 goblins changed room in 8 s"
  end

  test "the sidecar's physics and paths: the Elixir zone's bits" do
    {elixir, _} = start(400, [])
    {sidecar, _} = start(400, physics: :sidecar, sidecar: [deadline_ms: 1_000])
    p = Zone.config(sidecar).physics

    Overworld.Sidecar.await(p, 5_000) ||
      flunk("the sidecar never became ready (make deps-rust builds it)")

    for _ <- 1..4 do
      {:ok, _} = Zone.tick_now(elixir, 30)
      {:ok, _} = Zone.tick_now(sidecar, 30)
      assert positions(sidecar) == positions(elixir)
    end

    c = Overworld.Sidecar.counters(p)
    assert c.failures == 0 and c.sidecar == 2 * 119, inspect(c)
  end
end

defmodule Overworld.Zone.BucketTest do
  # Entities migrate between bucket workers and the result never depends on how many workers
  # share the zone.
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.{Random, Zone}
  alias Overworld.Spatial.View
  alias Overworld.Test.Game

  defmodule Jumpers do
    # Every entity runs at up to 60 m/s in a random direction, changes direction on its own
    # random timer, and now and then jumps anywhere in the world (crossing many stripes at
    # once). It also reads its neighbours, so a wrong halo would change the result.
    use Overworld.Zone

    @impl true
    def init(args) do
      n = Keyword.fetch!(args, :n)
      side = Keyword.fetch!(args, :side)

      specs =
        for i <- 1..n, do: [kind: :jumper, x: rem(i * 7919, side), y: rem(i * 104_729, side)]

      {:ok, %{}, [{:spawn, specs}]}
    end

    @impl true
    def handle_entity(e, view, ctx) do
      {roll, r} = Random.uniform(entity(e, :rng), 100)
      ns = length(View.neighbours(view, e, ctx.cell_size))

      {x, y, vx, vy, r} =
        cond do
          roll < 2 ->
            {x, r} = Random.uniform(r, ctx.width + 1)
            {y, r} = Random.uniform(r, ctx.height + 1)
            {x, y, 0, 0, r}

          roll < 12 ->
            {vx, r} = Random.uniform(r, 2 * 61_440 + 1)
            {vy, r} = Random.uniform(r, 2 * 61_440 + 1)
            {entity(e, :x), entity(e, :y), vx - 61_440, vy - 61_440, r}

          true ->
            {entity(e, :x), entity(e, :y), entity(e, :vx), entity(e, :vy), r}
        end

      {:ok,
       entity(e,
         x: x + div(vx, ctx.tick_rate),
         y: y + div(vy, ctx.tick_rate) + rem(ns, 2),
         vx: vx,
         vy: vy,
         rng: r,
         state: ns
       )}
    end
  end

  defp start(module, opts) do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(module, [id: id, clock: :manual] ++ opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  defp ids(zone), do: zone |> Zone.entities() |> Enum.map(&entity(&1, :id))

  test "over 1,000 ticks of fast random movement no entity is lost or duplicated" do
    n = 2_000

    zone =
      start(Jumpers, workers: 4, size: {200, 200}, cell_size: 12, args: [n: n, side: 200 * 1024])

    for _ <- 1..20 do
      {:ok, _} = Zone.tick_now(zone, 50)
      ids = ids(zone)
      assert length(ids) == n
      assert Enum.sort(ids) == Enum.to_list(1..n)
      assert Zone.count(zone) == n
    end

    assert Zone.metrics(zone).callback_errors == 0
  end

  test "jumpers end in the same state on 1, 2, 3 and 7 workers" do
    hashes =
      for w <- [1, 2, 3, 7] do
        zone =
          start(Jumpers,
            workers: w,
            size: {150, 150},
            cell_size: 12,
            args: [n: 1_500, side: 150 * 1024]
          )

        {:ok, 300} = Zone.tick_now(zone, 300)
        Zone.state_hash(zone)
      end

    assert length(Enum.uniq(hashes)) == 1
  end

  test "more workers than grid rows: the workers without rows idle, nothing is lost" do
    hashes =
      for w <- [1, 4] do
        zone =
          start(Jumpers, workers: w, size: {20, 20}, cell_size: 12, args: [n: 50, side: 20 * 1024])

        {:ok, 100} = Zone.tick_now(zone, 100)
        assert Zone.count(zone) == 50
        Zone.state_hash(zone)
      end

    assert [_] = Enum.uniq(hashes)
  end

  describe "the test game" do
    defp game(n, opts), do: start(Game, Game.zone_options(n, opts))

    defp coins(zone), do: zone |> Zone.entities() |> Enum.map(&entity(&1, :data)) |> Enum.sum()

    # 12 players join and walk for `ticks` ticks, each changing direction every half second
    # (the same script in every run); the coins they picked up.
    defp play(zone, ticks) do
      for i <- 1..12, do: {:ok, _} = Zone.join(zone, "p#{i}", %{})

      for n <- 1..ticks do
        for i <- 1..12, rem(n + i, 15) == 1 do
          Zone.input(
            zone,
            "p#{i}",
            {:erlang.phash2({i, n, :x}, 255) - 127, :erlang.phash2({i, n, :y}, 255) - 127}
          )
        end

        {:ok, ^n} = Zone.tick_now(zone)
      end

      for e <- Zone.entities(zone), entity(e, :kind) == :player, do: entity(e, :data)
    end

    test "300 ticks with players looting give the same state hash on 1 worker and on N workers" do
      runs =
        for w <- [1, 2, 4] do
          zone = game(3_000, workers: w)
          coins = coins(zone)
          picked = play(zone, 300)
          # Coins move from critters to players, none is made or lost.
          assert coins(zone) == coins
          assert Zone.metrics(zone).callback_errors == 0
          {Zone.state_hash(zone), Enum.sum(picked)}
        end

      assert [{_hash, picked}] = Enum.uniq(runs)
      assert picked > 0
    end

    test "the same seed twice gives the same hash, another seed another" do
      run = fn seed ->
        zone = game(1_000, workers: 2, seed: seed)
        {:ok, 100} = Zone.tick_now(zone, 100)
        Zone.state_hash(zone)
      end

      assert run.(1) == run.(1)
      assert run.(1) != run.(2)
    end

    test "players touching a critter from both sides of a stripe border: one gets its coins, once" do
      # Rows of 12 m: row 0 (y < 12,288 units) is worker 0's, rows 1-2 worker 1's (on 2 workers).
      border = 12 * 1024

      runs =
        for w <- [1, 2] do
          zone = game(0, size: {48, 24}, workers: w)
          # Critter 1 (7 coins) just below the border; critter 2 (4 coins) further right.
          {:ok, [1, 2]} =
            Zone.spawn(zone, [
              [kind: :beetle, x: 10_000, y: border - 200, data: 7],
              [kind: :mouse, x: 30_000, y: border - 100, data: 4]
            ])

          # Critter 1: "far" (0.6 m, row 0) joins before "near" (0.5 m, row 1): the nearest
          # gets the coins, even with the higher id. Critter 2: "t1" (row 1) and "t2" (row 0)
          # at 0.5 m each: the lowest id.
          for {p, x, y} <- [
                {"far", 10_000, border - 800},
                {"near", 10_000, border + 300},
                {"t1", 30_000, border + 400},
                {"t2", 30_000, border - 600}
              ],
              do: {:ok, _} = Zone.join(zone, p, %{x: x, y: y, session: self()})

          # Tick 1 brings them in; tick 2 decides from their positions then.
          {:ok, 2} = Zone.tick_now(zone, 2)
          assert_receive {:overworld_send, <<"L", 1::32, 7::16, 7::32>>}
          assert_receive {:overworld_send, <<"L", 2::32, 4::16, 4::32>>}
          {:ok, 32} = Zone.tick_now(zone, 30)
          refute_received {:overworld_send, _}

          data = Map.new(Zone.entities(zone), &{entity(&1, :id), entity(&1, :data)})
          players = Zone.info(zone).players
          assert data[1] == 0 and data[2] == 0
          assert data[players["near"]] == 7 and data[players["far"]] == 0
          assert data[players["t1"]] == 4 and data[players["t2"]] == 0
          Zone.state_hash(zone)
        end

      assert [_] = Enum.uniq(runs)
    end
  end
end

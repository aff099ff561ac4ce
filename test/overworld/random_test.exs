defmodule Overworld.RandomTest do
  use ExUnit.Case, async: true
  doctest Overworld.Random

  alias Overworld.Random

  test "the state stays a non-zero 32-bit integer" do
    Enum.reduce(1..10_000, Random.seed_for(7, 3), fn _, s ->
      s = Random.next(s)
      assert s > 0 and s < 0x1_0000_0000
      s
    end)
  end

  test "seeds differ across ids and seeds and are never zero" do
    seeds = for seed <- 0..3, id <- 1..2_000, do: Random.seed_for(seed, id)
    assert Enum.all?(seeds, &(&1 > 0 and &1 < 0x1_0000_0000))
    assert length(Enum.uniq(seeds)) == length(seeds)
  end

  test "uniform/2 stays in range and covers it" do
    {values, _} = Enum.map_reduce(1..5_000, 99, fn _, s -> Random.uniform(s, 10) end)
    assert Enum.all?(values, &(&1 in 0..9))
    assert values |> Enum.uniq() |> length() == 10
  end
end

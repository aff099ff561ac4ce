defmodule Overworld.BotsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Bots.Stick

  alias Overworld.Bots.Stick

  test "the stick walks: the same seed gives the same inputs, a new direction now and then" do
    inputs = fn seed ->
      {payloads, _} = Enum.map_reduce(1..200, Stick.init(seed), fn _, s -> Stick.next(s) end)
      payloads
    end

    a = inputs.(1)
    assert a == inputs.(1)
    assert a != inputs.(2)
    turns = a |> Enum.chunk_every(2, 1, :discard) |> Enum.count(fn [x, y] -> x != y end)
    # About one input in ten turns.
    assert turns in 8..40
    assert Enum.all?(a, fn <<x::signed-8, y::signed-8>> -> x > -128 and y > -128 end)
  end
end

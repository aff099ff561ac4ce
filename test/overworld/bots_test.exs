defmodule Overworld.BotsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Bots.Wander
  doctest Overworld.Bots.BorderWalk

  alias Overworld.Bots.Wander
  alias Overworld.Template

  defp inputs(seed, layout) do
    {payloads, _} =
      Enum.map_reduce(1..200, Wander.init(seed, layout), fn _, s -> Wander.next(s) end)

    payloads
  end

  test "wandering over an input layout: repeatable by seed, in range, a new draw now and then" do
    layout = Overworld.Template.Test.Wire.__input__()
    a = inputs(1, layout)
    assert a == inputs(1, layout)
    assert a != inputs(2, layout)
    values = for bin <- a, do: elem(Template.decode_input(layout, bin), 1)
    assert Enum.all?(values, &(&1.turn in -127..127 and is_boolean(&1.jump)))
    turns = values |> Enum.chunk_every(2, 1, :discard) |> Enum.count(fn [x, y] -> x != y end)
    # About one input in ten draws again.
    assert turns in 8..40
  end

  test "the layout as a client decodes it from the HANDSHAKE (names as strings) works too" do
    hs =
      Overworld.Protocol.handshake(
        tick_rate: 30,
        entity_id: 1,
        input: Overworld.Template.Test.Wire.__input__()
      )
      |> Overworld.Protocol.encode()

    {:ok, %{input: decoded}} = Overworld.Protocol.decode(hs)
    [bin | _] = inputs(3, decoded)

    assert {:ok, %{turn: _, jump: _}} =
             Template.decode_input(Overworld.Template.Test.Wire.__input__(), bin)
  end

  test "without a layout: two signed bytes, never -128" do
    a = inputs(1, nil)
    assert Enum.all?(a, fn <<x::signed-8, y::signed-8>> -> x > -128 and y > -128 end)
  end
end

defmodule Goblins.Wire do
  @moduledoc """
  What clients see of the goblin world: positions at 1/64 m over up to 16 km (20 bits each),
  heading to 1/256 of a turn, the state machine's state, and whether a goblin is a warlord.
  Players replicate their position and heading.
  """
  use Overworld.Template

  template :goblin, id: 1, kinds: [:goblin, :warlord] do
    field(:x, :fixed, max: 16384, precision: 1 / 64)
    field(:y, :fixed, max: 16384, precision: 1 / 64)
    field(:heading, :angle, bits: 8)
    field(:state, :enum, values: [:idle, :wander, :flee, :chase])
    field(:kind, :enum, values: [:goblin, :warlord])
  end

  template :player, id: 2, kinds: [:player] do
    field(:x, :fixed, max: 16384, precision: 1 / 64)
    field(:y, :fixed, max: 16384, precision: 1 / 64)
    field(:heading, :angle, bits: 8)
  end

  # The benchmarks' riders (`Goblins.init/1`'s `migrate:`).
  template :migrant, id: 3, kinds: [:migrant] do
    field(:x, :fixed, max: 16384, precision: 1 / 64)
    field(:y, :fixed, max: 16384, precision: 1 / 64)
  end

  # What a player's client sends: the stick's axes, -127..127 each (127 = full speed, 5 m/s).
  input :move do
    field(:mx, :int, min: -127, max: 127)
    field(:my, :int, min: -127, max: 127)
  end
end

defmodule Overworld.Template.Test.Wire do
  @moduledoc false
  # Templates for the tests: one with every field type.
  use Overworld.Template

  template :walker, id: 1, kinds: [:walker] do
    field(:x, :fixed, max: 1024, precision: 1 / 64)
    field(:y, :fixed, max: 1024, precision: 1 / 64)
    field(:heading, :angle, bits: 8)
    field(:state, :enum, values: [:idle, :wander, :flee, :chase])
  end

  template :everything, id: 2, kinds: [:thing, :other_thing] do
    field(:level, :uint, max: 100, from: {:data, 0})
    field(:hp, :int, min: -50, max: 1000, from: {:data, 1})
    field(:x, :fixed, min: -10, max: 16384, precision: 1 / 1024, diff_bits: 10)
    field(:vx, :fixed, min: -8, max: 8, precision: 1 / 256)
    field(:heading, :angle, bits: 12)
    field(:mode, :enum, values: [1, 2, 3], from: :state)
    field(:alive, :bool, from: {__MODULE__, :alive?})
  end

  # The layout of a test zone's inputs: a turn rate and a button.
  input :steer do
    field(:turn, :int, min: -127, max: 127)
    field(:jump, :bool)
  end

  def alive?(entity), do: elem(entity, 2) == :thing
end

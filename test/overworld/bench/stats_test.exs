defmodule Overworld.Bench.StatsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Bench.Stats
end

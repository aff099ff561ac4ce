defmodule Overworld.Interest.RunsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Interest.Runs
end

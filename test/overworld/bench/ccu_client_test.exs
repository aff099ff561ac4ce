defmodule Overworld.Bench.CCUClientTest do
  use ExUnit.Case, async: true
  doctest Overworld.Bench.CCUClient
end

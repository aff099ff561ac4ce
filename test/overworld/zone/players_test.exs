defmodule Overworld.Zone.PlayersTest do
  use ExUnit.Case, async: true
  doctest Overworld.Zone.Players
end

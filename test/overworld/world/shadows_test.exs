defmodule Overworld.World.ShadowsTest do
  use ExUnit.Case, async: true

  doctest Overworld.World.Shadows
end

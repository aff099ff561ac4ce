defmodule Overworld.EntityTest do
  use ExUnit.Case, async: true
  doctest Overworld.Entity
end

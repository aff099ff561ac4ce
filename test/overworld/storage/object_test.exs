defmodule Overworld.Storage.ObjectTest do
  use ExUnit.Case, async: true
  doctest Overworld.Storage.Object
  doctest Overworld.Storage
end

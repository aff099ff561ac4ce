defmodule Overworld.Operators.SettingsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Operators.Settings
end

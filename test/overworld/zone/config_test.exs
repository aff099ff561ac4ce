defmodule Overworld.Zone.ConfigTest do
  use ExUnit.Case, async: true
  doctest Overworld.Zone.Config

  alias Overworld.Zone.Config

  test "stripes cover every row exactly once" do
    for rows <- 1..40, n <- 1..9 do
      stripes = Config.stripes(rows, n)
      assert length(stripes) == n

      assert Enum.flat_map(stripes, fn {a, b} -> Enum.to_list(a..(b - 1)//1) end) ==
               Enum.to_list(0..(rows - 1))

      assert tuple_size(Config.owners(stripes)) == rows
    end
  end
end

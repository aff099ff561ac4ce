defmodule Overworld.OptionsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Options

  alias Overworld.Test.ProbeZone

  describe "zone options" do
    test "a string tick rate names the key, the expected type and the value" do
      error =
        assert_raise ArgumentError, fn ->
          Overworld.start_zone(ProbeZone, id: :bad1, tick_rate: "30")
        end

      assert error.message =~ ":tick_rate"
      assert error.message =~ "integer"
      assert error.message =~ ~s(got: "30")
    end

    test "an unknown key suggests the nearest valid one" do
      error =
        assert_raise ArgumentError, fn ->
          Overworld.start_zone(ProbeZone, id: :bad2, tick_rat: 30)
        end

      assert error.message =~ "unknown option :tick_rat"
      assert error.message =~ "did you mean :tick_rate?"
    end

    test "an unknown key far from every valid key lists the valid ones" do
      error =
        assert_raise ArgumentError, fn ->
          Overworld.start_zone(ProbeZone, id: :bad3, zzzz: 1)
        end

      assert error.message =~ "unknown option :zzzz"
      refute error.message =~ "did you mean"
      assert error.message =~ ":tick_rate"
    end

    test "other invalid values" do
      for {opts, key} <- [
            {[workers: 0], ":workers"},
            {[clock: :sometimes], ":clock"},
            {[size: {10, -1}], ":size"},
            {[cell_size: 0], ":cell_size"},
            {[seed: 1.5], ":seed"},
            {[tick_rate: 0], ":tick_rate"},
            {[tick_offset: 1], ":tick_offset"},
            {[tick_offset: 1.0], ":tick_offset"},
            {[tick_offset: -0.1], ":tick_offset"},
            {[tick_offset: :half], ":tick_offset"},
            {[id_space: {2, 2}], ":id_space"},
            {[id_space: {-1, 3}], ":id_space"},
            {[id_space: {0, 0}], ":id_space"},
            {[id_space: 5], ":id_space"}
          ] do
        error =
          assert_raise ArgumentError, fn ->
            Overworld.start_zone(ProbeZone, [id: :bad4] ++ opts)
          end

        assert error.message =~ key
      end
    end

    test "a missing id and a module that is not a zone" do
      assert_raise ArgumentError, ~r/missing required option :id/, fn ->
        Overworld.start_zone(ProbeZone, tick_rate: 30)
      end

      error = assert_raise ArgumentError, fn -> Overworld.start_zone(String, id: :bad5) end
      assert error.message =~ "Overworld.Zone behaviour"
    end

    test "options given twice and non-keyword options" do
      assert_raise ArgumentError, ~r/given twice/, fn ->
        Overworld.start_zone(ProbeZone, id: :bad6, seed: 1, seed: 2)
      end

      assert_raise ArgumentError, ~r/keyword list/, fn ->
        Overworld.Options.validate!(%{id: 1}, [id: {:any, :required}], "X")
      end
    end
  end
end

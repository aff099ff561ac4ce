defmodule Mix.Tasks.Overworld.FuzzTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  test "runs the decoders on random and mutated input and reports" do
    out =
      capture_io(fn -> assert :ok = Mix.Tasks.Overworld.Fuzz.run(~w(--cases 20000 --seed 7)) end)

    assert out =~
             ~r/20000 inputs \(seed 7\) × 2 decoders: \d+ decoded, \d+ refused, 0 crashes, 0 new atoms/
  end
end

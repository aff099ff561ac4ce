defmodule Overworld.Bench.ProfileTest do
  # Where a node's time goes: msacc states, reductions by process kind, eprof on one kind.
  use ExUnit.Case, async: false

  alias Overworld.Bench.Profile

  doctest Overworld.Bench.Profile

  defmodule Spinner do
    @moduledoc false
    def loop(n), do: receive(do: (:stop -> n), after: (0 -> loop(work(n))))
    def work(n), do: rem(Enum.sum(1..200) + n, 1_000_003)
  end

  test "a busy kind of process is seen by its reductions, and eprof finds its functions" do
    pids = for _ <- 1..2, do: :proc_lib.spawn(Spinner, :loop, [0])
    on_exit(fn -> Enum.each(pids, &send(&1, :stop)) end)
    kind = inspect(Spinner)
    r = Profile.sample(300, eprof: kind, eprof_ms: 300)
    assert Profile.kind(hd(pids)) == kind

    # The spinners are the node's busiest kind, by far.
    assert [%{kind: ^kind, processes: 2, reductions: red} | rest] = r.kinds
    assert Enum.all?(rest, &(&1.reductions < red))
    # The schedulers were busy running them: the emulator state shows it.
    assert r.msacc["scheduler"]["emulator"] > 0.2
    assert_in_delta Enum.sum(Map.values(r.msacc["scheduler"])), 1.0, 0.01
    # eprof: the spinners' own functions, with calls and time.
    names = Enum.map(r.eprof, & &1.function)
    assert "#{kind}.work/1" in names
    assert Enum.all?(r.eprof, &(&1.calls > 0 and &1.us >= 0))

    lines = Profile.format(r)
    assert Enum.any?(lines, &(&1 =~ kind))
    assert Enum.any?(lines, &(&1 =~ "eprof"))
  end
end

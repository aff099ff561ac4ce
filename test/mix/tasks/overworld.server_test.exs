defmodule Mix.Tasks.Overworld.ServerTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  test "runs the goblin world and prints tick statistics" do
    out =
      capture_io(fn ->
        Mix.Tasks.Overworld.Server.run(
          ~w(--entities 300 --seconds 2 --interval 1 --port 0 --data-dir) ++
            [Overworld.Test.DataDir.path()]
        )
      end)

    assert out =~ "goblin world with 300 goblins"
    assert [_, port] = Regex.run(~r/listening on http:\/\/127.0.0.1:(\d+)/, out)
    assert String.to_integer(port) > 0

    assert [_, _ | _] =
             Regex.scan(
               ~r/tick \d+ \| 300 entities \| \d+ ticks in .* tick µs p50 \d+ p99 \d+/,
               out
             )

    assert out =~ "schedulers"
    Overworld.stop_zone(:goblins)
    Supervisor.stop(Overworld.Server)
  end
end

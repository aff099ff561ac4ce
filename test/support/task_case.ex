defmodule Overworld.Test.TaskCase do
  @moduledoc false
  # The check every Mix task's test makes: each invalid command line ends the task with one
  # `Mix.Error` line that says what to do (no stack trace, no second line).

  import ExUnit.Assertions
  import ExUnit.CaptureIO

  @doc "Runs `run.(argv)` for each `{argv, message}` and checks the one-line error."
  def assert_one_line_errors(run, cases) do
    for {argv, message} <- cases do
      error = assert_raise Mix.Error, fn -> capture_io(fn -> run.(argv) end) end
      assert error.message =~ message
      refute error.message =~ "\n"
    end
  end
end

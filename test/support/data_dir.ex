defmodule Overworld.Test.DataDir do
  @moduledoc false
  # The data directory of a test run. Mnesia has one directory per node, so every test that
  # starts `Overworld.Accounts` (or anything else that keeps data) uses this one. It is removed
  # when the suite ends.

  @doc "The per-run data directory (created on demand)."
  @spec path() :: Path.t()
  def path do
    dir = Path.join(System.tmp_dir!(), "overworld-test-#{System.pid()}")

    unless :persistent_term.get(__MODULE__, false) do
      :persistent_term.put(__MODULE__, true)
      ExUnit.after_suite(fn _ -> remove(dir) end)
    end

    File.mkdir_p!(dir)
    dir
  end

  defp remove(dir) do
    :mnesia.stop()
    File.rm_rf!(dir)
  end
end

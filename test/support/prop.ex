defmodule Overworld.Test.Prop do
  @moduledoc false
  # Running PropEr properties from ExUnit (Debian's erlang-proper, no Elixir wrapper).
  import ExUnit.Assertions

  @doc "Checks a PropEr property; fails with the counterexample."
  def check(property, numtests \\ 200) do
    case :proper.quickcheck(property, [{:numtests, numtests}, :quiet, {:to_file, :user}]) do
      true ->
        :ok

      other ->
        flunk(
          "property failed: #{inspect(:proper.counterexample(), limit: :infinity)} (#{inspect(other)})"
        )
    end
  end
end

defmodule Overworld.Bench.Args do
  @moduledoc false
  # Command-line arguments of the benchmark and tool tasks: strict parsing and the checks
  # every task makes, with the same messages everywhere.

  @doc "Parses `argv` strictly; raises `Mix.Error` naming the task's help on anything else."
  @spec parse!([String.t()], keyword, String.t()) :: keyword
  def parse!(argv, switches, task) do
    case OptionParser.parse(argv, strict: switches) do
      {opts, [], []} ->
        opts

      {_opts, rest, invalid} ->
        Mix.raise("invalid arguments: #{inspect(invalid ++ rest)}; see `mix help #{task}`")
    end
  end

  @doc """
  Raises `Mix.Error` unless each of `keys` of `o` (a map or keyword list) is an integer of at
  least `min` (1 by default).
  """
  @spec at_least!(map | keyword, [atom], integer) :: :ok
  def at_least!(o, keys, min \\ 1) do
    for k <- keys, not (is_integer(o[k]) and o[k] >= min) do
      kind = if min == 0, do: "non-negative", else: "positive"
      Mix.raise("--#{String.replace(to_string(k), "_", "-")} must be a #{kind} integer")
    end

    :ok
  end

  @doc """
  The values of `defaults`' keys (a keyword list of key and default) from the parsed `opts`,
  as a map, each checked to be a positive integer (`at_least!/3`).
  """
  @spec positive!(keyword, keyword) :: map
  def positive!(opts, defaults) do
    o = Map.new(defaults, fn {k, default} -> {k, Keyword.get(opts, k, default)} end)
    at_least!(o, Map.keys(o))
    o
  end

  @doc """
  The module an option names (`--zone MyGame.Zone`), which must exist in the project: raises
  `Mix.Error` naming the option and `what` it should be otherwise (missing, or unknown).
  """
  @spec module!(String.t() | nil, String.t(), String.t()) :: module
  def module!(nil, option, what), do: Mix.raise("#{option} is required: #{what}")

  def module!(name, option, what) do
    module = Module.concat([name])

    if Code.ensure_loaded?(module),
      do: module,
      else:
        Mix.raise(
          "#{option} #{name}: no such module in this project (#{what}; names are case-sensitive)"
        )
  end
end

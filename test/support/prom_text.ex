defmodule Overworld.Test.PromText do
  @moduledoc false
  # A reader of the Prometheus text format for the metrics tests: strict enough to catch a
  # malformed line (it raises), small enough to read. `parse/1` answers the families
  # (`%{name => %{type, help}}`) and the samples (`[{name, labels, value}]` in order, labels
  # a map, values floats, `+Inf` as :inf).

  @doc "Parses an exposition."
  def parse(text) do
    text
    |> String.split("\n", trim: true)
    |> Enum.reduce(%{families: %{}, samples: []}, &line/2)
    |> Map.update!(:samples, &Enum.reverse/1)
  end

  defp line("# HELP " <> rest, acc) do
    [name, help] = String.split(rest, " ", parts: 2)
    family = Map.put(acc.families[name] || %{}, :help, help)
    %{acc | families: Map.put(acc.families, name, family)}
  end

  defp line("# TYPE " <> rest, acc) do
    [name, type] = String.split(rest, " ")
    family = Map.put(acc.families[name] || %{}, :type, type)
    %{acc | families: Map.put(acc.families, name, family)}
  end

  defp line(sample, acc) do
    [_, name, labels, value] =
      Regex.run(~r/^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/, sample) ||
        raise "not a sample line: #{inspect(sample)}"

    %{acc | samples: [{name, labels(labels), number(value)} | acc.samples]}
  end

  defp labels(""), do: %{}

  defp labels(text) do
    Regex.scan(~r/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)/, text)
    |> Map.new(fn [_, k, v] ->
      {k,
       Regex.replace(~r/\\(.)/, v, fn
         _, "n" -> "\n"
         _, c -> c
       end)}
    end)
  end

  defp number("+Inf"), do: :inf

  defp number(text) do
    case Float.parse(text) do
      {f, ""} -> f
      _ -> raise "not a number: #{inspect(text)}"
    end
  end

  @doc "The value of the sample `name` whose labels include `labels` (nil when none)."
  def value(parsed, name, labels \\ %{}) do
    Enum.find_value(parsed.samples, fn {n, l, v} ->
      if n == name and Map.take(l, Map.keys(labels)) == labels, do: v
    end)
  end

  @doc "The samples of `name` whose labels include `labels`."
  def samples(parsed, name, labels \\ %{}) do
    for {n, l, v} <- parsed.samples,
        n == name,
        Map.take(l, Map.keys(labels)) == labels,
        do: {l, v}
  end
end

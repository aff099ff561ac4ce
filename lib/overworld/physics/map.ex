defmodule Overworld.Physics.Map do
  @moduledoc """
  A zone's static obstacles, read from an obstacle map: a text file a level designer can write
  by hand (docs/sidecar.md, "The obstacle map"). One obstacle per line, in metres:

      # the rooms of the goblin example
      box    0 0 100 1          # x0 y0 x1 y1: an axis-aligned box (x0 <= x1, y0 <= y1)
      circle 50 50 3.5          # cx cy r: a circle (r > 0)

  Blank lines and everything from a `#` on are ignored; numbers are integers or decimals (a
  decimal is truncated to the unit, 1/1024 m, like `Overworld.Entity.meters/1`). Anything
  else is an error naming the line.

      iex> Overworld.Physics.Map.parse("box 0 0 1 2\\ncircle 5 5 0.5 # a pillar\\n")
      {:ok, [boxes: [{0, 0, 1024, 2048}], circles: [{5120, 5120, 512}]]}
      iex> Overworld.Physics.Map.parse("box 0 0 1\\n")
      {:error, "line 1: a box is x0 y0 x1 y1 (metres), got: \\"box 0 0 1\\""}
  """

  alias Overworld.Entity

  @typedoc "Obstacles in units, as `Overworld.Physics.world/3` takes them."
  @type obstacles :: [
          boxes: [Overworld.Physics.box()],
          circles: [Overworld.Physics.circle()]
        ]

  @doc "Reads and parses the obstacle map at `path`."
  @spec load(Path.t()) :: {:ok, obstacles} | {:error, String.t()}
  def load(path) do
    case File.read(path) do
      {:ok, text} ->
        case parse(text) do
          {:ok, obstacles} -> {:ok, obstacles}
          {:error, message} -> {:error, "#{path}: #{message}"}
        end

      {:error, reason} ->
        {:error, "#{path}: #{:file.format_error(reason)}"}
    end
  end

  @doc "Parses the text of an obstacle map (see the module's doc)."
  @spec parse(String.t()) :: {:ok, obstacles} | {:error, String.t()}
  def parse(text) when is_binary(text) do
    text
    |> String.split("\n")
    |> Enum.with_index(1)
    |> Enum.reduce_while({[], []}, fn {line, n}, {boxes, circles} ->
      case line |> String.split("#", parts: 2) |> hd() |> String.split() do
        [] ->
          {:cont, {boxes, circles}}

        ["box" | nums] ->
          case numbers(nums, 4) do
            {:ok, [x0, y0, x1, y1]} when x0 <= x1 and y0 <= y1 ->
              {:cont, {[{x0, y0, x1, y1} | boxes], circles}}

            _ ->
              {:halt, {:error, "line #{n}: a box is x0 y0 x1 y1 (metres), got: #{inspect(line)}"}}
          end

        ["circle" | nums] ->
          case numbers(nums, 3) do
            {:ok, [cx, cy, r]} when r > 0 ->
              {:cont, {boxes, [{cx, cy, r} | circles]}}

            _ ->
              {:halt, {:error, "line #{n}: a circle is cx cy r (metres), got: #{inspect(line)}"}}
          end

        [word | _] ->
          {:halt, {:error, "line #{n}: unknown obstacle #{inspect(word)} (box or circle)"}}
      end
    end)
    |> case do
      {:error, _} = error -> error
      {boxes, circles} -> {:ok, [boxes: Enum.reverse(boxes), circles: Enum.reverse(circles)]}
    end
  end

  @doc """
  Obstacles given in metres as a keyword list (`boxes:` `{x0, y0, x1, y1}`, `circles:`
  `{cx, cy, r}`), in units; the zone option `:map` takes them so, or as a file's path.

      iex> Overworld.Physics.Map.from_meters(boxes: [{0, 0, 1, 1}], circles: [{2, 2, 0.25}])
      {:ok, [boxes: [{0, 0, 1024, 1024}], circles: [{2048, 2048, 256}]]}
      iex> Overworld.Physics.Map.from_meters(walls: [])
      {:error, "obstacles are boxes: [{x0, y0, x1, y1}] and circles: [{cx, cy, r}] (metres), got: [walls: []]"}
  """
  @spec from_meters(keyword) :: {:ok, obstacles} | {:error, String.t()}
  def from_meters(obstacles) do
    with true <-
           Keyword.keyword?(obstacles) and Keyword.keys(obstacles) -- [:boxes, :circles] == [],
         {:ok, boxes} <- shapes(Keyword.get(obstacles, :boxes, []), 4),
         {:ok, circles} <- shapes(Keyword.get(obstacles, :circles, []), 3),
         true <- Enum.all?(boxes, fn {x0, y0, x1, y1} -> x0 <= x1 and y0 <= y1 end),
         true <- Enum.all?(circles, fn {_, _, r} -> r > 0 end) do
      {:ok, [boxes: boxes, circles: circles]}
    else
      _ ->
        {:error,
         "obstacles are boxes: [{x0, y0, x1, y1}] and circles: [{cx, cy, r}] (metres), got: " <>
           inspect(obstacles)}
    end
  end

  defp shapes(list, size) when is_list(list) do
    each(list, fn
      t when is_tuple(t) and tuple_size(t) == size ->
        if Enum.all?(Tuple.to_list(t), &is_number/1),
          do: {:ok, t |> Tuple.to_list() |> Enum.map(&Entity.meters/1) |> List.to_tuple()},
          else: :error

      _ ->
        :error
    end)
  end

  defp shapes(_, _), do: :error

  defp numbers(words, count) when length(words) == count do
    each(words, fn w ->
      case Float.parse(w) do
        {f, ""} ->
          m = if String.contains?(w, [".", "e", "E"]), do: f, else: String.to_integer(w)
          {:ok, Entity.meters(m)}

        _ ->
          :error
      end
    end)
  end

  defp numbers(_words, _count), do: :error

  # `{:ok, values}` when `fun` answers `{:ok, value}` for every element (in order), else
  # :error.
  defp each(list, fun) do
    Enum.reduce_while(list, {:ok, []}, fn x, {:ok, acc} ->
      case fun.(x) do
        {:ok, v} -> {:cont, {:ok, [v | acc]}}
        :error -> {:halt, :error}
      end
    end)
    |> case do
      {:ok, acc} -> {:ok, Enum.reverse(acc)}
      :error -> :error
    end
  end
end

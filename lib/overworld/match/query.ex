defmodule Overworld.Match.Query do
  @moduledoc """
  Queries over flat JSON objects: a match's label (`Overworld.Match.list/2`) or a matchmaker
  ticket's properties (`Overworld.Matchmaker`).

  A query is a JSON object of terms, each naming a field:

    * a string, number or boolean: the field equals it (`{"mode": "ffa"}`);
    * a list of such values: the field equals one of them (`{"region": ["eu", "us"]}`);
    * an object of bounds `gt`, `gte`, `lt`, `lte` (numbers): the field is a number within
      them (`{"level": {"gte": 3, "lt": 10}}`).

  Every term must hold; a field the object lacks fails its term. At most 32 terms, field
  names of at most 64 bytes, strings of at most 256.

      iex> {:ok, q} = Overworld.Match.Query.parse(%{"mode" => "ffa", "level" => %{"gte" => 3, "lt" => 10}})
      iex> Overworld.Match.Query.match?(q, %{"mode" => "ffa", "level" => 3})
      true
      iex> Overworld.Match.Query.match?(q, %{"mode" => "ffa", "level" => 10})
      false
      iex> Overworld.Match.Query.match?(q, %{"level" => 5})
      false
      iex> Overworld.Match.Query.parse(%{"level" => %{"about" => 3}})
      {:error, "level: expected bounds gt, gte, lt, lte with numbers"}
  """

  @max_terms 32
  @max_name 64
  @max_string 256

  @typedoc "A parsed query: its terms, sorted by field."
  @type t :: [{binary, term_spec}]
  @type term_spec ::
          {:eq, scalar} | {:in, [scalar]} | {:range, [{:gt | :gte | :lt | :lte, number}]}
  @type scalar :: binary | number | boolean

  @doc "Parses a query (a decoded JSON object); `{:error, message}` says what is wrong."
  @spec parse(term) :: {:ok, t} | {:error, binary}
  def parse(q) when is_map(q) and map_size(q) <= @max_terms do
    q
    |> Enum.sort()
    |> Enum.reduce_while({:ok, []}, fn {k, v}, {:ok, acc} ->
      case term(k, v) do
        {:ok, t} -> {:cont, {:ok, [{k, t} | acc]}}
        {:error, _} = e -> {:halt, e}
      end
    end)
    |> case do
      {:ok, terms} -> {:ok, Enum.reverse(terms)}
      error -> error
    end
  end

  def parse(q) when is_map(q), do: {:error, "at most #{@max_terms} terms"}
  def parse(_q), do: {:error, "a query is a JSON object of terms"}

  defp term(k, _v) when not is_binary(k) or byte_size(k) > @max_name,
    do: {:error, "field names are strings of at most #{@max_name} bytes"}

  defp term(k, v) when is_list(v) do
    if v != [] and length(v) <= @max_terms and Enum.all?(v, &scalar?/1),
      do: {:ok, {:in, v}},
      else: {:error, "#{k}: expected a list of 1 to #{@max_terms} strings, numbers or booleans"}
  end

  defp term(k, v) when is_map(v) do
    bounds =
      for {b, n} <- v, into: [] do
        case {b, n} do
          {"gt", n} when is_number(n) -> {:gt, n}
          {"gte", n} when is_number(n) -> {:gte, n}
          {"lt", n} when is_number(n) -> {:lt, n}
          {"lte", n} when is_number(n) -> {:lte, n}
          _ -> :bad
        end
      end

    if bounds != [] and :bad not in bounds,
      do: {:ok, {:range, Enum.sort(bounds)}},
      else: {:error, "#{k}: expected bounds gt, gte, lt, lte with numbers"}
  end

  defp term(k, v) do
    if scalar?(v),
      do: {:ok, {:eq, v}},
      else:
        {:error,
         "#{k}: expected a string (at most #{@max_string} bytes), number, boolean, list or bounds"}
  end

  defp scalar?(v) when is_binary(v), do: byte_size(v) <= @max_string
  defp scalar?(v), do: is_number(v) or is_boolean(v)

  @doc "Whether every term of a parsed query holds for `object` (a map with string keys)."
  @spec match?(t, map) :: boolean
  def match?(terms, object),
    do: Enum.all?(terms, fn {k, t} -> holds?(t, Map.get(object, k, :absent)) end)

  defp holds?(_t, :absent), do: false
  defp holds?({:eq, v}, x), do: equal?(v, x)
  defp holds?({:in, vs}, x), do: Enum.any?(vs, &equal?(&1, x))
  defp holds?({:range, bounds}, x) when is_number(x), do: Enum.all?(bounds, &within?(&1, x))
  defp holds?({:range, _}, _x), do: false

  # 3 and 3.0 are the same JSON number.
  defp equal?(a, b) when is_number(a) and is_number(b), do: a == b
  defp equal?(a, b), do: a === b

  defp within?({:gt, n}, x), do: x > n
  defp within?({:gte, n}, x), do: x >= n
  defp within?({:lt, n}, x), do: x < n
  defp within?({:lte, n}, x), do: x <= n

  @doc """
  The query's exact terms (`{:eq, _}`), sorted: what tickets must share to meet
  (`Overworld.Matchmaker` shards tickets by them).

      iex> {:ok, q} = Overworld.Match.Query.parse(%{"mode" => "ffa", "rank" => %{"gte" => 1}, "region" => "eu"})
      iex> Overworld.Match.Query.fixed(q)
      [{"mode", "ffa"}, {"region", "eu"}]
  """
  @spec fixed(t) :: [{binary, scalar}]
  def fixed(terms), do: for({k, {:eq, v}} <- terms, do: {k, v})
end

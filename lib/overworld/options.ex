defmodule Overworld.Options do
  @moduledoc false
  # Option validation shared by every `start_link` (DESIGN.md §9.3).
  #
  # A schema is a keyword list of `key: {type, default}` where `default` is `:required` for a
  # mandatory key. Types:
  #
  #   :pos_integer | :non_neg_integer | :integer | :boolean | :atom | :module | :any
  #   :pos_number                       a positive integer or float
  #   {:in, [values]}                   one of the listed values
  #   {:tuple_of, [type]}               a tuple whose elements have the given types
  #   {:custom, fun, description}       fun.(value) returns true when the value is valid
  #
  # Errors raise ArgumentError with a message that names the key, the expected type and what was
  # given; an unknown key is reported with the nearest valid key, if one is close.

  @type type ::
          :pos_integer
          | :non_neg_integer
          | :integer
          | :boolean
          | :atom
          | :module
          | :any
          | :pos_number
          | {:in, [term]}
          | {:tuple_of, [type]}
          | {:custom, (term -> boolean), String.t()}

  @type schema :: [{atom, {type, term}}]

  @doc """
  Validates `opts` against `schema` and returns a map with every key of the schema.

      iex> Overworld.Options.validate!([rate: 10], [rate: {:pos_integer, 30}, mode: {{:in, [:a, :b]}, :a}], "Thing")
      %{rate: 10, mode: :a}

      iex> Overworld.Options.validate!([rate: "10"], [rate: {:pos_integer, 30}], "Thing")
      ** (ArgumentError) invalid option for Thing: expected :rate to be a positive integer, got: "10"

      iex> Overworld.Options.validate!([rat: 10], [rate: {:pos_integer, 30}], "Thing")
      ** (ArgumentError) unknown option :rat for Thing, did you mean :rate? Valid options: [:rate]
  """
  @spec validate!(keyword, schema, String.t()) :: map
  def validate!(opts, schema, context) do
    unless is_list(opts) and Keyword.keyword?(opts) do
      raise ArgumentError,
            "expected options for #{context} to be a keyword list, got: #{inspect(opts)}"
    end

    valid_keys = Keyword.keys(schema)

    Enum.each(opts, fn {key, _} ->
      unless Keyword.has_key?(schema, key) do
        raise ArgumentError, unknown_key_message(key, valid_keys, context)
      end
    end)

    case Enum.uniq(Keyword.keys(opts) -- Enum.uniq(Keyword.keys(opts))) do
      [] -> :ok
      [dup | _] -> raise ArgumentError, "option #{inspect(dup)} given twice for #{context}"
    end

    Map.new(schema, fn {key, {type, default}} ->
      case Keyword.fetch(opts, key) do
        {:ok, value} ->
          check!(key, type, value, context)
          {key, value}

        :error when default == :required ->
          raise ArgumentError, "missing required option #{inspect(key)} for #{context}"

        :error ->
          {key, default}
      end
    end)
  end

  defp check!(key, type, value, context) do
    unless valid?(type, value) do
      raise ArgumentError,
            "invalid option for #{context}: expected #{inspect(key)} to be #{describe(type)}, " <>
              "got: #{inspect(value)}"
    end
  end

  @doc false
  @spec valid?(type, term) :: boolean
  def valid?(:pos_integer, v), do: is_integer(v) and v > 0
  def valid?(:non_neg_integer, v), do: is_integer(v) and v >= 0
  def valid?(:integer, v), do: is_integer(v)
  def valid?(:boolean, v), do: is_boolean(v)
  def valid?(:atom, v), do: is_atom(v)
  def valid?(:module, v), do: is_atom(v) and not is_nil(v) and not is_boolean(v)
  def valid?(:any, _v), do: true
  def valid?(:pos_number, v), do: is_number(v) and v > 0
  def valid?({:in, values}, v), do: v in values

  def valid?({:tuple_of, types}, v) do
    is_tuple(v) and tuple_size(v) == length(types) and
      types |> Enum.zip(Tuple.to_list(v)) |> Enum.all?(fn {t, e} -> valid?(t, e) end)
  end

  def valid?({:custom, fun, _}, v), do: fun.(v) == true

  defp describe(:pos_integer), do: "a positive integer"
  defp describe(:non_neg_integer), do: "a non-negative integer"
  defp describe(:integer), do: "an integer"
  defp describe(:boolean), do: "a boolean"
  defp describe(:atom), do: "an atom"
  defp describe(:module), do: "a module"
  defp describe(:any), do: "any term"
  defp describe(:pos_number), do: "a positive number"
  defp describe({:in, values}), do: "one of #{inspect(values)}"

  defp describe({:tuple_of, types}),
    do: "a tuple of {" <> Enum.map_join(types, ", ", &describe/1) <> "}"

  defp describe({:custom, _, description}), do: description

  defp unknown_key_message(key, valid_keys, context) do
    suggestion =
      case nearest(key, valid_keys) do
        nil -> "."
        near -> ", did you mean #{inspect(near)}?"
      end

    "unknown option #{inspect(key)} for #{context}#{suggestion} Valid options: #{inspect(valid_keys)}"
  end

  @doc """
  The valid key closest to `key` (Jaro distance at least 0.8), or nil.

      iex> Overworld.Options.nearest(:tick_rat, [:tick_rate, :workers])
      :tick_rate
      iex> Overworld.Options.nearest(:zzz, [:tick_rate, :workers])
      nil
  """
  @spec nearest(term, [atom]) :: atom | nil
  def nearest(key, valid_keys) do
    name = if is_atom(key), do: Atom.to_string(key), else: inspect(key)

    valid_keys
    |> Enum.map(fn k -> {String.jaro_distance(name, Atom.to_string(k)), k} end)
    |> Enum.filter(fn {d, _} -> d >= 0.8 end)
    |> Enum.max_by(fn {d, _} -> d end, fn -> {0, nil} end)
    |> elem(1)
  end

  @doc false
  # The child spec of a supervisor started by `module.start_link(opts)` under `id`.
  @spec supervisor_spec(module, keyword, term) :: Supervisor.child_spec()
  def supervisor_spec(module, opts, id),
    do: %{id: id, start: {module, :start_link, [opts]}, type: :supervisor}
end

defmodule Overworld.Template.Field do
  @moduledoc """
  One replicated field of a template: its wire type, bit width and how its value is quantized.

  Types (`t:type/0`):

  * `:uint` — an integer in `0..max` (option `:max`, or `:bits` for `0..2^bits-1`)
  * `:int` — an integer in `min..max`
  * `:fixed` — a length in entity units (1/1024 m), `min <= v < max` metres at `precision`
    metres (a power of two fraction of a metre, at least 1/1024): x in 0..16384 m at 1/64 m is
    20 bits
  * `:angle` — a heading (0..65535) kept to `bits` bits (default 8)
  * `:enum` — one of `values` (atoms or integers), sent as its index
  * `:bool` — `true` or `false`, one bit

  A field is at most 53 bits wide, so that a JavaScript number holds it exactly.

  Values are quantized once, on the server, to non-negative integers of `bits` bits; the client
  decodes the same integers, so both agree bit for bit. Numeric fields (all but enum and bool)
  can travel in a delta as a signed difference of `diff_bits` bits (default: a quarter of the
  width, at least 3) when it is small enough; angles wrap around.
  """

  @enforce_keys [:name, :type, :bits, :min, :step, :values, :diff_bits, :source]
  # `max`: the largest quantized value the declaration allows (`min..max` of an int is
  # `0..max - min`); the wire carries `bits`, so a client may send up to `2^bits - 1`. Not on
  # the wire: a field read from a HANDSHAKE has `2^bits - 1` (an enum's: its last index).
  defstruct @enforce_keys ++ [:max]

  @type type :: :uint | :int | :fixed | :angle | :enum | :bool
  @type t :: %__MODULE__{
          name: atom,
          type: type,
          bits: 1..53,
          min: integer,
          step: pos_integer,
          max: non_neg_integer | nil,
          values: [term] | nil,
          diff_bits: non_neg_integer,
          source: atom | {:data, non_neg_integer} | {module, atom} | {:input, atom}
        }

  @unit 1024

  @doc false
  # Builds a field from the DSL's options, or returns {:error, message}.
  @spec new(atom, atom, keyword) :: {:ok, t} | {:error, String.t()}
  def new(name, type, opts) do
    with :ok <- check_name(name),
         {:ok, spec} <- spec(type, opts),
         {:ok, source} <- source(name, Keyword.get(opts, :from)) do
      bits = spec.bits

      diff_bits =
        case type do
          t when t in [:enum, :bool] -> 0
          _ -> Keyword.get(opts, :diff_bits, max(3, div(bits, 4)))
        end

      cond do
        bits > 53 ->
          {:error,
           "field #{inspect(name)} needs #{bits} bits; at most 53 fit a JavaScript number exactly"}

        not is_integer(diff_bits) or diff_bits < 0 or diff_bits > bits ->
          {:error,
           "field #{inspect(name)}: :diff_bits must be an integer in 0..#{bits}, got: #{inspect(diff_bits)}"}

        true ->
          {:ok,
           struct!(
             __MODULE__,
             Map.merge(spec, %{name: name, type: type, diff_bits: diff_bits, source: source})
           )}
      end
    end
  end

  defp check_name(name) when is_atom(name) and not is_nil(name), do: :ok
  defp check_name(name), do: {:error, "a field name must be an atom, got: #{inspect(name)}"}

  defp spec(:uint, opts) do
    case {Keyword.get(opts, :bits), Keyword.get(opts, :max)} do
      {b, nil} when is_integer(b) and b in 1..64 ->
        {:ok, %{bits: b, min: 0, step: 1, max: Bitwise.bsl(1, b) - 1, values: nil}}

      {nil, m} when is_integer(m) and m > 0 ->
        {:ok, %{bits: bits_for(m), min: 0, step: 1, max: m, values: nil}}

      other ->
        {:error, ":uint needs :bits in 1..64 or a positive :max, got: #{inspect(other)}"}
    end
  end

  defp spec(:int, opts) do
    case {Keyword.get(opts, :min), Keyword.get(opts, :max)} do
      {lo, hi} when is_integer(lo) and is_integer(hi) and hi > lo ->
        {:ok, %{bits: bits_for(hi - lo), min: lo, step: 1, max: hi - lo, values: nil}}

      other ->
        {:error, ":int needs integers :min < :max, got: #{inspect(other)}"}
    end
  end

  defp spec(:fixed, opts) do
    lo = Keyword.get(opts, :min, 0)
    hi = Keyword.get(opts, :max)
    precision = Keyword.get(opts, :precision)

    cond do
      not is_number(lo) or not is_number(hi) or hi <= lo ->
        {:error, ":fixed needs numbers :min < :max (metres), got: #{inspect({lo, hi})}"}

      not is_number(precision) or precision <= 0 ->
        {:error, ":fixed needs a positive :precision (metres), got: #{inspect(precision)}"}

      not power_of_two_fraction?(precision) ->
        {:error,
         ":fixed :precision must be a power of two fraction of a metre between 1/1024 and 1 " <>
           "(e.g. 1/64), so that quantizing is exact; got: #{inspect(precision)}"}

      true ->
        step = round(precision * @unit)
        min = round(lo * @unit)
        # max is exclusive: [0, 16384) m at 1/64 m is 2^20 values, 20 bits.
        range = max(div(round(hi * @unit) - min - 1, step), 1)
        {:ok, %{bits: bits_for(range), min: min, step: step, max: range, values: nil}}
    end
  end

  defp spec(:angle, opts) do
    case Keyword.get(opts, :bits, 8) do
      b when is_integer(b) and b in 1..16 ->
        {:ok, %{bits: b, min: 0, step: 1, max: Bitwise.bsl(1, b) - 1, values: nil}}

      b ->
        {:error, ":angle :bits must be in 1..16, got: #{inspect(b)}"}
    end
  end

  defp spec(:enum, opts) do
    case Keyword.get(opts, :values) do
      [_, _ | _] = values ->
        if length(Enum.uniq(values)) == length(values) and
             Enum.all?(values, &(is_atom(&1) or is_integer(&1))),
           do:
             {:ok,
              %{
                bits: bits_for(length(values) - 1),
                min: 0,
                step: 1,
                max: length(values) - 1,
                values: values
              }},
           else:
             {:error, ":enum :values must be distinct atoms or integers, got: #{inspect(values)}"}

      other ->
        {:error, ":enum needs at least two :values, got: #{inspect(other)}"}
    end
  end

  defp spec(:bool, _opts), do: {:ok, %{bits: 1, min: 0, step: 1, max: 1, values: [false, true]}}

  defp spec(type, _opts),
    do:
      {:error,
       "unknown field type #{inspect(type)}; expected one of :uint, :int, :fixed, :angle, :enum, :bool"}

  defp power_of_two_fraction?(p) do
    units = p * @unit

    units >= 1 and units <= @unit and units == round(units) and
      Bitwise.band(round(units), round(units) - 1) == 0
  end

  @entity_fields [:kind, :x, :y, :vx, :vy, :heading, :state]

  defp source(name, nil) do
    if name in @entity_fields,
      do: {:ok, name},
      else:
        {:error,
         "field #{inspect(name)} is not an entity field (#{inspect(@entity_fields)}): give :from"}
  end

  defp source(_name, f) when f in @entity_fields, do: {:ok, f}
  # A field of an input layout: the value of that name a client sends.
  defp source(name, {:input, name} = s), do: {:ok, s}
  defp source(_name, {:data, i} = s) when is_integer(i) and i >= 0, do: {:ok, s}
  defp source(_name, {m, f} = s) when is_atom(m) and is_atom(f), do: {:ok, s}

  defp source(name, other),
    do:
      {:error,
       "field #{inspect(name)}: :from must be an entity field, {:data, index} or {module, function}, got: #{inspect(other)}"}

  @doc """
  Bits needed for integers in `0..n`.

      iex> Overworld.Template.Field.bits_for(1)
      1
      iex> Overworld.Template.Field.bits_for(16384 * 64)
      21
      iex> Overworld.Template.Field.bits_for(16384 * 64 - 1)
      20
  """
  @spec bits_for(pos_integer) :: pos_integer
  def bits_for(n) when n >= 1, do: length(Integer.digits(n, 2))

  @doc """
  The quantized value (an integer in `0..2^bits-1`) of a raw value of this field.

  Integers out of a numeric field's range clamp to it (angles wrap around); a value that is not
  an integer, or not one of an enum's or bool's `values`, raises `Overworld.Template.Error`.

      iex> {:ok, f} = Overworld.Template.Field.new(:heading, :angle, bits: 8)
      iex> Overworld.Template.Field.quantize(f, 16384)
      64
      iex> Overworld.Template.Field.quantize(f, 1.5)
      ** (Overworld.Template.Error) field :heading: expected an integer, got: 1.5

      iex> {:ok, f} = Overworld.Template.Field.new(:state, :enum, values: [:idle, :wander])
      iex> Overworld.Template.Field.quantize(f, :wander)
      1
      iex> Overworld.Template.Field.quantize(f, :sleeping)
      ** (Overworld.Template.Error) field :state: expected one of [:idle, :wander], got: :sleeping
  """
  @spec quantize(t, term) :: non_neg_integer
  def quantize(%__MODULE__{type: :angle, bits: b}, v) when is_integer(v),
    do: Bitwise.bsr(Integer.mod(v, 65536), 16 - b)

  def quantize(%__MODULE__{type: t, values: values} = f, v) when t in [:enum, :bool] do
    case Enum.find_index(values, &(&1 === v)) do
      nil -> raise Overworld.Template.Error, field: f.name, value: v, values: values
      i -> i
    end
  end

  def quantize(%__MODULE__{min: min, step: step, bits: b}, v) when is_integer(v) do
    (v - min) |> Integer.floor_div(step) |> max(0) |> min(Bitwise.bsl(1, b) - 1)
  end

  def quantize(%__MODULE__{name: name}, v),
    do: raise(Overworld.Template.Error, field: name, value: v)

  @doc "The value a quantized integer stands for (what the client sees)."
  @spec dequantize(t, non_neg_integer) :: term
  def dequantize(%__MODULE__{type: :angle, bits: b}, q), do: Bitwise.bsl(q, 16 - b)

  def dequantize(%__MODULE__{type: t, values: values}, q) when t in [:enum, :bool],
    do: Enum.at(values, q)

  def dequantize(%__MODULE__{min: min, step: step}, q), do: min + q * step
end

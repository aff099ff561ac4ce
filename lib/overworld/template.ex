defmodule Overworld.Template do
  @moduledoc """
  Entity templates: which fields of an entity kind are replicated to clients, and how they are
  bit-packed.

  A game declares its templates in a module with a small DSL; declarations are checked when the
  module compiles (unknown types, impossible ranges, duplicate names or ids raise a
  `CompileError` that says what is wrong):

      defmodule MyGame.Wire do
        use Overworld.Template

        template :goblin, id: 1, kinds: [:goblin, :warlord] do
          field :x, :fixed, max: 16384, precision: 1 / 64
          field :y, :fixed, max: 16384, precision: 1 / 64
          field :heading, :angle, bits: 8
          field :state, :enum, values: [:idle, :wander, :flee, :chase]
          field :warlord, :bool, from: {MyGame, :warlord?}
        end
      end

      MyGame.Wire.__templates__()

  A field's value comes from the entity field of the same name, or from `:from`: an entity
  field, `{:data, index}` (an element of the entity's `data` tuple) or `{module, function}`
  (called with the entity). See `Overworld.Template.Field` for the types.

  ## Encoding

  * **Keyframe**: every field's quantized value, `bits` bits each, in declaration order.
  * **Delta** against a previous keyframe's values: a mask with one bit per field (1 =
    changed), then for each changed field either `1` and a signed difference of `diff_bits`
    bits (two's complement; angles wrap around) when it fits, or `0` and the full value.
    Enums and booleans always send the full value (no flag).

  Bits are written most significant first. The message layer pads each encoded record to whole
  bytes where it needs to (see docs/protocol.md). `decode_*` never raise on bad input: they
  answer `{:error, reason}`.

  A templates module also gets compiled, straight-line encoders for the server's hot path
  (`__quantize__(index, entity)`, `__keyframe__(index, values)`, `__delta__(index, old, new)`,
  `index` being the template's position in `__templates__/0`); they produce the same bits as
  `quantize/2`, `encode_keyframe/2` and `encode_delta/3`, several times faster.

      iex> require Overworld.Entity
      iex> t = Overworld.Template.Test.Wire.__templates__() |> hd()
      iex> e = Overworld.Entity.entity(x: 1024, y: 2048, heading: 16384, state: :wander)
      iex> q = Overworld.Template.quantize(t, e)
      iex> bits = Overworld.Template.encode_keyframe(t, q)
      iex> {bit_size(bits), Overworld.Template.decode_keyframe(t, bits)}
      {42, {:ok, q, <<>>}}

  ## Values that cannot be quantized

  Integers out of a numeric field's range clamp to it (angles wrap around). A value that is not
  an integer (a float, nil, a string) for a numeric field, or not one of the `values` of an
  `:enum` or `:bool` field, raises `Overworld.Template.Error`, naming the template and the
  field, in `quantize/2` and in the compiled `__quantize__/2` alike. A `{:data, index}` source
  whose element is missing (the entity's `data` is not a tuple, or too short) reads as `nil`:
  not an integer, so the same error (and for an enum, outside its values unless `nil` is one).

      iex> require Overworld.Entity
      iex> t = Overworld.Template.Test.Wire.__templates__() |> hd()
      iex> Overworld.Template.quantize(t, Overworld.Entity.entity(x: 1.5, state: :idle))
      ** (Overworld.Template.Error) template :walker, field :x: expected an integer, got: 1.5

      iex> require Overworld.Entity
      iex> Overworld.Template.Test.Wire.__quantize__(0, Overworld.Entity.entity(state: :sleeping))
      ** (Overworld.Template.Error) template :walker, field :state: expected one of [:idle, :wander, :flee, :chase], got: :sleeping

  A zone with a `:wire` (`Overworld.Zone`) never lets such an entity in: a spawn is refused with
  `{:error, {:invalid_field, message}}`, and an entity that `c:Overworld.Zone.handle_entity/3`
  returns with such a value is an invalid return (counted, logged with the error's message; the
  entity keeps its previous state).
  """
  import Bitwise
  alias Overworld.Template.{Error, Field}

  @enforce_keys [:id, :name, :kinds, :fields]
  defstruct @enforce_keys

  @type t :: %__MODULE__{id: 0..255, name: atom | String.t(), kinds: [term], fields: [Field.t()]}
  @typedoc "Quantized values, one per field, in field order."
  @type values :: tuple

  defmacro __using__(_opts) do
    quote do
      import Overworld.Template, only: [template: 3, input: 2, input: 3, field: 2, field: 3]
      Module.register_attribute(__MODULE__, :overworld_templates, accumulate: true)
      Module.register_attribute(__MODULE__, :overworld_inputs, accumulate: true)
      @before_compile Overworld.Template
    end
  end

  @doc """
  Declares the layout of the zone's inputs (at most one per module): typed values a client
  sends instead of raw bytes (see "Inputs" in the module doc).
  """
  defmacro input(name, opts \\ [], do: block) do
    quote do
      Module.put_attribute(__MODULE__, :overworld_fields, [])
      unquote(block)

      @overworld_inputs {unquote(name), unquote(opts),
                         Enum.reverse(Module.get_attribute(__MODULE__, :overworld_fields)),
                         __ENV__.line}
    end
  end

  @doc "Declares a template (see the module doc)."
  defmacro template(name, opts, do: block) do
    quote do
      Module.put_attribute(__MODULE__, :overworld_fields, [])
      unquote(block)

      @overworld_templates {unquote(name), unquote(opts),
                            Enum.reverse(Module.get_attribute(__MODULE__, :overworld_fields)),
                            __ENV__.line}
    end
  end

  @doc "Declares a field of the enclosing template (see `Overworld.Template.Field`)."
  defmacro field(name, type, opts \\ []) do
    quote do
      Module.put_attribute(__MODULE__, :overworld_fields, [
        {unquote(name), unquote(type), unquote(opts), __ENV__.line}
        | Module.get_attribute(__MODULE__, :overworld_fields)
      ])
    end
  end

  defmacro __before_compile__(env) do
    templates =
      env.module
      |> Module.get_attribute(:overworld_templates)
      |> Enum.reverse()
      |> Enum.map(&build!(&1, env))

    check_unique!(templates, env)
    escaped = Macro.escape(templates)

    input =
      case Module.get_attribute(env.module, :overworld_inputs) do
        [] ->
          nil

        [one] ->
          build!(one, env, :input)

        [_, {name, _, _, line} | _] ->
          raise CompileError,
            file: env.file,
            line: line,
            description: "input #{inspect(name)}: a module declares at most one input layout"
      end

    quote do
      @doc "The templates declared in this module."
      @spec __templates__() :: [Overworld.Template.t()]
      def __templates__, do: unquote(escaped)

      @doc "The layout of the zone's inputs declared in this module, or nil."
      @spec __input__() :: Overworld.Template.t() | nil
      def __input__, do: unquote(Macro.escape(input))

      unquote(Overworld.Template.Compiled.functions(templates))
    end
  end

  defp build!({name, opts, fields, line}, env, what \\ :template) do
    fail = fn msg ->
      raise CompileError,
        file: env.file,
        line: line,
        description: "#{what} #{inspect(name)}: " <> msg
    end

    unless is_atom(name), do: fail.("the name must be an atom")
    id = Keyword.get(opts, :id, if(what == :input, do: 0))

    unless is_integer(id) and id in 0..255,
      do: fail.("expected :id to be an integer in 0..255, got: #{inspect(id)}")

    kinds = if what == :input, do: [], else: Keyword.get(opts, :kinds, [name])

    unless what == :input or (is_list(kinds) and kinds != []),
      do: fail.("expected :kinds to be a non-empty list, got: #{inspect(kinds)}")

    if fields == [], do: fail.("declares no field")

    names = Enum.map(fields, &elem(&1, 0))

    case names -- Enum.uniq(names) do
      [] -> :ok
      [dup | _] -> fail.("field #{inspect(dup)} is declared twice")
    end

    fields =
      Enum.map(fields, fn {fname, type, fopts, fline} ->
        # An input's fields are the values a client sends, by name.
        fopts = if what == :input, do: Keyword.put(fopts, :from, {:input, fname}), else: fopts

        case Field.new(fname, type, fopts) do
          {:ok, f} ->
            f

          {:error, msg} ->
            raise CompileError,
              file: env.file,
              line: fline,
              description: "#{what} #{inspect(name)}: " <> msg
        end
      end)

    %__MODULE__{id: id, name: name, kinds: kinds, fields: fields}
  end

  defp check_unique!(templates, env) do
    for key <- [:id, :name] do
      values = Enum.map(templates, &Map.fetch!(&1, key))

      case values -- Enum.uniq(values) do
        [] ->
          :ok

        [dup | _] ->
          raise CompileError,
            file: env.file,
            description: "two templates have the #{key} #{inspect(dup)}"
      end
    end

    kinds = Enum.flat_map(templates, & &1.kinds)

    case kinds -- Enum.uniq(kinds) do
      [] ->
        :ok

      [dup | _] ->
        raise CompileError,
          file: env.file,
          description: "entity kind #{inspect(dup)} is in two templates"
    end
  end

  ## Quantizing

  @doc """
  The quantized values of an entity for a template.

  Raises `Overworld.Template.Error` (naming the template and the field) for a value that is not
  an integer, or not one of an enum's or bool's values (see the module doc).
  """
  @spec quantize(t, Overworld.Entity.t()) :: values
  def quantize(%__MODULE__{name: name, fields: fields}, entity) do
    fields |> Enum.map(&Field.quantize(&1, value(&1.source, entity))) |> List.to_tuple()
  rescue
    # Field.quantize/2 does not know the template (an error that names one is kept as it is).
    e in Error -> reraise %{e | template: e.template || name}, __STACKTRACE__
  end

  @positions %{kind: 3, x: 4, y: 5, vx: 6, vy: 7, heading: 8, state: 9}

  defp value({:data, i}, entity) do
    case elem(entity, 10) do
      data when is_tuple(data) and tuple_size(data) > i -> elem(data, i)
      _ -> nil
    end
  end

  defp value({m, f}, entity), do: apply(m, f, [entity])
  defp value(field, entity), do: elem(entity, Map.fetch!(@positions, field) - 1)

  @doc "What the quantized values stand for, as a map field name => value."
  @spec to_map(t, values) :: map
  def to_map(%__MODULE__{fields: fields}, q) do
    fields
    |> Enum.with_index()
    |> Map.new(fn {f, i} -> {f.name, Field.dequantize(f, elem(q, i))} end)
  end

  ## Inputs

  @doc """
  The payload of an INPUT message for an input layout (`__input__/0`): the values (a map of
  field name => value, keyed as the layout names its fields: atoms in a module's layout,
  strings in one a client read from a HANDSHAKE) quantized and bit-packed as a keyframe, zero
  bits to the byte boundary.
  Raises `Overworld.Template.Error` for a value the layout cannot quantize (a missing one is
  nil).

      iex> t = Overworld.Template.Test.Wire.__input__()
      iex> bin = Overworld.Template.encode_input(t, %{turn: -3, jump: true})
      iex> {bin, Overworld.Template.decode_input(t, bin)}
      {<<124, 128>>, {:ok, %{turn: -3, jump: true}}}
  """
  @spec encode_input(t, map) :: binary
  def encode_input(%__MODULE__{fields: fields} = t, values) when is_map(values) do
    q = fields |> Enum.map(&Field.quantize(&1, Map.get(values, &1.name))) |> List.to_tuple()
    bits = encode_keyframe(t, q)
    pad = rem(8 - rem(bit_size(bits), 8), 8)
    <<bits::bitstring, 0::size(pad)>>
  rescue
    e in Error -> reraise %{e | template: e.template || t.name}, __STACKTRACE__
  end

  @doc """
  Reads an INPUT payload with an input layout: the values as a map, or `{:error, reason}`
  (too short, or more than the zero bits that pad it to a byte). Never raises.

      iex> t = Overworld.Template.Test.Wire.__input__()
      iex> Overworld.Template.decode_input(t, <<124>>)
      {:error, :truncated}
      iex> Overworld.Template.decode_input(t, <<124, 128, 0>>)
      {:error, :bad_input}
  """
  @spec decode_input(t, binary) ::
          {:ok, map} | {:error, :truncated | :bad_input | :bad_enum_index}
  def decode_input(%__MODULE__{} = t, payload) when is_binary(payload) do
    case decode_keyframe(t, payload) do
      {:ok, q, rest} when bit_size(rest) < 8 ->
        size = bit_size(rest)

        if rest == <<0::size(size)>>,
          do: {:ok, to_map(t, in_range(t.fields, q))},
          else: {:error, :bad_input}

      {:ok, _q, _rest} ->
        {:error, :bad_input}

      error ->
        error
    end
  end

  # A client may send what the wire carries (`2^bits - 1`); numbers past the declared range
  # are clamped to it (an enum index past its values never decodes: see read_keyframe/3).
  defp in_range(fields, q) do
    fields
    |> Enum.with_index()
    |> Enum.reduce(q, fn
      {%Field{values: nil, max: m}, i}, q when is_integer(m) and elem(q, i) > m ->
        put_elem(q, i, m)

      _, q ->
        q
    end)
  end

  ## Keyframes

  @doc "Every field's value, bit-packed."
  @spec encode_keyframe(t, values) :: bitstring
  def encode_keyframe(%__MODULE__{fields: fields}, q), do: keyframe(fields, q, 0, <<>>)

  defp keyframe([], _q, _i, acc), do: acc

  defp keyframe([%Field{bits: b} | fs], q, i, acc),
    do: keyframe(fs, q, i + 1, <<acc::bitstring, elem(q, i)::size(b)>>)

  @doc "Reads a keyframe; answers the values and the bits after it."
  @spec decode_keyframe(t, bitstring) ::
          {:ok, values, bitstring} | {:error, :truncated | :bad_enum_index}
  def decode_keyframe(%__MODULE__{fields: fields}, bits), do: read_keyframe(fields, bits, [])

  defp read_keyframe([], rest, acc), do: {:ok, acc |> :lists.reverse() |> List.to_tuple(), rest}

  defp read_keyframe([%Field{bits: b} = f | fs], bits, acc) do
    case bits do
      <<v::size(b), rest::bitstring>> ->
        if known?(f, v), do: read_keyframe(fs, rest, [v | acc]), else: {:error, :bad_enum_index}

      _ ->
        {:error, :truncated}
    end
  end

  # An enum's index is one of its values.
  defp known?(%Field{values: nil}, _v), do: true
  defp known?(%Field{max: m}, v), do: v <= m

  ## Deltas

  @doc """
  The change from `old` to `new` values: the mask and the changed fields, or `nil` when
  nothing changed.
  """
  @spec encode_delta(t, values, values) :: bitstring | nil
  def encode_delta(_t, same, same), do: nil

  def encode_delta(%__MODULE__{fields: fields}, old, new) do
    {mask, body} = delta(fields, old, new, 0, <<>>, <<>>)
    <<mask::bitstring, body::bitstring>>
  end

  defp delta([], _old, _new, _i, mask, body), do: {mask, body}

  defp delta([f | fs], old, new, i, mask, body) do
    a = elem(old, i)
    b = elem(new, i)

    if a === b do
      delta(fs, old, new, i + 1, <<mask::bitstring, 0::1>>, body)
    else
      delta(
        fs,
        old,
        new,
        i + 1,
        <<mask::bitstring, 1::1>>,
        <<body::bitstring, changed(f, a, b)::bitstring>>
      )
    end
  end

  defp changed(%Field{diff_bits: 0, bits: bits}, _a, b), do: <<b::size(bits)>>

  defp changed(%Field{diff_bits: db, bits: bits} = f, a, b) do
    d = difference(f, a, b)
    half = 1 <<< (db - 1)
    if d >= -half and d < half, do: <<1::1, d::signed-size(db)>>, else: <<0::1, b::size(bits)>>
  end

  # Angles wrap around: the difference is taken modulo 2^bits, in -2^(bits-1)..2^(bits-1)-1.
  defp difference(%Field{type: :angle, bits: bits}, a, b) do
    size = 1 <<< bits
    d = Integer.mod(b - a, size)
    if d >= size >>> 1, do: d - size, else: d
  end

  defp difference(_f, a, b), do: b - a

  @doc "Reads a delta against `old`; answers the new values and the bits after it."
  @spec decode_delta(t, values, bitstring) :: {:ok, values, bitstring} | {:error, atom}
  def decode_delta(%__MODULE__{fields: fields}, old, bits)
      when tuple_size(old) == length(fields) do
    n = length(fields)

    case bits do
      <<mask::size(n), rest::bitstring>> -> read_delta(fields, old, mask, n - 1, 0, rest, [])
      _ -> {:error, :truncated}
    end
  end

  def decode_delta(_t, _old, _bits), do: {:error, :bad_baseline}

  defp read_delta([], _old, _mask, _bit, _i, rest, acc),
    do: {:ok, acc |> :lists.reverse() |> List.to_tuple(), rest}

  defp read_delta([f | fs], old, mask, bit, i, bits, acc) do
    a = elem(old, i)

    if (mask >>> bit &&& 1) == 0 do
      read_delta(fs, old, mask, bit - 1, i + 1, bits, [a | acc])
    else
      case read_changed(f, a, bits) do
        {:ok, v, rest} -> read_delta(fs, old, mask, bit - 1, i + 1, rest, [v | acc])
        error -> error
      end
    end
  end

  defp read_changed(%Field{diff_bits: 0, bits: b} = f, _a, bits) do
    case bits do
      <<v::size(b), rest::bitstring>> ->
        if known?(f, v), do: {:ok, v, rest}, else: {:error, :bad_enum_index}

      _ ->
        {:error, :truncated}
    end
  end

  defp read_changed(%Field{diff_bits: db, bits: b} = f, a, bits) do
    case bits do
      <<1::1, d::signed-size(db), rest::bitstring>> -> apply_difference(f, a, d, rest)
      <<0::1, v::size(b), rest::bitstring>> -> {:ok, v, rest}
      _ -> {:error, :truncated}
    end
  end

  defp apply_difference(%Field{type: :angle, bits: b}, a, d, rest),
    do: {:ok, Integer.mod(a + d, 1 <<< b), rest}

  defp apply_difference(%Field{bits: b}, a, d, rest) do
    v = a + d
    if v >= 0 and v < 1 <<< b, do: {:ok, v, rest}, else: {:error, :out_of_range}
  end
end

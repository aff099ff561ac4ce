defmodule Overworld.Template.Compiled do
  @moduledoc false
  # Code generation for a templates module: per template, straight-line functions that quantize
  # an entity, pack a keyframe and pack a delta, with every field's width, range and source
  # known at compile time. They produce exactly the bits of the generic `Overworld.Template`
  # functions (tested), several times faster; the zone's encoder uses them.
  #
  #   __index__(kind) :: index | nil
  #   __quantize__(index, entity) :: values  (raises Overworld.Template.Error for a value it
  #                                            cannot quantize, as Template.quantize/2 does)
  #   __keyframe__(index, values) :: bitstring
  #   __delta__(index, old, new) :: bitstring | nil
  #   __same__(index, entity_a, entity_b) :: boolean  (every replicated source identical, so
  #                                                    no delta: cheaper than quantizing both)
  #
  # `index` is the template's position in `__templates__/0`.

  import Bitwise
  alias Overworld.Template
  alias Overworld.Template.Field

  @positions %{kind: 2, x: 3, y: 4, vx: 5, vy: 6, heading: 7, state: 8}

  @doc false
  @spec functions([Template.t()]) :: Macro.t()
  def functions(templates) do
    indexed = Enum.with_index(templates)

    index_clauses =
      for {t, i} <- indexed, kind <- t.kinds do
        quote do
          def __index__(unquote(Macro.escape(kind))), do: unquote(i)
        end
      end

    quote do
      @doc false
      unquote_splicing(index_clauses)
      def __index__(_kind), do: nil

      @doc false
      unquote_splicing(Enum.map(indexed, fn {t, i} -> quantize(t, i) end))
      def __quantize__(_index, _entity), do: raise(ArgumentError, "no such template index")

      @doc false
      unquote_splicing(Enum.map(indexed, fn {t, i} -> keyframe(t, i) end))

      @doc false
      unquote_splicing(Enum.map(indexed, fn {t, i} -> delta(t, i) end))

      @doc false
      unquote_splicing(Enum.map(indexed, fn {t, i} -> same(t, i) end))
    end
  end

  defp vars(prefix, n), do: for(i <- 0..(n - 1), do: Macro.var(:"#{prefix}#{i}", __MODULE__))

  ## Quantize

  defp quantize(%Template{name: name, fields: fields}, index) do
    entity = Macro.var(:entity, __MODULE__)
    qs = vars(:q, length(fields))

    # One binding per field, in field order: an invalid value raises for the first bad field,
    # as the generic quantize/2 does (the order of a tuple's elements is not specified).
    bindings =
      fields
      |> Enum.zip(qs)
      |> Enum.map(fn {f, q} ->
        quote(do: unquote(q) = unquote(quantize_field(f, source(f.source, entity), name)))
      end)

    quote do
      def __quantize__(unquote(index), unquote(entity)) do
        unquote_splicing(bindings)
        {unquote_splicing(qs)}
      end
    end
  end

  defp source({:data, i}, entity) do
    quote do
      case :erlang.element(11, unquote(entity)) do
        data when is_tuple(data) and tuple_size(data) > unquote(i) ->
          :erlang.element(unquote(i + 1), data)

        _ ->
          nil
      end
    end
  end

  defp source({m, f}, entity), do: quote(do: unquote(m).unquote(f)(unquote(entity)))

  defp source(field, entity),
    do: quote(do: :erlang.element(unquote(Map.fetch!(@positions, field) + 1), unquote(entity)))

  defp quantize_field(%Field{type: :angle, bits: b} = f, v, template) do
    clauses =
      quote do
        v when is_integer(v) -> Bitwise.bsr(Bitwise.band(v, 65535), unquote(16 - b))
      end

    quote do: case(unquote(v), do: unquote(clauses ++ invalid(f, template)))
  end

  defp quantize_field(%Field{type: t, values: values} = f, v, template)
       when t in [:enum, :bool] do
    clauses =
      values |> Enum.with_index() |> Enum.map(fn {value, i} -> {:->, [], [[value], i]} end)

    quote do: case(unquote(v), do: unquote(clauses ++ invalid(f, template)))
  end

  defp quantize_field(%Field{min: min, step: step, bits: b} = f, v, template) do
    max = (1 <<< b) - 1
    # Steps are powers of two (fixed) or 1 (uint, int): a shift floors like div for v >= min.
    shift = step |> Integer.digits(2) |> length() |> Kernel.-(1)

    clauses =
      quote do
        v when is_integer(v) and v <= unquote(min) -> 0
        v when is_integer(v) -> min(Bitwise.bsr(v - unquote(min), unquote(shift)), unquote(max))
      end

    quote do: case(unquote(v), do: unquote(clauses ++ invalid(f, template)))
  end

  # The last clause of a field's case: any other value raises (valid values never reach it).
  # The exception is built inline and raised with :erlang.error/1, which the compiler knows
  # never returns: the valid clauses then compile to the same code as without this clause (a
  # function call here would make the quantized values of earlier fields live across it).
  defp invalid(%Field{name: name, type: type, values: values}, template) do
    values = if type in [:enum, :bool], do: values, else: nil

    quote do
      other ->
        :erlang.error(%Overworld.Template.Error{
          template: unquote(template),
          field: unquote(name),
          value: other,
          values: unquote(Macro.escape(values))
        })
    end
  end

  ## Same sources

  defp same(%Template{fields: fields}, index) do
    a = Macro.var(:a, __MODULE__)
    b = Macro.var(:b, __MODULE__)

    checks =
      fields
      |> Enum.map(& &1.source)
      |> Enum.uniq()
      |> Enum.map(fn src -> quote(do: unquote(source(src, a)) === unquote(source(src, b))) end)
      |> Enum.reduce(fn check, acc -> quote(do: unquote(acc) and unquote(check)) end)

    quote do
      def __same__(unquote(index), unquote(a), unquote(b)), do: unquote(checks)
    end
  end

  ## Keyframe

  defp keyframe(%Template{fields: fields}, index) do
    qs = vars(:q, length(fields))

    segments =
      fields
      |> Enum.zip(qs)
      |> Enum.map(fn {%Field{bits: b}, q} -> quote(do: unquote(q) :: size(unquote(b))) end)

    quote do
      def __keyframe__(unquote(index), {unquote_splicing(qs)}), do: <<unquote_splicing(segments)>>
    end
  end

  ## Delta

  defp delta(%Template{fields: fields}, index) do
    n = length(fields)
    as = vars(:a, n)
    bs = vars(:b, n)
    ms = vars(:m, n)
    triples = Enum.zip([fields, as, bs])

    # Field by field (small integers compare inline); all equal means no delta.
    flags =
      Enum.zip(ms, triples)
      |> Enum.map(fn {m, {_f, a, b}} ->
        quote(do: unquote(m) = if(unquote(a) === unquote(b), do: 0, else: 1))
      end)

    mask = Enum.map(ms, fn m -> quote(do: unquote(m) :: 1) end)
    sum = Enum.reduce(ms, fn m, acc -> quote(do: unquote(acc) + unquote(m)) end)

    body =
      Enum.zip(ms, triples)
      |> Enum.map(fn {m, {f, a, b}} ->
        quote do
          if(unquote(m) === 0, do: <<>>, else: unquote(changed(f, a, b))) :: bitstring
        end
      end)

    quote do
      def __delta__(unquote(index), {unquote_splicing(as)}, {unquote_splicing(bs)}) do
        unquote_splicing(flags)
        if unquote(sum) === 0, do: nil, else: <<unquote_splicing(mask), unquote_splicing(body)>>
      end
    end
  end

  defp changed(%Field{diff_bits: 0, bits: bits}, _a, b),
    do: quote(do: <<unquote(b)::size(unquote(bits))>>)

  defp changed(%Field{type: type, diff_bits: db, bits: bits}, a, b) do
    half = 1 <<< (db - 1)
    size = 1 <<< bits

    d =
      if type == :angle do
        quote do
          d = Integer.mod(unquote(b) - unquote(a), unquote(size))
          if d >= unquote(size >>> 1), do: d - unquote(size), else: d
        end
      else
        quote(do: unquote(b) - unquote(a))
      end

    quote do
      d = unquote(d)

      if d >= unquote(-half) and d < unquote(half),
        do: <<1::1, d::signed-size(unquote(db))>>,
        else: <<0::1, unquote(b)::size(unquote(bits))>>
    end
  end
end

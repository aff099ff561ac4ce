defmodule Overworld.Lua.Convert do
  @moduledoc false
  # Elixir values <-> luerl 1.0 values (the rules are documented in `Overworld.Lua`, "Values").
  #
  # luerl's own values: nil, true, false, binaries (strings), integers and floats (numbers),
  # `#tref{}` (a table, in the state's heap), `#funref{}`/`#erl_func{}` (functions) and
  # `#usdref{}` (userdata). Encoding allocates tables in the state, so it threads the state;
  # decoding reads it. Tables are read through `luerl_new:decode/2`, which answers a table as a
  # list of `{key, value}` pairs (array part first, in order), a function as an Erlang fun and
  # userdata as `{userdata, data}`, and raises `{recursive_table, _}` on a cycle; its answer
  # is then turned into ours here.

  # Integral floats within ±2^53 come back as integers; beyond, a float may not be an exact
  # integer any more, and a huge one (1e308) would become a 309-digit integer.
  @max_exact 9_007_199_254_740_992

  defmodule Error do
    @moduledoc false
    # A value that cannot cross between Elixir and Lua.
    defexception [:message]
  end

  @doc "Raises ArgumentError unless `value` can be encoded (walks it without a state)."
  @spec check!(term) :: :ok
  def check!(value) when is_binary(value) or is_number(value) or is_atom(value), do: :ok
  def check!(value) when is_list(value), do: check_list!(value, value)

  def check!(value) when is_map(value) do
    Enum.each(value, fn {k, v} ->
      check_key!(k)
      check!(v)
    end)
  end

  def check!(value), do: raise(ArgumentError, cannot_encode(value))

  defp check_list!([], _whole), do: :ok

  defp check_list!([h | t], whole) do
    check!(h)
    check_list!(t, whole)
  end

  defp check_list!(_improper, whole),
    do: raise(ArgumentError, "cannot convert an improper list to Lua: #{inspect(whole)}")

  defp check_key!(k) when is_binary(k) or is_number(k), do: :ok
  defp check_key!(k) when is_atom(k) and k not in [nil, true, false], do: :ok

  defp check_key!(k),
    do:
      raise(
        ArgumentError,
        "cannot use #{inspect(k)} as a Lua table key (expected a string, a number or an " <>
          "atom other than nil, true and false)"
      )

  defp cannot_encode(value) do
    "cannot convert #{inspect(value)} to a Lua value (expected nil, a boolean, a number, a " <>
      "string, an atom, a list or a map)"
  end

  @doc "Encodes a list of Elixir values (raises ArgumentError on one that cannot be)."
  @spec encode_list([term], tuple) :: {[term], tuple}
  def encode_list(values, st), do: Enum.map_reduce(values, st, &encode/2)

  @doc "Encodes an Elixir value into a luerl value, allocating its tables in `st`."
  @spec encode(term, tuple) :: {term, tuple}
  def encode(nil, st), do: {nil, st}
  def encode(true, st), do: {true, st}
  def encode(false, st), do: {false, st}
  def encode(v, st) when is_binary(v) or is_number(v), do: {v, st}
  def encode(v, st) when is_atom(v), do: {Atom.to_string(v), st}

  def encode(v, st) when is_list(v) do
    {pairs, st} = sequence(v, 1, st, [], v)
    :luerl_heap.alloc_table(pairs, st)
  end

  def encode(v, st) when is_map(v) do
    {pairs, st} =
      Enum.map_reduce(v, st, fn {k, e}, st ->
        check_key!(k)
        {k, st} = encode(k, st)
        {e, st} = encode(e, st)
        {{k, e}, st}
      end)

    :luerl_heap.alloc_table(pairs, st)
  end

  def encode(v, _st), do: raise(ArgumentError, cannot_encode(v))

  defp sequence([], _i, st, acc, _whole), do: {acc, st}

  defp sequence([e | rest], i, st, acc, whole) do
    {e, st} = encode(e, st)
    sequence(rest, i + 1, st, [{i, e} | acc], whole)
  end

  defp sequence(_improper, _i, _st, _acc, whole), do: check_list!(whole, whole)

  @doc "Decodes a list of luerl values (raises `Error` on one that cannot be)."
  @spec decode_list([term], tuple) :: [term]
  def decode_list(values, st), do: Enum.map(values, &decode(&1, st))

  @doc "Decodes a luerl value into an Elixir value."
  @spec decode(term, tuple) :: term
  def decode(v, _st) when v in [nil, true, false] or is_binary(v), do: v
  def decode(v, _st) when is_number(v), do: number(v)

  def decode(v, st) do
    from_luerl(:luerl_new.decode(v, st))
  catch
    :error, {:recursive_table, _} -> raise Error, "cannot convert a table that contains itself"
    :error, :badarg -> raise Error, "cannot convert #{describe(v)}"
  end

  defp from_luerl(v) when v in [nil, true, false] or is_binary(v), do: v
  defp from_luerl(v) when is_number(v), do: number(v)
  defp from_luerl(pairs) when is_list(pairs), do: table(pairs)
  defp from_luerl(f) when is_function(f), do: raise(Error, "cannot convert a function")
  defp from_luerl({:userdata, _}), do: raise(Error, "cannot convert userdata")
  defp from_luerl(other), do: raise(Error, "cannot convert #{inspect(other)}")

  defp number(f) when is_float(f) and f == trunc(f) and abs(f) <= @max_exact, do: trunc(f)
  defp number(n), do: n

  # A table whose keys are exactly 1..n (luerl lists the array part first, in order) is a
  # list; any other one is a map with string keys. The empty table is [].
  defp table(pairs) do
    if sequence?(pairs, 1) do
      Enum.map(pairs, fn {_, v} -> from_luerl(v) end)
    else
      Map.new(pairs, fn {k, v} -> {key(k), from_luerl(v)} end)
    end
  end

  defp sequence?([], _), do: true
  defp sequence?([{i, _} | rest], i), do: sequence?(rest, i + 1)
  defp sequence?(_, _), do: false

  defp key(k) when is_binary(k), do: k
  defp key(k) when is_integer(k), do: Integer.to_string(k)

  defp key(k) when is_float(k) do
    case number(k) do
      i when is_integer(i) -> Integer.to_string(i)
      f -> Float.to_string(f)
    end
  end

  defp key(k) when is_boolean(k), do: Atom.to_string(k)
  defp key(_), do: raise(Error, "cannot convert a table with a table or function as a key")

  @doc "What a luerl value is, in Lua's words (\"a table\", \"a function\"...)."
  @spec describe(term) :: String.t()
  def describe(nil), do: "nil"
  def describe(b) when is_boolean(b), do: "a boolean"
  def describe(n) when is_number(n), do: "a number"
  def describe(s) when is_binary(s), do: "a string"
  def describe({:tref, _}), do: "a table"
  def describe({:usdref, _}), do: "userdata"
  def describe(_), do: "a function"
end

defmodule Overworld.Lua.Strings do
  @moduledoc false
  # Bounded strings: no Lua string longer than the state's `:max_string_bytes`, and making
  # strings costs reductions.
  #
  # Why: luerl's strings are binaries, and a binary longer than 64 bytes lives off the
  # process heap, where `max_heap_size` does not count it (OTP 25). `s = s .. s` doubles one
  # per step, and a step costs a few reductions whatever its size: a process doubling a
  # string is not scheduled out for hundreds of steps, so nothing outside it (a guard, a
  # kill signal: both are handled when it is scheduled out) acts before it has taken every
  # byte of the machine. (Seen: the OOM killer took the node.) So:
  #
  #   * `a .. b` is compiled as `__overworld_concat(a, b)` (`guard_concat/1` rewrites the
  #     parsed chunk, before luerl compiles it): Lua semantics (numbers written out, the
  #     `__concat` metamethod), plus the length check. A script that redefines the name only
  #     breaks its own concatenations (its function's own `..` calls it again).
  #   * The library functions that make long strings out of short ones check the length of
  #     what they would make before they make it: `string.rep` (exactly; ours, as luerl's makes a
  #     list of 16 bytes of heap per character), `string.format`
  #     (its format and string arguments), `table.concat` (exactly), `string.gsub` (a bound:
  #     the subject, plus the replacement per match, plus each capture it copies once per
  #     subject; a function or table replacement is counted as it answers).
  #   * Every string made by these and the rest of `string` bumps the process's reductions
  #     by one per 64 bytes, so a process that makes strings fast is scheduled out often:
  #     then its guard sees its binaries (`Overworld.Lua.Limited`) and a kill takes effect.

  @concat "__overworld_concat"
  @bytes_per_reduction 64

  @doc "Rewrites every `a .. b` of a parsed chunk into `__overworld_concat(a, b)`."
  @spec guard_concat(term) :: term
  def guard_concat({:op, line, :.., a, b}) do
    {:., line, {:NAME, line, @concat}, {:functioncall, line, [guard_concat(a), guard_concat(b)]}}
  end

  def guard_concat(t) when is_tuple(t),
    do: t |> Tuple.to_list() |> Enum.map(&guard_concat/1) |> List.to_tuple()

  def guard_concat(l) when is_list(l), do: Enum.map(l, &guard_concat/1)
  def guard_concat(other), do: other

  @doc "Installs the bounded concatenation and string functions, at most `max` bytes."
  @spec install(tuple, pos_integer) :: tuple
  def install(st, max) do
    st = set(st, [@concat], fn args, st -> concat(args, st, max) end)

    {:ok, {:tref, _} = string, st} = :luerl_new.get_table_keys(["string"], st)

    st =
      Enum.reduce(:luerl_new.decode(string, st), st, fn {name, _}, st ->
        {:ok, {:erl_func, f}, st} = :luerl_new.get_table_keys(["string", name], st)
        set(st, ["string", name], charged(name, f, max))
      end)

    st = set(st, ["string", "rep"], fn args, st -> rep(args, st, max) end)
    {:ok, {:erl_func, f}, st} = :luerl_new.get_table_keys(["table", "concat"], st)
    set(st, ["table", "concat"], fn args, st -> table_concat(f, args, st, max) end)
  end

  defp set(st, path, fun) do
    {:ok, [], st} = :luerl_new.set_table_keys(path, {:erl_func, fun}, st)
    st
  end

  ## a .. b

  defp concat([a, b | _], st, max) do
    case {:luerl_lib.arg_to_string(a), :luerl_lib.arg_to_string(b)} do
      {sa, sb} when is_binary(sa) and is_binary(sb) ->
        size = byte_size(sa) + byte_size(sb)
        if size > max, do: too_long("..", size, max, st)
        charge(size)
        {[<<sa::binary, sb::binary>>], st}

      _ ->
        case :luerl_heap.get_metamethod(a, b, "__concat", st) do
          nil ->
            :luerl_lib.lua_error({:badarg, :.., [a, b]}, st)

          meta ->
            {results, st} = :luerl_emul.functioncall(meta, [a, b], st)
            {[:luerl_lib.first_value(results)], st}
        end
    end
  end

  defp concat(args, st, _max), do: :luerl_lib.lua_error({:badarg, :.., args}, st)

  ## string.*

  defp charged(name, f, max) do
    fn args, st ->
      args = precheck(name, args, st, max)
      {results, st} = f.(args, st)
      Enum.each(results, fn r -> if is_binary(r), do: charge(byte_size(r)) end)
      {results, st}
    end
  end

  # string.rep(s, n [, sep]): luerl's builds a list of n elements, and a list of 16 bytes of
  # heap per character; this one makes the string with binary:copy/2.
  defp rep([s, n | rest] = args, st, max) do
    sep =
      case rest do
        [sep | _] when sep != nil -> :luerl_lib.arg_to_string(sep)
        _ -> ""
      end

    case {:luerl_lib.arg_to_string(s), :luerl_lib.arg_to_integer(n), sep} do
      {s, n, sep} when is_binary(s) and is_integer(n) and is_binary(sep) and n <= 0 ->
        {[""], st}

      {s, n, sep} when is_binary(s) and is_integer(n) and is_binary(sep) ->
        size = byte_size(s) * n + byte_size(sep) * (n - 1)
        if size > max, do: too_long("string.rep", size, max, st)
        charge(size)

        result =
          if sep == "",
            do: :binary.copy(s, n),
            else: <<s::binary, :binary.copy(<<sep::binary, s::binary>>, n - 1)::binary>>

        {[result], st}

      _ ->
        :luerl_lib.badarg_error(:rep, args, st)
    end
  end

  defp rep(args, st, _max), do: :luerl_lib.badarg_error(:rep, args, st)

  defp precheck("format", [fmt | rest] = args, st, max) do
    size =
      Enum.reduce([fmt | rest], 0, fn
        s, acc when is_binary(s) -> acc + byte_size(s)
        _, acc -> acc + 32
      end)

    if size > max, do: too_long("string.format", size, max, st)
    args
  end

  defp precheck("gsub", [s, pattern, repl | rest], st, max) do
    subject = :luerl_lib.arg_to_string(s)

    if is_binary(subject) do
      matches =
        case rest do
          [n | _] when is_number(n) -> min(trunc(n), byte_size(subject) + 1)
          _ -> byte_size(subject) + 1
        end

      [s, pattern, bounded_repl(repl, subject, matches, st, max) | rest]
    else
      [s, pattern, repl | rest]
    end
  end

  defp precheck(_name, args, _st, _max), do: args

  # A string replacement: each match copies it (its captures, %1..%9 and %0, are parts of the
  # subject, and matches do not overlap: each capture reference copies at most the subject).
  # A function or table replacement: counted as it answers (a counter per gsub call).
  defp bounded_repl(repl, subject, matches, st, max) when is_binary(repl) or is_number(repl) do
    r = :luerl_lib.arg_to_string(repl)
    refs = length(:binary.matches(r, "%"))
    size = byte_size(subject) + matches * byte_size(r) + refs * byte_size(subject)
    if size > max, do: too_long("string.gsub", size, max, st)
    repl
  end

  defp bounded_repl(repl, subject, _matches, _st, max) do
    total = :counters.new(1, [])
    :counters.add(total, 1, byte_size(subject))

    {:erl_func,
     fn args, st ->
       {value, st} =
         case repl do
           {:tref, _} ->
             :luerl_emul.get_table_key(repl, hd(args), st)

           f ->
             {results, st} = :luerl_emul.functioncall(f, args, st)
             {:luerl_lib.first_value(results), st}
         end

       case :luerl_lib.arg_to_string(value) do
         s when is_binary(s) -> :counters.add(total, 1, byte_size(s))
         _ -> :ok
       end

       size = :counters.get(total, 1)
       if size > max, do: too_long("string.gsub", size, max, st)
       {[value], st}
     end}
  end

  ## table.concat

  defp table_concat(f, [{:tref, _} = t | rest] = args, st, max) do
    {sep, i, j} =
      case rest do
        [] -> {"", 1, nil}
        [sep] -> {sep, 1, nil}
        [sep, i] -> {sep, i, nil}
        [sep, i, j | _] -> {sep, i, j}
      end

    sep = if sep == nil, do: "", else: :luerl_lib.arg_to_string(sep)
    i = :luerl_lib.arg_to_integer(i || 1)
    j = if j == nil, do: :luerl_lib_table.raw_length(t, st), else: :luerl_lib.arg_to_integer(j)

    if is_binary(sep) and is_integer(i) and is_integer(j) do
      size = concat_size(t, i, j, byte_size(sep), st, max, 0)
      if size > max, do: too_long("table.concat", size, max, st)
      charge(size)
    end

    f.(args, st)
  end

  defp table_concat(f, args, st, _max), do: f.(args, st)

  # The length of the concatenation, counted until it passes `max` (or an element that is not
  # a string or a number: luerl's table.concat raises its error).
  defp concat_size(_t, i, j, _sep, _st, _max, size) when i > j, do: size
  defp concat_size(_t, _i, _j, _sep, _st, max, size) when size > max, do: size

  defp concat_size(t, i, j, sep, st, max, size) do
    case :luerl_lib.arg_to_string(:luerl_heap.raw_get_table_key(t, i, st)) do
      s when is_binary(s) ->
        concat_size(t, i + 1, j, sep, st, max, size + byte_size(s) + if(i < j, do: sep, else: 0))

      _ ->
        size
    end
  end

  defp charge(bytes) when bytes >= @bytes_per_reduction,
    do: :erlang.bump_reductions(div(bytes, @bytes_per_reduction))

  defp charge(_bytes), do: true

  defp too_long(what, size, max, st) do
    :luerl_lib.lua_error(
      {:error_call, "#{what}: string too long (#{size} bytes; at most #{max})"},
      st
    )
  end
end

defmodule Overworld.Postgres.Wire do
  @moduledoc false
  # The only module that talks to p1_pgsql (Debian's erlang-p1-pgsql, modules `pgsql` and
  # `pgsql_proto`). A connection is a `pgsql_proto` gen_server: it owns the socket (through a
  # linked `pgsql_socket` process) and runs one request at a time. Everything here runs in the
  # caller, which calls that process directly; the pool only hands the pid out.
  #
  # What the library does, and what we do about it (p1_pgsql 1.1.20):
  #
  #   * `pgsql:prepare/3` and `pgsql:execute/3` are its extended-query protocol: Parse/Describe/
  #     Sync, then Bind/Describe/Execute, then Close/Sync (three round trips). We use them with
  #     the unnamed statement "". Its `pquery/3` (one round trip) waits forever on an error or
  #     on a statement that returns no rows, so it is not used. Both functions have a fixed
  #     5 s call timeout: we send the same requests with `:gen_server.call/3` and our own.
  #   * Parameters: the library sends a binary in *binary* format and anything else (integers,
  #     charlists) in text format, `null` as SQL NULL. We send every value as text (a binary
  #     becomes the list of its bytes) so that PostgreSQL parses it by the parameter's type,
  #     and keep binary format for `{:binary, bytes}` (bytea).
  #   * Results come in binary format. The library decodes bool, int2/4/8 and numeric itself,
  #     and crashes the connection on a NULL of those types; every other type comes back as
  #     `{type_name, wire_bytes | null}`. Right after connecting we rename those five types in
  #     the connection's oid map (`:sys.replace_state/2`) so that all values come back raw,
  #     and decode them here.
  #   * Errors come back as `{error, [{code, Sqlstate}, {message, Text}, ...]}`; we make maps.
  #   * A NOTICE or WARNING arriving during `execute` crashes the connection (it expects only
  #     the protocol's replies), so every connection sets `client_min_messages` to `error`.
  #   * Also fatal to the connection (we answer `{:error, {:disconnected, reason}}` and the
  #     pool replaces it): a statement that changes a parameter the server reports
  #     (`SET TimeZone`, `SET application_name`, ...), a column of a type created after the
  #     connection was opened (its oid map is read once), an empty statement.
  #   * `pgsql_socket` prints "Sock closed" with `io:format/2` when the server closes the
  #     socket: the connection's owner is its group leader and answers (see `connect/1`).

  @typedoc "A connection: the pid of a `pgsql_proto` process."
  @type pg :: pid

  @typedoc "A PostgreSQL error, from the server's ErrorResponse."
  @type pg_error :: %{
          required(:code) => binary,
          required(:message) => binary,
          required(:severity) => binary | nil,
          optional(atom) => term
        }

  @typedoc "A query's result."
  @type result :: %{
          command: binary,
          columns: [binary],
          rows: [[term]],
          count: non_neg_integer
        }

  # bool, int2, int4, int8 and numeric are decoded by the library (and crash it on NULL).
  @renamed %{
    bool: :raw_bool,
    int2: :raw_int2,
    int4: :raw_int4,
    int8: :raw_int8,
    numeric: :raw_numeric
  }

  # Types whose binary form is their text.
  @text_types [:text, :varchar, :bpchar, :char, :name, :citext, :json, :xml, :bytea, :unknown]

  @doc """
  Opens a connection. The caller becomes the group leader of its processes (and must answer
  io requests); the connection is not linked to it.
  """
  @spec connect(map) :: {:ok, pg} | {:error, term}
  def connect(o) do
    opts = [
      host: to_charlist(o.host),
      port: o.port,
      database: o.database,
      user: o.user,
      password: o.password,
      as_binary: true,
      connect_timeout: o.timeout
    ]

    gl = Process.group_leader()
    Process.group_leader(self(), self())

    started =
      try do
        :pgsql.connect(opts)
      after
        Process.group_leader(self(), gl)
      end

    case started do
      {:ok, pg} ->
        with :ok <- patch(pg),
             :ok <- simple(pg, "SET client_min_messages TO error", o.timeout) do
          {:ok, pg}
        else
          error ->
            close(pg)
            error
        end

      {:error, _} = error ->
        error
    end
  end

  # The connection's state is pgsql_proto's `#state{}` record: its 8th field is the socket
  # (`{gen_tcp, port}`), its 9th the oid map, a dict of oid => type name. The shape is checked
  # before anything is changed. The socket gets TCP_NODELAY: pgsql sends a query's messages in
  # several writes, and Nagle's algorithm held the last one for the server's delayed ACK
  # (about 40 ms per statement on loopback).
  defp patch(pg) do
    state = :sys.get_state(pg, 5_000)

    with true <- is_tuple(state) and tuple_size(state) == 10 and elem(state, 0) == :state,
         {:gen_tcp, socket} when is_port(socket) <- elem(state, 7),
         oids when is_tuple(oids) and elem(oids, 0) == :dict <- elem(state, 8),
         :ok <- :inet.setopts(socket, nodelay: true) do
      :sys.replace_state(pg, fn state ->
        oids = :dict.map(fn _oid, name -> Map.get(@renamed, name, name) end, elem(state, 8))
        put_elem(state, 8, oids)
      end)

      :ok
    else
      {:error, reason} -> {:error, {:disconnected, reason}}
      _ -> {:error, :unsupported_pgsql_version}
    end
  catch
    :exit, reason -> {:error, {:disconnected, reason}}
  end

  @doc """
  Closes a connection: Terminate sent to the server if the connection answers within a second,
  then its processes killed (`pgsql:terminate/1` leaves the socket's process running).
  """
  @spec close(pg) :: :ok
  def close(pg) do
    links =
      case Process.info(pg, :links) do
        {:links, links} -> Enum.filter(links, &(is_pid(&1) and &1 != self()))
        nil -> []
      end

    try do
      :gen_server.call(pg, :terminate, 1_000)
    catch
      :exit, _ -> :ok
    end

    Enum.each([pg | links], &Process.exit(&1, :kill))
  end

  @doc """
  Runs a statement without parameters and without results through the simple-query protocol
  (one round trip): BEGIN, COMMIT, ROLLBACK, SET. COMMIT of a failed transaction answers
  `{:error, :rollback}`.
  """
  @spec simple(pg, binary, timeout) :: :ok | {:error, term}
  def simple(pg, sql, timeout) do
    case call(pg, {:squery, sql}, timeout) do
      {:ok, results} ->
        case Enum.find(results, &match?({:error, _}, &1)) do
          {:error, error} -> {:error, error_map(error)}
          nil when sql == "COMMIT" and results == ["ROLLBACK"] -> {:error, :rollback}
          nil -> :ok
        end

      {:error, _} = error ->
        error
    end
  end

  @doc """
  Runs a statement with parameters already encoded (`encode_params/1`). On a timeout the
  connection is killed: it would answer the late reply to nobody and be out of step; its
  owner opens a new one.
  """
  @spec run(pg, binary, [term], timeout) :: {:ok, result} | {:error, pg_error | term}
  def run(pg, sql, params, timeout) do
    deadline = System.monotonic_time(:millisecond) + timeout

    with {:ok, _status, _param_types, result_types} <- call(pg, {:prepare, {"", sql}}, timeout),
         left = max(deadline - System.monotonic_time(:millisecond), 1),
         {:ok, {command, result}} <- call(pg, {:execute, {"", params}}, left) do
      {:ok, result(command, result, result_types)}
    else
      {:error, error} when is_list(error) -> {:error, error_map(error)}
      {:error, _} = error -> error
    end
  end

  defp call(pg, request, timeout) do
    :gen_server.call(pg, request, timeout)
  catch
    :exit, {:timeout, _} ->
      Process.exit(pg, :kill)
      {:error, :timeout}

    :exit, {reason, {:gen_server, :call, _}} ->
      {:error, {:disconnected, reason}}

    :exit, reason ->
      {:error, {:disconnected, reason}}
  end

  ## Parameters

  @doc """
  Encodes parameters for `run/4`; raises `ArgumentError` on a value of an unsupported type.

  nil is NULL; integers, floats, booleans, binaries (text), dates and times are sent in
  PostgreSQL's text form; `{:binary, bytes}` is sent as raw bytes (bytea).
  """
  @spec encode_params([term]) :: [term]
  def encode_params(params), do: Enum.map(params, &encode/1)

  defp encode(nil), do: :null
  defp encode(true), do: ~c"true"
  defp encode(false), do: ~c"false"
  defp encode(v) when is_integer(v), do: v
  defp encode(v) when is_float(v), do: :erlang.float_to_list(v, [:short])
  defp encode(v) when is_binary(v), do: :binary.bin_to_list(v)
  defp encode({:binary, v}) when is_binary(v), do: v
  defp encode(%Date{} = v), do: v |> Date.to_iso8601() |> to_charlist()
  defp encode(%Time{} = v), do: v |> Time.to_iso8601() |> to_charlist()
  defp encode(%NaiveDateTime{} = v), do: v |> NaiveDateTime.to_iso8601() |> to_charlist()
  defp encode(%DateTime{} = v), do: v |> DateTime.to_iso8601() |> to_charlist()

  defp encode(v) do
    raise ArgumentError,
          "unsupported query parameter #{inspect(v)}: expected nil, an integer, a float, a " <>
            "boolean, a binary, {:binary, bytes}, a Date, a Time, a NaiveDateTime or a DateTime"
  end

  ## Results

  # A statement without rows other than INSERT, UPDATE and DELETE: `{nyi, Tag}`.
  defp result(:nyi, tag, _types) do
    tag = to_string(tag)
    %{command: tag, columns: [], rows: [], count: tag_count(tag, 0)}
  end

  defp result(command, rows, types) when is_binary(command) and is_list(rows) do
    columns = Enum.map(types, &elem(&1, 0))
    rows = Enum.map(rows, fn row -> Enum.map(row, &decode/1) end)
    %{command: command, columns: columns, rows: rows, count: tag_count(command, length(rows))}
  end

  # INSERT, UPDATE and DELETE without RETURNING: the library parsed the tag.
  defp result(command, n, _types) when is_atom(command) and is_integer(n),
    do: %{command: Atom.to_string(command), columns: [], rows: [], count: n}

  defp result(command, _other, _types),
    do: %{command: to_string(command), columns: [], rows: [], count: 0}

  # "SELECT 2", "UPDATE 3", "INSERT 0 1": the count is the tag's last word, when a number.
  defp tag_count(tag, default) do
    case tag |> String.split(" ") |> List.last() |> Integer.parse() do
      {n, ""} -> n
      _ -> default
    end
  end

  defp decode({_type, :null}), do: nil
  defp decode({:raw_bool, <<b>>}), do: b == 1
  defp decode({:raw_int2, <<i::signed-16>>}), do: i
  defp decode({:raw_int4, <<i::signed-32>>}), do: i
  defp decode({:raw_int8, <<i::signed-64>>}), do: i
  defp decode({:oid, <<i::32>>}), do: i
  defp decode({:raw_numeric, bin}), do: decode_numeric(bin)
  defp decode({:float4, <<f::float-32>>}), do: f
  defp decode({:float8, <<f::float-64>>}), do: f
  # (NaN and infinities do not match a float pattern.)
  defp decode({type, <<0x7F800000::32>>}) when type == :float4, do: :inf
  defp decode({type, <<0xFF800000::32>>}) when type == :float4, do: :"-inf"
  defp decode({type, <<0x7FF0000000000000::64>>}) when type == :float8, do: :inf
  defp decode({type, <<0xFFF0000000000000::64>>}) when type == :float8, do: :"-inf"
  defp decode({type, _}) when type in [:float4, :float8], do: :nan
  defp decode({:jsonb, <<1, json::binary>>}), do: json
  defp decode({:uuid, <<_::128>> = u}), do: format_uuid(u)
  defp decode({:date, <<d::signed-32>>}), do: special(d, 32) || Date.add(~D[2000-01-01], d)
  defp decode({:time, <<us::signed-64>>}), do: Time.add(~T[00:00:00.000000], us, :microsecond)

  defp decode({:timestamp, <<us::signed-64>>}),
    do: special(us, 64) || NaiveDateTime.add(~N[2000-01-01 00:00:00.000000], us, :microsecond)

  defp decode({:timestamptz, <<us::signed-64>>}),
    do: special(us, 64) || DateTime.add(~U[2000-01-01 00:00:00.000000Z], us, :microsecond)

  defp decode({type, bin}) when type in @text_types, do: bin

  # Anything else: the type's name and its binary wire form (cast it to text in SQL instead).
  defp decode({type, bin}), do: {type, bin}

  # ±infinity of date and timestamp types.
  defp special(v, bits) do
    max = Bitwise.bsl(1, bits - 1) - 1

    cond do
      v == max -> :infinity
      v == -max - 1 -> :"-infinity"
      true -> nil
    end
  end

  defp format_uuid(<<a::32, b::16, c::16, d::16, e::48>>) do
    [hex(a, 8), hex(b, 4), hex(c, 4), hex(d, 4), hex(e, 12)] |> Enum.join("-")
  end

  defp hex(n, width),
    do: n |> Integer.to_string(16) |> String.downcase() |> String.pad_leading(width, "0")

  # numeric's binary form: digit count, weight (of the first digit, in powers of 10,000),
  # sign, display scale (digits after the point), then base-10,000 digits. Decoded exactly,
  # to its text form ("12.50").
  defp decode_numeric(<<_n::16, weight::signed-16, sign::16, dscale::16, digits::binary>>) do
    case sign do
      0xC000 ->
        "NaN"

      0xD000 ->
        "Infinity"

      0xF000 ->
        "-Infinity"

      _ ->
        ds = for <<d::16 <- digits>>, do: d
        int = Integer.undigits(ds, 10_000)
        # value = int * 10_000^(weight - length(ds) + 1); scaled = value * 10^dscale.
        shift = 4 * (weight - length(ds) + 1) + dscale

        scaled =
          if shift >= 0, do: int * Integer.pow(10, shift), else: div(int, Integer.pow(10, -shift))

        text = format_scaled(scaled, dscale)
        if sign == 0x4000 and scaled != 0, do: "-" <> text, else: text
    end
  end

  defp format_scaled(scaled, 0), do: Integer.to_string(scaled)

  defp format_scaled(scaled, dscale) do
    s = scaled |> Integer.to_string() |> String.pad_leading(dscale + 1, "0")
    {whole, frac} = String.split_at(s, byte_size(s) - dscale)
    whole <> "." <> frac
  end

  ## Errors

  @fields [:code, :message, :detail, :hint, :position, :where]
  @letters %{?s => :schema, ?t => :table, ?c => :column, ?d => :data_type, ?n => :constraint}

  @doc false
  @spec error_map([{atom | integer, term}]) :: pg_error
  def error_map(fields) do
    base = %{code: nil, message: nil, severity: nil}

    Enum.reduce(fields, base, fn
      {:severity, s}, acc -> Map.put(acc, :severity, to_string(s))
      {key, v}, acc when key in @fields -> Map.put(acc, key, v)
      {letter, v}, acc when is_map_key(@letters, letter) -> Map.put(acc, @letters[letter], v)
      _, acc -> acc
    end)
  end
end

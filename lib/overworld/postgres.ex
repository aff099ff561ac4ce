defmodule Overworld.Postgres do
  @moduledoc """
  A pool of PostgreSQL connections, on Debian's `erlang-p1-pgsql` client.

      {:ok, _} =
        Overworld.Postgres.start_link(
          name: MyApp.DB,
          host: "127.0.0.1",
          database: "game",
          user: "game",
          password: "secret"
        )

      {:ok, %{columns: ["id", "name"], rows: [[1, "ann"]], count: 1}} =
        Overworld.Postgres.query(MyApp.DB, "SELECT id, name FROM players WHERE id = $1", [1])

      alias Overworld.Postgres

      {:ok, id} =
        Postgres.transaction(MyApp.DB, fn conn ->
          with {:ok, %{rows: [[id]]}} <-
                 Postgres.query(conn, "INSERT INTO players (name) VALUES ($1) RETURNING id", ["bob"]),
               {:ok, _} <- Postgres.query(conn, "INSERT INTO bags (player) VALUES ($1)", [id]) do
            {:ok, id}
          end
        end)

  ## Options

    * `:name` (required) — the atom the pool is registered under; the first argument of
      `query/3` and `transaction/2`.
    * `:host` — default `"127.0.0.1"`; `:port` — default 5432.
    * `:database`, `:user` (required) and `:password` (default `""`): cleartext, MD5 and
      SCRAM-SHA-256 password authentication are supported (SCRAM needs the `stringprep`
      application of `erlang-p1-stringprep`, started by `start_link/1`).
    * `:size` — connections, default 4.
    * `:queue` — callers that may wait for a connection, default 1000; one more is answered
      `{:error, :pool_busy}` at once.
    * `:timeout` — milliseconds, default 5000: the longest a caller waits for a connection
      (then `{:error, :timeout}`), and the longest a statement may run (then
      `{:error, :timeout}`, and the connection is replaced), and the connect timeout.

  ## How it works

  Each connection has an owner process that opens it and, when it dies, opens another (at
  once, or after a backoff from 100 ms to 5 s while the server cannot be reached or the
  connections die young). A checkout process, registered under `:name`, only lends
  connections: a query runs in its caller, which talks to the connection directly, then
  gives it back. A caller that dies
  holding a connection gives it back too; it is rolled back before anyone else gets it.
  Waiting callers are served in order.

  Statements use the extended protocol: the values of `$1`, `$2`, ... travel apart from the
  SQL text, and are never spliced into it.

  ## Values

  Parameters: `nil` (NULL), integers, floats, booleans, binaries (as text: PostgreSQL parses
  them by the parameter's type, so `"2024-05-01"` fits a `date` and `"{}"` a `jsonb`),
  `{:binary, bytes}` for `bytea`, `Date`, `Time`, `NaiveDateTime` and `DateTime`.

  Results: NULL is `nil`; `bool` a boolean; `int2`, `int4`, `int8` and `oid` integers;
  `float4` and `float8` floats (or `:nan`, `:inf`, `:"-inf"`); `numeric` its exact text
  (`"12.50"`); `text`, `varchar`, `char`, `name`, `json`, `jsonb`, `xml` and `bytea`
  binaries; `uuid` its text form; `date` a `Date`, `time` a `Time`, `timestamp` a
  `NaiveDateTime`, `timestamptz` a UTC `DateTime` (and `:infinity`/`:"-infinity"`). Any other
  type comes back as `{type_name, wire_bytes}`: cast it to text in the SQL (`tags::text`).

  ## Limits of the client

  The connection dies, and is replaced (the caller gets
  `{:error, {:disconnected, reason}}`), on a statement that changes a setting the server
  reports to clients (`SET TimeZone`, `SET application_name`, ...: set them in the role or
  database instead), on a result column of a type created after the connection was opened,
  and on an empty statement. Notices and warnings are not delivered (each connection sets
  `client_min_messages` to `error`).
  """

  alias Overworld.Options
  alias Overworld.Postgres.{Connection, Pool, Wire}

  defmodule Conn do
    @moduledoc """
    A connection lent to the function of `Overworld.Postgres.transaction/2`: pass it to
    `Overworld.Postgres.query/3`. It is valid until the function returns.
    """
    @enforce_keys [:pid, :timeout]
    defstruct [:pid, :timeout]

    @typedoc "A connection lent by a pool."
    @type t :: %__MODULE__{pid: pid, timeout: timeout}
  end

  @typedoc "A pool (its `:name`, or the pid of its checkout) or a connection of a transaction."
  @type conn :: atom | pid | Conn.t()

  @typedoc """
  A query's result: the column names, the rows (lists of values, in column order), the
  number of rows the statement returned or changed, and the server's command tag
  (`"SELECT 2"`, `"CREATE TABLE"`; only its first word, `"INSERT"`, for INSERT, UPDATE and
  DELETE without RETURNING).
  """
  @type result :: %{
          columns: [binary],
          rows: [[term]],
          count: non_neg_integer,
          command: binary
        }

  @typedoc """
  An error the server reported: its SQLSTATE (`"23505"`), message and severity, and when the
  server sent them `:detail`, `:hint`, `:position`, `:where`, `:schema`, `:table`,
  `:column`, `:data_type` and `:constraint`.
  """
  @type pg_error :: Wire.pg_error()

  @typedoc """
  Why a call failed: the server's error, `:pool_busy` (the queue is full), `:timeout`,
  `{:disconnected, reason}` (the connection died during the call), `:rollback` (COMMIT of a
  transaction in which a statement failed), `:noproc` (no such pool).
  """
  @type error :: pg_error | :pool_busy | :timeout | :rollback | :noproc | term

  defp schema do
    string = {:custom, &is_binary/1, "a string"}
    name = {:custom, &(is_atom(&1) and &1 not in [nil, true, false]), "an atom (not nil)"}

    [
      name: {name, :required},
      host: {string, "127.0.0.1"},
      port: {{:custom, &(is_integer(&1) and &1 in 1..65_535), "a port number (1..65535)"}, 5432},
      database: {string, :required},
      user: {string, :required},
      password: {string, ""},
      size: {:pos_integer, 4},
      queue: {:non_neg_integer, 1000},
      timeout: {:pos_integer, 5000}
    ]
  end

  @doc """
  Starts a pool (see the options above) under the calling process. Raises `ArgumentError` on
  an invalid option. The connections are opened in the background: the pool starts even when
  the server cannot be reached, and callers wait for a connection as for a busy pool.
  """
  @spec start_link(keyword) :: Supervisor.on_start()
  def start_link(opts) do
    o = Options.validate!(opts, schema(), inspect(__MODULE__))
    # SCRAM-SHA-256 authentication (p1_pgsql's `scram`) needs stringprep's NIF, which its
    # application loads. (Without it, a SCRAM login fails, with a reason saying so.)
    _ = Application.ensure_all_started(:stringprep)

    connections = for i <- 0..(o.size - 1), do: {Connection, {o, i}}

    children = [
      {Pool, o},
      %{
        id: :connections,
        type: :supervisor,
        start: {Supervisor, :start_link, [connections, [strategy: :one_for_one]]}
      }
    ]

    # :rest_for_one: the connections announce themselves to the checkout process, so a new
    # one (after a crash) must see new connections announce themselves again.
    Supervisor.start_link(children, strategy: :rest_for_one)
  end

  @doc false
  @spec child_spec(keyword) :: Supervisor.child_spec()
  def child_spec(opts),
    do:
      Overworld.Options.supervisor_spec(__MODULE__, opts, {__MODULE__, Keyword.get(opts, :name)})

  @doc """
  Runs a statement, with `params` for its `$1`, `$2`, ... placeholders.

  `conn` is a pool (a connection is checked out for the statement) or the connection of a
  `transaction/2`. Raises `ArgumentError` on a parameter of an unsupported type.

      {:ok, %{rows: [[3]]}} = Overworld.Postgres.query(MyApp.DB, "SELECT $1::int + 1", [2])
      {:error, %{code: "42601"}} = Overworld.Postgres.query(MyApp.DB, "SELEC 1")
  """
  @spec query(conn, binary, [term]) :: {:ok, result} | {:error, error}
  def query(conn, sql, params \\ [])

  def query(%Conn{pid: pg, timeout: timeout}, sql, params)
      when is_binary(sql) and is_list(params) do
    Wire.run(pg, sql, Wire.encode_params(params), timeout)
  end

  def query(pool, sql, params) when is_binary(sql) and is_list(params) do
    params = Wire.encode_params(params)

    with {:ok, {pg, timeout, tag}} <- Pool.checkout(pool) do
      try do
        Wire.run(pg, sql, params, timeout)
      after
        Pool.checkin(pool, tag)
      end
    end
  end

  @doc """
  Runs `fun` in a transaction, on one connection, which `fun` receives.

  The transaction is committed when `fun` returns `{:ok, value}` (the answer is then
  `{:ok, value}`, or `{:error, :rollback}` if a statement of the transaction failed, or the
  error of COMMIT), and rolled back when it returns `{:error, reason}` (the answer) or raises,
  throws or exits (which goes on after the rollback). Any other return value is rolled back
  and raises `ArgumentError`.

  Use the connection `fun` receives: a query on the pool inside `fun` runs outside the
  transaction, on another connection (and waits for one when the pool has no other).
  """
  @spec transaction(atom | pid, (Conn.t() -> {:ok, term} | {:error, term})) ::
          {:ok, term} | {:error, error}
  def transaction(pool, fun) when (is_atom(pool) or is_pid(pool)) and is_function(fun, 1) do
    with {:ok, {pg, timeout, tag}} <- Pool.checkout(pool) do
      conn = %Conn{pid: pg, timeout: timeout}

      case Wire.simple(pg, "BEGIN", timeout) do
        :ok -> run_transaction(pool, tag, conn, fun)
        {:error, _} = error -> give_back(pool, tag, :reset, error)
      end
    end
  end

  # Every way out gives the connection back: `:ok` when the transaction is known to be over,
  # `:reset` (its owner rolls back, or replaces it) when not.
  defp run_transaction(pool, tag, conn, fun) do
    fun.(conn)
  catch
    kind, reason ->
      Pool.checkin(pool, tag, rollback(conn))
      :erlang.raise(kind, reason, __STACKTRACE__)
  else
    {:ok, _} = ok ->
      case Wire.simple(conn.pid, "COMMIT", conn.timeout) do
        :ok -> give_back(pool, tag, :ok, ok)
        # (COMMIT of a transaction in which a statement failed rolls back.)
        {:error, :rollback} = error -> give_back(pool, tag, :ok, error)
        {:error, _} = error -> give_back(pool, tag, :reset, error)
      end

    {:error, _} = error ->
      give_back(pool, tag, rollback(conn), error)

    other ->
      Pool.checkin(pool, tag, rollback(conn))

      raise ArgumentError,
            "expected the function of Overworld.Postgres.transaction/2 to return " <>
              "{:ok, value} or {:error, reason}, got: #{inspect(other)}"
  end

  defp rollback(conn) do
    case Wire.simple(conn.pid, "ROLLBACK", conn.timeout) do
      :ok -> :ok
      {:error, _} -> :reset
    end
  end

  defp give_back(pool, tag, status, result) do
    Pool.checkin(pool, tag, status)
    result
  end

  @doc """
  Counts of a pool's connections: `:size` (configured), `:connected`, `:idle`, `:busy` (lent)
  and `:waiting` (callers waiting for one).
  """
  @spec info(atom | pid) :: %{
          size: pos_integer,
          connected: non_neg_integer,
          idle: non_neg_integer,
          busy: non_neg_integer,
          waiting: non_neg_integer
        }
  def info(pool), do: Pool.info(pool)
end

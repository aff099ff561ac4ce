defmodule Overworld.PostgresTest do
  # Against a real PostgreSQL server (Overworld.Bench.PostgresServer), started once for the module.
  use ExUnit.Case, async: true

  alias Overworld.Postgres
  alias Overworld.Bench.PostgresServer, as: Server

  setup_all do
    server = Server.start!()
    on_exit(fn -> Server.stop(server) end)
    %{server: server}
  end

  # A pool named after the test, stopped with it.
  defp start_pool(ctx, opts \\ []) do
    s = ctx.server

    base = [
      name: ctx.test,
      host: s.host,
      port: s.port,
      database: s.database,
      user: s.user,
      password: s.password
    ]

    sup = start_supervised!({Postgres, Keyword.merge(base, opts)})
    {ctx.test, sup}
  end

  defp table, do: "t#{System.unique_integer([:positive])}"

  defp backend_pid(conn) do
    {:ok, %{rows: [[pid]]}} = Postgres.query(conn, "SELECT pg_backend_pid()")
    pid
  end

  # A task that holds a connection of `pool` until it is sent :release.
  defp hold(pool) do
    test = self()

    task =
      Task.async(fn ->
        Postgres.transaction(pool, fn _conn ->
          send(test, {:holding, self()})
          receive do: (:release -> {:ok, :held})
        end)
      end)

    assert_receive {:holding, pid}, 5_000
    assert pid == task.pid
    task
  end

  defp release(task) do
    send(task.pid, :release)
    assert {:ok, :held} = Task.await(task)
  end

  defp wait_until(fun, deadline \\ nil) do
    deadline = deadline || System.monotonic_time(:millisecond) + 3_000

    cond do
      fun.() -> :ok
      System.monotonic_time(:millisecond) > deadline -> flunk("condition never met")
      true -> Process.sleep(10) && wait_until(fun, deadline)
    end
  end

  test "connects and answers a simple query", ctx do
    {pool, _} = start_pool(ctx)

    assert {:ok, %{columns: ["one", "word"], rows: [[1, "two"]], count: 1}} =
             Postgres.query(pool, "SELECT 1 AS one, 'two' AS word")

    assert {:ok, %{rows: [[1], [2], [3]], count: 3}} =
             Postgres.query(pool, "SELECT * FROM generate_series(1, 3)")
  end

  test "parameters of several types, NULL included, travel apart from the SQL", ctx do
    {pool, _} = start_pool(ctx)
    t = table()

    {:ok, _} =
      Postgres.query(
        pool,
        "CREATE TABLE #{t} (id int8, name text, score float8, active bool, born date, " <>
          "seen timestamptz, data bytea, cost numeric(10, 2), note text)"
      )

    # A value that would end the statement and drop the table, were it spliced into the SQL.
    evil = "Robert'); DROP TABLE #{t}; -- \"double\" 'single' \\ é ✓ 🐉 “q”"
    seen = ~U[2024-05-01 12:30:45.123456Z]

    params = [
      1_099_511_627_776,
      evil,
      2.5,
      true,
      ~D[1999-12-31],
      seen,
      {:binary, <<0, 1, 255>>},
      "12.5",
      nil
    ]

    assert {:ok, %{command: "INSERT", count: 1, rows: []}} =
             Postgres.query(
               pool,
               "INSERT INTO #{t} VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
               params
             )

    assert {:ok, %{columns: columns, rows: [row]}} =
             Postgres.query(pool, "SELECT * FROM #{t} WHERE name = $1", [evil])

    assert columns == ~w(id name score active born seen data cost note)

    assert row == [
             1_099_511_627_776,
             evil,
             2.5,
             true,
             ~D[1999-12-31],
             seen,
             <<0, 1, 255>>,
             "12.50",
             nil
           ]

    assert {:ok, %{rows: [[1]]}} = Postgres.query(pool, "SELECT count(*)::int FROM #{t}")

    # (A parameter with no type from its place is text.)
    assert {:ok, %{rows: [[nil, true, "2.20", false, "-7"]]}} =
             Postgres.query(
               pool,
               "SELECT $1::int, $1::int IS NULL, $2::numeric * 2, $3::bool, $4",
               [
                 nil,
                 "1.10",
                 false,
                 -7
               ]
             )

    assert_raise ArgumentError, ~r/unsupported query parameter %\{\}/, fn ->
      Postgres.query(pool, "SELECT $1", [%{}])
    end
  end

  test "values of the common types come back decoded", ctx do
    {pool, _} = start_pool(ctx)

    sql = """
    SELECT 0::numeric, -12.345::numeric, 100000000::numeric, 0.0001::numeric, 'NaN'::numeric,
           'NaN'::float8, '-infinity'::float4, 'infinity'::timestamptz, '2024-01-02'::date,
           '12:34:56.5'::time, '2024-01-02 03:04:05'::timestamp, '{"a": [1]}'::jsonb,
           '00000000-0000-0000-0000-0000000000ff'::uuid, 42::int2, 'x'::char(3), false,
           ARRAY[1, 2]
    """

    assert {:ok, %{rows: [row]}} = Postgres.query(pool, sql)

    assert [
             "0",
             "-12.345",
             "100000000",
             "0.0001",
             "NaN",
             :nan,
             :"-inf",
             :infinity,
             ~D[2024-01-02],
             ~T[12:34:56.500000],
             ~N[2024-01-02 03:04:05.000000],
             ~s({"a": [1]}),
             "00000000-0000-0000-0000-0000000000ff",
             42,
             "x  ",
             false,
             {:_int4, array}
           ] = row

    assert is_binary(array)
  end

  test "a SQL error answers the server's error, and the connection carries on", ctx do
    {pool, _} = start_pool(ctx, size: 1)
    backend = backend_pid(pool)

    assert {:error, %{code: "42601", message: "syntax error at or near \"SELEC\"", position: 1}} =
             Postgres.query(pool, "SELEC 1")

    assert {:error, %{code: "22012", severity: "ERROR"}} = Postgres.query(pool, "SELECT 1 / 0")
    assert {:error, %{code: "42P01"}} = Postgres.query(pool, "SELECT * FROM no_such_table")
    # A parameter of the wrong type for its place is the server's error too.
    assert {:error, %{code: "22P02"}} = Postgres.query(pool, "SELECT $1::int", ["one"])

    t = table()
    {:ok, _} = Postgres.query(pool, "CREATE TABLE #{t} (id int PRIMARY KEY)")
    {:ok, _} = Postgres.query(pool, "INSERT INTO #{t} VALUES (1)")

    pkey = "#{t}_pkey"

    assert {:error, %{code: "23505", constraint: ^pkey, table: ^t}} =
             Postgres.query(pool, "INSERT INTO #{t} VALUES ($1)", [1])

    assert {:ok, %{rows: [[2]]}} = Postgres.query(pool, "SELECT 2")
    assert backend_pid(pool) == backend
  end

  test "a transaction commits on {:ok, _} and rolls back on {:error, _} or a raise", ctx do
    {pool, _} = start_pool(ctx, size: 1)
    # Another pool, to look from another connection.
    {other, _} = start_pool(%{ctx | test: :"#{ctx.test} (other)"}, size: 1)
    t = table()
    {:ok, _} = Postgres.query(pool, "CREATE TABLE #{t} (id int PRIMARY KEY)")
    insert = fn conn, id -> Postgres.query(conn, "INSERT INTO #{t} VALUES ($1)", [id]) end

    assert {:ok, :done} =
             Postgres.transaction(pool, fn conn ->
               {:ok, _} = insert.(conn, 1)
               {:ok, _} = insert.(conn, 2)
               {:ok, :done}
             end)

    assert {:error, :nope} =
             Postgres.transaction(pool, fn conn ->
               {:ok, _} = insert.(conn, 3)
               {:error, :nope}
             end)

    assert_raise RuntimeError, "boom", fn ->
      Postgres.transaction(pool, fn conn ->
        {:ok, _} = insert.(conn, 4)
        raise "boom"
      end)
    end

    # A statement failed, and the function still says {:ok, _}: COMMIT rolls back.
    assert {:error, :rollback} =
             Postgres.transaction(pool, fn conn ->
               {:ok, _} = insert.(conn, 5)
               {:error, %{code: "23505"}} = insert.(conn, 1)
               {:ok, :ignored}
             end)

    assert_raise ArgumentError, ~r/expected the function .* got: :what/, fn ->
      Postgres.transaction(pool, fn conn ->
        {:ok, _} = insert.(conn, 6)
        :what
      end)
    end

    assert {:ok, %{rows: [[1], [2]]}} = Postgres.query(other, "SELECT id FROM #{t} ORDER BY id")
    assert {:ok, %{rows: [[1], [2]]}} = Postgres.query(pool, "SELECT id FROM #{t} ORDER BY id")

    # The pool's connection is back, and outside any transaction.
    assert %{busy: 0, idle: 1} = Postgres.info(pool)

    assert {:ok, %{rows: [[0]]}} =
             Postgres.query(
               other,
               "SELECT count(*)::int FROM pg_stat_activity " <>
                 "WHERE datname = current_database() AND state LIKE 'idle in transaction%'"
             )
  end

  test "no more statements run at once than the pool has connections", ctx do
    {pool, _} = start_pool(ctx, size: 2)
    wait_until(fn -> Postgres.info(pool).idle == 2 end)
    started = System.monotonic_time(:millisecond)

    backends =
      1..6
      |> Enum.map(fn _ ->
        Task.async(fn ->
          {:ok, %{rows: [[backend, _void]]}} =
            Postgres.query(pool, "SELECT pg_backend_pid(), pg_sleep(0.2)")

          backend
        end)
      end)
      |> Task.await_many()

    elapsed = System.monotonic_time(:millisecond) - started
    # Six statements of 200 ms on two connections: three rounds.
    assert elapsed >= 580
    assert elapsed < 1_500
    assert backends |> Enum.uniq() |> length() == 2
  end

  test "a full queue answers :pool_busy at once; a waiter that dies leaves it", ctx do
    {pool, _} = start_pool(ctx, size: 1, queue: 1)
    holder = hold(pool)
    waiter = Task.async(fn -> Postgres.query(pool, "SELECT 2") end)
    wait_until(fn -> Postgres.info(pool).waiting == 1 end)

    {micros, busy} = :timer.tc(fn -> Postgres.query(pool, "SELECT 3") end)
    assert busy == {:error, :pool_busy}
    assert micros < 100_000

    release(holder)
    assert {:ok, %{rows: [[2]]}} = Task.await(waiter)

    # A waiter killed while it waits is no longer counted, and gets no connection.
    holder = hold(pool)
    doomed = spawn(fn -> Postgres.query(pool, "SELECT 4") end)
    wait_until(fn -> Postgres.info(pool).waiting == 1 end)
    Process.exit(doomed, :kill)
    wait_until(fn -> Postgres.info(pool).waiting == 0 end)
    release(holder)
    assert %{busy: 0, idle: 1, waiting: 0} = Postgres.info(pool)
  end

  test "a caller waits for a connection at most :timeout", ctx do
    {pool, _} = start_pool(ctx, size: 1, timeout: 200)
    holder = hold(pool)
    {micros, result} = :timer.tc(fn -> Postgres.query(pool, "SELECT 1") end)
    assert result == {:error, :timeout}
    assert micros >= 190_000
    assert %{waiting: 0} = Postgres.info(pool)
    release(holder)
  end

  test "a statement that runs past :timeout answers :timeout; its connection is replaced", ctx do
    {pool, _} = start_pool(ctx, size: 1, timeout: 300)
    backend = backend_pid(pool)
    assert {:error, :timeout} = Postgres.query(pool, "SELECT pg_sleep(2)")
    # The replacement connects after a backoff (the old one lived under a second): a checkout
    # in the meantime may wait past the 300 ms :timeout on a loaded machine, so a few tries.
    answer =
      Enum.find_value(1..10, fn _ ->
        case Postgres.query(pool, "SELECT 1") do
          {:error, :timeout} -> nil
          other -> other
        end
      end)

    assert {:ok, %{rows: [[1]]}} = answer
    assert backend_pid(pool) != backend
  end

  test "a killed connection, or its owner, is replaced", ctx do
    {pool, sup} = start_pool(ctx, size: 1)
    backend = backend_pid(pool)

    # The connection (the client's process).
    {:ok, pg} = Postgres.transaction(pool, fn conn -> {:ok, conn.pid} end)
    ref = Process.monitor(pg)
    Process.exit(pg, :kill)
    assert_receive {:DOWN, ^ref, _, _, :killed}, 5_000
    assert {:ok, %{rows: [[1]]}} = Postgres.query(pool, "SELECT 1")
    replaced = backend_pid(pool)
    assert replaced != backend

    # Its owner.
    [conns] = for {:connections, pid, :supervisor, _} <- Supervisor.which_children(sup), do: pid
    [{_, owner, :worker, _}] = Supervisor.which_children(conns)
    ref = Process.monitor(owner)
    Process.exit(owner, :kill)
    assert_receive {:DOWN, ^ref, _, _, :killed}, 5_000
    assert {:ok, %{rows: [[1]]}} = Postgres.query(pool, "SELECT 1")
    assert backend_pid(pool) not in [backend, replaced]
    assert %{connected: 1, busy: 0} = Postgres.info(pool)
  end

  test "a caller killed holding a connection gives it back, rolled back", ctx do
    {pool, _} = start_pool(ctx, size: 1)
    t = table()
    {:ok, _} = Postgres.query(pool, "CREATE TABLE #{t} (id int)")
    test = self()

    holder =
      spawn(fn ->
        Postgres.transaction(pool, fn conn ->
          {:ok, _} = Postgres.query(conn, "INSERT INTO #{t} VALUES (1)")
          send(test, {:inserted, backend_pid(conn)})
          Process.sleep(:infinity)
        end)
      end)

    assert_receive {:inserted, backend}, 5_000
    Process.exit(holder, :kill)

    # The same connection (not a new one), and the insert was rolled back.
    assert {:ok, %{rows: [[0]]}} = Postgres.query(pool, "SELECT count(*)::int FROM #{t}")
    assert backend_pid(pool) == backend
    assert %{connected: 1, busy: 0, idle: 1} = Postgres.info(pool)
  end

  test "a pool whose server cannot be reached answers :timeout", ctx do
    {:ok, socket} = :gen_tcp.listen(0, ip: {127, 0, 0, 1})
    {:ok, port} = :inet.port(socket)
    :gen_tcp.close(socket)
    {pool, _} = start_pool(ctx, port: port, size: 1, timeout: 200)
    assert {:error, :timeout} = Postgres.query(pool, "SELECT 1")
    assert %{connected: 0} = Postgres.info(pool)
  end

  test "invalid options raise ArgumentError naming the key" do
    base = [name: :pg_invalid, database: "d", user: "u"]

    for {opts, key} <- [
          {Keyword.put(base, :size, 0), ":size"},
          {Keyword.put(base, :queue, -1), ":queue"},
          {Keyword.put(base, :timeout, :infinity), ":timeout"},
          {Keyword.put(base, :port, "5432"), ":port"},
          {Keyword.put(base, :host, ~c"localhost"), ":host"},
          {Keyword.put(base, :password, nil), ":password"},
          {Keyword.put(base, :name, "pool"), ":name"},
          {Keyword.delete(base, :name), ":name"},
          {Keyword.delete(base, :database), ":database"}
        ] do
      error = assert_raise ArgumentError, fn -> Postgres.start_link(opts) end
      assert error.message =~ key
    end

    error = assert_raise ArgumentError, fn -> Postgres.start_link([sise: 2] ++ base) end
    assert error.message =~ "did you mean :size?"
  end
end

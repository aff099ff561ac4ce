defmodule Overworld.Postgres.Connection do
  @moduledoc false
  # The owner of one connection of a pool. It opens the connection (a `pgsql_proto` process,
  # linked to it), tells the pool it is ready, and opens a new one when it dies: at once after
  # a connection that lived a second or more, else with a doubling backoff (100 ms to 5 s),
  # as while opening fails. It never runs a query of a caller: callers use the connection directly, and the
  # owner only steps in between two leases, when the pool sends the connection back for a
  # reset (its caller died holding it): a ROLLBACK, after which it is ready again, or a new
  # connection if that fails.
  #
  # It is also the group leader of the connection's processes, to answer the io request that
  # `pgsql_socket` makes when the server closes the socket (Overworld.Postgres.Wire).

  use GenServer
  require Logger
  alias Overworld.Postgres.{Pool, Wire}

  @backoff_min 100
  @backoff_max 5_000
  # A connection that lived this long (ms) worked: the next one is opened at once.
  @lived 1_000

  @spec child_spec({map, non_neg_integer}) :: Supervisor.child_spec()
  def child_spec({o, index}),
    do: %{id: {__MODULE__, index}, start: {__MODULE__, :start_link, [o]}}

  @spec start_link(map) :: GenServer.on_start()
  def start_link(o), do: GenServer.start_link(__MODULE__, o)

  @impl true
  def init(o) do
    # The connection is linked: it dies with its owner, and its owner hears of its death.
    # (An exit from the supervisor is handled by gen_server itself.)
    Process.flag(:trap_exit, true)
    {:ok, %{o: o, pg: nil, delay: nil, since: nil}, {:continue, :connect}}
  end

  @impl true
  def handle_continue(:connect, s), do: connect(s)

  @impl true
  def handle_info(:connect, %{pg: nil} = s), do: connect(s)

  def handle_info({:EXIT, pg, reason}, %{pg: pg} = s) do
    Logger.warning(
      "#{describe(s.o)}: connection closed (#{inspect(reason, limit: 8)}); reconnecting"
    )

    if System.monotonic_time(:millisecond) - s.since >= @lived do
      {:noreply, %{s | pg: nil, delay: nil}, {:continue, :connect}}
    else
      {:noreply, retry(%{s | pg: nil})}
    end
  end

  def handle_info({:reset, pg}, %{pg: pg} = s) do
    case Wire.simple(pg, "ROLLBACK", s.o.timeout) do
      :ok ->
        Pool.ready(s.o.name, pg)
        {:noreply, s}

      {:error, reason} ->
        Logger.warning(
          "#{describe(s.o)}: a connection could not be reset (#{inspect(reason, limit: 8)}); " <>
            "reconnecting"
        )

        Process.unlink(pg)
        Wire.close(pg)
        {:noreply, %{s | pg: nil}, {:continue, :connect}}
    end
  end

  def handle_info({:io_request, from, reply_as, _request}, s) do
    send(from, {:io_reply, reply_as, :ok})
    {:noreply, s}
  end

  # Exits of connections already replaced, notices sent while connecting, stale resets.
  def handle_info(_message, s), do: {:noreply, s}

  @impl true
  def terminate(_reason, %{pg: pg}) do
    if pg, do: Wire.close(pg)
    :ok
  end

  defp connect(s) do
    case Wire.connect(s.o) do
      {:ok, pg} ->
        # (If it died already, the link delivers {:EXIT, pg, :noproc}.)
        Process.link(pg)
        Pool.ready(s.o.name, pg)
        {:noreply, %{s | pg: pg, since: System.monotonic_time(:millisecond)}}

      {:error, reason} ->
        s = retry(s)

        Logger.warning(
          "#{describe(s.o)}: cannot connect (#{inspect(reason, limit: 8)}); " <>
            "retrying in #{s.delay} ms"
        )

        {:noreply, s}
    end
  end

  # The next attempt after a doubled delay (with up to a quarter more, at random).
  defp retry(s) do
    delay = if s.delay, do: min(s.delay * 2, @backoff_max), else: @backoff_min
    Process.send_after(self(), :connect, delay + :rand.uniform(div(delay, 4) + 1) - 1)
    %{s | delay: delay}
  end

  defp describe(o),
    do: "Overworld.Postgres #{inspect(o.name)} (#{o.user}@#{o.host}:#{o.port}/#{o.database})"
end

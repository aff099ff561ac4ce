defmodule Overworld.Transport.Listener do
  @moduledoc false
  # Owns a server's listening socket and its acceptors. Each acceptor hands every accepted
  # socket to a new connection process under its own partition of the server's connection
  # supervisor, or, when the server holds `max_connections` already, answers 503 and closes.
  # Out of file descriptors (emfile/enfile), an acceptor logs (once per second per server)
  # and backs off; nothing crashes.
  use GenServer
  require Logger

  alias Overworld.Server
  alias Overworld.Transport.{Conn, HTTP}

  @backoff 100

  def start_link({name, port}),
    do: GenServer.start_link(__MODULE__, {name, port}, name: via(name))

  defp via(name), do: Overworld.Names.via(Overworld.Names.listener(name))

  @spec port(atom) :: :inet.port_number()
  def port(name), do: GenServer.call(via(name), :port)

  @impl true
  def init({name, port}) do
    cfg = Server.config(name)

    opts = [
      :binary,
      packet: :raw,
      active: false,
      reuseaddr: true,
      nodelay: true,
      backlog: 4096,
      ip: cfg.ip,
      send_timeout: 5_000,
      send_timeout_close: true
    ]

    case :gen_tcp.listen(port, opts) do
      {:ok, lsock} ->
        {:ok, actual} = :inet.port(lsock)

        for _ <- 1..cfg.acceptors,
            do: :proc_lib.spawn_link(fn -> accept(lsock, name) end)

        Logger.info(
          "Overworld.Server #{inspect(name)} listening on #{:inet.ntoa(cfg.ip)}:#{actual} " <>
            "(max #{cfg.max_connections} connections)"
        )

        {:ok, %{lsock: lsock, port: actual}}

      {:error, reason} ->
        {:stop, {:listen, port, reason}}
    end
  end

  @impl true
  def handle_call(:port, _from, st), do: {:reply, st.port, st}

  defp accept(lsock, name) do
    case :gen_tcp.accept(lsock) do
      {:ok, sock} ->
        handoff(sock, name)
        accept(lsock, name)

      {:error, :closed} ->
        :ok

      {:error, reason} when reason in [:emfile, :enfile, :system_limit] ->
        limited(name, "out of file descriptors (#{reason}): backing off #{@backoff} ms")
        Process.sleep(@backoff)
        accept(lsock, name)

      {:error, _transient} ->
        accept(lsock, name)
    end
  end

  defp handoff(sock, name) do
    cfg = Server.config(name)
    c = cfg.counters
    conns = Server.counter(:connections)
    :counters.add(c, Server.counter(:accepted), 1)
    # Taken before the check, so that acceptors racing each other never exceed the limit.
    :counters.add(c, conns, 1)

    if :counters.get(c, conns) > cfg.max_connections do
      :counters.sub(c, conns, 1)
      refuse(sock, name, cfg, "connection limit (#{cfg.max_connections}) reached")
    else
      sup = {:via, PartitionSupervisor, {Server.connections(name), self()}}

      case DynamicSupervisor.start_child(sup, {Conn, name}) do
        {:ok, pid} ->
          case :gen_tcp.controlling_process(sock, pid) do
            :ok ->
              send(pid, {:go, sock})

            {:error, _} ->
              # The connection process never got the socket: it is not counted any more.
              Process.exit(pid, :kill)
              :counters.sub(c, conns, 1)
              :gen_tcp.close(sock)
          end

        {:error, reason} ->
          :counters.sub(c, conns, 1)
          refuse(sock, name, cfg, "cannot start a connection process: #{inspect(reason)}")
      end
    end
  end

  defp refuse(sock, name, cfg, why) do
    :counters.add(cfg.counters, Server.counter(:refused), 1)
    limited(name, why <> ": refusing connections with 503")
    body = HTTP.error_body("unavailable", why)
    :gen_tcp.send(sock, HTTP.response(503, [{"retry-after", "5"}], body, false))
    :gen_tcp.close(sock)
  end

  # One log line per second per server.
  defp limited(name, message) do
    now = System.monotonic_time(:second)
    c = Server.config(name).counters
    i = Server.counter(:warned_at)

    if :counters.get(c, i) != now do
      :counters.put(c, i, now)
      Logger.warning("Overworld.Server #{inspect(name)}: #{message}")
    end
  end
end

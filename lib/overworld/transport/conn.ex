defmodule Overworld.Transport.Conn do
  @moduledoc false
  # One process per accepted connection (temporary, under the server's partitioned
  # supervisor): HTTP requests one after the other (keep-alive), answered by
  # `Overworld.Web`; `GET /ws` turns the process into the player's session
  # (`Overworld.Session.upgrade/3`). A malformed request gets its status and a log line, and
  # the connection closes.
  require Logger

  alias Overworld.Server
  alias Overworld.Transport.HTTP

  @max_body 65_536

  def child_spec(name),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [name]}, restart: :temporary}

  def start_link(name), do: {:ok, :proc_lib.spawn_link(__MODULE__, :init, [name])}

  @doc false
  def init(name) do
    # High priority until the connection is a live session (`Overworld.Session.Hello` lowers
    # it): device authentication, the upgrade and HELLO answer within a second however busy
    # the node's sessions are. Their work is small and bounded (one request at a time, limits).
    Process.flag(:priority, :high)

    receive do
      {:go, sock} -> serve(sock, Server.config(name), address(sock))
    after
      5_000 -> exit(:normal)
    end
  end

  defp serve(sock, cfg, address) do
    case HTTP.read(sock, cfg.request_timeout, @max_body) do
      {:ok, %{path: "/ws"} = req} ->
        # Returns only when the upgrade was refused (the response is sent).
        Overworld.Session.upgrade(sock, cfg, req)
        done(sock, cfg)

      {:ok, req} ->
        {status, headers, body} = answer(%{req | peer: address}, cfg)
        keep? = HTTP.keep_alive?(req)

        case :gen_tcp.send(sock, HTTP.response(status, headers, body, keep?)) do
          :ok when keep? -> serve(sock, cfg, address)
          _ -> done(sock, cfg)
        end

      {:error, :closed} ->
        done(sock, cfg)

      {:error, 408, _} ->
        # A connection idle between requests is closed quietly.
        done(sock, cfg)

      {:error, status, message} ->
        Logger.info("http: #{status} #{message} (#{peer(sock)})")
        body = HTTP.error_body("bad_request", message)
        :gen_tcp.send(sock, HTTP.response(status, [json()], body, false))
        done(sock, cfg)
    end
  end

  # A route that fails (a game's RPC that exits, a value that is no JSON) answers 500 and
  # logs: the connection, and its count, carry on.
  defp answer(req, cfg) do
    # The game's code (RPC), storage, listings, the operator API and metrics scrapes yield to
    # zones and sessions: the connection runs them at normal priority (its own high priority
    # is for the upgrade, HELLO and authentication, small and bounded).
    if req.path == "/metrics" or
         String.starts_with?(req.path, [
           "/api/v1/rpc/",
           "/api/v1/storage/",
           "/api/v1/matches/",
           "/api/v1/operator/"
         ]) do
      Process.flag(:priority, :normal)

      try do
        Overworld.Web.handle(req, cfg)
      after
        Process.flag(:priority, :high)
      end
    else
      Overworld.Web.handle(req, cfg)
    end
  catch
    kind, reason ->
      Logger.error(
        "http: #{req.method} #{String.slice(req.path, 0, 100)} failed: " <>
          Exception.format(kind, reason, __STACKTRACE__)
      )

      {500, [json()], HTTP.error_body("internal", "the request failed")}
  end

  @doc false
  def done(sock, cfg) do
    :gen_tcp.close(sock)
    :counters.sub(cfg.counters, Server.counter(:connections), 1)
    :ok
  end

  @doc false
  def json, do: {"content-type", "application/json"}

  # The client's IP address (the rate limits of the password routes count per address).
  defp address(sock) do
    case :inet.peername(sock) do
      {:ok, {ip, _port}} -> ip
      _ -> nil
    end
  end

  @doc false
  def peer(sock) do
    case :inet.peername(sock) do
      {:ok, {ip, port}} -> "#{:inet.ntoa(ip)}:#{port}"
      _ -> "unknown peer"
    end
  end
end

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
        {status, headers, body} = Overworld.Web.handle(%{req | peer: address}, cfg)
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

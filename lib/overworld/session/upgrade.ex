defmodule Overworld.Session.Upgrade do
  @moduledoc false
  # The HTTP side of a session (lifecycle step 1 in `Overworld.Session`): `GET /ws` checked
  # (RFC 6455 through `Overworld.Transport.WebSocket`), a token in the URL verified (401), the
  # zone name resolved (404), `101` sent, the socket set up for the session (bounded buffers),
  # and the connection process turned into the session (`:gen_server.enter_loop/3`). A
  # refusal is an HTTP error answer with a JSON body; the connection goes on with HTTP.

  require Logger

  alias Overworld.{Server, Session}
  alias Overworld.Transport.{Conn, HTTP, WebSocket}

  @doc """
  Upgrades the connection and runs the session (never returns), or answers the refusal and
  returns :ok.
  """
  @spec upgrade(:gen_tcp.socket(), Server.Config.t(), HTTP.Request.t()) :: :ok
  def upgrade(sock, cfg, req) do
    with {:ok, accept} <- ws_upgrade(req),
         {:ok, query} <- query(req.query),
         {:ok, token_user} <- url_token(cfg, query),
         {:ok, zone} <- zone(cfg, query),
         :ok <- :gen_tcp.send(sock, WebSocket.upgrade_response(accept)) do
      :ok = :inet.setopts(sock, packet: :raw, active: Session.active(), exit_on_close: true)
      :ok = Session.bound_outbound(sock, cfg.max_outbound)

      :counters.add(cfg.counters, Server.counter(:sessions), 1)
      now = System.monotonic_time(:millisecond)
      :erlang.start_timer(cfg.hello_timeout, self(), :hello)
      :erlang.start_timer(cfg.idle_timeout, self(), :idle)

      st = %Session{
        sock: sock,
        cfg: cfg,
        max_outbound: cfg.max_outbound,
        zone: zone,
        token_user: token_user,
        ws: WebSocket.new(cfg.max_message_size),
        last_in: now,
        bucket: cfg.input_rate * 1000,
        refilled: now
      }

      # Exits are trapped so that `terminate/2` runs when the server shuts down (1001) or
      # the session crashes (1011): the counters drop and the player leaves the zone.
      Process.flag(:trap_exit, true)
      :gen_server.enter_loop(Session, [hibernate_after: 2_000], st)
    else
      {:error, status, headers, message} ->
        Logger.info("ws: upgrade refused with #{status}: #{message} (#{Conn.peer(sock)})")
        body = HTTP.error_body(error_code(status), message)
        :gen_tcp.send(sock, HTTP.response(status, [Conn.json() | headers], body, false))
        :ok

      {:error, _closed} ->
        :ok
    end
  end

  # The error codes of docs/protocol.md ("Transport"); the upgrade's own refusals (400, 426)
  # are "bad_upgrade".
  defp error_code(401), do: "invalid_token"
  defp error_code(404), do: "not_found"
  defp error_code(405), do: "method_not_allowed"
  defp error_code(_), do: "bad_upgrade"

  defp ws_upgrade(req) do
    case WebSocket.upgrade(req) do
      {:ok, accept} -> {:ok, accept}
      {:error, status, headers, message} -> {:error, status, headers, message}
    end
  end

  defp query(q) do
    {:ok, URI.decode_query(q)}
  rescue
    _ -> {:error, 400, [], "malformed query string"}
  end

  defp url_token(cfg, %{"token" => token}) when token != "" do
    case Overworld.Accounts.verify_token(cfg.keys, token, :session) do
      {:ok, claims} -> {:ok, claims}
      {:error, why} -> {:error, 401, [], "invalid token: #{why}"}
    end
  end

  defp url_token(_cfg, _query), do: {:ok, nil}

  defp zone(_cfg, %{"zone" => ""}), do: {:ok, nil}

  defp zone(cfg, %{"zone" => name}) do
    case cfg.zones do
      %{^name => id} -> {:ok, id}
      _ -> {:error, 404, [], "unknown zone"}
    end
  end

  defp zone(cfg, _query), do: {:ok, cfg.default_zone && Map.fetch!(cfg.zones, cfg.default_zone)}
end

defmodule Overworld.Web do
  @moduledoc """
  The HTTP routes of `Overworld.Server` (docs/protocol.md, "Transport"):

  | route | answer |
  | --- | --- |
  | `GET /` | the status page (HTML and a little JS polling `/api/v1/status` every second) |
  | `GET /console`, `/console/*` | the visualizer and operator console (`Overworld.Web.Static`: clients/console's build in priv/static/console) |
  | `GET /api/v1/status` | zones (players, entities, tick p50/p99; a world's zone by zone, with their crossings), sessions, bytes sent |
  | `GET /healthz` | `{"status":"ok"}` |
  | `GET /metrics` | Prometheus metrics (`Overworld.Web.Metrics`, docs/metrics.md; the server's `:metrics` options) |
  | `POST /api/v1/auth/device` | `{"device_id"}` → tokens (the account is made on first use) |
  | `POST /api/v1/auth/refresh` | `{"refresh_token"}` → new tokens |
  | `POST /api/v1/storage/write` | `{"objects": [...]}` → `{"acks": [...]}` (session token in `authorization: Bearer`) |
  | `POST /api/v1/storage/read` | `{"object_ids": [...]}` → `{"objects": [...]}` |
  | `POST /api/v1/storage/delete` | `{"object_ids": [...]}` → `{}` |
  | `GET /api/v1/storage/list?collection=C` | `{"objects": [...], "cursor": ...}` (`user_id`, `limit`, `cursor` optional) |
  | `POST /api/v1/auth/email/register` | `{"email", "password"}` → 202 (a code is mailed; 200 with tokens without confirmation) |
  | `POST /api/v1/auth/email/confirm` | `{"code"}` → tokens |
  | `POST /api/v1/auth/email/login` | `{"email", "password"}` → tokens |
  | `POST /api/v1/auth/custom` | what the server's `Overworld.Accounts.CustomAuth` checks → tokens |
  | `POST /api/v1/auth/logout` | revokes the login of the session token (`authorization: Bearer`) |
  | `GET /api/v1/account` | the account: id, devices, email, custom id |
  | `POST /api/v1/rpc/:id` | calls an RPC function (`Overworld.RPC`) with the JSON body → `{"payload": ...}` |
  | `POST /api/v1/matches/list` | `{"query", "min_size", "max_size", "limit"}` → `{"matches": [...]}` (`Overworld.Match.list/1`) |
  | `POST /api/v1/account/link/{device,custom,email}`, `.../unlink/...` | links and unlinks identities |
  | `/api/v1/operator/...` | the operator API (`Overworld.Web.Operator`, docs/operator-api.md) |

  The storage routes (`Overworld.Storage`, docs/protocol.md "Storage") answer 401 without a
  valid session token, 403/409/413 for a permission, a version condition or a size. The
  account routes are `Overworld.Web.Accounts`' (docs/protocol.md "Accounts"). Every token is
  checked against its account on every use (`Overworld.Accounts.verify_token/3`): a token of
  a logged-out login or a disabled account answers 401 `invalid_token` (`revoked`,
  `disabled`).

  Unknown paths answer 404, a known path with another method 405 (with `Allow`), a body that is
  not a JSON object 400; every error body is `{"error": code, "message": text}`. The API routes
  and `/healthz` allow any origin (CORS, with `OPTIONS` preflights answered 204), so game pages
  served from elsewhere can authenticate.
  """
  require Logger

  alias Overworld.Auth.Token
  alias Overworld.Server.Config

  @type response :: {pos_integer, [{binary, iodata}], iodata}

  @routes Map.merge(Overworld.Web.Accounts.routes(), %{
            "/" => "GET",
            "/healthz" => "GET",
            "/metrics" => "GET",
            "/api/v1/status" => "GET",
            "/api/v1/auth/device" => "POST",
            "/api/v1/auth/refresh" => "POST",
            "/api/v1/storage/write" => "POST",
            "/api/v1/storage/read" => "POST",
            "/api/v1/storage/delete" => "POST",
            "/api/v1/storage/list" => "GET",
            "/api/v1/matches/list" => "POST"
          })

  @doc false
  @spec handle(Overworld.Transport.HTTP.Request.t(), Config.t()) :: response
  def handle(%{method: method, path: path} = req, cfg) do
    # (RPC ids are part of their path: /api/v1/rpc/:id; the operator API's refs and user ids
    # part of theirs; the console's files are under /console.)
    routes =
      cond do
        String.starts_with?(path, "/api/v1/rpc/") -> %{path => "POST"}
        String.starts_with?(path, "/api/v1/operator/") -> Overworld.Web.Operator.routes(path)
        Overworld.Web.Static.path?(path) -> %{path => "GET"}
        true -> @routes
      end

    response =
      case routes do
        %{^path => ^method} ->
          route(method, path, req, cfg)

        %{^path => allowed} when method == "OPTIONS" ->
          # A browser's CORS preflight (a game page served from another origin).
          {204,
           [
             {"access-control-allow-methods", allowed <> ", OPTIONS"},
             {"access-control-allow-headers", "content-type, authorization"},
             {"access-control-max-age", "600"}
           ], ""}

        %{^path => allowed} ->
          error(405, "method_not_allowed", "use #{allowed}", [{"allow", allowed}])

        _ ->
          error(404, "not_found", "no route for #{method} #{printable(path, 100)}")
      end

    refused(method, path, response)
    cors(path, response)
  end

  # A request refused for what it was (4xx): one line, with the error's code.
  defp refused(method, path, {status, _headers, body}) when status in 400..499 do
    code =
      case decode_json(IO.iodata_to_binary(body)) do
        {:ok, %{"error" => c}} -> c
        _ -> ""
      end

    Logger.info("http: #{status} #{code} for #{method} #{printable(path, 100)}")
  end

  defp refused(_method, _path, _response), do: :ok

  # The API may be called from game pages of any origin: tokens travel in bodies and
  # messages, never in cookies.
  defp cors(path, {status, headers, body} = response) do
    if path == "/healthz" or String.starts_with?(path, "/api/"),
      do:
        {status,
         [
           {"access-control-allow-origin", "*"},
           # (So that a page of another origin reads how long to wait after a 429.)
           {"access-control-expose-headers", "retry-after"} | headers
         ], body},
      else: response
  end

  defp route("GET", "/", _req, _cfg),
    do: {200, [{"content-type", "text/html; charset=utf-8"}], Overworld.Web.StatusPage.html()}

  defp route("GET", "/console" <> _ = path, req, _cfg), do: Overworld.Web.Static.serve(path, req)

  defp route("GET", "/healthz", _req, _cfg), do: json(200, %{status: "ok"})
  defp route("GET", "/metrics", req, cfg), do: Overworld.Web.Metrics.handle(req, cfg)
  defp route("GET", "/api/v1/status", _req, cfg), do: json(200, status(cfg))

  defp route(_method, "/api/v1/storage/" <> _ = path, req, cfg),
    do: Overworld.Web.Storage.handle(path, req, cfg)

  defp route(_method, "/api/v1/rpc/" <> _ = path, req, cfg),
    do: Overworld.Web.Backend.handle(path, req, cfg)

  defp route(_method, "/api/v1/matches/" <> _ = path, req, cfg),
    do: Overworld.Web.Backend.handle(path, req, cfg)

  defp route(_method, "/api/v1/operator/" <> _ = path, req, cfg),
    do: Overworld.Web.Operator.handle(path, req, cfg)

  defp route(_method, "/api/v1/auth/device" = path, req, cfg), do: device(path, req, cfg)
  defp route(_method, "/api/v1/auth/refresh" = path, req, cfg), do: refresh(path, req, cfg)

  defp route(_method, path, req, cfg), do: Overworld.Web.Accounts.handle(path, req, cfg)

  defp device(_path, req, cfg) do
    with {:ok, body} <- json_body(req),
         {:ok, device} <- field(body, "device_id") do
      case Overworld.Accounts.authenticate_device(device) do
        {:ok, %{user_id: user, created: created?}} ->
          token_response(cfg, user, nil, created: created?)

        {:error, reason} ->
          Overworld.Web.Accounts.failed(reason)
      end
    end
  end

  # A refresh keeps its login (sid), so that a logout reaches the tokens refreshed from it.
  defp refresh(_path, req, cfg) do
    with {:ok, body} <- json_body(req),
         {:ok, token} <- field(body, "refresh_token") do
      case Overworld.Accounts.verify_token(cfg.keys, token, :refresh) do
        {:ok, %{user_id: user, sid: sid}} ->
          case Overworld.Accounts.get_user(user) do
            {:ok, _} -> token_response(cfg, user, sid, [])
            {:error, :not_found} -> error(401, "invalid_token", "unknown user")
          end

        {:error, why} ->
          Logger.info("http: refused refresh token: #{why}")
          error(401, "invalid_token", Atom.to_string(why))
      end
    end
  end

  @doc false
  # 200 with a new session and refresh token of `user` (of login `sid`, or a new one), and
  # `extra` fields; 403 for a disabled account.
  @spec token_response(Config.t(), binary, binary | nil, keyword) :: response
  def token_response(cfg, user, sid, extra) do
    case Overworld.Accounts.subject(user, sid) do
      {:ok, subject} ->
        [key | _] = cfg.keys
        Overworld.Accounts.LastSeen.touch(user)

        json(
          200,
          Map.merge(Map.new(extra), %{
            user_id: user,
            token: Token.sign(key, :session, subject, cfg.session_ttl),
            expires_in: cfg.session_ttl,
            refresh_token: Token.sign(key, :refresh, subject, cfg.refresh_ttl),
            refresh_expires_in: cfg.refresh_ttl
          })
        )

      {:error, :disabled} ->
        Overworld.Web.Accounts.failed(:disabled)
    end
  end

  @doc false
  # The claims of the request's session token (`authorization: Bearer <token>`), checked
  # against its account, or the 401 response.
  @spec session(Overworld.Transport.HTTP.Request.t(), Config.t()) ::
          {:ok, Token.claims()} | response
  def session(req, cfg) do
    with token when token != nil <- bearer(req),
         {:ok, claims} <- Overworld.Accounts.verify_token(cfg.keys, token, :session) do
      {:ok, claims}
    else
      {:error, why} -> error(401, "invalid_token", Atom.to_string(why))
      nil -> error(401, "invalid_token", "expected authorization: Bearer <session token>")
    end
  end

  @doc false
  # The token of the request's `authorization: Bearer <token>` header (trimmed), or nil.
  @spec bearer(Overworld.Transport.HTTP.Request.t()) :: String.t() | nil
  def bearer(req) do
    case Map.get(req.headers, "authorization", "") do
      "Bearer " <> token -> String.trim(token)
      _ -> nil
    end
  end

  @doc false
  # A request's body as a JSON object, or the error response.
  @spec json_body(Overworld.Transport.HTTP.Request.t()) :: {:ok, map} | response
  def json_body(%{body: body}) do
    case decode_json(body) do
      {:ok, map} when is_map(map) -> {:ok, map}
      {:ok, _} -> error(400, "invalid_body", "expected a JSON object")
      :error -> error(400, "bad_json", "the body is not valid JSON")
    end
  end

  @doc false
  # JSON text decoded (objects as maps; `opts`: more of jiffy's, e.g. `null_term: nil`), or
  # :error; never raises.
  @spec decode_json(iodata, keyword) :: {:ok, term} | :error
  def decode_json(text, opts \\ []) do
    {:ok, :jiffy.decode(text, [:return_maps | opts])}
  catch
    _, _ -> :error
  end

  @doc false
  # A body's string field, or the 400.
  @spec field(map, binary) :: {:ok, binary} | response
  def field(map, name) do
    case map do
      %{^name => v} when is_binary(v) -> {:ok, v}
      _ -> error(400, "invalid_body", "expected a string field #{inspect(name)}")
    end
  end

  @doc false
  # The query string's parameters (none when it is not a valid one).
  @spec query(Overworld.Transport.HTTP.Request.t()) :: %{optional(binary) => binary}
  def query(%{query: q}) when is_binary(q) and q != "" do
    URI.decode_query(q)
  rescue
    _ -> %{}
  end

  def query(_req), do: %{}

  @doc false
  # `Overworld.RateLimit.hit/2`'s answer: :ok, or the 429 with its retry-after.
  @spec limited(:ok | {:error, {:rate_limited, pos_integer}}) :: :ok | response
  def limited(:ok), do: :ok

  def limited({:error, {:rate_limited, seconds}}),
    do: too_many("rate_limited", "too many attempts", seconds)

  @doc false
  # A 429: retry after `seconds` (the header, and said in the message).
  @spec too_many(binary, binary, pos_integer) :: response
  def too_many(code, message, seconds),
    do:
      error(429, code, "#{message}: retry in #{seconds} s", [
        {"retry-after", Integer.to_string(seconds)}
      ])

  @doc false
  @spec status(Config.t()) :: map
  def status(cfg) do
    stats = Overworld.Server.stats(cfg.name)
    pace = Overworld.Server.Pace.stats(cfg)

    zones =
      for {public, id, world} <- served_zones(cfg),
          m = Overworld.Zone.metrics(id),
          m != nil do
        %{
          name: public,
          # A world's zone: the world's name as clients give it, its crossings (entities
          # adopted from and handed to its neighbours, since it started).
          world: world,
          crossings_in: m[:world][:crossings_in],
          crossings_out: m[:world][:crossings_out],
          tick: m.tick,
          entities: m.entities,
          players: m.players,
          # The percentiles rest on tick_samples ticks (since the zone started).
          tick_samples: m.tick_us[:count],
          tick_p50_us: m.tick_us[:p50],
          tick_p99_us: m.tick_us[:p99],
          tick_max_us: m.tick_us[:max],
          # The same over the last 150 to 300 ticks (5 to 10 s at 30 Hz): what happens now.
          recent_tick_samples: m.recent_tick_us[:count],
          recent_tick_p50_us: m.recent_tick_us[:p50],
          recent_tick_p99_us: m.recent_tick_us[:p99],
          recent_tick_max_us: m.recent_tick_us[:max],
          overruns: m.overruns,
          # The raw tick histogram (µs), so a tool can take the percentiles of a time window
          # from two polls (`Overworld.Metrics.Histogram.diff/2`).
          tick_histogram: histogram(id)
        }
      end

    %{
      uptime_ms: System.monotonic_time(:millisecond) - cfg.started_at,
      now_ms: System.monotonic_time(:millisecond),
      zones: zones,
      connections: stats.connections,
      sessions: stats.sessions,
      bytes_out: stats.bytes_out,
      frames_out: stats.frames_out,
      inputs: stats.inputs,
      inputs_dropped: stats.inputs_dropped,
      frames_skipped: stats.frames_skipped,
      frames_late: stats.frames_late,
      # Ticks between two snapshots of each session now (1: every tick; the server lowers the
      # rate for everyone when it cannot keep up: Overworld.Server.Pace), and its changes.
      send_interval: pace.interval,
      send_interval_changes: pace.changes,
      # At the largest interval, late or no room left: new players are refused (4008).
      saturated: pace.saturated,
      refused_joins: stats.refused_joins,
      closed_slow: stats.closed_slow,
      refused: stats.refused,
      memory_bytes: :erlang.memory(:total),
      # Cumulative CPU counters of the node (Overworld.Metrics.CPU.counters/0) and its OS pid.
      cpu: Overworld.Metrics.CPU.counters(),
      os_pid: System.pid()
    }
  end

  # The zones served, {name, zone id, world name or nil}: a world's (`{:world, name}`) one by one, named `public/region`.
  defp served_zones(cfg) do
    Enum.flat_map(cfg.zones, fn
      {public, {:world, name}} ->
        for {_, rid} = z <- Enum.sort(Overworld.World.zones(name)),
            do: {"#{public}/#{region(rid)}", z, public}

      {public, id} ->
        [{public, id, nil}]
    end)
  end

  defp region({c, r}), do: "#{c},#{r}"
  defp region(rid), do: to_string(rid)

  defp histogram(id) do
    case Overworld.Zone.metrics_ref(id) do
      %{ticks_us: h} ->
        h |> Overworld.Metrics.Histogram.snapshot() |> Overworld.Metrics.Histogram.to_map()

      _ ->
        nil
    end
  end

  @doc false
  # A decoded JSON value (nil for null) made ready for jiffy, which writes nil as "nil".
  @spec nulls(term) :: term
  def nulls(nil), do: :null
  def nulls(list) when is_list(list), do: Enum.map(list, &nulls/1)
  def nulls(map) when is_map(map), do: Map.new(map, fn {k, v} -> {k, nulls(v)} end)
  def nulls(other), do: other

  @doc false
  @spec json(pos_integer, map) :: response
  def json(status, map),
    do: {status, [Overworld.Transport.Conn.json()], :jiffy.encode(map)}

  @doc false
  @spec error(pos_integer, binary, binary, list) :: response
  def error(status, code, message, headers \\ []) do
    {status, [Overworld.Transport.Conn.json() | headers],
     Overworld.Transport.HTTP.error_body(code, message)}
  end

  # Paths come from the network: shown only when short and printable.
  @doc false
  # What a client sent, fit to show in a message or a log line: as it is when short (at most
  # `max` bytes) and printable, else "(unprintable)".
  @spec printable(term, pos_integer) :: String.t()
  def printable(text, max \\ 64)

  def printable(text, max) when is_binary(text) do
    if byte_size(text) <= max and String.printable?(text), do: text, else: "(unprintable)"
  end

  def printable(_text, _max), do: "(not a string)"
end

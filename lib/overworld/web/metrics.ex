defmodule Overworld.Web.Metrics do
  @moduledoc """
  `GET /metrics`: the server's, its node's zones' and the node's metrics in the Prometheus
  text exposition format (docs/metrics.md lists every metric; `deploy/prometheus.yml` scrapes
  it and `deploy/grafana/overworld.json` shows it).

  A scrape reads counters, atomics and the registry only: it sends no message, so it never
  reaches a zone's tick path, and it costs no work per entity or per session. It runs in the
  connection's process at normal priority (zones and sessions go first).

  ## Options (the server's `:metrics`, a keyword list)

  * `:enabled` - serve `/metrics` (default true); when false it answers 404 as an unknown
    path does.
  * `:token` - nil (the default: anyone who reaches the port may scrape), or a string of at
    least 16 bytes that a scrape must present as `authorization: Bearer <token>` (compared in
    constant time); a scrape without it answers 401. Prometheus sends it with
    `authorization: {credentials: ...}` in its scrape configuration.
  """

  alias Overworld.Metrics.Prometheus
  alias Overworld.Web

  @doc false
  @spec schema() :: Overworld.Options.schema()
  def schema do
    [
      enabled: {:boolean, true},
      token:
        {{:custom, &(is_nil(&1) or (is_binary(&1) and byte_size(&1) >= 16)),
          "nil or a string of at least 16 bytes"}, nil}
    ]
  end

  @doc false
  # The server's `:metrics` options validated (raises `ArgumentError`), the token kept as its
  # SHA-256 hash (`token_hash`): what a scrape compares (`handle/2`).
  @spec settings!(keyword) :: %{enabled: boolean, token_hash: binary | nil}
  def settings!(opts) do
    o = Overworld.Options.validate!(opts, schema(), "Overworld.Server metrics")
    %{enabled: o.enabled, token_hash: o.token && :crypto.hash(:sha256, o.token)}
  end

  @doc false
  @spec handle(Overworld.Transport.HTTP.Request.t(), Overworld.Server.Config.t()) ::
          Web.response()
  def handle(req, cfg) do
    case cfg.metrics do
      %{enabled: false} ->
        Web.error(404, "not_found", "no route for GET /metrics")

      %{token_hash: nil} ->
        scrape(cfg)

      %{token_hash: hash} ->
        if authorized?(req, hash),
          do: scrape(cfg),
          else:
            Web.error(401, "invalid_token", "expected authorization: Bearer <metrics token>", [
              {"www-authenticate", "Bearer"}
            ])
    end
  end

  @doc false
  # The exposition (a 200 response) of the server `cfg`.
  @spec scrape(Overworld.Server.Config.t()) :: Web.response()
  def scrape(cfg),
    do:
      {200, [{"content-type", Prometheus.content_type()}], Overworld.Metrics.Exporter.scrape(cfg)}

  # The given token hashed: hash_equals/2 compares equal lengths in constant time.
  defp authorized?(req, hash) do
    case Web.bearer(req) do
      nil -> false
      given -> :crypto.hash_equals(:crypto.hash(:sha256, given), hash)
    end
  end
end

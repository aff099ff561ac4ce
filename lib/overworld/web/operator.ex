defmodule Overworld.Web.Operator do
  @moduledoc false
  # The operator API of `Overworld.Web` (docs/operator-api.md), under /api/v1/operator/:
  # login and logout, who am I, the audit log, accounts; the zones and sessions are
  # `Overworld.Web.Operator.Zones`'. Every route but login wants an operator token
  # (`authorization: Bearer`, `Overworld.Operators.verify/2`): without one, or with a player's,
  # 401. A viewer's token reads only: its POSTs (but logout) answer 403. Every action that
  # changes something, failed logins included, is written to the audit log
  # (`Overworld.Operators.Audit`) before its answer.
  require Logger

  alias Overworld.{Accounts, Operators, RateLimit, Web}
  alias Overworld.Operators.Audit

  @prefix "/api/v1/operator/"
  @max_q 256
  @max_results 50

  # Each route: its segments after the prefix (`:_` any non-empty segment) and its method.
  @routes [
    {["login"], "POST"},
    {["logout"], "POST"},
    {["me"], "GET"},
    {["audit"], "GET"},
    {["accounts"], "GET"},
    {["accounts", :_], "GET"},
    {["accounts", :_, "disable"], "POST"},
    {["accounts", :_, "enable"], "POST"},
    {["zones"], "GET"},
    {["zones", "start"], "POST"},
    {["zones", :_, "stop"], "POST"},
    {["zones", :_, "snapshot"], "POST"},
    {["zones", :_, "history"], "GET"},
    {["zones", :_, "sessions"], "GET"},
    {["zones", :_, "entities", :_], "GET"},
    {["zones", :_, "obstacles"], "GET"},
    {["zones", :_, "history", "range"], "GET"},
    {["zones", :_, "history", "state"], "GET"},
    {["zones", :_, "rewind"], "POST"},
    {["sessions", :_, "kick"], "POST"},
    {["sessions", :_, "interest"], "GET"}
  ]

  @doc false
  # The route of an operator path, `%{path => method}`, or `%{}` (404), for `Overworld.Web`'s
  # 404, 405 and OPTIONS answers.
  @spec routes(binary) :: %{optional(binary) => binary}
  def routes(@prefix <> rest = path) do
    segments = String.split(rest, "/")

    case Enum.find(@routes, fn {pattern, _} -> matches?(pattern, segments) end) do
      {_, method} -> %{path => method}
      nil -> %{}
    end
  end

  def routes(_path), do: %{}

  defp matches?(pattern, segments) when length(pattern) == length(segments) do
    Enum.zip(pattern, segments)
    |> Enum.all?(fn
      {:_, s} -> s != "" and byte_size(s) <= 128
      {p, s} -> p == s
    end)
  end

  defp matches?(_pattern, _segments), do: false

  @doc false
  @spec handle(binary, Overworld.Transport.HTTP.Request.t(), Overworld.Server.Config.t()) ::
          Web.response()
  def handle(@prefix <> "login", req, cfg), do: login(req, cfg)

  def handle(@prefix <> rest, req, cfg) do
    with {:ok, op} <- operator(req, cfg),
         :ok <- allowed(op, req.method, rest) do
      route(String.split(rest, "/"), req, cfg, op)
    end
  end

  defp route(["logout"], req, cfg, op) do
    result = Operators.logout(op)
    audit(cfg, req, op.name, "logout", nil, result)
    answer(result, fn -> %{} end)
  end

  defp route(["me"], _req, _cfg, op),
    do: Web.json(200, %{name: op.name, role: op.role, expires_at: op.expires_at})

  defp route(["audit"], req, cfg, _op) do
    with {:ok, limit} <- limit(Web.query(req), 100, 1_000) do
      Web.json(200, %{entries: Audit.read(cfg.operators, limit) |> Web.nulls()})
    end
  end

  defp route(["accounts"], req, _cfg, _op) do
    case Web.query(req) do
      %{"q" => q} when byte_size(q) in 1..@max_q ->
        accounts = for u <- Accounts.Search.find(q, @max_results), a = account(u), do: a
        Web.json(200, %{accounts: accounts})

      %{"q" => q} when byte_size(q) > @max_q ->
        Web.error(400, "invalid_query", "q is at most #{@max_q} bytes")

      _ ->
        Web.error(
          400,
          "invalid_query",
          "expected ?q= a user id (or its start), an email, a device or custom id"
        )
    end
  end

  defp route(["accounts", user], _req, _cfg, _op) do
    case account(user) do
      nil -> not_found("no such account")
      a -> Web.json(200, a)
    end
  end

  defp route(["accounts", user, action], req, cfg, op) when action in ["disable", "enable"] do
    result = if action == "disable", do: Accounts.disable(user), else: Accounts.enable(user)

    audit(cfg, req, op.name, action, user, result)
    answer(result, fn -> account(user) end)
  end

  defp route(segments, req, cfg, op), do: Web.Operator.Zones.handle(segments, req, cfg, op)

  ## Login

  defp login(req, cfg) do
    s = cfg.operators

    with :ok <-
           Web.limited(
             RateLimit.hit({:operator_login, cfg.name, req.peer}, s.login_limit_per_address)
           ),
         {:ok, body} <- Web.json_body(req),
         {:ok, name} <- Web.field(body, "name"),
         {:ok, password} <- Web.field(body, "password") do
      shown = Web.printable(name, 64)

      case Operators.login(cfg, name, password) do
        {:ok, t} ->
          audit(cfg, req, shown, "login", nil, :ok)
          Web.json(200, t)

        {:error, {:busy, _}} = busy ->
          answer(busy, nil)

        {:error, :timeout} = busy ->
          answer(busy, nil)

        {:error, reason} = error ->
          audit(cfg, req, shown, "login", nil, error)
          Logger.info("operator: refused login of #{inspect(shown)}: #{inspect(reason)}")
          answer(error, nil)
      end
    end
  end

  ## Who calls

  defp operator(req, cfg) do
    with token when token != nil <- Web.bearer(req),
         {:ok, op} <- Operators.verify(cfg, token) do
      {:ok, op}
    else
      {:error, why} -> Web.error(401, "invalid_token", Atom.to_string(why))
      _ -> Web.error(401, "invalid_token", "expected authorization: Bearer <operator token>")
    end
  end

  # A viewer reads only (and logs itself out).
  defp allowed(%{role: :operator}, _method, _rest), do: :ok
  defp allowed(_op, "GET", _rest), do: :ok
  defp allowed(_op, _method, "logout"), do: :ok

  defp allowed(_op, _method, _rest),
    do: Web.error(403, "forbidden", "a viewer's token reads only")

  ## Accounts

  # An account as operators see it (nil when there is none).
  defp account(user) do
    case Accounts.account(user) do
      {:ok, a} -> a |> Map.put(:last_seen_at, Accounts.LastSeen.get(user)) |> Web.nulls()
      {:error, :not_found} -> nil
    end
  end

  ## Shared by the operator routes

  @doc false
  # Writes an audit entry of an operator's action on `target` and how it went.
  @spec audit(map, map, String.t() | nil, String.t(), term, term) :: :ok
  def audit(cfg, req, operator, action, target, result) do
    _ =
      Audit.log(cfg.name, %{
        operator: operator,
        action: action,
        target: target && Web.printable(to_string(target), 200),
        result: outcome(result),
        address: req.peer && to_string(:inet.ntoa(req.peer))
      })

    :ok
  end

  defp outcome(:ok), do: "ok"
  defp outcome({:ok, _}), do: "ok"
  defp outcome({:ok, _, _}), do: "ok"
  defp outcome({:error, reason}), do: elem(error_of(reason), 1)
  # (An answer refused already made, with its error code.)
  defp outcome({:refused, code}) when is_binary(code), do: code

  @doc false
  # `?limit=N`: `default` without it, 1..max with it; else the 400.
  @spec limit(map, pos_integer, pos_integer) :: {:ok, pos_integer} | Web.response()
  def limit(params, default, max) do
    case params do
      %{"limit" => text} ->
        case Integer.parse(text) do
          {n, ""} when n in 1..max -> {:ok, n}
          _ -> Web.error(400, "invalid_query", "limit must be an integer in 1..#{max}")
        end

      _ ->
        {:ok, default}
    end
  end

  @doc false
  @spec not_found(binary) :: Web.response()
  def not_found(message), do: Web.error(404, "not_found", message)

  @doc false
  # 200 with `fun.()` (or its result's value) for a success, else the error's answer.
  @spec answer(term, (() -> map) | nil) :: Web.response()
  def answer(:ok, fun), do: Web.json(200, fun.())
  def answer({:ok, _}, fun), do: Web.json(200, fun.())

  def answer({:error, {:busy, seconds}}, _fun),
    do: Web.too_many("busy", "the server is busy hashing passwords", seconds)

  def answer({:error, :timeout}, fun), do: answer({:error, {:busy, 1}}, fun)

  def answer({:error, reason}, _fun) do
    {status, code, message} = error_of(reason)
    if status >= 500, do: Logger.error("operator api: #{inspect(reason)}")
    Web.error(status, code, message)
  end

  @errors %{
    invalid_credentials: {401, "invalid_credentials", "unknown operator or wrong password"},
    invalid_password: {400, "invalid_password", "the password is a string of at most 256 bytes"},
    not_found: {404, "not_found", "no such account or zone"},
    unknown_name: {404, "not_found", "the server names no such zone"},
    no_session: {404, "not_found", "the user has no session"},
    no_quorum:
      {503, "no_quorum",
       "this node sees no majority of its cluster: try another node, or again shortly"},
    no_history: {409, "no_history", "the zone keeps no history (its history option is 0)"},
    no_keyframe:
      {409, "no_keyframe", "the zone has no complete keyframe in its history yet: retry shortly"},
    no_data_dir: {409, "no_data_dir", "the zone has no data directory: no snapshots"},
    in_world:
      {409, "in_world", "a zone of a world: its world places, starts and stops its zones"},
    not_managed:
      {409, "not_managed",
       "the zone runs under the game's own supervisor (not Overworld.start_zone/2)"},
    already_running: {409, "already_running", "the zone runs already"},
    not_restartable:
      {409, "not_restartable",
       "the zone was never started on this node by Overworld.start_zone/2"},
    moved: {409, "moved", "the zone is moving to another node"}
  }

  @doc false
  # {status, code, message} of an error reason.
  @spec error_of(term) :: {pos_integer, binary, binary}
  def error_of(reason) do
    case @errors do
      %{^reason => e} ->
        e

      _ when is_tuple(reason) and elem(reason, 0) == :node ->
        {503, "node_unavailable", "the zone's node did not answer"}

      _ ->
        {500, "internal", "the operation failed"}
    end
  end
end

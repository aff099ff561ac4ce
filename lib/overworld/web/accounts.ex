defmodule Overworld.Web.Accounts do
  @moduledoc false
  # The account routes of `Overworld.Web` (docs/protocol.md, "Accounts"): email and custom
  # authentication, logout, the account and its links. Email and password calls are rate
  # limited per client address and, for failed logins, per address (`Overworld.RateLimit`,
  # limits in `Overworld.Accounts.Settings`); the password hashing pool's "busy" and the
  # limits answer 429 with `retry-after`.
  require Logger

  alias Overworld.Accounts
  alias Overworld.Accounts.Email
  alias Overworld.RateLimit
  alias Overworld.Web

  @routes %{
    "/api/v1/auth/email/register" => "POST",
    "/api/v1/auth/email/confirm" => "POST",
    "/api/v1/auth/email/login" => "POST",
    "/api/v1/auth/custom" => "POST",
    "/api/v1/auth/logout" => "POST",
    "/api/v1/account" => "GET",
    "/api/v1/account/link/device" => "POST",
    "/api/v1/account/link/custom" => "POST",
    "/api/v1/account/link/email" => "POST",
    "/api/v1/account/unlink/device" => "POST",
    "/api/v1/account/unlink/custom" => "POST",
    "/api/v1/account/unlink/email" => "POST"
  }

  @doc false
  def routes, do: @routes

  @doc false
  @spec handle(binary, Overworld.Transport.HTTP.Request.t(), Overworld.Server.Config.t()) ::
          Web.response()
  def handle("/api/v1/auth/email/register", req, cfg) do
    s = cfg.accounts

    with :ok <- per_address(req, cfg),
         {:ok, body} <- Web.json_body(req) do
      case Email.register(body["email"], body["password"], s) do
        {:ok, :pending} -> pending()
        {:ok, %{user_id: user, created: c}} -> Web.token_response(cfg, user, nil, created: c)
        {:error, reason} -> failed(reason)
      end
    end
  end

  def handle("/api/v1/auth/email/confirm", req, cfg) do
    with :ok <- per_address(req, cfg),
         {:ok, body} <- Web.json_body(req) do
      requester =
        case Web.session(req, cfg) do
          {:ok, %{user_id: u}} -> u
          _ -> nil
        end

      case Email.confirm(body["code"], cfg.accounts, requester) do
        {:ok, %{user_id: user, created: c}} -> Web.token_response(cfg, user, nil, created: c)
        {:error, reason} -> failed(reason)
      end
    end
  end

  def handle("/api/v1/auth/email/login", req, cfg) do
    s = cfg.accounts

    with :ok <- per_address(req, cfg),
         {:ok, body} <- Web.json_body(req),
         account = {:login_account, cfg.name, normalized(body["email"])},
         # (Counted before the hash: attempts in flight at once count too.)
         :ok <- Web.limited(RateLimit.hit(account, s.login_limit_per_account)) do
      case Email.login(body["email"], body["password"], s) do
        {:ok, user} ->
          RateLimit.reset(account, elem(s.login_limit_per_account, 1))
          Web.token_response(cfg, user, nil, [])

        {:error, :invalid_credentials} ->
          failed(:invalid_credentials)

        {:error, reason} ->
          failed(reason)
      end
    end
  end

  def handle("/api/v1/auth/custom", req, cfg) do
    with {:ok, body} <- Web.json_body(req),
         {:ok, custom_id} <- custom_id(body, cfg) do
      case Accounts.authenticate_custom(custom_id) do
        {:ok, %{user_id: user, created: c}} -> Web.token_response(cfg, user, nil, created: c)
        {:error, reason} -> failed(reason)
      end
    end
  end

  def handle("/api/v1/auth/logout", req, cfg) do
    with {:ok, claims} <- Web.session(req, cfg) do
      case claims.sid do
        nil ->
          # A token of version 1 has no login of its own: the account's every token goes.
          answer(Accounts.revoke_all(claims.user_id), fn -> %{} end)

        sid ->
          until = System.system_time(:second) + cfg.refresh_ttl
          answer(Accounts.logout(claims.user_id, sid, until), fn -> %{} end)
      end
    end
  end

  def handle("/api/v1/account", req, cfg) do
    with {:ok, %{user_id: user}} <- Web.session(req, cfg) do
      case Accounts.account(user) do
        {:ok, _} -> Web.json(200, account!(user))
        {:error, :not_found} -> Web.error(404, "not_found", "no such account")
      end
    end
  end

  def handle("/api/v1/account/link/email", req, cfg) do
    with :ok <- per_address(req, cfg),
         {:ok, %{user_id: user}} <- Web.session(req, cfg),
         {:ok, body} <- Web.json_body(req) do
      case Email.link(user, body["email"], body["password"], cfg.accounts) do
        {:ok, :pending} -> pending()
        {:ok, _} -> Web.json(200, account!(user))
        {:error, reason} -> failed(reason)
      end
    end
  end

  # /api/v1/account/link/KIND and /api/v1/account/unlink/KIND (the routes name the kinds).
  def handle("/api/v1/account/" <> op_kind, req, cfg) do
    [op, kind] = String.split(op_kind, "/")

    with {:ok, %{user_id: user}} <- Web.session(req, cfg),
         {:ok, body} <- Web.json_body(req),
         {:ok, identity} <-
           if(op == "link", do: identity(kind, body, cfg), else: unlinked(kind, body, user)) do
      result =
        if op == "link", do: Accounts.link(user, identity), else: Accounts.unlink(user, identity)

      answer(result, fn -> account!(user) end)
    end
  end

  defp identity("device", body, _cfg) do
    case body do
      %{"device_id" => d} -> {:ok, {:device, d}}
      _ -> Web.error(400, "invalid_body", "expected a string field \"device_id\"")
    end
  end

  defp identity("custom", body, cfg) do
    with {:ok, c} <- custom_id(body, cfg), do: {:ok, {:custom, c}}
  end

  # What to unlink: a device id named in the body; the account's custom id or address.
  defp unlinked("device", body, _user), do: identity("device", body, nil)

  defp unlinked(kind, _body, user) do
    key = if kind == "email", do: :email, else: :custom_id

    case Accounts.account(user) do
      {:ok, %{^key => v}} when is_binary(v) ->
        {:ok, {if(kind == "email", do: :email, else: :custom), v}}

      _ ->
        failed(:not_linked)
    end
  end

  defp custom_id(body, %{accounts: %{custom_auth: {module, state}}}) do
    case module.verify(body, state) do
      {:ok, id} ->
        {:ok, id}

      {:error, why} ->
        Logger.info("http: refused custom id: #{why}")
        Web.error(401, "invalid_assertion", why)
    end
  end

  defp custom_id(_body, _cfg),
    do: Web.error(404, "not_found", "custom ids are not configured on this server")

  # (JSON null for what the account has not.)
  defp account!(user) do
    {:ok, account} = Accounts.account(user)
    account |> Map.delete(:disabled) |> Web.nulls()
  end

  # (Per server: several servers of a node count apart.)
  defp per_address(%{peer: ip}, cfg),
    do:
      Web.limited(
        RateLimit.hit({:login_address, cfg.name, ip}, cfg.accounts.login_limit_per_address)
      )

  defp normalized(address) do
    case Email.normalize(address) do
      {:ok, a} -> a
      :error -> nil
    end
  end

  defp pending,
    do:
      Web.json(202, %{
        status: "confirmation_sent",
        message: "if the address can be used, a code has been mailed to it"
      })

  defp answer(:ok, fun), do: Web.json(200, fun.())
  defp answer({:error, reason}, _fun), do: failed(reason)

  # What each refusal answers: status, code, message.
  @errors %{
    invalid_email: {400, "invalid_email", "expected an email address"},
    invalid_password:
      {400, "invalid_password", "the password must be 8 to #{Email.max_password_bytes()} bytes"},
    invalid_credentials: {401, "invalid_credentials", "unknown address or wrong password"},
    invalid_code: {400, "invalid_code", "unknown, used or expired code"},
    invalid_custom_id:
      {400, "invalid_custom_id",
       "a custom id is 6 to 128 printable ASCII characters without spaces"},
    invalid_identity: {400, "invalid_identity", "not a valid device or custom id"},
    invalid_device_id:
      {400, "invalid_device_id",
       "device_id must be 10 to 128 printable ASCII characters without spaces"},
    email_taken: {409, "email_taken", "the address has an account"},
    already_linked: {409, "already_linked", "another account has it"},
    identity_exists: {409, "identity_exists", "the account has one already: unlink it first"},
    last_identity: {409, "last_identity", "an account keeps at least one way to log in"},
    not_linked: {404, "not_linked", "the account does not have it"},
    not_found: {404, "not_found", "no such account"},
    disabled: {403, "account_disabled", "the account is disabled"},
    no_quorum:
      {503, "no_quorum",
       "this node sees no majority of its cluster: try another node, or again shortly"}
  }

  @doc false
  @spec failed(term) :: Web.response()
  def failed({:busy, seconds}),
    do: Web.too_many("busy", "the server is busy hashing passwords", seconds)

  def failed(:timeout), do: failed({:busy, 1})

  def failed(reason) do
    case @errors do
      %{^reason => {status, code, message}} ->
        Web.error(status, code, message)

      _ ->
        Logger.error("accounts: #{inspect(reason)}")
        Web.error(500, "internal", "account storage failed")
    end
  end
end

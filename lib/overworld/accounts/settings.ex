defmodule Overworld.Accounts.Settings do
  @moduledoc """
  The account options of an `Overworld.Server` (`accounts: [...]`):

  * `:password_iterations` - PBKDF2-HMAC-SHA256 iterations of new password hashes (default
    #{Overworld.Accounts.Password.default_iterations()}; `Overworld.Accounts.Password`).
  * `:min_password_bytes` - shortest password accepted (default 8; the longest is 256 bytes).
  * `:email_confirmation` - whether an email registration or link waits for the code mailed to
    the address (default true). With confirmation, registering or linking an address answers
    the same whether the address is taken or not (the owner of a taken address is mailed a
    notice instead of a code), so nobody learns which addresses have accounts. Without it the
    account is made at once and a taken address answers 409 `email_taken`: an enumeration
    oracle, for development and closed tests only.
  * `:mailer` - the `Overworld.Accounts.Mailer` that sends codes and notices (default
    `Overworld.Accounts.Mailer.Log`, which only logs them: for development).
  * `:confirmation_ttl` - seconds a mailed code stays valid (default 3,600).
  * `:custom_auth` - `{module, options}` of an `Overworld.Accounts.CustomAuth` that checks what
    a game's own auth server vouches for (for example `{Overworld.Accounts.CustomAuth.HMAC,
    secret: s}`); nil (the default) leaves `/api/v1/auth/custom` answering 404.
  * `:login_limit_per_address` - password logins, registrations and confirmations a client
    address may try, `{count, seconds}` (default `{30, 60}`).
  * `:login_limit_per_account` - failed password logins an address (account) may have,
    `{count, seconds}` (default `{10, 300}`; a successful login clears them).
  """

  alias Overworld.Options

  @typedoc "Validated settings."
  @type t :: %{
          password_iterations: pos_integer,
          min_password_bytes: pos_integer,
          email_confirmation: boolean,
          mailer: module,
          confirmation_ttl: pos_integer,
          custom_auth: {module, keyword} | nil,
          login_limit_per_address: Overworld.RateLimit.limit(),
          login_limit_per_account: Overworld.RateLimit.limit()
        }

  @limit {:tuple_of, [:pos_integer, :pos_integer]}

  @doc false
  @spec schema() :: Options.schema()
  def schema do
    [
      password_iterations: {:pos_integer, Overworld.Accounts.Password.default_iterations()},
      min_password_bytes:
        {{:custom, &(is_integer(&1) and &1 in 1..256), "an integer in 1..256"}, 8},
      email_confirmation: {:boolean, true},
      mailer: {:module, Overworld.Accounts.Mailer.Log},
      confirmation_ttl: {:pos_integer, 3_600},
      custom_auth:
        {{:custom, &custom_auth?/1,
          "nil or {module, keyword} of an Overworld.Accounts.CustomAuth"}, nil},
      login_limit_per_address: {@limit, {30, 60}},
      login_limit_per_account: {@limit, {10, 300}}
    ]
  end

  defp custom_auth?(nil), do: true
  defp custom_auth?({m, opts}) when is_atom(m) and is_list(opts), do: Keyword.keyword?(opts)
  defp custom_auth?(_), do: false

  @doc """
  Validates account options; raises `ArgumentError` naming the bad one.

      iex> Overworld.Accounts.Settings.new(password_iterations: 1000).password_iterations
      1000
      iex> Overworld.Accounts.Settings.new(email_confirmation: :yes)
      ** (ArgumentError) invalid option for Overworld.Server accounts: expected :email_confirmation to be a boolean, got: :yes
  """
  @spec new(keyword) :: t
  def new(opts) do
    s = Options.validate!(opts, schema(), "Overworld.Server accounts")

    case s.custom_auth do
      {m, o} -> %{s | custom_auth: {m, m.init(o)}}
      nil -> s
    end
  end
end

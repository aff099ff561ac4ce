defmodule Overworld.Accounts.Mailer do
  @moduledoc """
  Sends the mails of email accounts: a code confirming a registration or a link, or a notice
  to the owner of an address that someone tried to register or link again.

  The server calls `c:deliver/3` in a process of its own after it has answered the request (a
  slow or failing mailer never delays nor changes an answer, so its timing tells nothing
  either); an error is logged. Set the mailer with `Overworld.Server`'s `accounts: [mailer:
  MyMailer]`; the default, `Overworld.Accounts.Mailer.Log`, only logs, for development.

  Kinds and their data:

    * `:confirm_registration` - `%{code: code}`: whoever sends the code to
      `POST /api/v1/auth/email/confirm` gets the new account.
    * `:confirm_link` - `%{code: code}`: the address is linked to the account that asked.
    * `:already_registered` - `%{}`: someone tried to register or link this address, which
      already has an account. (Tell its owner to log in, or to ignore the mail.)
  """

  @typedoc "What is sent."
  @type kind :: :confirm_registration | :confirm_link | :already_registered

  @doc "Sends one mail to `address`."
  @callback deliver(kind, address :: binary, data :: map) :: :ok | {:error, term}

  require Logger

  @doc false
  # Delivers in a process of its own (the caller has answered already).
  @spec send_later(module, kind, binary, map) :: :ok
  def send_later(mailer, kind, address, data) do
    {:ok, _} =
      Task.Supervisor.start_child(Overworld.Accounts.Mail, fn ->
        case mailer.deliver(kind, address, data) do
          :ok -> :ok
          {:error, reason} -> Logger.error("accounts: mail #{kind} failed: #{inspect(reason)}")
        end
      end)

    :ok
  end
end

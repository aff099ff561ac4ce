defmodule Overworld.Accounts.Mailer.Log do
  @moduledoc """
  The development mailer: logs each mail (kind, address, code) at the info level instead of
  sending it. Never use it in production: the log would hold the codes.
  """
  @behaviour Overworld.Accounts.Mailer
  require Logger

  @impl true
  def deliver(kind, address, data) do
    Logger.info(
      "mail (not sent: Overworld.Accounts.Mailer.Log) #{kind} to #{address} #{inspect(data)}"
    )
  end
end

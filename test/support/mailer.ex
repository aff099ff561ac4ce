defmodule Overworld.Test.Mailer do
  @moduledoc false
  # A mailer for the tests: each mail goes as {:mail, kind, address, data} to the process that
  # called `listen/0` last.
  @behaviour Overworld.Accounts.Mailer

  def listen, do: :persistent_term.put(__MODULE__, self())

  @impl true
  def deliver(kind, address, data) do
    send(:persistent_term.get(__MODULE__), {:mail, kind, address, data})
    :ok
  end
end

defmodule Overworld.Accounts.Sweeper do
  @moduledoc false
  # Every ten minutes, forgets the logouts whose tokens have all expired and the email codes
  # past their time (`Overworld.Accounts.sweep/1`); idle while the accounts are not started.
  use GenServer
  require Logger

  @every 600_000

  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    Process.send_after(self(), :sweep, @every)
    {:ok, nil}
  end

  @impl true
  def handle_info(:sweep, state) do
    if :mnesia.system_info(:is_running) == :yes do
      try do
        Overworld.Accounts.sweep(System.system_time(:second))
      catch
        :exit, reason -> Logger.warning("accounts: sweep failed: #{inspect(reason)}")
      end
    end

    Process.send_after(self(), :sweep, @every)
    {:noreply, state}
  end
end

defmodule Overworld.Match.Table do
  @moduledoc false
  # Owns this node's table of matches (`Overworld.Match.list/1`): `{id, pid, handler, label,
  # size, tick_rate}`, written by each match process itself (public, write concurrency).
  use GenServer

  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    :ets.new(Overworld.Match.table(), [
      :named_table,
      :public,
      :set,
      write_concurrency: true,
      read_concurrency: true
    ])

    {:ok, nil}
  end
end

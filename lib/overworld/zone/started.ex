defmodule Overworld.Zone.Started do
  @moduledoc false
  # What every zone started on this node by `Overworld.start_zone/2` was started with, by id
  # (`{module, options}`; the last start wins), kept after it stops: what an operator needs
  # to start a stopped zone again (`Overworld.Operators.Zones`). The process owns the table
  # and is its only writer (one call per zone start, rare); anybody reads it.

  use GenServer

  @table __MODULE__

  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Remembers how zone `id` was started."
  @spec put(term, module, keyword) :: :ok
  def put(id, module, opts), do: GenServer.call(__MODULE__, {:put, id, module, opts})

  @doc "How zone `id` was last started on this node, or nil."
  @spec get(term) :: {module, keyword} | nil
  def get(id) do
    case :ets.lookup(@table, id) do
      [{^id, module, opts}] -> {module, opts}
      [] -> nil
    end
  end

  @impl true
  def init(:ok) do
    :ets.new(@table, [:named_table, :protected, :set, read_concurrency: true])
    {:ok, nil}
  end

  @impl true
  def handle_call({:put, id, module, opts}, _from, st) do
    :ets.insert(@table, {id, module, opts})
    {:reply, :ok, st}
  end
end

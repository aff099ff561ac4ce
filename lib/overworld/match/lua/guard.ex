defmodule Overworld.Match.Lua.Guard do
  @moduledoc false
  # Stops Lua match handlers that run past their time. luerl cannot stop a script from
  # inside, so a match writes its deadline into a public table before each Lua call and
  # deletes it after (two ETS operations a call); this process looks at the table every
  # 10 ms and kills a match whose call is overdue (its players get match_error). The table
  # holds only the calls running now, so a look is short.
  use GenServer
  require Logger

  @table __MODULE__
  @every 10

  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc "Runs `fun` in the calling process, killed if it runs more than `timeout` ms."
  @spec run(pos_integer, (() -> term)) :: term
  def run(timeout, fun) do
    :ets.insert(@table, {self(), System.monotonic_time(:millisecond) + timeout})

    try do
      fun.()
    after
      :ets.delete(@table, self())
    end
  end

  @impl true
  def init(:ok) do
    :ets.new(@table, [:named_table, :public, :set, write_concurrency: true])
    :erlang.send_after(@every, self(), :look)
    {:ok, nil}
  end

  @impl true
  def handle_info(:look, st) do
    now = System.monotonic_time(:millisecond)

    for pid <- :ets.select(@table, [{{:"$1", :"$2"}, [{:<, :"$2", now}], [:"$1"]}]) do
      Logger.error("match #{inspect(pid)}: a Lua call ran past its time: stopped")
      :ets.delete(@table, pid)
      Process.exit(pid, :kill)
    end

    :erlang.send_after(@every, self(), :look)
    {:noreply, st}
  end
end

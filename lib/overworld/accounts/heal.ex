defmodule Overworld.Accounts.Heal do
  @moduledoc """
  The accounts' partition policy: **the majority's copy wins**.

  Mnesia does not heal a partition by itself: when two parts of a cluster that both ran
  while cut off from each other meet again, it reports `inconsistent_database` and leaves
  each part with its own copy. This process (one per node, started with the application,
  watching once `Overworld.Accounts.start/1` has started Mnesia) decides:

    * while the cluster is cut, each node remembers whether its part held a majority of the
      cluster's configured nodes (`Overworld.Cluster.quorate?/2` over Mnesia's running
      nodes), at every `mnesia_down`;
    * a node of the minority makes no account meanwhile (`Overworld.Accounts.authenticate_device/1`
      answers `{:error, :no_quorum}`: HTTP 503), so nothing it acknowledged is lost;
    * when the parts meet again, a node that was in the minority takes the majority's copy:
      it makes the node it met its master for the account tables, restarts Mnesia (which
      loads them from there), and clears the masters. A node of the majority keeps its copy.

  In a cluster of two nodes neither half is a majority: the part holding the smallest node
  name keeps its copy (no partition safety with two nodes: docs/cluster.md).
  """

  use GenServer
  require Logger

  @doc false
  def start_link(_), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc false
  # Mnesia runs (again): watch its system events.
  @spec watch() :: :ok
  def watch do
    case Process.whereis(__MODULE__) do
      nil -> :ok
      pid -> GenServer.cast(pid, :watch)
    end
  end

  @doc "How many times this node took the majority's copy (for tests and operators)."
  @spec reloads() :: non_neg_integer
  def reloads, do: GenServer.call(__MODULE__, :reloads)

  @impl true
  def init(nil), do: {:ok, %{majority: true, reloads: 0}}

  @impl true
  def handle_cast(:watch, st) do
    {:ok, _} = :mnesia.subscribe(:system)
    {:noreply, st}
  end

  @impl true
  def handle_call(:reloads, _from, st), do: {:reply, st.reloads, st}

  @impl true
  def handle_info({:mnesia_system_event, {:mnesia_down, _node}}, st),
    do: {:noreply, %{st | majority: majority?()}}

  def handle_info({:mnesia_system_event, {:inconsistent_database, _context, other}}, st) do
    if st.majority or (tie?() and node() < other) do
      Logger.warning(
        "accounts: partition healed with #{other}: this node's part was the majority, it keeps its copy"
      )

      {:noreply, st}
    else
      Logger.warning(
        "accounts: partition healed with #{other}: this node's part was the minority, " <>
          "it reloads the accounts from #{other}"
      )

      {:noreply, reload(st, other)}
    end
  end

  def handle_info(_msg, st), do: {:noreply, st}

  # (Mnesia stopping on this node answers with an exit: this node then counts as its own.)
  defp majority? do
    Overworld.Cluster.quorate?(:mnesia.system_info(:running_db_nodes))
  catch
    :exit, _ -> Overworld.Cluster.quorate?([node()])
  end

  # Neither part can be a majority (two nodes, or an even split): a tie.
  defp tie? do
    case Overworld.Cluster.configured() do
      nil -> true
      nodes -> rem(length(Enum.uniq(nodes)), 2) == 0
    end
  end

  defp reload(st, other) do
    tables = :mnesia.system_info(:tables) -- [:schema]
    for t <- tables, do: :ok = :mnesia.set_master_nodes(t, [other])
    :stopped = :mnesia.stop()
    :ok = :mnesia.start()
    _ = :mnesia.wait_for_tables(tables, 30_000)
    for t <- tables, do: :ok = :mnesia.set_master_nodes(t, [])
    {:ok, _} = :mnesia.subscribe(:system)
    %{st | majority: true, reloads: st.reloads + 1}
  end
end

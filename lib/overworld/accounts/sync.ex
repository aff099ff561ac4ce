defmodule Overworld.Accounts.Sync do
  @moduledoc """
  Group commit of this node's Mnesia transaction log: `await/0` answers once everything
  committed before the call is on disk, fsynced.

  Mnesia appends a committed transaction of a `disc_copies` table to its log
  (`LATEST.LOG`) without an fsync, so an answer given at commit can be lost with the machine.
  The accounts (`Overworld.Accounts`) and the embedded storage (`Overworld.Storage.Mnesia`)
  call `await/0` after their transaction commits and before they answer: durable to the
  standard of a database commit.

  One process per node syncs (`:mnesia.sync_log/0`, an fsync of the log) for every caller
  waiting when a sync starts: callers that come during a sync wait for the next one, which
  covers all of them. With fsyncs of `f` ms, `n` callers a second cost about `1000 / f` fsyncs
  a second, whatever `n` is. The process does no other work of the callers' (their
  transactions, hashing and encoding run in themselves).

  `set_delay/1` adds a delay to every sync, to measure group commit against a slow disk (this
  machine's fsync answers in tens of microseconds; a real disk's in milliseconds).
  """
  use GenServer
  require Logger

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc """
  Waits until the Mnesia log holds, fsynced, everything this node committed before the call.
  `{:error, reason}` if the sync failed (the caller must not report success).
  """
  @spec await(timeout) :: :ok | {:error, term}
  def await(timeout \\ 30_000), do: GenServer.call(__MODULE__, :await, timeout)

  @doc "Adds `ms` milliseconds before every sync from now on (0: none)."
  @spec set_delay(non_neg_integer) :: :ok
  def set_delay(ms) when is_integer(ms) and ms >= 0, do: GenServer.call(__MODULE__, {:delay, ms})

  @doc "Syncs done, and callers answered, since the node started: `{syncs, callers}`."
  @spec stats() :: {non_neg_integer, non_neg_integer}
  def stats, do: GenServer.call(__MODULE__, :stats)

  @impl true
  def init(nil) do
    {:ok, %{waiting: [], syncing: nil, delay: 0, syncs: 0, callers: 0}}
  end

  @impl true
  def handle_call(:await, from, st), do: {:noreply, start(%{st | waiting: [from | st.waiting]})}
  def handle_call({:delay, ms}, _from, st), do: {:reply, :ok, %{st | delay: ms}}
  def handle_call(:stats, _from, st), do: {:reply, {st.syncs, st.callers}, st}

  @impl true
  def handle_info({:synced, pid, result}, %{syncing: {pid, ref, batch}} = st) do
    Process.demonitor(ref, [:flush])
    reply = if result == :ok, do: :ok, else: {:error, {:sync_log, result}}
    if reply != :ok, do: Logger.error("the Mnesia log's sync failed: #{inspect(result)}")
    Enum.each(batch, &GenServer.reply(&1, reply))

    st = %{st | syncing: nil, syncs: st.syncs + 1, callers: st.callers + length(batch)}
    {:noreply, start(st)}
  end

  def handle_info({:DOWN, ref, :process, _pid, reason}, %{syncing: {_, ref, batch}} = st) do
    Logger.error("the Mnesia log's sync crashed: #{inspect(reason)}")
    Enum.each(batch, &GenServer.reply(&1, {:error, {:sync_log, reason}}))
    {:noreply, start(%{st | syncing: nil})}
  end

  def handle_info(_msg, st), do: {:noreply, st}

  # A sync for every caller waiting, unless one runs (they wait for the next).
  defp start(%{syncing: nil, waiting: [_ | _] = batch, delay: delay} = st) do
    me = self()

    {pid, ref} =
      spawn_monitor(fn ->
        if delay > 0, do: Process.sleep(delay)
        send(me, {:synced, self(), :mnesia.sync_log()})
      end)

    %{st | syncing: {pid, ref, batch}, waiting: []}
  end

  defp start(st), do: st
end

defmodule Overworld.Zone.Replica do
  @moduledoc false
  # The copy of a zone's files on its replica node (zone option `durability: :replicated`,
  # docs/cluster.md): one process per zone on that node, under `Overworld.Replicas`, started
  # when the zone's journal writer asks for it (`Overworld.World.Placer.start_replica/4`,
  # through `:erpc`), writing into
  # the directory the zone would use on this node, so that the zone starts from it here when
  # its node dies (this node is next in its rendezvous order: its new home).
  #
  #   * a seed first: every file of the zone's directory as it was when the writer asked, in
  #     chunks (`Overworld.World.Handover`), installed in place of what was here; until then
  #     nothing is acknowledged;
  #   * then the journal's commits, `{:journal_append, writer, file, offset, bytes, seq}`:
  #     written at their offset in that segment and fsynced (a new segment's directory entry
  #     too) before `{:journal_replicated, self(), seq}` goes back. An offset that does not
  #     follow what the file holds, or a writer other than the one that seeded it (a stale
  #     owner: a node that resumed after a pause), is refused (`{:journal_replica_refused,
  #     self(), reason}`): that writer must seed again, and a stale one cannot;
  #   * the snapshots the zone's store writes, in chunks, installed as the store installs its
  #     own (`Overworld.Persistence.SnapshotFile.install/2`), then the segments that no
  #     snapshot needs any more are deleted.
  #
  # It stops when its writer goes (its files stay) and when the zone starts on this node.

  use GenServer
  require Logger

  alias Overworld.Persistence.{Dir, SnapshotFile}
  alias Overworld.World.Handover
  alias Overworld.Zone.Store

  @doc false
  def child_spec({id, dir, writer}) do
    %{
      id: {__MODULE__, id},
      start: {__MODULE__, :start_link, [{id, dir, writer}]},
      restart: :temporary
    }
  end

  @doc false
  @spec start_link({term, Path.t(), pid}) :: GenServer.on_start()
  def start_link({id, dir, writer}) do
    GenServer.start_link(__MODULE__, {id, dir, writer},
      name: Overworld.Names.via(Overworld.Names.replica(id))
    )
  end

  @doc "The replica of zone `id` on this node, or nil."
  @spec whereis(term) :: pid | nil
  def whereis(id), do: Overworld.Names.whereis(Overworld.Names.replica(id))

  @doc "Stops the replica of zone `id` on this node, if any (the zone starts here)."
  @spec stop(term) :: :ok
  def stop(id) do
    case whereis(id) do
      nil -> :ok
      pid -> GenServer.stop(pid, :normal, 30_000)
    end
  catch
    :exit, _ -> :ok
  end

  @doc """
  Seeds the replica `pid` with the files of `dir` (this node's copy of the zone): chunk by
  chunk (one call each, so one large snapshot never fills the distribution link), then
  installed. Called by the writer, which appends nothing meanwhile.
  """
  @spec seed(pid, Path.t()) :: :ok | {:error, term}
  def seed(pid, dir) do
    with {:ok, chunks} <- Handover.chunks(dir),
         :ok <- Handover.call_each(pid, chunks, &{:seed_chunk, &1}) do
      GenServer.call(pid, :seed_install, 60_000)
    end
  catch
    :exit, reason -> {:error, {:replica, reason}}
  end

  @doc """
  Sends a snapshot file the store just wrote (its bytes) to the replica `pid`, in chunks;
  `keep_from`: the oldest journal segment still needed.
  """
  @spec snapshot(pid, binary, non_neg_integer) :: :ok | {:error, term}
  def snapshot(pid, bytes, keep_from) do
    with :ok <- Handover.call_each(pid, Handover.split(bytes), &{:snapshot_chunk, &1}) do
      GenServer.call(pid, {:snapshot_done, keep_from}, 60_000)
    end
  catch
    :exit, reason -> {:error, {:replica, reason}}
  end

  ## Server

  @impl true
  def init({id, dir, writer}) do
    Logger.metadata(zone: inspect(id))
    Process.monitor(writer)

    {:ok,
     %{dir: dir, writer: writer, seeded: false, files: %{}, snap: [], io: nil, file: nil, size: 0}}
  end

  @impl true
  def handle_call({:seed_chunk, chunk}, {from, _}, %{writer: from} = st),
    do: {:reply, :ok, %{st | files: Handover.add(st.files, chunk)}}

  def handle_call(:seed_install, {from, _}, %{writer: from} = st) do
    st = close(st)

    case Handover.install(st.dir, st.files) do
      :ok -> {:reply, :ok, %{st | files: %{}, seeded: true}}
      error -> {:reply, error, %{st | files: %{}}}
    end
  end

  def handle_call({:snapshot_chunk, bytes}, _from, %{seeded: true} = st),
    do: {:reply, :ok, %{st | snap: [bytes | st.snap]}}

  def handle_call({:snapshot_done, keep_from}, _from, %{seeded: true} = st) do
    bytes = st.snap |> Enum.reverse() |> IO.iodata_to_binary()
    st = %{st | snap: []}

    case SnapshotFile.install(Path.join(st.dir, "snapshot"), bytes) do
      :ok ->
        for {n, path} <- Store.segments(st.dir), n < keep_from, do: File.rm(path)
        {:reply, :ok, st}

      error ->
        {:reply, error, st}
    end
  end

  def handle_call(_msg, _from, st), do: {:reply, {:error, :not_seeded_by_you}, st}

  @impl true
  def handle_info({:journal_append, w, file, offset, bytes, seq}, %{writer: w, seeded: true} = st) do
    case append(st, file, offset, bytes) do
      {:ok, st} ->
        send(w, {:journal_replicated, self(), seq})
        {:noreply, st}

      {:error, reason, st} ->
        send(w, {:journal_replica_refused, self(), reason})
        {:noreply, close(st)}
    end
  end

  def handle_info({:journal_append, w, _file, _offset, _bytes, _seq}, st) do
    send(w, {:journal_replica_refused, self(), :not_seeded_by_you})
    {:noreply, st}
  end

  def handle_info({:DOWN, _, :process, w, _}, %{writer: w} = st), do: {:stop, :normal, st}
  def handle_info(_msg, st), do: {:noreply, st}

  @impl true
  def terminate(_reason, st), do: close(st)

  defp append(st, file, offset, bytes) do
    with true <- valid_name?(file) || {:error, :bad_file},
         {:ok, st} <- open(st, file),
         true <- offset == st.size || {:error, {:gap, st.size, offset}},
         :ok <- :file.pwrite(st.io, offset, bytes),
         :ok <- :file.datasync(st.io),
         :ok <- if(offset == 0, do: Dir.sync(st.dir), else: :ok) do
      {:ok, %{st | size: offset + IO.iodata_length(bytes)}}
    else
      {:error, reason} -> {:error, reason, st}
    end
  end

  defp valid_name?("journal." <> n), do: n =~ ~r/\A[0-9]{1,12}\z/
  defp valid_name?(_), do: false

  defp open(%{file: file} = st, file), do: {:ok, st}

  defp open(st, file) do
    st = close(st)
    path = Path.join(st.dir, file)

    with {:ok, io} <- :file.open(path, [:read, :write, :raw, :binary]),
         {:ok, size} <- :file.position(io, :eof) do
      {:ok, %{st | io: io, file: file, size: size}}
    end
  end

  defp close(%{io: nil} = st), do: st

  defp close(st) do
    :file.close(st.io)
    %{st | io: nil, file: nil, size: 0}
  end
end

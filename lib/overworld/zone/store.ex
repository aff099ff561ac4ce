defmodule Overworld.Zone.Store do
  @moduledoc false
  # A zone's files (zones with a `:data_dir`): the journal of durable events and the snapshots,
  # in `<data_dir>/<zone>/`. It starts before the bucket workers and the server and outlives
  # their restarts.
  #
  # * The journal (`Overworld.Persistence.Journal`, linked) is written in segments
  #   `journal.<n>`: the server appends to it directly (`append_async/3`, never waiting) and
  #   starts a new segment with every snapshot (`roll/2`, ordered with its appends). A new
  #   store never appends to an old segment: it opens the next one.
  # * Snapshots are assembled here, off the tick path: the server sends its part
  #   (`{:snapshot_begin, tick, part, workers, server}`) and every worker, once the tick is over, its
  #   cells (`{:snapshot_part, tick, w, cells}`). The whole state is kept in memory (the newest,
  #   for a restart of the workers) and written with `Overworld.Persistence.SnapshotFile`
  #   (temporary file, fsync, verified, then renamed; the previous one kept). A snapshot still
  #   incomplete when a newer one begins is dropped (newest wins); the server hears
  #   `{:snapshot_done, tick}` and begins no other before. Segments older than the
  #   previous snapshot's are deleted once a snapshot is written.
  # * `recover/1`: the newest valid snapshot (memory, then disk) and every journal record after
  #   it, in order; a torn or corrupt tail ends a segment's records (with a warning).

  use GenServer
  require Logger

  alias Overworld.Cluster.Placement
  alias Overworld.Persistence.{Journal, SnapshotFile}
  alias Overworld.Zone.{Config, Replica}

  @format 1

  @spec start_link(Config.t()) :: GenServer.on_start()
  def start_link(%Config{} = config) do
    GenServer.start_link(__MODULE__, config,
      name: Overworld.Names.via(Overworld.Names.zone_store(config.id))
    )
  end

  @spec child_spec(Config.t()) :: Supervisor.child_spec()
  def child_spec(config),
    do: %{id: __MODULE__, start: {__MODULE__, :start_link, [config]}, shutdown: 30_000}

  @spec whereis(term) :: pid | nil
  def whereis(zone), do: Overworld.Names.whereis(Overworld.Names.zone_store(zone))

  @doc "The directory of a zone's files."
  @spec dir(Config.t()) :: Path.t()
  def dir(%Config{data_dir: data_dir, id: id}), do: Path.join(data_dir, dir_name(id))

  # A file name for any zone id: printable ids as they are (made safe), others by hash.
  defp dir_name(id) when is_atom(id) or is_binary(id) or is_integer(id) do
    name = to_string(id)

    if name =~ ~r/\A[A-Za-z0-9_.-]{1,64}\z/ and name not in [".", ".."],
      do: name,
      else: "zone-" <> hash(id)
  end

  defp dir_name(id), do: "zone-" <> hash(id)

  defp hash(id),
    do: :crypto.hash(:sha256, :erlang.term_to_binary(id)) |> Base.encode16(case: :lower)

  @spec segment_path(Path.t(), non_neg_integer) :: Path.t()
  def segment_path(dir, n),
    do: Path.join(dir, "journal." <> String.pad_leading(Integer.to_string(n), 8, "0"))

  @doc "The journal's writer."
  @spec journal(pid) :: pid
  def journal(store), do: GenServer.call(store, :journal)

  @doc """
  The state to recover: `{snapshot | nil, records}` (records of the journal after the snapshot,
  in order). Everything appended to the journal before the call is on disk first.
  """
  @spec recover(pid) :: {map | nil, [term]}
  def recover(store), do: GenServer.call(store, :recover, 60_000)

  ## Server

  @impl true
  def init(config) do
    Logger.metadata(zone: inspect(config.id))
    # Encoding and writing snapshots gives way to the zone's ticks and sessions.
    Process.flag(:priority, :low)
    # A zone that stops finishes the snapshot under way and closes its journal (terminate/2).
    Process.flag(:trap_exit, true)
    dir = dir(config)

    with :ok <- Overworld.Persistence.Dir.make(dir),
         segment = (segments(dir) |> Enum.map(&elem(&1, 0)) |> Enum.max(fn -> 0 end)) + 1,
         path = segment_path(dir, segment),
         {:ok, journal} <-
           Journal.open(path,
             commit_ms: config.commit_ms,
             fsync_us: config.shared.fsync_us,
             replica: replica_fun(config, dir),
             replica_timeout: config.replica_timeout
           ) do
      # Where the zone server finds the journal and its segment without a call (a store busy
      # writing a snapshot would hold up a restarting server).
      Overworld.Zone.Memory.put_journal(config.shared.memory, journal)
      Overworld.Zone.Memory.put_segment(config.shared.memory, segment)

      {:ok,
       %{
         config: config,
         dir: dir,
         journal: journal,
         latest: nil,
         assembling: nil,
         written: []
       }}
    else
      {:error, reason} ->
        Logger.error("zone data directory #{dir}: #{inspect(reason)}")
        {:stop, {:data_dir, dir, reason}}
    end
  end

  # Durability :replicated: the journal's writer asks this function for its replica (see
  # Overworld.Persistence.Journal, "Replication"): the first node after this one in the zone's
  # rendezvous order (the zone's next home if this node dies), where
  # Overworld.World.Placer.start_replica/4 starts the replica process, seeded here with the
  # zone's files.
  defp replica_fun(%Config{durability: :local}, _dir), do: nil

  defp replica_fun(%Config{id: id, world: %{name: world}, owner: owner}, dir) do
    # (The zone's ownership epoch: a replica node holding a newer copy refuses this writer.)
    epoch = if owner, do: elem(owner, 1), else: 0

    fn current ->
      # (The zone's home among the other nodes: its next home if this node dies.)
      target = Placement.home(id, Overworld.Cluster.nodes() -- [node()])

      cond do
        target == nil -> {:error, :no_node}
        current != nil and node(current) == target -> :keep
        true -> new_replica(world, id, dir, target, epoch)
      end
    end
  end

  defp new_replica(world, id, dir, target, epoch) do
    args = [world, id, self(), epoch]

    with {:ok, pid} <- :erpc.call(target, Overworld.World.Placer, :start_replica, args, 5_000),
         :ok <- Replica.seed(pid, dir) do
      {:ok, pid}
    end
  catch
    :error, {:erpc, reason} -> {:error, {:replica_node, reason}}
  end

  @doc "The journal segments in a zone's directory, as {number, path}, in order."
  @spec segments(Path.t()) :: [{non_neg_integer, Path.t()}]
  def segments(dir) do
    case File.ls(dir) do
      {:ok, names} ->
        for "journal." <> n <- names,
            {i, ""} <- [Integer.parse(n)],
            do: {i, Path.join(dir, "journal." <> n)}

      _ ->
        []
    end
    |> Enum.sort()
  end

  defp snapshot_path(dir), do: Path.join(dir, "snapshot")

  @impl true
  def handle_call(:journal, _from, st), do: {:reply, st.journal, st}

  def handle_call(:recover, _from, st) do
    :ok = Journal.sync(st.journal)
    snapshot = st.latest || from_disk(st.dir)
    from = if snapshot, do: snapshot.segment, else: 0

    records =
      for {n, path} <- segments(st.dir), n >= from, record <- read_segment(path), do: record

    # (A store started on files: its first snapshot is the second one written, and the
    # segments before the one it starts from go then. A zone that moves on after one snapshot,
    # at every start, would otherwise carry every segment it ever wrote.)
    written = if st.written == [] and snapshot, do: [snapshot.segment], else: st.written
    {:reply, {snapshot, records}, %{st | written: written}}
  end

  @impl true
  def handle_info({:snapshot_begin, tick, part, parts, from}, st) do
    if st.assembling,
      do: Logger.warning("snapshot of tick #{st.assembling.tick} dropped: newer one")

    a = %{tick: tick, part: part, missing: parts, cells: [], from: from}
    {:noreply, %{st | assembling: a}}
  end

  def handle_info({:snapshot_part, tick, _w, cells}, %{assembling: %{tick: tick} = a} = st) do
    a = %{a | missing: a.missing - 1, cells: [cells | a.cells]}

    if a.missing == 0 do
      st = write(%{st | assembling: nil}, a)
      # The zone may hand over its next snapshot.
      send(a.from, {:snapshot_done, a.tick})
      {:noreply, st}
    else
      {:noreply, %{st | assembling: a}}
    end
  end

  def handle_info({:EXIT, _pid, reason}, st), do: {:stop, reason, st}
  def handle_info(_stale, st), do: {:noreply, st}

  defp write(st, a) do
    entities = for cells <- a.cells, {_key, list} <- cells, e <- list, do: e

    state =
      Map.merge(a.part, %{format: @format, zone: st.config.id, tick: a.tick, entities: entities})

    bytes = IO.iodata_to_binary(SnapshotFile.encode(state))

    case SnapshotFile.install(snapshot_path(st.dir), bytes) do
      :ok ->
        Overworld.Zone.Metrics.add(st.config.shared, :snapshots, 1)
        written = Enum.take([state.segment | st.written], 2)
        # Segments before the previous snapshot's are needed by nobody any more.
        keep_from =
          case written do
            [_, prev] -> prev
            _ -> 0
          end

        for {n, p} <- segments(st.dir), n < keep_from, do: File.rm(p)
        replicate(st, bytes, keep_from)
        %{st | latest: state, written: written}

      {:error, reason} ->
        Overworld.Zone.Metrics.add(st.config.shared, :snapshot_failures, 1)
        Logger.error("snapshot of tick #{a.tick} not written: #{inspect(reason)}")
        %{st | latest: state}
    end
  end

  # The replica gets each snapshot too (in chunks: Overworld.Zone.Replica.snapshot/3). One
  # it misses is no loss: its seed and the journal hold everything after the last it has.
  defp replicate(%{config: %Config{durability: :local}}, _bytes, _keep_from), do: :ok

  defp replicate(st, bytes, keep_from) do
    with rep when is_pid(rep) <- Journal.replica(st.journal),
         {:error, reason} <- Replica.snapshot(rep, bytes, keep_from) do
      Logger.warning("snapshot not replicated: #{inspect(reason)}")
    end

    :ok
  end

  defp from_disk(dir) do
    case SnapshotFile.read(snapshot_path(dir)) do
      {:ok, %{format: @format} = state, which} ->
        if which == :previous,
          do: Logger.warning("recovering from the previous snapshot (tick #{state.tick})")

        state

      {:ok, other, _} ->
        Logger.error("snapshot of an unknown shape ignored: #{inspect(other, limit: 5)}")
        nil

      {:error, :no_snapshot, _why} ->
        nil
    end
  end

  defp read_segment(path) do
    case Journal.read(path) do
      {:ok, records, :complete} ->
        records

      {:ok, records, {:stopped_at, offset, reason}} ->
        Logger.warning(
          "journal #{path}: replay ends at byte #{offset} (#{reason}); #{length(records)} records kept"
        )

        records

      {:error, reason} ->
        Logger.error("journal #{path} unreadable (#{inspect(reason)}): skipped")
        []
    end
  end

  @impl true
  def terminate(_reason, st), do: Journal.close(st.journal)
end

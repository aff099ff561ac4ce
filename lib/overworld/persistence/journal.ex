defmodule Overworld.Persistence.Journal do
  @moduledoc """
  An append-only journal of durable events, one file, with group commit (issue 5 builds zone
  recovery on it; see DESIGN.md §7).

  ## Format

  A file starts with the 8-byte header `"OWJ" 1 0 0 0 0` (magic and format version). Each
  record is `<<length::32, crc32::32, payload::binary-size(length)>>`: the payload is the
  event as `:erlang.term_to_binary/1`, the CRC-32 (`:erlang.crc32/1`) covers the payload.
  Records are at most `#{16 * 1024 * 1024}` bytes.

  ## Writing

  `append/3` hands an event to the journal's writer process and returns at once with the
  record's sequence number (1, 2, ...); the writer gathers the records that arrive within the
  commit interval (option `:commit_ms`, default 2) and writes them with one `write` and one
  `fsync` (group commit), then tells each caller that asked (`{:journal_synced, ref, seq}`)
  that everything up to `seq` is on disk. A new file's header is synced, and its directory
  (`Overworld.Persistence.Dir`), before any record goes in. A durable event is acknowledged
  to a client only after that message. `sync_append/2` waits for it.

  When a write or fsync fails, the file can no longer be trusted: every caller waiting on that
  group commit gets `{:journal_failed, ref, reason}` instead (never `:journal_synced`), the
  error is logged, and the writer exits with `{:shutdown, {:journal_failed, reason}}` (its
  owner opens a new file; a zone's store restarts).

  ## Replication

  With the option `:replica` every group commit also goes to a replica process (on another
  node) before anyone hears of it: a waiter gets `{:journal_synced, ref, seq}` only once the
  record is fsynced here **and** the replica answered that it fsynced it too. The writer asks
  `replica.(current)` every 200 ms (`current`: the replica process, or nil) and the function
  answers `:keep`, `{:ok, pid}` (a new replica, already seeded by the function with every
  file of the journal's directory as it is: it is called in the writer with nothing pending,
  so everything appended so far is in the seed) or `{:error, reason}` (none for now). Each
  commit then goes as `{:journal_append, writer, file_name, offset, bytes, last_seq}`; the
  replica answers `{:journal_replicated, replica, seq}`, or `{:journal_replica_refused,
  replica, reason}` (the writer drops it and seeds one again). While no replica answers,
  acknowledgements wait; a waiter still waiting after `:replica_timeout` ms gets
  `{:journal_failed, ref, :no_replica}`: nothing is ever acknowledged on one copy.

  ## Reading

  `read/1` never raises: it answers the events of every valid record in order, and how the
  file ended. A torn tail (a partial record header or payload), a record whose CRC does not
  match, a length beyond the maximum or a payload that does not decode end the reading at the
  last valid record (`{:stopped_at, offset, reason}`); nothing after it is applied.

  The file header is judged the same way. An empty (or missing) file is an empty journal,
  `{:ok, [], :complete}`: a file created and never written, by a crash before its header.
  A file shorter than the header whose bytes begin the header is a torn tail at byte 0,
  `{:ok, [], {:stopped_at, 0, :torn_file_header}}`: nothing in it was ever acknowledged (the
  header is synced before any record goes in), and `open/2` on it writes the header anew. Any
  other beginning (a damaged header, another file) is refused whole, `{:error, :not_a_journal}`:
  no record of it is read, and `open/2` does not write into it.

      iex> path = Path.join(System.tmp_dir!(), "journal-doc-#{System.os_time()}")
      iex> File.rm(path)
      iex> {:ok, j} = Overworld.Persistence.Journal.open(path)
      iex> {:ok, 1} = Overworld.Persistence.Journal.sync_append(j, {:picked_up, "ann", 7})
      iex> {:ok, 2} = Overworld.Persistence.Journal.sync_append(j, {:left, "ann"})
      iex> :ok = Overworld.Persistence.Journal.close(j)
      iex> Overworld.Persistence.Journal.read(path)
      {:ok, [{:picked_up, "ann", 7}, {:left, "ann"}], :complete}
      iex> File.rm(path)
      :ok
  """
  use GenServer
  require Logger
  alias Overworld.Persistence.Dir

  @header <<"OWJ", 1, 0, 0, 0, 0>>
  @replica_check_ms 200
  @max_record 16 * 1024 * 1024

  @type t :: pid
  @type ending :: :complete | {:stopped_at, non_neg_integer, atom}

  ## API

  @doc """
  Opens (creating it if needed) the journal at `path` and starts its writer, linked to the
  caller. An existing file is read first: appends continue after its last valid record (a
  torn tail is cut off). When the file or its directory cannot be made or opened, or the file
  is not a journal, answers `{:error, reason}`; the writer's exit then reaches the (linked)
  caller too, which should trap exits (a zone's store does).

  Options:

    * `:commit_ms` — the group commit interval in milliseconds (default 2; 0 commits every
      record at once).
    * `:sync` — **a test hook** (DESIGN.md §9.11), `nil` by default. A function of one argument,
      the open file, called by the writer in place of `:file.datasync/1` for every group commit,
      after the commit's `write`; its result is taken as the fsync's (`:ok` or
      `{:error, reason}`), and no caller of the commit hears of it before it returns. A test
      holds acknowledgements back by blocking in it (then calling `:file.datasync/1` itself) or
      makes the fsync fail by returning an error. Without it the writer calls
      `:file.datasync/1` directly. (The new file's header sync is not covered.)
    * `:fsync_us` — an `Overworld.Metrics.Histogram` (default nil: none) where the writer
      records how long each group commit's fsync took, in microseconds (a zone's store
      passes its zone's: the fsync latency of `GET /metrics`).
  """
  @spec open(Path.t(), keyword) :: {:ok, t} | {:error, term}
  def open(path, opts \\ []) do
    o = Overworld.Options.validate!(opts, schema(), inspect(__MODULE__))
    GenServer.start_link(__MODULE__, {path, o})
  end

  defp schema do
    [
      commit_ms: {:non_neg_integer, 2},
      sync:
        {{:custom, &(is_nil(&1) or is_function(&1, 1)), "nil or a function of one argument"}, nil},
      replica:
        {{:custom, &(is_nil(&1) or is_function(&1, 1)), "nil or a function of one argument"}, nil},
      replica_timeout: {:pos_integer, 5_000},
      fsync_us:
        {{:custom, &(is_nil(&1) or is_reference(&1)), "nil or an Overworld.Metrics.Histogram"},
         nil}
    ]
  end

  @doc """
  Appends an event. Answers its sequence number at once; with `notify: ref` the caller gets
  `{:journal_synced, ref, seq}` once the record is on disk (fsynced).
  """
  @spec append(t, term, keyword) :: {:ok, pos_integer}
  def append(j, event, opts \\ []) do
    GenServer.call(j, {:append, :erlang.term_to_binary(event), opts[:notify]})
  end

  @doc """
  Appends an event without waiting at all (a message; for callers that must never block, such
  as a zone between ticks): the caller gets `{:journal_synced, ref, seq}` once the record is on
  disk, or `{:journal_failed, ref, reason}` (nothing with `ref` nil). Records of one caller keep
  their order.
  """
  @spec append_async(t, term, reference | nil) :: :ok
  def append_async(j, event, ref) do
    send(j, {:append, :erlang.term_to_binary(event), self(), ref})
    :ok
  end

  @doc """
  Moves on to a new file (a message, ordered with the caller's `append_async/3`): what is
  pending is written and synced to the current file first. Zones start a new segment with
  every snapshot, so that old segments can be deleted.
  """
  @spec roll(t, Path.t()) :: :ok
  def roll(j, path) do
    send(j, {:roll, path})
    :ok
  end

  @doc """
  Asks for `{:journal_synced, ref, seq}` once every record appended before this call (by any
  process on this node) is on disk: at once when nothing is waiting for an fsync. A zone
  server that replaces a dead one learns this way that its predecessor's records are synced.
  """
  @spec notify(t, reference) :: :ok
  def notify(j, ref) do
    send(j, {:notify, self(), ref})
    :ok
  end

  @doc "Appends an event and waits until it is on disk."
  @spec sync_append(t, term, timeout) :: {:ok, pos_integer} | {:error, term}
  def sync_append(j, event, timeout \\ 5_000) do
    ref = make_ref()
    {:ok, seq} = append(j, event, notify: ref)

    receive do
      {:journal_synced, ^ref, ^seq} -> {:ok, seq}
      {:journal_failed, ^ref, reason} -> {:error, reason}
    after
      timeout -> {:error, :timeout}
    end
  end

  @doc "The replica process the commits go to (option `:replica`), or nil."
  @spec replica(t) :: pid | nil
  def replica(j), do: GenServer.call(j, :replica, 30_000)

  @doc "Writes and syncs what is pending now (every append made before the call)."
  @spec sync(t) :: :ok
  def sync(j), do: GenServer.call(j, :sync, 30_000)

  @doc "Writes and syncs what is pending, then closes the file and stops the writer."
  @spec close(t) :: :ok
  def close(j), do: GenServer.stop(j, :normal)

  @doc "How many records were written and how many fsyncs it took (group commit at work)."
  @spec stats(t) :: %{records: non_neg_integer, syncs: non_neg_integer}
  def stats(j), do: GenServer.call(j, :stats)

  @doc "Reads a journal file (see the moduledoc); never raises."
  @spec read(Path.t()) :: {:ok, [term], ending} | {:error, term}
  def read(path) do
    case File.read(path) do
      {:ok, bin} -> decode(bin)
      {:error, :enoent} -> {:ok, [], :complete}
      {:error, reason} -> {:error, reason}
    end
  end

  @doc """
  Decodes a journal's bytes: the events of the valid records and how the bytes ended, plus
  the byte offset where the valid part ends.

      iex> Overworld.Persistence.Journal.decode(<<"OWJ", 1, 0, 0, 0, 0, 0, 0>>)
      {:ok, [], {:stopped_at, 8, :torn_header}}
      iex> Overworld.Persistence.Journal.decode(<<"OWJ", 1>>)
      {:ok, [], {:stopped_at, 0, :torn_file_header}}
      iex> Overworld.Persistence.Journal.decode("nonsense")
      {:error, :not_a_journal}
  """
  @spec decode(binary) :: {:ok, [term], ending} | {:error, :not_a_journal}
  def decode(bin) do
    case valid(bin) do
      {:ok, events, _end, ending} -> {:ok, events, ending}
      error -> error
    end
  end

  # The events of the valid prefix and where it ends (byte offset). A file cut inside its
  # header is a torn tail at 0; a header with any byte wrong is not ours.
  defp valid(<<@header, rest::binary>>), do: records(rest, byte_size(@header), [])
  defp valid(<<>>), do: {:ok, [], 0, :complete}

  defp valid(bin)
       when byte_size(bin) < byte_size(@header) and
              binary_part(@header, 0, byte_size(bin)) == bin,
       do: stop([], 0, :torn_file_header)

  defp valid(_), do: {:error, :not_a_journal}

  defp records(<<>>, at, acc), do: {:ok, Enum.reverse(acc), at, :complete}

  defp records(<<len::32, _crc::32, _::binary>>, at, acc) when len > @max_record,
    do: stop(acc, at, :bad_length)

  defp records(<<len::32, crc::32, payload::binary-size(len), rest::binary>>, at, acc) do
    with true <- :erlang.crc32(payload) == crc,
         {:ok, event} <- safe_decode(payload) do
      records(rest, at + 8 + len, [event | acc])
    else
      false -> stop(acc, at, :bad_checksum)
      :error -> stop(acc, at, :undecodable)
    end
  end

  defp records(<<_len::32, _crc::32, _::binary>>, at, acc), do: stop(acc, at, :torn_payload)
  defp records(_partial, at, acc), do: stop(acc, at, :torn_header)

  defp stop(acc, at, reason), do: {:ok, Enum.reverse(acc), at, {:stopped_at, at, reason}}

  # Our own records, checked by their CRC first; `:safe` still refuses new atoms and funs.
  defp safe_decode(payload) do
    {:ok, :erlang.binary_to_term(payload, [:safe])}
  rescue
    ArgumentError -> :error
  end

  ## Writer

  @impl true
  def init({path, o}) do
    Process.flag(:trap_exit, true)

    case open_file(path) do
      {:ok, io, seq, size, _fresh} ->
        if o.replica, do: send(self(), :replica_check)

        {:ok,
         %{
           io: io,
           path: path,
           commit: o.commit_ms,
           sync: o.sync,
           fsync_us: o.fsync_us,
           seq: seq,
           size: size,
           pending: [],
           pending_n: 0,
           waiters: [],
           timer: nil,
           records: 0,
           syncs: 0,
           # Replication (option :replica): the replica process and its monitor, the last
           # seq it fsynced, and the waiters synced here that wait for it (oldest first, with
           # the time they were synced here). The replica holds the current file as far as
           # `size`: what is written here goes there at the same offset.
           replica: o.replica,
           replica_timeout: o.replica_timeout,
           rep: nil,
           rep_mon: nil,
           acked: 0,
           held: []
         }}

      {:error, reason} ->
        {:stop, reason}
    end
  end

  defp open_file(path) do
    with :ok <- Dir.make(Path.dirname(path)),
         {:ok, seq, size} <- recover(path),
         {:ok, io} <- :file.open(path, [:read, :write, :raw, :binary]),
         {:ok, _} <- :file.position(io, size),
         :ok <- :file.truncate(io),
         :ok <- header(io, path, size) do
      {:ok, io, seq, max(size, byte_size(@header)), size == 0}
    end
  end

  # The valid part of an existing file: its record count and byte size (the rest is cut).
  defp recover(path) do
    case File.read(path) do
      {:error, :enoent} ->
        {:ok, 0, 0}

      {:ok, bin} ->
        case valid(bin) do
          {:ok, events, size, :complete} ->
            {:ok, length(events), size}

          {:ok, events, size, {:stopped_at, _, reason}} ->
            Logger.warning(
              "journal #{path}: tail cut at byte #{size} (#{reason}); #{length(events)} records kept"
            )

            {:ok, length(events), size}

          {:error, reason} ->
            {:error, {reason, path}}
        end

      error ->
        error
    end
  end

  # A new file: its header synced, and its name in the directory (before any record in it is
  # acknowledged).
  defp header(io, path, 0) do
    with :ok <- :file.write(io, @header),
         :ok <- :file.sync(io),
         do: Dir.sync(Path.dirname(path))
  end

  defp header(_io, _path, _size), do: :ok

  @impl true
  def handle_call({:append, payload, notify}, {pid, _}, st) do
    {seq, st} = add(st, payload, pid, notify)
    {:reply, {:ok, seq}, arm(st)}
  end

  def handle_call(:stats, _from, st), do: {:reply, %{records: st.records, syncs: st.syncs}, st}
  def handle_call(:sync, _from, st), do: {:reply, :ok, commit(st)}
  def handle_call(:replica, _from, st), do: {:reply, st.rep, st}

  defp add(st, payload, pid, notify) do
    seq = st.seq + 1
    record = [<<byte_size(payload)::32, :erlang.crc32(payload)::32>>, payload]
    waiters = if notify, do: [{pid, notify, seq} | st.waiters], else: st.waiters

    st = %{
      st
      | seq: seq,
        pending: [st.pending | record],
        pending_n: st.pending_n + 1,
        waiters: waiters
    }

    {seq, st}
  end

  @impl true
  def handle_info({:append, payload, pid, ref}, st) do
    {_seq, st} = add(st, payload, pid, ref)
    {:noreply, arm(st)}
  end

  def handle_info({:notify, pid, ref}, %{pending: []} = st),
    do: {:noreply, synced(st, [{pid, ref, st.seq}])}

  def handle_info({:notify, pid, ref}, st),
    do: {:noreply, arm(%{st | waiters: [{pid, ref, st.seq} | st.waiters]})}

  def handle_info({:roll, path}, st) do
    st = commit(st)
    :file.close(st.io)

    case open_file(path) do
      {:ok, io, _seq, size, fresh} ->
        st = %{st | io: io, path: path, size: size}

        cond do
          st.rep == nil -> {:noreply, st}
          # The replica gets the new file's header at once (it creates the file).
          fresh -> {:noreply, ship(st, 0, @header)}
          true -> {:noreply, drop_replica(st, :not_a_new_file)}
        end

      {:error, reason} ->
        {:stop, {:roll_failed, path, reason}, st}
    end
  end

  def handle_info(:commit, st), do: {:noreply, commit(%{st | timer: nil})}

  def handle_info({:journal_replicated, rep, seq}, %{rep: rep} = st),
    do: {:noreply, release(%{st | acked: max(st.acked, seq)})}

  def handle_info({:journal_replica_refused, rep, reason}, %{rep: rep} = st),
    do: {:noreply, drop_replica(st, reason)}

  def handle_info({:DOWN, mon, :process, _, reason}, %{rep_mon: mon} = st),
    do: {:noreply, drop_replica(st, {:down, reason})}

  def handle_info(:replica_check, st) do
    Process.send_after(self(), :replica_check, @replica_check_ms)
    {:noreply, st |> expire() |> find_replica()}
  end

  def handle_info({:EXIT, _pid, reason}, st), do: {:stop, reason, st}
  def handle_info(_other, st), do: {:noreply, st}

  @impl true
  def terminate({:shutdown, {:journal_failed, _}}, _st), do: :ok

  def terminate(_reason, st) do
    commit(st)
    :file.close(st.io)
  end

  defp arm(%{timer: nil, commit: 0} = st), do: commit(st)
  defp arm(%{timer: nil} = st), do: %{st | timer: Process.send_after(self(), :commit, st.commit)}
  defp arm(st), do: st

  # One write and one fsync for everything pending, then the waiters hear of it.
  defp commit(%{pending: []} = st), do: st

  defp commit(st) do
    result = with :ok <- :file.write(st.io, st.pending), do: datasync(st)

    case result do
      :ok ->
        :ok

      {:error, reason} ->
        # After a failed write or fsync the file can no longer be trusted (a torn record may
        # sit where the next ones would go, and the kernel may have dropped the dirty pages):
        # the waiters are told, and the writer stops. Its owner (a zone's store) restarts and
        # opens a new segment; nothing is acknowledged that is not on disk.
        Logger.error("journal #{st.path}: write failed (#{inspect(reason)}): the writer stops")

        for {pid, ref, _seq} <- Enum.reverse(st.waiters),
            do: send(pid, {:journal_failed, ref, reason})

        :file.close(st.io)
        exit({:shutdown, {:journal_failed, reason}})
    end

    %{
      st
      | size: st.size + IO.iodata_length(st.pending),
        pending: [],
        pending_n: 0,
        waiters: [],
        records: st.records + st.pending_n,
        syncs: st.syncs + 1
    }
    |> ship(st.size, st.pending)
    # In the order they were asked (the list is newest first).
    |> synced(Enum.reverse(st.waiters))
  end

  # Waiters whose records are fsynced here: told now, or, replicated, once the replica has
  # them too.
  defp synced(%{replica: nil} = st, waiters) do
    for {pid, ref, seq} <- waiters, do: send(pid, {:journal_synced, ref, seq})
    st
  end

  defp synced(st, waiters) do
    now = System.monotonic_time(:millisecond)
    release(%{st | held: st.held ++ Enum.map(waiters, &Tuple.append(&1, now))})
  end

  defp release(st) do
    {done, held} = Enum.split_while(st.held, fn {_, _, seq, _} -> seq <= st.acked end)
    for {pid, ref, seq, _} <- done, do: send(pid, {:journal_synced, ref, seq})
    %{st | held: held}
  end

  # Bytes written at `offset` of the current file, to the replica.
  defp ship(%{rep: nil} = st, _offset, _bytes), do: st

  defp ship(st, offset, bytes) do
    bin = IO.iodata_to_binary(bytes)
    send(st.rep, {:journal_append, self(), Path.basename(st.path), offset, bin, st.seq})
    st
  end

  defp drop_replica(%{rep: nil} = st, _reason), do: st

  defp drop_replica(st, reason) do
    # (Replaced, or gone with its zone moving on: no news; anything else is worth a warning.)
    level = if reason in [:replaced, {:down, :normal}], do: :info, else: :warning

    Logger.log(
      level,
      "journal #{st.path}: replica #{inspect(st.rep)} dropped (#{inspect(reason)})"
    )

    Process.demonitor(st.rep_mon, [:flush])
    %{st | rep: nil, rep_mon: nil}
  end

  # Waiters held longer than the replica timeout: never acknowledged on one copy.
  defp expire(%{held: []} = st), do: st

  defp expire(st) do
    old = System.monotonic_time(:millisecond) - st.replica_timeout
    {late, held} = Enum.split_while(st.held, fn {_, _, _, at} -> at <= old end)

    if late != [] do
      Logger.error(
        "journal #{st.path}: no replica acknowledged #{length(late)} records within " <>
          "#{st.replica_timeout} ms: they are not acknowledged"
      )
    end

    for {pid, ref, _, _} <- late, do: send(pid, {:journal_failed, ref, :no_replica})
    %{st | held: held}
  end

  # The replica function is asked with nothing pending: a new replica's seed (made by the
  # function from the directory's files) holds every record appended so far.
  defp find_replica(st) do
    st = commit(st)

    case st.replica.(st.rep) do
      :keep ->
        st

      {:ok, pid} ->
        st = drop_replica(st, :replaced)
        st = %{st | rep: pid, rep_mon: Process.monitor(pid)}
        release(%{st | acked: st.seq})

      {:error, _reason} ->
        st
    end
  end

  # The commit's fsync: `:file.datasync/1` called directly, or the test hook `:sync` (once per
  # group commit, never per record); timed into the histogram of option :fsync_us if given.
  defp datasync(%{fsync_us: nil} = st), do: do_datasync(st)

  defp datasync(%{fsync_us: h} = st) do
    t0 = System.monotonic_time()
    result = do_datasync(st)
    us = System.convert_time_unit(System.monotonic_time() - t0, :native, :microsecond)
    Overworld.Metrics.Histogram.record(h, us)
    result
  end

  defp do_datasync(%{sync: nil, io: io}), do: :file.datasync(io)
  defp do_datasync(%{sync: sync, io: io}), do: sync.(io)
end

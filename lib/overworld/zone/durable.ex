defmodule Overworld.Zone.Durable do
  @moduledoc false
  # Durability, as functions over the zone server's state (`Overworld.Zone.State`):
  #
  #   * joins and leaves are journaled, nobody waits for them (`journal/2`);
  #   * durable events (`{:durable, event}` actions, events of `handle_entity/3`) are journaled
  #     and acknowledged to game code (`c:Overworld.Zone.handle_durable/2`) only once the
  #     journal's fsync covers them (`events/4`, `synced/2`); a server that replaces a dead one
  #     acknowledges the events its predecessor handed to the journal (`adopt/1`);
  #   * snapshots: every `:snapshot_ticks` ticks (or `:snapshot_ms`), one at a time, assembled
  #     by the store from the server's part and the workers' cells (`snapshot/2`), and the
  #     workers' other after-tick jobs (history keyframes, state hashes: `jobs/2`).
  #
  # Without a data directory there is no journal: events are acknowledged at once.

  alias Overworld.Persistence.Journal
  alias Overworld.Zone.{Actions, Memory, Players, State, Store}

  @doc "Journals a join or a leave (no acknowledgement)."
  @spec journal(State.t(), tuple) :: :ok
  def journal(%State{journal: nil}, _record), do: :ok
  def journal(st, record), do: Journal.append_async(st.journal, record, nil)

  @doc """
  Events of tick `n`: journaled (acknowledged once on disk), or acknowledged at once without a
  data directory. `finished` (a tick, or nil): that tick's end is handled, recorded in the
  same insert as the events' row, so a server killed in between cannot journal them twice.
  """
  @spec events(State.t(), non_neg_integer, [term], non_neg_integer | nil) :: State.t()
  def events(st, n, events, finished \\ nil)

  def events(%State{journal: j} = st, _n, events, finished) when j == nil or events == [] do
    if finished, do: Memory.put_finished(st.memory, finished)
    acknowledge(st, events)
  end

  def events(st, n, events, finished) do
    ref = make_ref()
    Journal.append_async(st.journal, {:events, n, events}, ref)
    # Remembered once handed to the journal (never before: a successor acknowledges what it
    # finds here once the journal has synced it).
    Memory.put_unsynced(st.memory, ref, events, finished)
    %{st | unsynced: Map.put(st.unsynced, ref, {events, [ref]})}
  end

  @doc """
  A dead predecessor's events still waiting for their fsync: acknowledged, in order, once
  every record it appended is on disk (the journal outlived it). Its rows stay until then.
  """
  @spec adopt(State.t()) :: State.t()
  def adopt(%State{journal: nil} = st), do: st

  def adopt(st) do
    case Memory.unsynced(st.memory) do
      [] ->
        st

      rows ->
        ref = make_ref()
        Journal.notify(st.journal, ref)
        batch = {Enum.flat_map(rows, &elem(&1, 1)), Enum.map(rows, &elem(&1, 0))}
        %{st | unsynced: Map.put(st.unsynced, ref, batch)}
    end
  end

  @doc "Whether `ref` names a batch of events waiting for the journal."
  @spec waiting?(State.t(), reference) :: boolean
  def waiting?(st, ref), do: is_map_key(st.unsynced, ref)

  @doc "A batch is on disk: game code acknowledges its events (`c:handle_durable/2`)."
  @spec synced(State.t(), reference) :: State.t()
  def synced(st, ref) do
    {events, st} = pop(st, ref)
    acknowledge(st, events)
  end

  @doc "A batch could not be journaled: its events are never acknowledged (logged)."
  @spec failed(State.t(), reference) :: {non_neg_integer, State.t()}
  def failed(st, ref) do
    {events, st} = pop(st, ref)
    {length(events), st}
  end

  # The batch's rows go before anything is acknowledged (a server killed in between loses
  # those acknowledgements rather than sending them twice).
  defp pop(st, ref) do
    {{events, rows}, unsynced} = Map.pop(st.unsynced, ref)
    Memory.delete_unsynced(st.memory, rows)
    {events, %{st | unsynced: unsynced}}
  end

  defp acknowledge(st, events) do
    if function_exported?(st.config.module, :handle_durable, 2),
      do: Enum.reduce(events, st, &Actions.run(&2, :handle_durable, [&1, &2.game])),
      else: st
  end

  ## After a tick: snapshots and the workers' jobs

  @doc """
  What the workers do after tick `n`: their part of a snapshot (when one is due), of a history
  keyframe, and (debug zones) their state hash.
  """
  @spec jobs(State.t(), non_neg_integer) :: {State.t(), list}
  def jobs(st, n) do
    c = st.config
    {st, snap} = snapshot(st, n)
    history? = c.history > 0 and rem(n, c.keyframe_ticks) == 0

    jobs =
      [
        snap,
        history? &&
          {:keyframe, rem(div(n, c.keyframe_ticks), div(c.history, c.keyframe_ticks) + 2)},
        c.debug && {:hash, Memory.slots(c.history)}
      ]
      |> Enum.filter(& &1)

    {st, jobs}
  end

  defp snapshot(%State{store: nil} = st, _n), do: {st, nil}

  defp snapshot(st, n) do
    c = st.config
    now = System.monotonic_time(:millisecond)

    due =
      st.snap_tick == nil or n - st.snap_tick >= c.snapshot_ticks or
        (c.snapshot_ms != nil and now - st.snap_at >= c.snapshot_ms)

    # One snapshot at a time: the next waits until the store has written (or dropped) this
    # one, so copies of the world never pile up in its mailbox.
    if due and not st.snapshotting, do: take(st, n, now), else: {st, nil}
  end

  @doc """
  A snapshot of the last tick now, whether due or not (a zone released to another node:
  `Overworld.Zone.Release`); none may be under way. Answers the workers' job.
  """
  @spec snapshot_now(State.t()) :: {State.t(), {:snapshot, pid, non_neg_integer}}
  def snapshot_now(%State{snapshotting: false} = st),
    do: take(st, st.tick, System.monotonic_time(:millisecond))

  @doc """
  A snapshot asked for now (`Overworld.Zone.snapshot/1`): taken once no tick runs and no other
  snapshot is being written, answered `{:ok, tick}` once written (`snapshot_written/2`).
  Callers who ask while one is waiting to be taken share it.
  """
  @spec ask_snapshot(State.t(), GenServer.from()) :: State.t()
  def ask_snapshot(st, from), do: take_asked(%{st | snapshot_asked: [from | st.snapshot_asked]})

  @doc """
  Takes the snapshot asked for, if any and nothing is under way (called after a tick and after
  a snapshot is written). A zone letting go of its state (`Overworld.Zone.Release`) takes its
  own instead.
  """
  @spec take_asked(State.t()) :: State.t()
  def take_asked(
        %State{snapshot_asked: [_ | _] = froms, running: nil, snapshotting: false, release: nil} =
          st
      ) do
    {st, job} = snapshot_now(st)
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:jobs_now, st.epoch, [job]})
    %{st | snapshot_asked: [], snapshot_answer: {st.tick, froms}}
  end

  def take_asked(st), do: st

  @doc """
  A snapshot of `tick` was written (or dropped: the store logs why): those who asked for it
  are answered, and the next asked for is taken.
  """
  @spec snapshot_written(State.t(), non_neg_integer) :: State.t()
  def snapshot_written(%State{snapshot_answer: {tick, froms}} = st, tick) do
    for from <- froms, do: GenServer.reply(from, {:ok, tick})
    take_asked(%{st | snapshot_answer: nil})
  end

  def snapshot_written(st, _tick), do: take_asked(st)

  defp take(st, n, now) do
    c = st.config
    # A new journal segment: the records after this snapshot start there.
    segment = st.segment + 1
    # Remembered before the roll: a server killed in between never rolls to it again.
    Memory.put_segment(st.memory, segment)
    Journal.roll(st.journal, Store.segment_path(Store.dir(c), segment))

    part = %{
      game: st.game,
      next_id: st.next_id,
      players: Players.to_map(st.players),
      spawns: st.spawns,
      despawns: st.despawns,
      segment: segment,
      # A zone of a world: transfers not acknowledged, transfers adopted.
      world: Overworld.Zone.Neighbours.saved(st)
    }

    send(st.store, {:snapshot_begin, n, part, c.workers, self()})

    {%{st | segment: segment, snap_tick: n, snap_at: now, snapshotting: true},
     {:snapshot, st.store, n}}
  end
end

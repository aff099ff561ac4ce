defmodule Overworld.Zone.Neighbours do
  @moduledoc false
  # A zone of a world (`Overworld.World`) and its neighbour zones, seen from its server: zones
  # talk only by messages, one per neighbour per tick:
  #
  #   {:overworld_shadows, from, tick, cells, transfers, acks}
  #
  # * `cells` — the sender's cells of tick `tick` that the receiver needs as shadows (sorted
  #   `{key, entities}` pairs, see Overworld.World.Place.shadow_rows/1);
  # * `transfers` — `[{transfer id, entity, session}]`: entities the sender handed to the
  #   receiver at the end of that tick (full state), sent again until acknowledged; the
  #   receiver adopts a transfer id once. A player's avatar comes with its player: `session`
  #   is the pid of the player's session (nil for others, or unknown), which follows it;
  # * `acks` — the transfer ids the sender adopted since its last message.
  #
  # And, when it happens, `{:overworld_gone, from, [{entity id, player | nil, reason}]}`: what
  # was despawned (or whose player left) after the sender handed it to the receiver, sent on
  # to the zone that holds it (or will: it may come before the transfer, whose message waits
  # for its journal record), which despawns it, or runs the player's leave, once it has it.
  #
  # Tick n of a zone reads its neighbours' shadows of tick n - 1 and adopts the transfers of
  # ticks up to n - 1, as an entity reads its neighbours' previous state inside one zone:
  # with the manual clock the zone waits for them (`ready?/2`), so a world computes exactly
  # what one zone covering its map computes. With the realtime clock it reads the newest it
  # has: shadows late by a tick or more are dead-reckoned from their velocity, and dropped past
  # the place's lateness bound (`Overworld.World.Shadows`).

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Telemetry
  alias Overworld.Metrics.Histogram
  alias Overworld.Persistence.Journal
  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.World.{Place, Shadows}
  alias Overworld.Zone.{Config, Crossings, Memory, Metrics, State}

  # Entries kept per neighbour (a neighbour runs at most a tick ahead with the manual clock).
  @keep 3
  # Ticks after which an unacknowledged transfer is sent again; ticks a transfer id is
  # remembered after its adoption (a transfer sent again is ignored).
  @resend 2
  @remember 300

  @type t :: %{
          neighbours: [{term, term}],
          inbox: %{optional(term) => [{non_neg_integer, Sweep.pairs()}]},
          incoming: %{optional(term) => {term, non_neg_integer, Overworld.Entity.t()}},
          adopted: %{optional(term) => non_neg_integer},
          acks: %{optional(term) => [term]},
          pending: %{optional(term) => {term, non_neg_integer, Overworld.Entity.t()}},
          last: %{optional(term) => [tuple]},
          deferred: %{optional(reference) => {[{term, tuple}], [term]}},
          ack_wait: %{optional(reference) => [{term, term}]},
          hold: reference | nil,
          sessions_out: %{optional(term) => pid},
          moved: %{optional(term) => {pid | nil, non_neg_integer, term}},
          early: %{optional(term) => {non_neg_integer, [tuple]}},
          recent: %{optional(pos_integer) => tuple},
          incarnation: term,
          adopting: boolean,
          handed: %{optional(pos_integer) => true},
          away: %{optional(pos_integer) => {term, non_neg_integer, term}},
          doomed: %{optional(pos_integer) => {term, term, non_neg_integer}}
        }

  @doc "The neighbour state of a zone's server (nil for a zone of its own)."
  @spec new(Config.t()) :: t | nil
  def new(%Config{world: nil}), do: nil

  def new(%Config{world: place}) do
    neighbours = Place.neighbours(place)

    %{
      neighbours: neighbours,
      inbox: Map.new(neighbours, fn {n, _} -> {n, []} end),
      incoming: %{},
      adopted: %{},
      acks: %{},
      pending: %{},
      last: %{},
      deferred: %{},
      ack_wait: %{},
      hold: nil,
      sessions_out: %{},
      # Players whose avatar we handed away (`@remember` ticks): player => {session, tick,
      # neighbour}; and what came for players not ours yet, forwarded by the zone they left
      # (their avatar in flight to us): player => {tick, [item]} (newest first, bounded).
      moved: %{},
      early: %{},
      # With a lower shadow rate: what we adopted and handed lately (`since/4`).
      recent: %{},
      # Transfer ids are `{entity id, {tick, incarnation}}`: unique across restarts (a zone
      # restarted from disk goes back in ticks and hands an entity over at a tick it used).
      incarnation: {System.os_time(), :erlang.unique_integer([:positive])},
      adopting: false,
      # The ids handed to neighbours at the end of our last tick (every worker's).
      handed: %{},
      # Entities we handed away (`@remember` ticks): id => {neighbour, tick, player}; and
      # those a neighbour despawned after handing them to us: id => {player, reason, tick}.
      away: %{},
      doomed: %{}
    }
  end

  @doc """
  After a server restart (from the in-memory copy): the transfers not yet acknowledged (sent
  again) and those adopted (not adopted twice).
  """
  @spec restore(t | nil, map | nil) :: t | nil
  def restore(nil, _saved), do: nil
  def restore(w, nil), do: w

  def restore(w, saved) do
    # (From memory, the same timeline: the same transfer ids, so those republished are the
    # ones sent before. From disk, ticks go back: new ids, `saved` has no incarnation.)
    %{
      w
      | pending: saved.pending,
        adopted: saved.adopted,
        incarnation: Map.get(saved, :incarnation, w.incarnation)
    }
  end

  @doc """
  After a server restart from disk, once the snapshot's tick is loaded: the ids the zone
  handed over at the end of that tick (loaded read-only: `Overworld.Zone.Recovery`), as
  publishing that tick would have left them, so that a snapshot of it keeps them as handed.
  """
  @spec handed(State.t(), [pos_integer]) :: State.t()
  def handed(%State{world: nil} = st, _ids), do: st

  def handed(%State{world: w} = st, ids),
    do: %{st | world: %{w | handed: Map.new(ids, &{&1, true})}}

  @doc """
  After a server restart from memory: the players whose avatars we handed away lately (what
  comes for them goes on after them, `event/5`; what we send them reaches their session).
  """
  @spec restore_moved(t | nil, [{term, tuple}]) :: t | nil
  def restore_moved(nil, _moved), do: nil
  def restore_moved(w, moved), do: %{w | moved: Map.new(moved)}

  @doc """
  A restarted server with a journal: the transfers its predecessor handed to the journal are
  sent again only once the journal has synced everything appended so far (never before their
  `:handoff_out` record is on disk).
  """
  @spec hold(State.t()) :: State.t()
  def hold(%State{world: nil} = st), do: st
  def hold(%State{journal: nil} = st), do: st

  def hold(%State{world: w} = st) do
    ref = make_ref()
    Journal.notify(st.journal, ref)
    %{st | world: %{w | hold: ref}}
  end

  @doc "Whether `ref` is a journal notification of ours (`synced/2` then)."
  @spec waiting?(State.t(), reference) :: boolean
  def waiting?(%State{world: nil}, _ref), do: false

  def waiting?(%State{world: w}, ref),
    do: w.hold == ref or is_map_key(w.deferred, ref) or is_map_key(w.ack_wait, ref)

  @doc """
  The journal synced `ref`: messages carrying new transfers go now (their `:handoff_out`
  record is on disk), adoptions are acknowledged (their `:handoff_in` record is).
  """
  @spec synced(State.t(), reference) :: State.t()
  def synced(%State{world: w} = st, ref) do
    {{msgs, _tids}, deferred} = Map.pop(w.deferred, ref, {[], []})
    {acks, ack_wait} = Map.pop(w.ack_wait, ref, [])

    last =
      Enum.reduce(msgs, w.last, fn {to, msg}, last ->
        sent(st, w, to, msg)
        keep_last(last, to, msg)
      end)

    acks_out = Enum.reduce(acks, w.acks, fn {from, tid}, acc -> ack(acc, from, tid) end)

    hold = if w.hold == ref, do: nil, else: w.hold

    %{
      st
      | world: %{
          w
          | deferred: deferred,
            ack_wait: ack_wait,
            last: last,
            acks: acks_out,
            hold: hold
        }
    }
  end

  @doc """
  The journal could not write a handoff record (`ref`): logged; the transfers go all the same
  (a world whose disk fails keeps its entities moving; a crash before the disk is back may
  then find one of them twice), adoptions are acknowledged.

  But a record written here that no replica acknowledged in time (`:no_replica`, durability
  `:replicated`) goes on waiting for one: a transfer or an acknowledgement never goes on one
  copy (the zone's node may die before a replica has the record, and its zone restart
  elsewhere from a copy that holds the entity still, or never adopted it). Its entities wait
  at the border meanwhile.
  """
  @spec failed(State.t(), reference, term) :: State.t()
  def failed(st, ref, :no_replica) do
    Journal.notify(st.journal, ref)
    st
  end

  def failed(st, ref, reason) do
    Logger.error(
      "zone #{inspect(st.config.id)}: a handoff record was not journaled (#{inspect(reason)}); " <>
        "the transfers go on without it"
    )

    synced(st, ref)
  end

  @doc """
  What a snapshot keeps of a world zone: the transfers not acknowledged, those adopted, and
  the ids handed over at the end of its tick (the snapshot still holds them: they are not
  ours, acknowledged or not).
  """
  @spec saved(State.t()) :: map | nil
  def saved(%State{world: nil}), do: nil

  def saved(%State{world: w}),
    do: %{pending: w.pending, adopted: w.adopted, handed: Map.keys(w.handed)}

  # Written to the in-memory copy whenever they change: after the publication that hands over
  # or the message that acknowledges, and with the record of the tick that adopts (in the same
  # insert: a server killed in between finds both or neither, see `memory_rows/1`).
  defp remember(%State{world: w, memory: mem} = st) do
    Memory.put_world(mem, memorised(w))
    st
  end

  # What the in-memory copy keeps: `saved/1` and the incarnation (the same timeline).
  defp memorised(w), do: %{pending: w.pending, adopted: w.adopted, incarnation: w.incarnation}

  @doc "The in-memory copy's rows of a world zone, written with each tick's record."
  @spec memory_rows(State.t()) :: list
  def memory_rows(%State{world: nil}), do: []

  # (Only with a tick that adopts: other changes are written when they happen, `remember/1`.)
  def memory_rows(%State{world: %{adopting: false}}), do: []

  def memory_rows(%State{world: w}), do: [Memory.world_row(memorised(w))]

  @doc "A neighbour's message, kept for the ticks that read it."
  @spec received(State.t(), term) :: State.t()
  def received(%State{world: nil} = st, _msg), do: st

  def received(%State{world: w} = st, {:overworld_shadows, from, tick, cells, transfers, acks})
      when is_map_key(w.inbox, from) do
    # Newest first (a message sent again on a hello may come after a newer one). `cells` nil:
    # no shadows that tick (a lower shadow rate): the newest entry with some is kept too.
    inbox =
      Map.update!(w.inbox, from, fn entries ->
        all =
          Enum.sort_by(
            [{tick, cells, st.tick} | List.keydelete(entries, tick, 0)],
            &elem(&1, 0),
            :desc
          )

        # (And the two newest with cells: a neighbour a tick ahead may have sent the next
        # ones already, with the manual clock; we read the older until our tick reaches it.)
        with_cells = all |> Enum.filter(&(elem(&1, 1) != nil)) |> Enum.take(2)
        Enum.uniq(Enum.take(all, @keep) ++ with_cells) |> Enum.sort_by(&elem(&1, 0), :desc)
      end)

    # (A transfer sent again by a restarted neighbour may carry no session: the one it came
    # with first is kept.)
    incoming =
      Enum.reduce(transfers, w.incoming, fn {tid, e, session}, acc ->
        cond do
          is_map_key(w.adopted, tid) -> acc
          session == nil and is_map_key(acc, tid) -> acc
          true -> Map.put(acc, tid, {from, tick, e, session})
        end
      end)

    # Adopted again (sent twice): acknowledged again, once its adoption is on disk (not while
    # its record waits for the journal, nor before a restarted server's journal synced).
    again =
      case for {tid, _, _} <- transfers, is_map_key(w.adopted, tid), w.hold == nil, do: tid do
        [] ->
          []

        adopted ->
          waiting = for {_ref, l} <- w.ack_wait, {_, tid} <- l, into: MapSet.new(), do: tid
          Enum.reject(adopted, &MapSet.member?(waiting, &1))
      end

    # Players' avatars on their way to us: their inputs come to our slots from now.
    Crossings.arriving(
      st,
      for(
        {tid, e, pid} <- transfers,
        is_pid(pid) and entity(e, :owner) != nil,
        not is_map_key(w.adopted, tid) and not is_map_key(w.incoming, tid),
        do: {e, pid}
      )
    )

    # Ownership confirmed, for an entity handed at the end of our tick `at`: the ticks of ours
    # since (the one running counts).
    for tid <- acks,
        {_, at, _} <- [Map.get(w.pending, tid)],
        at >= 0,
        do: Histogram.record(st.metrics.handoff_ticks, State.next_tick(st) - at)

    acks_out = if again == [], do: w.acks, else: Map.update(w.acks, from, again, &(again ++ &1))

    st = %{
      st
      | world: %{
          w
          | inbox: inbox,
            incoming: incoming,
            acks: acks_out,
            pending: Map.drop(w.pending, acks)
        }
    }

    if acks != [], do: st |> journal_acks(acks, w.pending) |> remember(), else: st
  end

  # A neighbour (re)started: it gets our last messages again (it may have lost them, and be a
  # tick behind us).
  # (Answered to the pid that asked: on another node, the cluster's registry may not show it
  # yet.)
  def received(%State{world: w} = st, {:overworld_hello, from, pid})
      when is_map_key(w.inbox, from) do
    for msg <- Enum.reverse(Map.get(w.last, from, [])), do: send(pid, msg)
    st
  end

  def received(st, _msg), do: st

  # Acknowledged transfers are journaled (not waited for): a zone started again from its
  # files does not send them again. (A neighbour remembers the transfers it adopted only
  # `@remember` ticks: one sent again after that would be adopted twice.)
  defp journal_acks(%State{journal: nil} = st, _acks, _pending), do: st

  defp journal_acks(st, acks, pending) do
    case for tid <- acks, is_map_key(pending, tid), do: tid do
      [] -> st
      acked -> Journal.append_async(st.journal, {:handoff_acked, st.tick, acked}, nil) && st
    end
  end

  @doc "Tells the neighbours we (re)started: each sends its last message again."
  @spec hello(State.t()) :: :ok
  def hello(%State{world: nil}), do: :ok

  def hello(%State{world: w, config: c}) do
    for {to, _} <- w.neighbours, do: send_to(w, to, {:overworld_hello, c.world.id, self()})
    :ok
  end

  @doc false
  # A message to neighbour `to` (its region id), if its server runs.
  @spec send_to(t, term, term) :: term
  def send_to(w, to, msg) do
    {_, zone} = List.keyfind(w.neighbours, to, 0)

    # On this node, else wherever it runs in the cluster.
    case Overworld.Zone.whereis(zone) do
      nil -> false
      pid -> send(pid, msg)
    end
  end

  @doc """
  Whether every neighbour's shadows of tick n - 1 are here (the manual clock waits), or the
  neighbour is past them: every message it sent us since it (re)started is of a later tick
  (we went back in ticks, restarted from our files: we catch up on its oldest).
  """
  @spec ready?(State.t(), non_neg_integer) :: boolean
  def ready?(%State{world: nil}, _n), do: true

  def ready?(%State{world: w}, n),
    do:
      Enum.all?(w.inbox, fn {_, entries} ->
        List.keymember?(entries, n - 1, 0) or ahead?(entries, n)
      end)

  defp ahead?([], _n), do: false
  defp ahead?(entries, n), do: entries |> List.last() |> elem(0) > n - 1

  @doc """
  What the workers get with tick n: per worker `{shadow cells, adopted entities, {the entities
  adopted by any worker (id => entity), ids handed away at the end of the last tick}}` (nil
  for a zone of its own; the zone's history keeps it: `Overworld.Zone.History` replays from
  it). The transfers adopted are acknowledged with our next message.
  """
  @spec take(State.t(), non_neg_integer) :: {State.t(), tuple | nil}
  def take(%State{world: nil} = st, _n), do: {st, nil}

  def take(%State{world: w, config: c} = st, n) do
    late = c.world.late

    manual? = c.clock == :manual

    shadows =
      w.inbox
      |> Enum.flat_map(fn {from, entries} ->
        case newest(entries, n, manual?) do
          {cells, 0, as_of} -> [{from, cells, as_of}]
          {cells, age, as_of} when age <= late -> [{from, reckon(c, cells, age), as_of}]
          _ -> []
        end
      end)
      |> since(w.recent, n, c)
      |> merge_all()
      |> within_reach(c)

    {now, later} =
      if manual?,
        do: Enum.split_with(w.incoming, fn {_tid, {_, t, _, _}} -> t <= n - 1 end),
        else: {Map.to_list(w.incoming), []}

    adopt = for {_tid, {_, _, e, _}} <- now, do: e
    recent = recent(c.world, w.recent, n, for(e <- adopt, do: {entity(e, :id), {:adopted, n}}))

    # With a journal, an adoption is acknowledged once its record is on disk (until then the
    # old zone keeps the transfer and sends it again after a crash of ours).
    {acks, ack_wait} =
      case {now, st.journal} do
        {[], _} ->
          {w.acks, w.ack_wait}

        {_, nil} ->
          {Enum.reduce(now, w.acks, fn {tid, {from, _, _, _}}, acc -> ack(acc, from, tid) end),
           w.ack_wait}

        {_, journal} ->
          ref = make_ref()

          record = {:handoff_in, n, for({tid, {_, _, e, _}} <- now, do: {tid, e})}
          Journal.append_async(journal, record, ref)
          {w.acks, Map.put(w.ack_wait, ref, for({tid, {from, _, _, _}} <- now, do: {from, tid}))}
      end

    # (Pruned when it grows: not a walk of the map every tick.)
    adopted =
      case now do
        [] ->
          w.adopted

        _ ->
          now
          |> Enum.reduce(w.adopted, fn {tid, _}, acc -> Map.put(acc, tid, n) end)
          |> Map.reject(fn {_, at} -> at < n - @remember end)
      end

    if now != [], do: Metrics.add(st.metrics, :crossings_in, length(now))
    by_worker = Enum.group_by(adopt, &Config.owner_of(c, entity(&1, :x), entity(&1, :y)))

    # What is ours this tick, the same for every worker: every worker's adoptions (a worker's
    # halo of the last tick has not got another's: they join it from here, never as their old
    # zone's shadows, which the realtime clock may have read a tick off, or not at all) and
    # handoffs (in its halo). Shadows but those adopted, and those handed away at the end of
    # the last tick, are flagged as shadows to game code.
    marks = {Map.new(adopt, &{entity(&1, :id), &1}), w.handed}

    parts =
      for {{r0, r1}, i} <- Enum.with_index(Tuple.to_list(c.stripes)) do
        lo = Grid.key_at(c.grid, 0, r0 - 1)
        hi = Grid.key_at(c.grid, 0, r1 + 1)
        mine = for {k, _} = pair <- shadows, k >= lo and k < hi, do: pair
        {mine, Map.get(by_worker, i, []), marks}
      end

    # An entity coming back proves our earlier transfers of it were adopted: not sent again.
    back = for {_tid, {_, _, e, _}} <- now, into: MapSet.new(), do: entity(e, :id)

    pending =
      if now == [],
        do: w.pending,
        else: Map.reject(w.pending, fn {{id, _}, _} -> MapSet.member?(back, id) end)

    w = %{
      w
      | incoming: Map.new(later),
        recent: recent,
        acks: acks,
        ack_wait: ack_wait,
        adopted: adopted,
        pending: pending,
        adopting: now != []
    }

    st =
      %{st | world: w}
      |> Crossings.players_in(
        for({_tid, {_, _, e, pid}} <- now, entity(e, :owner) != nil, do: {e, pid})
      )
      |> Crossings.arrived(back)

    {st, List.to_tuple(parts)}
  end

  # The cells a neighbour's messages give tick n, and how many ticks late they are. With the
  # manual clock, exactly its tick n - 1 (the zones tick in lockstep). With the realtime clock
  # the zones' tick numbers drift apart (each skips the deadlines it overran), so the newest
  # message: late by the ticks of ours that ran since it came.
  # (And the tick of ours the cells stand for: the sender's tick with the manual clock, the
  # one before they came with the realtime clock.)
  # (Or, catching up with a neighbour past our tick n - 1, its oldest, as it is.)
  defp newest(entries, n, true = _manual?) do
    case Enum.find(entries, &(elem(&1, 0) <= n - 1 and elem(&1, 1) != nil)) do
      {t, cells, _} ->
        {cells, n - 1 - t, t}

      nil ->
        if ahead?(entries, n),
          do: entries |> Enum.filter(&(elem(&1, 1) != nil)) |> List.last() |> oldest(),
          else: nil
    end
  end

  defp newest(entries, n, false) do
    case Enum.find(entries, &(elem(&1, 1) != nil)) do
      {_t, cells, came} -> {cells, max(n - 1 - came, 0), came - 1}
      nil -> nil
    end
  end

  defp oldest(nil), do: nil
  defp oldest({t, cells, _}), do: {cells, 0, t}

  # A lower shadow rate: a neighbour's cells may be older than what we did since. An entity we
  # adopted since is ours (its shadow goes); one we handed to a neighbour after the tick that
  # neighbour's cells stand for is not in them yet: our last copy of it stands in, reckoned
  # (and another neighbour's older copy goes). With shadows every tick, nothing to do.
  defp since(sources, recent, _n, _c) when map_size(recent) == 0,
    do: for({_from, cells, _as_of} <- sources, do: cells)

  defp since(sources, recent, n, c) do
    as_of = Map.new(sources, fn {from, _, t} -> {from, t} end)

    kept =
      for {from, cells, t} <- sources do
        for {k, l} <- cells,
            l = Enum.reject(l, &stale?(Map.get(recent, entity(&1, :id)), from, t)),
            l != [],
            do: {k, l}
      end

    # (One handed at the end of our last tick is in our workers' view still: `departed`.)
    ours =
      for {_id, {:handed, h, to, e}} <- recent,
          h < n - 1 and Map.get(as_of, to, -1) <= h,
          do: inside(c, Shadows.reckon(e, n - 1 - h, c.tick_rate))

    [Sweep.from_entities(c.grid, ours) | kept]
  end

  defp stale?(nil, _from, _t), do: false
  defp stale?({:adopted, _at}, _from, _t), do: true
  # (One handed on since by the zone we handed it to: the cells newer than our handoff have
  # it where it is, whichever neighbour's they are.)
  defp stale?({:handed, h, _to, _e}, _from, t), do: t <= h

  # What we adopted and handed lately (a lower shadow rate only): id => the latest of
  # `{:adopted, tick}` and `{:handed, tick, neighbour, entity}`, for the ticks a neighbour's
  # shadows may be older than ours.
  defp recent(%Place{every: 1}, recent, _n, _events), do: recent

  defp recent(%Place{every: every, late: late}, recent, n, events) do
    recent
    |> Map.reject(fn {_id, event} -> elem(event, 1) < n - every - late - 1 end)
    |> Map.merge(Map.new(events))
  end

  # A neighbour's cells `ticks` ticks older than wanted: each entity moved on by its velocity
  # (into the cell it reaches).
  defp reckon(c, cells, ticks) do
    entities = for {_k, l} <- cells, e <- l, do: Shadows.reckon(e, ticks, c.tick_rate)
    Sweep.from_entities(c.grid, Enum.map(entities, &inside(c, &1)))
  end

  # With a lower shadow rate the neighbours send a wider margin (where an entity may come
  # from before the next update): once reckoned, what lies beyond our reach is not read.
  defp within_reach(pairs, %Config{world: %Place{margin: 2}}), do: pairs

  defp within_reach(pairs, %Config{world: place, grid: g}) do
    {c0, r0, c1, r1} = Place.reach(place)

    for {k, _} = pair <- pairs,
        col = Grid.col(g, k),
        row = Grid.row(g, k),
        col >= c0 and col <= c1 and row >= r0 and row <= r1,
        do: pair
  end

  defp inside(%Config{grid: g}, e) do
    entity(e,
      x: entity(e, :x) |> max(0) |> min(g.width),
      y: entity(e, :y) |> max(0) |> min(g.height)
    )
  end

  defp merge_all([]), do: []
  defp merge_all([one]), do: one
  defp merge_all([a, b | rest]), do: merge_all([Sweep.merge(a, b) | rest])

  @doc """
  The workers' reports of tick n (`{worker, {shadows by neighbour, handoffs}}`) as one
  message to each neighbour: its shadow cells, the entities handed to it (and those not yet
  acknowledged, again), the transfers we adopted.
  """
  @spec publish(State.t(), non_neg_integer, [{non_neg_integer, term}]) :: State.t()
  def publish(%State{world: nil} = st, _n, _parts), do: st

  def publish(%State{world: w, config: c} = st, n, parts) do
    parts = Enum.sort_by(parts, &elem(&1, 0))

    handoffs =
      for {_w, {_, handoffs}} <- parts,
          {to, e} <- handoffs,
          do: {to, {entity(e, :id), {n, w.incarnation}}, e}

    pending =
      Enum.reduce(handoffs, w.pending, fn {to, tid, e}, acc -> Map.put(acc, tid, {to, n, e}) end)

    # The sessions of the players whose avatars go: they travel with the transfer.
    sessions =
      for {_to, tid, e} <- handoffs,
          player = entity(e, :owner),
          player != nil,
          is_map_key(st.sessions, player),
          into: w.sessions_out,
          do: {tid, Map.fetch!(st.sessions, player)}

    # (A server restarted from memory publishes its last tick again: the transfers its
    # predecessor remembered are counted once.)
    fresh = Enum.count(handoffs, fn {_to, tid, _e} -> not is_map_key(w.pending, tid) end)

    if fresh > 0 do
      Metrics.add(st.metrics, :crossings_out, fresh)

      Telemetry.execute([:overworld, :zone, :handoff], %{count: fresh}, %{
        zone: c.id,
        tick: n
      })
    end

    # With a journal, the entities handed over are journaled first, and the messages that
    # carry them wait for the record's fsync (a zone restarted from disk must not find them
    # again while the neighbour has them). The other neighbours' messages go now.
    {defer_ref, deferred_to} =
      if st.journal != nil and handoffs != [] do
        ref = make_ref()
        Journal.append_async(st.journal, {:handoff_out, n, handoffs}, ref)
        {ref, MapSet.new(handoffs, &elem(&1, 0))}
      else
        {nil, MapSet.new()}
      end

    # Transfers whose handoff_out record is not on disk yet (their first message waits).
    unsynced = for {_ref, {_msgs, tids}} <- w.deferred, tid <- tids, into: MapSet.new(), do: tid

    # Remembered before any message goes: a server killed while sending is replaced by one
    # that sends the same transfers (same ids) again.
    if handoffs != [], do: Memory.put_world(st.memory, memorised(%{w | pending: pending}))

    # (After a restart with a journal, transfers wait until it synced its predecessor's records.)
    resend? = w.hold == nil

    {last, deferred} =
      Enum.reduce(w.neighbours, {w.last, []}, fn {to, _zone}, {last, deferred} ->
        # (With a lower shadow rate, none between two updates: nil, not an empty list.)
        cells =
          if rem(n, c.world.every) == 0,
            do: Enum.flat_map(parts, fn {_w, {shadows, _}} -> Map.get(shadows, to, []) end)

        # (A transfer goes again only once its record is on disk: never ahead of its fsync.)
        transfers =
          for {tid, {^to, at, e}} <- pending,
              at == n or (resend? and n - at >= @resend and not MapSet.member?(unsynced, tid)),
              do: {tid, e, Map.get(sessions, tid)}

        msg = {:overworld_shadows, c.world.id, n, cells, transfers, Map.get(w.acks, to, [])}

        if MapSet.member?(deferred_to, to) do
          {last, [{to, msg} | deferred]}
        else
          sent(st, w, to, msg)
          {keep_last(last, to, msg), deferred}
        end
      end)

    deferred =
      if defer_ref,
        do: Map.put(w.deferred, defer_ref, {deferred, for({_, tid, _} <- handoffs, do: tid)}),
        else: w.deferred

    w = %{
      w
      | pending: pending,
        acks: %{},
        last: last,
        deferred: deferred,
        sessions_out: Map.take(sessions, Map.keys(pending)),
        handed: Map.new(handoffs, fn {_to, {id, _}, _e} -> {id, true} end),
        away: away(w, n, handoffs),
        recent:
          recent(
            c.world,
            w.recent,
            n,
            for({to, {id, _}, e} <- handoffs, do: {id, {:handed, n, to, e}})
          ),
        doomed: prune(w.doomed, n, 2),
        early: Crossings.prune_early(w.early, n, st.config.id)
    }

    # (The in-memory copy has this tick's transfers already: written before any message.)
    Crossings.players_out(
      %{st | world: w},
      for({to, _, e} <- handoffs, entity(e, :owner) != nil, do: {to, e})
    )
  end

  # (Pruned once a second or so: not a walk of the map every tick.)
  defp away(w, n, handoffs) do
    away =
      Enum.reduce(handoffs, w.away, fn {to, {id, _}, e}, acc ->
        Map.put(acc, id, {to, n, entity(e, :owner)})
      end)

    prune(away, n, 1)
  end

  defp prune(map, n, at) when rem(n, 32) == 0 and map_size(map) > 0,
    do: Map.reject(map, fn {_id, entry} -> elem(entry, at) < n - @remember end)

  defp prune(map, _n, _at), do: map

  # Our last messages to a neighbour, newest first (sent again on its hello).
  # (And the newest with cells: with a lower shadow rate, the last few may have none.)
  defp keep_last(last, to, msg) do
    all = [msg | Map.get(last, to, [])]
    with_cells = Enum.find(all, &(elem(&1, 3) != nil))
    kept = Enum.take(all, @keep)
    kept = if with_cells in kept or with_cells == nil, do: kept, else: kept ++ [with_cells]
    Map.put(last, to, kept)
  end

  # A transfer adopted, to acknowledge in our next message to `from`.
  defp ack(acks, from, tid), do: Map.update(acks, from, [tid], &[tid | &1])

  defp sent(st, w, to, {:overworld_shadows, _, _, cells, _, _} = msg) do
    if send_to(w, to, msg) do
      Metrics.add(st.metrics, :shadow_messages, 1)
      n = if cells, do: Enum.sum(for {_, l} <- cells, do: length(l)), else: 0
      Metrics.add(st.metrics, :shadow_entities, n)
    end
  end
end

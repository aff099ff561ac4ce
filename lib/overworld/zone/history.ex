defmodule Overworld.Zone.History do
  @moduledoc """
  A zone's time-travel history: its last ticks, replayed offline in one process.

  A zone with `:history` > 0 keeps, in its in-memory copy (an ETS table of the zone's
  supervisor), the record of each of its last `history` ticks (the inputs the bucket workers
  applied, spawns, despawns and the game state after `c:Overworld.Zone.handle_tick/2`) and,
  every
  `:keyframe_ticks` ticks, a keyframe: the cells of every bucket worker after that tick. A
  `:debug` zone also keeps the state hash of every tick.

  Every entity's next state depends only on the previous tick's state of its 3x3 cell block,
  in a canonical order (cells sorted by key, entities by id), so one process with one
  "worker" (`single/1`) computes exactly the cells of the live zone, whatever its number of
  workers. From a keyframe and the records after it, `step/3` rebuilds any later tick.

  1. `dump/1` copies a zone's history out of its memory table (`Overworld.Zone.history/1`);
  2. `write/2` and `read/2` keep it in a file (checksummed; `Overworld.Zone.dump_history/2`);
  3. `state_at/2` replays it up to a tick (`Overworld.Zone.state_at/2`);
  4. `replay/2` replays it all and checks every replayed tick against the zone's recorded hash
     (`:debug` zones) and every later keyframe exactly: the determinism check of
     `mix overworld.replay`.

  Game code runs in the replaying process (`c:Overworld.Zone.handle_entity/3` only: the game
  state comes from the records), so a history can be replayed on any node that has the zone's
  module, without starting the zone.

  A zone of a world (`Overworld.World`) records with each tick what its workers got from its
  neighbours: their shadows as the tick read them (dead-reckoned when late, with the realtime
  clock), the entities it adopted, and the ids it had handed away at the end of the tick
  before. Its replay reads them from the records, not from the neighbours: exact with either
  clock, for one zone of the world alone.
  """

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.Zone.{Config, Dispatch, Memory, Pass}
  alias Overworld.Zone.History.Codec

  @typedoc "Cells: `{cell key, entities sorted by id}`, sorted by key."
  @type pairs :: Sweep.pairs()

  @typedoc """
  One tick as the zone's workers ran it: the `inputs` each worker applied
  (`%{worker => %{entity id => input}}`), `spawns` newest first, `despawns` ids, `game` the game
  state after the tick's `c:Overworld.Zone.handle_tick/2`; in a dump, `hash` is the zone's
  recorded state hash after the tick (nil when it was not recorded).
  """
  @type record :: %{
          required(:n) => non_neg_integer,
          required(:simulate) => boolean,
          required(:inputs) => %{non_neg_integer => map},
          required(:spawns) => [Overworld.Entity.t()],
          required(:despawns) => [pos_integer],
          optional(:game) => term,
          optional(:next_id) => pos_integer,
          optional(:hash) => non_neg_integer | nil
        }

  @typedoc "A zone's history, as `dump/1` returns it."
  @type dump :: %{
          format: 1,
          zone: term,
          config: Config.t(),
          keyframe: %{tick: non_neg_integer, cells: pairs, game: term},
          ticks: [record],
          keyframes: %{non_neg_integer => pairs}
        }

  @typedoc """
  A difference between the replay and the zone: for a `:hash`, the recorded and the replayed
  hash; for a `:keyframe`, `expected` is the first differing cell
  `{:cell, key, ids in the keyframe, ids replayed}`.
  """
  @type mismatch :: %{
          tick: non_neg_integer,
          kind: :hash | :keyframe,
          expected: term,
          got: term
        }

  @modulus 0x100000000

  ## One tick

  @doc """
  The zone's config as one worker that owns every row, without shared tables: the config
  `step/3` runs with. It keeps the zone's `:wire` module: an entity that the wire cannot encode
  keeps its previous state (see `Overworld.Template`), in the replay as in the zone (the
  encoded cells are dropped).

      iex> c = Overworld.Zone.Config.new!(Overworld.Test.Game, id: :doc, size: {70, 70}, workers: 4)
      iex> one = Overworld.Zone.History.single(c)
      iex> {one.workers, one.stripes, one.wire, one.shared}
      {1, {{0, 6}}, nil, nil}
  """
  @spec single(Config.t()) :: Config.t()
  def single(%Config{grid: grid} = c) do
    stripes = Config.stripes(grid.rows, 1)

    %{
      c
      | workers: 1,
        stripes: List.to_tuple(stripes),
        owners: Config.owners(stripes),
        shared: nil
    }
  end

  @doc """
  One tick of the whole zone in the calling process: the cells after `record`'s tick from the
  cells before it. `config` is a `single/1` config. A load step (`simulate: false`: tick 0, or
  a recovery from disk) runs no simulation: the workers start it empty and take its spawns.

      iex> import Overworld.Entity
      iex> c = Overworld.Zone.History.single(Overworld.Zone.Config.new!(Overworld.Test.Game, id: :doc, size: {70, 70}))
      iex> rocks = [entity(id: 2, kind: :rock, x: 5000, y: 0), entity(id: 1, kind: :rock, x: 0, y: 0)]
      iex> cells = Overworld.Zone.History.step(c, [], %{n: 0, simulate: false, inputs: %{}, spawns: rocks, despawns: []})
      iex> for {_key, es} <- cells, e <- es, do: entity(e, :id)
      [1, 2]
      iex> cells = Overworld.Zone.History.step(c, cells, %{n: 1, simulate: true, inputs: %{}, spawns: [], despawns: [1]})
      iex> for {_key, es} <- cells, e <- es, do: entity(e, :id)
      [2]
  """
  @spec step(Config.t(), pairs, record) :: pairs
  def step(%Config{workers: 1, grid: grid} = c, pairs, %{n: n, simulate: simulate?} = record) do
    inputs = Enum.reduce(record.inputs, %{}, fn {_w, m}, acc -> Map.merge(acc, m) end)
    # The spawns as the zone server hands them over (in the order they were requested).
    spawns = record.spawns |> Enum.reverse() |> Enum.map(&Pass.with_input(&1, inputs))

    if simulate? do
      despawns = Map.new(record.despawns, &{&1, true})
      # One worker: its stripe is every row, it has no border rows (lo = 0, hi = stop).
      stop = Grid.key_at(grid, 0, grid.rows)
      ctx = Dispatch.context(c, n)
      world = Map.get(record, :world)
      back = back(c, world)
      # The tick's physics and the answers to the path requests, from the state before it
      # (Overworld.Zone.Physics, Overworld.Zone.Paths).
      {phys, paths} =
        Overworld.Zone.Physics.without(
          {Overworld.Zone.Physics.step_all(pairs, c.physics),
           Overworld.Zone.Paths.all(pairs, c.physics && c.physics.paths, n)},
          back
        )

      ctx = %{ctx | paths: paths}
      {pairs, view, world} = world_in(c, pairs, world, back)
      pass = Pass.run(pairs, view, {stop, 0, stop}, c, 0, ctx, inputs, despawns, world, phys)
      Sweep.insert_desc(pass.desc, grid, spawns ++ pass.movers, [])
    else
      # Workers are empty before a load step (a fresh zone, or a recovery from disk), and
      # nothing is despawned from the spawns.
      Sweep.from_entities(grid, spawns)
    end
  end

  # The entities handed away at the end of the last tick and back with this one (their old
  # copies leave the cells: world_in/4).
  defp back(%Config{world: nil}, _world), do: %{}
  defp back(_c, nil), do: %{}

  defp back(_c, parts) do
    {_, _, {adopted, handed}} = elem(parts, 0)
    Map.take(handed, Map.keys(adopted))
  end

  # A zone of a world: what its workers got with the tick (`Overworld.Zone.Neighbours.take/2`),
  # as one worker takes it: every worker's shadows (a row may be in two parts) and
  # adoptions; the entities handed away at the end of the last tick are still in the cells,
  # not computed (those that came straight back go, `back`: their new copy is adopted).
  defp world_in(%Config{world: nil}, pairs, _world, _back), do: {pairs, pairs, nil}
  defp world_in(_c, pairs, nil, _back), do: {pairs, pairs, {%{}, %{}, %{}}}

  defp world_in(%Config{grid: grid}, pairs, parts, back) do
    parts = Tuple.to_list(parts)
    {_, _, {adopted, handed} = marks} = hd(parts)
    adopt = Enum.flat_map(parts, &elem(&1, 1))

    shadows =
      parts
      |> Enum.flat_map(&elem(&1, 0))
      |> Enum.uniq_by(&elem(&1, 0))
      |> List.keysort(0)
      |> Sweep.without(adopted)

    pairs = pairs |> Sweep.without(back) |> Sweep.insert(grid, adopt)
    departed = Map.drop(handed, Map.keys(back))
    ids = Overworld.Zone.Bucket.World.flagged(shadows, departed, marks)
    {pairs, Sweep.merge(pairs, shadows), {ids, adopted, departed}}
  end

  @doc """
  The hash of cells, as the workers of a `:debug` zone compute theirs: the sum of one
  `:erlang.phash2/1` per cell, so that it does not depend on how the cells are split between
  workers. The zone's hash of a tick is the sum over its workers, modulo 2^32.
  """
  @spec cells_hash(pairs) :: non_neg_integer
  defdelegate cells_hash(pairs), to: Memory

  defp zone_hash(pairs), do: rem(cells_hash(pairs), @modulus)

  ## Dump

  @doc """
  A copy of the zone's history: its oldest complete keyframe (every worker's cells of tick
  `k`) whose following tick records are all still kept, the records of the ticks after it up
  to the last completed tick, and the later keyframes. Read from the zone's memory table
  without stopping the zone.

  Errors: `:not_found` (the zone is not running), `:no_history` (`history: 0`),
  `:no_keyframe` (none complete yet, e.g. before the first keyframe ticks of a recovery).
  """
  @spec dump(Overworld.Zone.zone()) ::
          {:ok, dump} | {:error, :not_found | :no_history | :no_keyframe}
  def dump(zone) do
    # A zone that is registered is running: its info is asked for only then.
    with %{memory: table} when table != nil <- Overworld.Zone.metrics_ref(zone),
         %{tick: last, config: %Config{history: h} = c} when h > 0 <- Overworld.Zone.info(zone) do
      dump(table, c, last)
    else
      %{config: %Config{}} -> {:error, :no_history}
      _ -> {:error, :not_found}
    end
  end

  defp dump(table, %Config{history: history, workers: workers} = c, last) do
    slots = Memory.slots(history)
    # The records still in the ring, newest first, back to the first one missing (the records
    # after the last completed tick are of a tick still running: left out).
    records =
      last
      |> Stream.iterate(&(&1 - 1))
      |> Stream.take_while(&(&1 >= 0))
      |> Stream.map(&Memory.tick(table, history, &1))
      |> Enum.take_while(&(&1 != nil))
      |> Enum.reverse()

    oldest = if records == [], do: last + 1, else: hd(records).n
    # Complete keyframes (every worker's, of the same tick) from the oldest record's tick on.
    complete =
      table
      |> Memory.keyframes()
      |> Enum.group_by(fn {_w, n, _} -> n end)
      |> Enum.filter(fn {n, parts} ->
        n >= oldest - 1 and n <= last and length(parts) == workers
      end)
      |> Enum.map(fn {n, parts} -> {n, merge_parts(parts)} end)
      |> Enum.sort()

    case complete do
      [] ->
        {:error, :no_keyframe}

      [{k, cells} | later] ->
        game = Enum.find_value(records, fn r -> if r.n == k, do: {r.game} end)

        ticks =
          for r <- records, r.n > k do
            r
            |> Map.put(:inputs, Memory.inputs(table, history, workers, r.n))
            |> Map.put(:hash, if(c.debug, do: Memory.hash(table, workers, slots, r.n)))
          end

        {:ok,
         %{
           format: 1,
           zone: c.id,
           config: %{c | shared: nil},
           keyframe: %{tick: k, cells: cells, game: game && elem(game, 0)},
           ticks: ticks,
           keyframes: Map.new(later)
         }}
    end
  end

  # Every worker's cells of one keyframe: their stripes are disjoint.
  defp merge_parts(parts), do: parts |> Enum.flat_map(&elem(&1, 2)) |> List.keysort(0)

  ## Replay

  @doc """
  The cells and game state after tick `t`, replayed from a dump (or from the history of a
  running zone). `t` must lie between the dump's keyframe and its last tick. (The game state
  of the keyframe's own tick is nil when its record has left the ring.)
  """
  @spec state_at(dump | Overworld.Zone.zone(), non_neg_integer) ::
          {:ok, pairs, term} | {:error, term}
  def state_at(%{format: 1} = dump, t) when is_integer(t) do
    k = dump.keyframe.tick
    last = last_tick(dump)

    if t < k or t > last do
      {:error, {:out_of_range, k..last}}
    else
      config = single(dump.config)

      Enum.reduce_while(dump.ticks, {:ok, dump.keyframe.cells, dump.keyframe.game}, fn
        %{n: n}, acc when n > t -> {:halt, acc}
        r, {:ok, cells, _game} -> {:cont, {:ok, step(config, cells, r), r.game}}
      end)
    end
  end

  def state_at(zone, t) when is_integer(t) do
    with {:ok, dump} <- dump(zone), do: state_at(dump, t)
  end

  @doc """
  Replays the whole dump (up to option `:to_tick`) and compares every replayed tick with the
  zone's recorded hash, when there is one, and with every later keyframe, exactly. Returns the
  counts (`ticks` replayed, hashes `checked` and found `equal`, `keyframes` compared), the
  `mismatches` in tick order, the `first_mismatch` tick (nil when the replay matches) and the final state (`tick`,
  entity `count`, zone `hash`).

  Option `:progress`: a function called after every replayed tick with
  `%{tick: n, hash: replayed, recorded: hash | nil, keyframe: nil | :equal | :differs}` and the
  running counts `checked` and `equal`.
  """
  @spec replay(dump, keyword) :: %{
          ticks: non_neg_integer,
          checked: non_neg_integer,
          equal: non_neg_integer,
          keyframes: non_neg_integer,
          mismatches: [mismatch],
          first_mismatch: non_neg_integer | nil,
          tick: non_neg_integer,
          count: non_neg_integer,
          hash: non_neg_integer
        }
  def replay(%{format: 1} = dump, opts \\ []) do
    to = Keyword.get(opts, :to_tick, last_tick(dump))
    progress = Keyword.get(opts, :progress, fn _ -> :ok end)
    config = single(dump.config)

    acc = %{
      ticks: 0,
      checked: 0,
      equal: 0,
      keyframes: 0,
      mismatches: [],
      tick: dump.keyframe.tick
    }

    {cells, acc} =
      Enum.reduce_while(dump.ticks, {dump.keyframe.cells, acc}, fn
        %{n: n}, state when n > to ->
          {:halt, state}

        r, {cells, acc} ->
          cells = step(config, cells, r)
          {acc, event} = check(acc, r, cells, Map.get(dump.keyframes, r.n))
          progress.(event)
          {:cont, {cells, acc}}
      end)

    mismatches = Enum.reverse(acc.mismatches)

    Map.merge(acc, %{
      mismatches: mismatches,
      first_mismatch: mismatches |> Enum.map(& &1.tick) |> List.first(),
      count: length(Sweep.entities(cells)),
      hash: zone_hash(cells)
    })
  end

  defp check(acc, r, cells, keyframe) do
    hash = zone_hash(cells)
    acc = %{acc | ticks: acc.ticks + 1, tick: r.n}
    recorded = Map.get(r, :hash)

    acc =
      cond do
        recorded == nil -> acc
        recorded == hash -> %{acc | checked: acc.checked + 1, equal: acc.equal + 1}
        true -> mismatch(%{acc | checked: acc.checked + 1}, r.n, :hash, recorded, hash)
      end

    {acc, kf} =
      cond do
        keyframe == nil ->
          {acc, nil}

        keyframe == cells ->
          {%{acc | keyframes: acc.keyframes + 1}, :equal}

        true ->
          acc = %{acc | keyframes: acc.keyframes + 1}
          {mismatch(acc, r.n, :keyframe, first_difference(keyframe, cells), nil), :differs}
      end

    {acc,
     %{
       tick: r.n,
       hash: hash,
       recorded: recorded,
       keyframe: kf,
       checked: acc.checked,
       equal: acc.equal
     }}
  end

  defp mismatch(acc, n, kind, expected, got),
    do: %{
      acc
      | mismatches: [%{tick: n, kind: kind, expected: expected, got: got} | acc.mismatches]
    }

  # The first cell where a keyframe and the replay differ: {key, expected ids, replayed ids}.
  defp first_difference(expected, got) do
    keys = Enum.uniq(Enum.map(expected, &elem(&1, 0)) ++ Enum.map(got, &elem(&1, 0)))
    a = Map.new(expected)
    b = Map.new(got)
    k = keys |> Enum.sort() |> Enum.find(&(Map.get(a, &1) != Map.get(b, &1)))
    ids = fn l -> Enum.map(l || [], &entity(&1, :id)) end
    {:cell, k, ids.(Map.get(a, k)), ids.(Map.get(b, k))}
  end

  @doc "The last tick of a dump."
  @spec last_tick(dump) :: non_neg_integer
  def last_tick(%{ticks: [], keyframe: %{tick: k}}), do: k
  def last_tick(%{ticks: ticks}), do: List.last(ticks).n

  ## Files

  @doc """
  Writes a dump to `path` (through a temporary file renamed into place).
  """
  @spec write(dump, Path.t()) :: :ok | {:error, File.posix()}
  def write(%{format: 1} = dump, path) do
    tmp = path <> ".tmp"

    with :ok <- File.write(tmp, encode(dump)), do: File.rename(tmp, path)
  end

  @doc """
  Reads a dump written by `write/2`; anything else is refused (see `format_error/1`). Option
  `:atoms`: `:existing` (default) creates no atom, and refuses a dump that holds atoms this
  node does not know (once the zone's module is loaded); `:create` lets the dump create them
  (for short-lived tools such as `mix overworld.replay`).
  """
  @spec read(Path.t(), keyword) :: {:ok, dump} | {:error, term}
  def read(path, opts \\ []) do
    with {:ok, bin} <- File.read(path), do: decode(bin, opts)
  end

  @doc "A dump as the bytes of a dump file."
  @spec encode(dump) :: binary
  defdelegate encode(dump), to: Codec

  @doc """
  A dump from the bytes of a dump file (options: see `read/2`).

      iex> Overworld.Zone.History.decode("hello")
      {:error, :not_a_dump}
      iex> Overworld.Zone.History.decode(<<"OVERWORLD-HISTORY", 9, 0::32, 0::64>>)
      {:error, {:unsupported_version, 9}}
  """
  @spec decode(binary, keyword) :: {:ok, dump} | {:error, term}
  defdelegate decode(bin, opts \\ []), to: Codec

  @doc """
  A message for an error of `read/1`, `decode/1`, `dump/1` or `state_at/2`.

      iex> Overworld.Zone.History.format_error(:checksum)
      "the dump's checksum does not match its contents (the file is damaged)"
  """
  @spec format_error(term) :: String.t()
  def format_error(:not_a_dump), do: "not an Overworld history dump"

  def format_error({:unsupported_version, v}),
    do:
      "a history dump of format version #{v}; this version of Overworld reads version #{Codec.version()}"

  def format_error({:truncated, got, want}),
    do: "the dump is truncated: #{got} bytes of #{want} after its header"

  def format_error({:trailing_bytes, n}), do: "the dump has #{n} unexpected bytes at its end"

  def format_error(:checksum),
    do: "the dump's checksum does not match its contents (the file is damaged)"

  def format_error({:unknown_module, name}),
    do: "the dump's zone module #{name} is not available on this node (is it compiled here?)"

  def format_error({:unknown_atoms, name}),
    do:
      "the dump refers to atoms unknown to this node (beyond those of #{name}); " <>
        "read it with atoms: :create to allow them"

  def format_error({:out_of_range, range}),
    do: "tick out of the history's range #{inspect(range)}"

  def format_error(:not_found), do: "the zone is not running"
  def format_error(:no_history), do: "the zone keeps no history (history: 0)"
  def format_error(:no_keyframe), do: "the zone has no complete keyframe in its history yet"
  def format_error(posix) when is_atom(posix), do: :file.format_error(posix) |> List.to_string()
  def format_error(other), do: inspect(other)
end

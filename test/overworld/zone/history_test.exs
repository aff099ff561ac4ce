defmodule Overworld.Zone.HistoryTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureIO

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 1, entity: 2]
  alias Overworld.Spatial.{Grid, Sweep}
  alias Overworld.Test.Game
  alias Overworld.World.{Layout, Place}
  alias Overworld.Zone
  alias Overworld.Zone.{Config, Dispatch, History, Pass}

  doctest History

  @moduletag timeout: 300_000
  @players ~w(p1 p2 p3 p4 p5)

  # A debug zone of the test game with 5 players, ticked one tick at a time for `ticks` ticks with random
  # inputs; the entities after the ticks in `record` (sorted by id).
  defp run_zone(ticks, record) do
    id = {__MODULE__, make_ref()}

    opts =
      Game.zone_options(2_000,
        id: id,
        clock: :manual,
        workers: 2,
        history: 300,
        keyframe_ticks: 30,
        debug: true
      )

    {:ok, _} = Overworld.start_zone(Game, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    for p <- @players, do: {:ok, _} = Zone.join(id, p, %{})
    :rand.seed(:exsss, 42)

    seen =
      for n <- 1..ticks, reduce: %{} do
        seen ->
          for p <- @players,
              :rand.uniform(3) == 1,
              do: Zone.input(id, p, {:rand.uniform(255) - 128, :rand.uniform(255) - 128})

          {:ok, ^n} = Zone.tick_now(id)
          # Also a barrier: the workers have done the tick's jobs (hash, keyframe) once they
          # answer a query sent after the tick.
          entities = sorted(Zone.entities(id))
          if n in record, do: Map.put(seen, n, entities), else: seen
      end

    {id, seen}
  end

  defp sorted(entities), do: Enum.sort_by(entities, &entity(&1, :id))

  defp tmp(name),
    do: Path.join(System.tmp_dir!(), "history-#{name}-#{System.unique_integer([:positive])}")

  setup_all do
    {id, seen} = run_zone(300, [250, 280, 299])
    {:ok, dump} = History.dump(id)
    final = sorted(Zone.entities(id))
    %{zone: id, dump: dump, seen: seen, final: final}
  end

  test "the dump starts at the oldest complete keyframe and holds every tick after it", %{dump: d} do
    assert d.format == 1
    assert d.config.workers == 2 and d.config.shared == nil
    assert d.keyframe.tick == 0
    assert Enum.map(d.ticks, & &1.n) == Enum.to_list(1..300)
    assert d.keyframes |> Map.keys() |> Enum.sort() == Enum.to_list(30..300//30)
    assert Enum.count(d.ticks, &is_integer(&1.hash)) >= 290
    # Player inputs were recorded.
    assert Enum.count(d.ticks, &(map_size(&1.inputs) > 0)) > 100
  end

  test "a replay reproduces every recorded hash, every keyframe and the final state", %{
    dump: dump,
    final: final
  } do
    r = History.replay(dump)
    assert r.mismatches == []
    assert r.first_mismatch == nil
    assert r.ticks == 300
    assert r.checked >= 290
    assert r.keyframes == 10
    assert r.tick == 300
    assert r.count == length(final)

    {:ok, cells, game} = History.state_at(dump, 300)
    assert sorted(Sweep.entities(cells)) == final
    assert game == List.last(dump.ticks).game
  end

  defmodule Faulty do
    @moduledoc false
    # Walkers stepping east; from tick 3 on, the one whose state is :flee returns a heading
    # that the zone's wire cannot encode (so it keeps its previous state).
    use Overworld.Zone
    require Overworld.Entity
    import Overworld.Entity, only: [entity: 2]

    @impl true
    def init(_args) do
      specs =
        for i <- 1..20,
            do: [
              kind: :walker,
              x: i * 5000,
              y: i * 9000,
              state: if(i == 7, do: :flee, else: :idle)
            ]

      {:ok, nil, [{:spawn, specs}]}
    end

    @impl true
    def handle_entity(e, _view, ctx) do
      if entity(e, :state) == :flee and ctx.tick >= 3,
        do: {:ok, entity(e, heading: 1.5)},
        else: {:ok, entity(e, x: entity(e, :x) + 700)}
    end
  end

  test "a zone with a wire replays the same, an entity that the wire cannot encode included" do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Faulty,
        id: id,
        clock: :manual,
        workers: 2,
        size: {200, 200},
        wire: Overworld.Template.Test.Wire,
        history: 100,
        keyframe_ticks: 10,
        debug: true
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    {:ok, 40} = Zone.tick_now(id, 40)
    assert Zone.metrics(id).callback_errors == 38
    {:ok, dump} = History.dump(id)
    r = History.replay(dump)
    assert r.mismatches == [] and r.checked >= 30
    {:ok, cells, _game} = History.state_at(dump, 40)
    assert sorted(Sweep.entities(cells)) == sorted(Zone.entities(id))
  end

  # A zone of a 2x2 world, realtime clock: its tick n read its neighbours' newest shadows
  # (whatever tick they had reached), adopted their transfers and handed its own away. The
  # history holds what it saw, so a replay, alone, computes exactly the zone's hashes and
  # keyframes.
  defp replayed_world(clock) do
    name = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_world(Overworld.Test.Crowd,
        name: name,
        clock: clock,
        tick_rate: 60,
        zones: {2, 2},
        workers: 2,
        size: {240, 240},
        cell_size: 12,
        args: [n: 600, side: 240],
        history: 400,
        keyframe_ticks: 30,
        debug: true
      )

    on_exit(fn -> Overworld.stop_world(name) end)

    case clock do
      :manual -> {:ok, 200} = Overworld.World.tick_now(name, 200)
      :realtime -> Process.sleep(4_000)
    end

    for zone <- Overworld.World.zones(name) do
      {:ok, dump} = History.dump(zone)
      {zone, dump, History.replay(dump)}
    end
  end

  for clock <- [:manual, :realtime] do
    test "a zone of a world replays exactly what it computed (#{clock} clock)" do
      results = replayed_world(unquote(clock))

      for {zone, dump, r} <- results do
        assert r.mismatches == [], "#{inspect(zone)}: #{inspect(Enum.take(r.mismatches, 2))}"
        assert r.ticks >= 150 and r.keyframes >= 4 and r.checked >= r.ticks - 5
        # It saw shadows and adopted entities: the replay had them to reckon with.
        assert Enum.any?(dump.ticks, &(&1.world != nil and shadows?(&1.world)))
      end

      adopted =
        for {_zone, dump, _} <- results, t <- dump.ticks, t.world != nil, reduce: 0 do
          acc ->
            acc + (t.world |> Tuple.to_list() |> Enum.map(&length(elem(&1, 1))) |> Enum.sum())
        end

      assert adopted > 20

      # Replayed, not rewound: its neighbours hold what it handed them since.
      {zone, dump, _} = hd(results)
      assert Zone.rewind(zone, dump.keyframe.tick + 1) == {:error, :in_world}
    end
  end

  defp shadows?(world), do: world |> Tuple.to_list() |> Enum.any?(&(elem(&1, 0) != []))

  # With the realtime clock a zone reads its neighbours' newest shadows, which may be of
  # another tick than a transfer it adopts with them: there the entity is a tick on
  # (reckoned), or not at all. And an entity one worker handed away at the end of the last
  # tick may come straight back. Whichever worker adopts, every worker computes the tick with
  # the adopted entity, as the replay's one worker does (a crowd entity reads its
  # neighbours: a copy a tick off, or none, changes it).
  for read <- [:reckoned, :missing, :back] do
    test "a world zone's workers compute an adoption as its replay does (#{read})" do
      c =
        Config.new!(Overworld.Test.Crowd,
          id: {__MODULE__, :workers},
          world:
            Place.new!(:w, Layout.new!(size: {240, 240}, cell_size: 12, zones: {2, 2}), {0, 0}),
          workers: 2
        )

      # Rows b - 1 (worker 0's last) and b (worker 1's first): each in the other's halo.
      {_, b} = elem(c.stripes, 0)
      y = b * c.grid.cell

      walker = fn id, x, at ->
        entity(
          id: id,
          kind: :walker,
          x: x,
          y: at,
          vx: -3000,
          vy: 400,
          rng: 7 + id,
          data: {0, false}
        )
      end

      {before, adopt, shadows, handed} =
        case unquote(read) do
          :back ->
            # Worker 0 handed 3 away at the end of the last tick; worker 1 adopts it back.
            {[
               walker.(1, 30_000, y - 3_000),
               walker.(2, 31_000, y + 2_000),
               walker.(3, 32_000, y - 1_000)
             ], [walker.(3, 33_000, y + 500)], [], %{3 => true}}

          read ->
            # Worker 0 adopts 3 next to worker 1's 2; the old zone's shadows have it a tick on,
            # or not (they are of the tick after its handoff).
            new = walker.(3, 32_000, y - 1_000)
            copy = [{Grid.key(c.grid, 31_950, y - 990), [walker.(3, 31_950, y - 990)]}]

            {[walker.(1, 30_000, y - 3_000), walker.(2, 31_000, y + 2_000)], [new],
             if(read == :reckoned, do: copy, else: []), %{}}
        end

      cells = Sweep.from_entities(c.grid, before)
      marks = {Map.new(adopt, &{entity(&1, :id), &1}), handed}
      row = &Grid.row(c.grid, elem(&1, 0))

      parts =
        for {{r0, r1}, i} <- Enum.with_index(Tuple.to_list(c.stripes)) do
          mine = for pair <- shadows, row.(pair) in (r0 - 1)..r1, do: pair
          owned = for e <- adopt, Config.owner_of(c, entity(e, :x), entity(e, :y)) == i, do: e
          {mine, owned, marks}
        end

      record = %{
        n: 9,
        simulate: true,
        inputs: %{},
        spawns: [],
        despawns: [],
        world: List.to_tuple(parts)
      }

      replayed = c |> History.single() |> History.step(cells, record) |> Sweep.entities()

      computed =
        for {stripe, i} <- Enum.with_index(Tuple.to_list(c.stripes)),
            e <- worker_tick(c, i, stripe, cells, handed, elem(record.world, i)),
            do: e

      assert sorted(computed) == sorted(replayed)
      assert length(replayed) == 3
    end
  end

  # Tick 9 of worker i from the zone's cells (its stripe and the halo behind it its cells, and
  # the halo in front its view; those handed away its own if i is 0), as Overworld.Zone.Bucket
  # runs it: the entities it computed.
  defp worker_tick(c, i, {r0, r1}, cells, handed, part) do
    row = &Grid.row(c.grid, elem(&1, 0))

    st = %{
      config: c,
      index: i,
      place: c.world,
      own: for(pair <- cells, row.(pair) in r0..r1, do: pair),
      view: for(pair <- cells, row.(pair) in (r0 - 1)..r1, do: pair),
      departed: if(i == 0, do: handed, else: %{}),
      count: 0,
      avatars: %{}
    }

    {st, world} = Overworld.Zone.Bucket.World.world_in(st, part)
    key = &Grid.key_at(c.grid, 0, &1)
    ctx = Dispatch.context(c, 9)

    pass =
      Pass.run(
        st.own,
        st.view,
        {key.(r1), key.(r0 + 1), key.(r1 - 1)},
        c,
        i,
        ctx,
        %{},
        %{},
        world
      )

    Sweep.entities(pass.desc) ++ pass.movers ++ Enum.map(pass.out, &elem(&1, 1))
  end

  test "state_at a past tick is what the zone held then", %{zone: zone, dump: dump, seen: seen} do
    for t <- [250, 280, 299] do
      {:ok, cells, _game} = History.state_at(dump, t)
      assert sorted(Sweep.entities(cells)) == seen[t]
    end

    # From the running zone too.
    {:ok, cells, _} = Zone.state_at(zone, 280)
    assert sorted(Sweep.entities(cells)) == seen[280]
    assert {:ok, _, _} = History.state_at(dump, 0)
    assert History.state_at(dump, 301) == {:error, {:out_of_range, 0..300}}
  end

  test "an altered input is detected at its tick or later", %{dump: dump} do
    # Tick 120's first input, turned around.
    i = Enum.find_index(dump.ticks, &(&1.n >= 120 and map_size(&1.inputs) > 0))
    t = Enum.at(dump.ticks, i)
    {w, m} = Enum.at(t.inputs, 0)
    {id, {mx, my}} = Enum.at(m, 0)
    altered = %{t | inputs: Map.put(t.inputs, w, Map.put(m, id, {-mx - 1, -my - 1}))}
    bad = %{dump | ticks: List.replace_at(dump.ticks, i, altered)}

    r = History.replay(bad)
    assert r.first_mismatch != nil and r.first_mismatch >= t.n
    assert [%{kind: :hash} | _] = r.mismatches
    # The later keyframes differ too.
    assert Enum.any?(r.mismatches, &(&1.kind == :keyframe))
    # Up to the tick before, the replay still matches.
    assert History.replay(bad, to_tick: t.n - 1).mismatches == []

    # The mix task fails on it.
    path = tmp("bad")
    on_exit(fn -> File.rm(path) end)
    :ok = History.write(bad, path)

    assert_raise Mix.Error, ~r/replay mismatch: first at tick #{r.first_mismatch} /, fn ->
      capture_io(fn -> Mix.Tasks.Overworld.Replay.run([path]) end)
    end
  end

  test "a zone without history, or not running, has no dump" do
    id = {__MODULE__, make_ref()}
    opts = Game.zone_options(50, id: id, clock: :manual, workers: 1, history: 0)
    {:ok, _} = Overworld.start_zone(Game, opts)
    on_exit(fn -> Overworld.stop_zone(id) end)
    {:ok, 3} = Zone.tick_now(id, 3)
    assert Zone.history(id) == {:error, :no_history}
    assert Zone.state_at(id, 2) == {:error, :no_history}
    assert Zone.history({__MODULE__, :nowhere}) == {:error, :not_found}
    assert Zone.dump_history({__MODULE__, :nowhere}, tmp("none")) == {:error, :not_found}
  end

  test "a dump file round-trips; damaged files are refused", %{dump: dump} do
    path = tmp("dump")
    on_exit(fn -> File.rm(path) end)
    assert :ok = History.write(dump, path)
    assert {:ok, ^dump} = History.read(path)

    bin = File.read!(path)
    at = div(byte_size(bin), 2)
    <<a::binary-size(at), b, c::binary>> = bin
    flipped = <<a::binary, Bitwise.bxor(b, 4), c::binary>>
    assert History.decode(flipped) == {:error, :checksum}
    assert {:error, {:truncated, _, _}} = History.decode(binary_part(bin, 0, at))
    assert History.decode("garbage") == {:error, :not_a_dump}
    assert {:error, :enoent} = History.read(path <> ".missing")
    assert History.format_error(:checksum) =~ "damaged"
  end

  # A dump file around any term body, as History.encode/1 writes it.
  defp file(name, term) do
    body = <<byte_size(name)::16, name::binary, term::binary>>
    <<"OVERWORLD-HISTORY", 1, :erlang.crc32(body)::32, byte_size(body)::64, body::binary>>
  end

  test "decoding makes no atom: unknown atoms or modules are refused", %{dump: dump} do
    fresh = "hx" <> Base.encode16(:crypto.strong_rand_bytes(8))
    placeholder = String.to_atom("hy" <> binary_part(fresh, 2, 16))
    term = :erlang.term_to_binary(%{dump | keyframe: %{dump.keyframe | game: placeholder}})
    term = :binary.replace(term, Atom.to_string(placeholder), fresh)
    module = Atom.to_string(Game)
    assert {:ok, _} = History.decode(file(module, :erlang.term_to_binary(dump)))
    assert History.decode(file(module, term)) == {:error, {:unknown_atoms, module}}
    assert History.format_error({:unknown_atoms, module}) =~ "atoms: :create"
    assert_raise ArgumentError, fn -> String.to_existing_atom(fresh) end
    # Allowed, they are created.
    assert {:ok, %{keyframe: %{game: game}}} = History.decode(file(module, term), atoms: :create)

    assert Atom.to_string(game) == fresh

    missing = "Elixir.Overworld.NoSuchZone" <> fresh
    assert History.decode(file(missing, term)) == {:error, {:unknown_module, missing}}
    assert_raise ArgumentError, fn -> String.to_existing_atom(missing) end
  end

  test "mix overworld.replay replays a dump file and fails on a bad one", %{zone: zone} do
    path = tmp("task")
    on_exit(fn -> File.rm(path) end)
    assert :ok = Zone.dump_history(zone, path)

    out = capture_io(fn -> Mix.Tasks.Overworld.Replay.run([path]) end)
    assert out =~ "replayed 300 ticks"
    assert out =~ "0 mismatches"
    assert out =~ "state at tick 300"

    out = capture_io(fn -> Mix.Tasks.Overworld.Replay.run([path, "--to-tick", "100"]) end)
    assert out =~ "replayed 100 ticks"

    File.write!(path, "not a dump")

    assert_raise Mix.Error, ~r/not an Overworld history dump/, fn ->
      Mix.Tasks.Overworld.Replay.run([path])
    end

    assert_raise Mix.Error, ~r/usage/, fn -> Mix.Tasks.Overworld.Replay.run([]) end
  end
end

defmodule Overworld.Zone.RewindTest do
  # Debug zones go back to a past tick and go on from there, deterministically.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  alias Overworld.Test.Game
  alias Overworld.Zone

  defp start(opts) do
    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(
        Game,
        Game.zone_options(
          500,
          [id: id, clock: :manual, workers: 2, keyframe_ticks: 10] ++ opts
        )
      )

    on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  test "rewind to a past tick: the state of that tick, and the same future again" do
    zone = start(debug: true)
    {:ok, _} = Zone.join(zone, "ann", %{})

    hashes =
      for n <- 1..60, into: %{} do
        if n < 30, do: Zone.input(zone, "ann", {100, -50})
        {:ok, ^n} = Zone.tick_now(zone)
        {n, Zone.state_hash(zone)}
      end

    log = capture_log(fn -> assert {:ok, 35} = Zone.rewind(zone, 35) end)
    assert log =~ "rewound to tick 35"
    assert Zone.info(zone).tick == 35
    assert Zone.state_hash(zone) == hashes[35]
    assert Map.has_key?(Zone.info(zone).players, "ann")
    # No inputs after tick 30 in either run: the same ticks come again.
    {:ok, 50} = Zone.tick_now(zone, 15)
    assert Zone.state_hash(zone) == hashes[50]
    # Beyond the history (it restarted at the rewind), or too old: refused.
    assert {:error, {:out_of_range, _}} = Zone.rewind(zone, 10)
  end

  test "only debug zones rewind" do
    zone = start([])
    {:ok, 20} = Zone.tick_now(zone, 20)
    assert {:error, :not_debug} = Zone.rewind(zone, 15)
  end
end

defmodule Overworld.Zone.WireTest do
  # A zone with a :wire module: every worker publishes, once per tick, the delta blocks of its
  # cells as one binary with an index by cell key. Applied tick after tick by an observer of
  # the whole world, they reproduce the zone's quantized state exactly.
  use ExUnit.Case, async: true

  import ExUnit.CaptureLog
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.{Template, Zone}
  alias Overworld.Protocol.{Codec, Snapshot}
  alias Overworld.Template.Test.Wire
  alias Overworld.Test.Walkers

  defmodule Faulty do
    @moduledoc false
    # Walkers stepping east, one durable event each per tick, and from tick 3 on two bugs of
    # game code: the walker whose state is :flee returns a float heading (staying in its cell),
    # the one whose state is :chase jumps to another worker's stripe with a state that is not
    # in the template.
    use Overworld.Zone
    require Overworld.Entity
    import Overworld.Entity, only: [entity: 2]

    @impl true
    def init({pid, specs}), do: {:ok, pid, [{:spawn, specs}]}

    @impl true
    def handle_join(_player, state, pid),
      do: {:ok, [kind: :walker, x: 1, y: 1, state: state], pid}

    @impl true
    def handle_entity(e, _view, ctx) do
      id = entity(e, :id)

      case entity(e, :state) do
        :flee when ctx.tick >= 3 ->
          {:ok, entity(e, heading: 1.5), [{:step, id}]}

        :chase when ctx.tick >= 3 ->
          {:ok, entity(e, y: entity(e, :y) - 140 * 1024, state: :sleeping), [{:step, id}]}

        _ ->
          {:ok, entity(e, x: entity(e, :x) + 256), [{:step, id}]}
      end
    end

    @impl true
    def handle_durable(event, pid) do
      send(pid, event)
      {:ok, pid}
    end
  end

  defp expected(zone, templates) do
    [walker | _] = templates

    for e <- Zone.entities(zone), entity(e, :kind) == :walker, into: %{} do
      {entity(e, :id), {0, Template.quantize(walker, e)}}
    end
  end

  # Per key of the worker's stripe, the slice of its blocks.
  defp per_key(data, index, first) do
    entries = for <<off::32, count::32 <- index>>, do: {off, count}

    entries
    |> Enum.zip(tl(entries))
    |> Enum.with_index(first)
    |> Enum.flat_map(fn {{{o0, c0}, {o1, c1}}, key} ->
      if o1 > o0, do: [{key, c1 - c0, binary_part(data, o0, o1 - o0)}], else: []
    end)
  end

  # What an observer of the whole world holds after tick n (the keyframes of every cell at
  # tick 1, then every worker's published blocks), checked against the zone.
  defp observe(id, workers, n, view) do
    %{table: table, templates: templates} = Zone.wire(id)

    blocks =
      if n == 1 do
        keys = for row <- 0..17, col <- 0..17, do: (row + 1) * 19 + col + 1
        {^n, keyframes} = Zone.keyframes(id, keys)
        Enum.map(keyframes, &{1, elem(&1, 1)})
      else
        for w <- 0..(workers - 1),
            {data, index, first} = Overworld.Zone.Wire.tick(table, w, n),
            {key, count, slice} <- per_key(data, index, first) do
          # Each key's slice is that cell's one block.
          assert count == 1
          assert {:ok, head, _} = Codec.read_varint(slice)
          assert head in [key * 4 + 1, key * 4 + 3]
          {count, slice}
        end
      end

    count = blocks |> Enum.map(&elem(&1, 0)) |> Enum.sum()
    msg = [2, Codec.varint(n), Codec.varint(n - 1), 0, Codec.varint(count)]
    # (No cell left, none held back, no extension.)
    msg = IO.iodata_to_binary([msg, Enum.map(blocks, &elem(&1, 1)), 0, 0, 0])
    {:ok, view} = Snapshot.apply(view, msg, templates)
    assert Snapshot.View.entities(view) == expected(id, templates)
    view
  end

  test "the published blocks of every worker, applied tick after tick, reproduce the zone (1 and 3 workers)" do
    for workers <- [1, 3] do
      id = {__MODULE__, make_ref()}

      {:ok, _} =
        Overworld.start_zone(Walkers,
          id: id,
          clock: :manual,
          workers: workers,
          size: {200, 200},
          wire: Wire
        )

      view =
        Enum.reduce(1..60, %Snapshot.View{}, fn n, view ->
          {:ok, ^n} = Zone.tick_now(id)
          observe(id, workers, n, view)
        end)

      assert map_size(Snapshot.View.entities(view)) == 300
      Overworld.stop_zone(id)
    end
  end

  test "a zone without :wire has none" do
    id = {__MODULE__, make_ref()}
    {:ok, _} = Overworld.start_zone(Walkers, id: id, clock: :manual)
    assert Zone.wire(id) == nil
    Overworld.stop_zone(id)
  end

  describe "an entity that the wire cannot encode" do
    setup do
      id = {__MODULE__, make_ref()}

      specs = [
        [kind: :walker, x: 10 * 1024, y: 10 * 1024, state: :idle],
        [kind: :walker, x: 10 * 1024 + 512, y: 10 * 1024 + 512, state: :flee],
        [kind: :walker, x: 11 * 1024, y: 11 * 1024, state: :wander],
        [kind: :walker, x: 50 * 1024, y: 150 * 1024, state: :chase],
        [kind: :rock, x: 20 * 1024, y: 20 * 1024]
      ]

      {:ok, _} =
        Overworld.start_zone(Faulty,
          id: id,
          args: {self(), specs},
          clock: :manual,
          workers: 2,
          size: {200, 200},
          wire: Wire
        )

      on_exit(fn -> Overworld.stop_zone(id) end)
      %{id: id}
    end

    test "returned by handle_entity keeps its previous state; the zone and the wire go on", %{
      id: id
    } do
      view = run(id, 1..2, %Snapshot.View{})
      [idle, flee, wander, chase, _rock] = Enum.sort_by(Zone.entities(id), &entity(&1, :id))
      errors = Zone.metrics(id).callback_errors
      flush_events()
      log = capture_log(fn -> run(id, 3..10, view) end)

      # The two faulty walkers failed every tick (one on each worker: both logged).
      assert Zone.metrics(id).callback_errors == errors + 2 * 8
      assert log =~ "the wire cannot encode the entity returned"
      assert log =~ "template :walker, field :heading: expected an integer, got: 1.5"

      assert log =~
               "template :walker, field :state: expected one of [:idle, :wander, :flee, :chase], got: :sleeping"

      assert Zone.entity(id, entity(flee, :id)) == flee
      assert Zone.entity(id, entity(chase, :id)) == chase
      # The others moved on, 8 steps (the wanderer into the next cell), their durable events
      # came; those returned with the failures did not.
      for e <- [idle, wander] do
        assert entity(Zone.entity(id, entity(e, :id)), :x) == entity(e, :x) + 8 * 256
        ok = entity(e, :id)
        for _ <- 3..10, do: assert_received({:step, ^ok})
      end

      assert entity(wander, :x) < 12 * 1024 and
               entity(Zone.entity(id, entity(wander, :id)), :x) > 12 * 1024

      for e <- [flee, chase], bad = entity(e, :id), do: refute_received({:step, ^bad})
    end

    test "is not spawned: the spawn or the join is refused with the error", %{id: id} do
      {:ok, 1} = Zone.tick_now(id)

      assert Zone.spawn(id, [[kind: :walker, x: 1, y: 1, state: :sleeping]]) ==
               {:error,
                {:invalid_field,
                 "template :walker, field :state: expected one of [:idle, :wander, :flee, :chase], got: :sleeping"}}

      # A {:data, i} element that is missing is not an integer.
      assert Zone.spawn(id, [
               [kind: :walker, x: 1, y: 1, state: :idle],
               [kind: :thing, x: 1, y: 1, data: {1}]
             ]) ==
               {:error,
                {:invalid_field, "template :everything, field :hp: expected an integer, got: nil"}}

      assert {:error, {:invalid_field, "template :walker, field :state: " <> _}} =
               Zone.join(id, "ann", :asleep)

      assert {:ok, _} = Zone.join(id, "bob", :idle)
      {:ok, 2} = Zone.tick_now(id)
      assert Zone.count(id) == 6
    end
  end

  defp run(id, ticks, view) do
    Enum.reduce(ticks, view, fn n, view ->
      {:ok, ^n} = Zone.tick_now(id)
      observe(id, 2, n, view)
    end)
  end

  defp flush_events do
    receive do
      {:step, _} -> flush_events()
    after
      0 -> :ok
    end
  end
end

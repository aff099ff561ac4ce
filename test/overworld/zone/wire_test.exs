defmodule Overworld.Zone.WireTest do
  # A zone with a :wire module encodes every cell once per tick in its workers; an observer of
  # the whole world, applying those blocks, holds exactly the zone's quantized state.
  use ExUnit.Case, async: true

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.{Random, Template, Zone}
  alias Overworld.Protocol.Snapshot
  alias Overworld.Template.Test.Wire

  defmodule Walkers do
    use Overworld.Zone

    @impl true
    def init(_args) do
      walkers =
        for i <- 1..300,
            do: [
              kind: :walker,
              x: rem(i * 7919, 200 * 1024),
              y: rem(i * 104_729, 200 * 1024),
              state: :idle
            ]

      rocks = for i <- 1..20, do: [kind: :rock, x: i * 5000, y: i * 5000]
      {:ok, %{}, [{:spawn, walkers ++ rocks}]}
    end

    # Now and then a walker disappears and another appears.
    @impl true
    def handle_tick(ctx, state) do
      if rem(ctx.tick, 7) == 0,
        do:
          {:ok, state,
           [
             {:despawn, ctx.tick},
             {:spawn, [kind: :walker, x: ctx.tick * 300, y: 1000, state: :flee]}
           ]},
        else: {:ok, state}
    end

    @impl true
    def handle_entity(e, _view, ctx) do
      if entity(e, :kind) == :walker do
        {r, s} = Random.uniform(entity(e, :rng), 100)
        {vx, s} = if r < 10, do: Random.uniform(s, 40_000), else: {entity(e, :vx) + 20_000, s}
        {vy, s} = if r < 10, do: Random.uniform(s, 40_000), else: {entity(e, :vy) + 20_000, s}
        {vx, vy} = {vx - 20_000, vy - 20_000}
        st = if r < 5, do: :wander, else: entity(e, :state)

        {:ok,
         entity(e,
           rng: s,
           vx: vx,
           vy: vy,
           heading: rem(entity(e, :heading) + r, 65_536),
           state: st,
           x: entity(e, :x) + div(vx, ctx.tick_rate),
           y: entity(e, :y) + div(vy, ctx.tick_rate)
         )}
      else
        {:ok, e}
      end
    end
  end

  defp expected(zone, templates) do
    [walker | _] = templates

    for e <- Zone.entities(zone), entity(e, :kind) == :walker, into: %{} do
      {entity(e, :id), {0, Template.quantize(walker, e)}}
    end
  end

  test "the blocks of every cell, applied tick after tick, reproduce the zone (1 and 3 workers)" do
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

      %{table: table, templates: templates, module: Wire} = Zone.wire(id)

      view =
        Enum.reduce(1..60, %Snapshot.View{}, fn n, view ->
          {:ok, ^n} = Zone.tick_now(id)
          rows = for {_k, ^n, _d} = row <- :ets.tab2list(table), do: row

          blocks =
            if n == 1 do
              {^n, keyframes} = Zone.keyframes(id, Enum.map(rows, &elem(&1, 0)))
              Enum.map(keyframes, &elem(&1, 1))
            else
              for {_k, _n, d} <- rows, d != nil, do: d
            end

          msg = Snapshot.encode(n, n - 1, blocks, []) |> IO.iodata_to_binary()
          {:ok, view} = Snapshot.apply(view, msg, templates)
          assert Snapshot.View.entities(view) == expected(id, templates)
          view
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
end

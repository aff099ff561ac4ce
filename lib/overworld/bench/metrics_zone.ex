defmodule Overworld.Bench.MetricsZone do
  @moduledoc false
  # The zones of the metrics scrape bench (`mix overworld.bench.metrics`): `entities` walkers
  # (args), each stepping 1/4 m east per tick and wrapping around a square world of `side`
  # units, and one durable event per second (`{:second, tick}`), so that the zone's journal
  # fsyncs and its snapshots are written: every histogram a scrape reads holds data.
  use Overworld.Zone
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]

  @step 256

  @doc "Zone options for `n` walkers (50 m² each) with `extra` merged in."
  @spec zone_options(pos_integer, keyword) :: keyword
  def zone_options(n, extra) do
    side_m = :math.sqrt(n * 50)
    side = trunc(side_m * 1024)
    Keyword.merge([size: {side_m, side_m}, args: [entities: n, side: side]], extra)
  end

  @impl true
  def init(args) do
    side = Keyword.fetch!(args, :side)

    walkers =
      for i <- 1..Keyword.fetch!(args, :entities)//1,
          do: [kind: :walker, x: :erlang.phash2({:x, i}, side), y: :erlang.phash2({:y, i}, side)]

    {:ok, %{}, [{:spawn, walkers}]}
  end

  @impl true
  def handle_tick(ctx, state) do
    if rem(ctx.tick, ctx.tick_rate) == 0,
      do: {:ok, state, [{:durable, {:second, ctx.tick}}]},
      else: {:ok, state}
  end

  @impl true
  def handle_entity(e, _view, ctx), do: {:ok, entity(e, x: rem(entity(e, :x) + @step, ctx.width))}
end

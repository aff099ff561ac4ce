defmodule Overworld.Zone.Dispatch do
  @moduledoc false
  # One tick seen from the server: the message to each worker, the collection of their `:done`
  # reports, and the tick's metrics and telemetry once all are in.
  #
  # The players' inputs are not in the message: each worker takes them from its input slots
  # when the tick starts (`Overworld.Zone.Inputs`).

  require Logger
  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  alias Overworld.Telemetry
  alias Overworld.Zone.{Config, Context, Memory, Metrics, Neighbours, State}

  @type running :: %{
          n: non_neg_integer,
          pending: non_neg_integer,
          t0: integer,
          input: integer,
          lateness: integer,
          systems: integer,
          grid: integer,
          count: non_neg_integer,
          errors: non_neg_integer,
          reported: [non_neg_integer],
          events: list,
          world: list
        }

  @doc "The tick context of tick `n`."
  @spec context(Config.t(), non_neg_integer) :: Context.t()
  def context(%Config{} = c, n) do
    %Context{
      zone: c.id,
      tick: n,
      tick_rate: c.tick_rate,
      width: c.width,
      height: c.height,
      cell_size: c.grid.cell,
      seed: c.seed
    }
  end

  @doc """
  The server sends tick `n` (`simulate?`: false for a load step, which only takes the spawns)
  with the spawns and despawns asked for since the last: first into the in-memory copy (a
  server killed after that and before the workers have the tick finds it there and sends it
  again), then to the workers. Answers the state with the tick running.
  """
  @spec tick(State.t(), non_neg_integer, boolean, nil | tuple) :: State.t()
  def tick(%State{} = st, n, simulate?, world \\ nil) do
    spawns = unborn(st.spawns, st.despawns)

    Memory.put_tick(
      st.memory,
      st.config.history,
      %{
        n: n,
        simulate: simulate?,
        spawns: spawns,
        despawns: st.despawns,
        game: st.game,
        next_id: st.next_id,
        # In a world: the neighbours' shadows and the transfers adopted (a tick sent again after
        # a server restart brings them; the history replays what the zone saw).
        world: world
      },
      Neighbours.memory_rows(st)
    )

    ctx = context(st.config, n)

    running =
      send_tick(st.config, st.workers, st.epoch, n, simulate?, ctx, spawns, st.despawns, world)

    Process.send_after(self(), {:stalled, st.epoch, n}, st.config.stall_timeout)
    %{st | spawns: [], despawns: [], running: running}
  end

  @doc """
  After a load step (a recovery from the store): the entities the zone handed to a neighbour
  at the end of the loaded tick, which its workers hold read-only for one more tick.
  """
  @spec departed(State.t(), [pos_integer]) :: :ok
  def departed(_st, []), do: :ok

  def departed(st, ids) do
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:departed, st.epoch, ids})
    :ok
  end

  # An entity spawned and despawned before the same tick (a player that joined and left)
  # never appears.
  defp unborn(spawns, []), do: spawns

  defp unborn(spawns, despawns) do
    gone = MapSet.new(despawns)
    Enum.reject(spawns, &MapSet.member?(gone, entity(&1, :id)))
  end

  @doc """
  Sends tick `n` to every worker: the spawns in its stripe, and every despawn. Returns the
  running tick.
  """
  @spec send_tick(
          Config.t(),
          tuple,
          integer,
          non_neg_integer,
          boolean,
          Context.t(),
          list,
          list,
          nil | tuple
        ) :: running
  def send_tick(config, workers, epoch, n, simulate?, ctx, spawns, despawns, world \\ nil) do
    t0 = System.monotonic_time()
    spawns = Enum.group_by(spawns, &Config.owner_of(config, entity(&1, :x), entity(&1, :y)))
    despawns = Map.new(despawns, &{&1, true})
    # The sidecar every worker sends this tick's bodies to (0: none, the next tick's physics
    # is computed in Elixir): one reading for all, so that they all send or none does.
    sidecar = Overworld.Sidecar.generation(config.physics)

    [first | others] =
      for w <- 0..(config.workers - 1) do
        {elem(workers, w),
         {:tick, epoch, n, simulate?, ctx, Enum.reverse(Map.get(spawns, w, [])), despawns,
          world && elem(world, w), System.monotonic_time(), sidecar}}
      end

    # One message, to worker 0, which forwards the others' parts: a server killed while
    # sending leaves either every worker with the tick or none (see Overworld.Zone.Server).
    {pid, msg} = first
    send(pid, {:tick_all, others, msg})

    %{
      n: n,
      pending: config.workers,
      t0: t0,
      input: 0,
      lateness: 0,
      systems: 0,
      grid: 0,
      count: 0,
      errors: 0,
      reported: [],
      events: [],
      world: []
    }
  end

  @doc """
  Adds a worker's report; the tick's input (taking the input slots), systems and grid phases
  are the slowest worker's.
  """
  @spec collect(running, non_neg_integer, map) :: running
  def collect(r, w, stats) do
    %{
      r
      | pending: r.pending - 1,
        reported: [w | r.reported],
        input: max(r.input, stats.input),
        systems: max(r.systems, stats.systems),
        grid: max(r.grid, stats.grid),
        count: r.count + stats.count,
        errors: r.errors + stats.errors,
        events: if(stats.events == [], do: r.events, else: [stats.events | r.events]),
        world: if(stats[:world], do: [{w, stats.world} | r.world], else: r.world)
    }
  end

  @doc "Records a finished tick (all workers done): metrics and the tick.stop event."
  @spec report(Config.t(), Metrics.t(), running, integer) :: :ok
  def report(config, metrics, r, total) do
    other = max(total - r.input - r.systems - r.grid, 0)
    if r.errors > 0, do: Metrics.add(metrics, :callback_errors, r.errors)

    Metrics.record_tick(metrics, r.n, %{
      total: us(total),
      input: us(r.input),
      systems: us(r.systems),
      grid: us(r.grid),
      other: us(other),
      entities: r.count
    })

    Telemetry.execute(
      [:overworld, :zone, :tick, :stop],
      %{
        duration: total,
        input: r.input,
        systems: r.systems,
        grid: r.grid,
        other: other,
        entities: r.count,
        lateness: r.lateness
      },
      %{zone: config.id, tick: r.n}
    )
  end

  defp us(native), do: System.convert_time_unit(native, :native, :microsecond)

  @doc """
  The running tick has not finished after `:stall_timeout`: counted and logged, with where
  each worker that has not reported is (a worker stuck in game code, the others waiting for
  it at the border exchange).
  """
  @spec stalled(State.t()) :: :ok
  def stalled(%State{running: %{n: n} = r} = st) do
    waiting = Enum.to_list(0..(st.config.workers - 1)) -- r.reported
    Metrics.add(st.metrics, :stalls, 1)

    where =
      Enum.map_join(waiting, "; ", fn w ->
        stack =
          case Process.info(elem(st.workers, w), :current_stacktrace) do
            {:current_stacktrace, frames} ->
              frames
              |> Enum.take(3)
              |> Enum.map_join(" < ", fn {m, f, a, _} -> Exception.format_mfa(m, f, a) end)

            nil ->
              "dead"
          end

        "worker #{w} in #{stack}"
      end)

    Logger.error(
      "zone #{inspect(st.config.id)} tick #{n} has not finished after " <>
        "#{st.config.stall_timeout} ms: bucket workers #{inspect(waiting)} have not reported " <>
        "(#{where}); the zone waits, other zones carry on",
      tick: n
    )
  end

  @doc "Merges the workers' answers to a query."
  @spec merge(term, [term]) :: term
  def merge(:count, results), do: Enum.sum(results)
  def merge(:entities, results), do: Enum.concat(results)
  def merge({:entity, _}, results), do: Enum.find(results, &(&1 != nil))
  def merge({:radius, _, _, _}, results), do: Enum.concat(results)

  def merge({:keyframes, _}, results) do
    {Enum.max(Enum.map(results, &elem(&1, 0))), Enum.flat_map(results, &elem(&1, 1))}
  end
end

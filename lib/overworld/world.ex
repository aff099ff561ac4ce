defmodule Overworld.World do
  @moduledoc """
  A world of zones: one map split into regions (`Overworld.World.Layout`), each simulated by a
  zone of its own that keeps everything a zone has (bucket workers, wire, persistence,
  recovery, history). Game code is the same `Overworld.Zone` module: every zone runs it.

      {:ok, _} =
        Overworld.start_world(MyGame,
          name: :overworld,
          size: {1400, 1400},
          cell_size: 12,
          zones: {2, 2},
          wire: MyGame.Wire
        )

  What makes the zones one world:

  * **Ids unique world-wide**: each zone allocates from its own id space
    (`Overworld.World.Layout.id_space/2`); `init/1`, which every zone runs, describes the whole
    world and each zone keeps the entities standing in its region, numbered as one zone would
    number them (`Overworld.Zone.Actions.perform_init/2`).
  * **Staggered ticks**: zone `i` of `n` ticks at `i / n` of the period, so the zones of a
    node share its cores instead of all starting at once.
  * **Shadows**: after each tick a zone sends each neighbour one message with its entities
    near their common border (the cells within two cells of the neighbour's region) and the
    tick they describe; the neighbour's workers see them in `Overworld.Spatial.View` like any
    entity of the previous tick, flagged by `Overworld.Spatial.View.shadow?/2` and never
    updated by its game code. Tick n reads the neighbours' tick n - 1: with the manual clock
    a zone waits for them, so a world computes exactly what one zone covering the map does
    (a zone restarted from its files, back at its last durable tick, catches up on the
    oldest shadows its neighbours still have: `tick_now/2` brings it to their tick first).
    With the realtime clock a zone reads the newest it has, dead-reckoned, and drops shadows
    late by more than `:shadow_late` ticks.
  * **Handoff with hysteresis**: an entity stays with its zone while it stands within
    `:hysteresis` metres of the zone's region (so one walking along a border does not flap),
    then goes to the zone whose region holds it: its whole state in the next message, under a
    transfer id, sent again until the new zone acknowledges it and adopted once. Until then
    the old zone still has it, read-only.

  Zones are named `{name, region id}` (`{name, {col, row}}` for a grid of zones) and are
  found as any zone is (`Overworld.Zone` functions take the id).

  ## Options

  * `:name` (required) — the world's name
  * `:zones` — `{cols, rows}`: a grid of regions (default `{1, 1}`), or `:regions`:
    `[{id, {x0, y0, x1, y1}}]` rectangles in metres on cell borders (see
    `Overworld.World.Layout`)
  * `:size`, `:cell_size` — the world's size and its grid's cell in metres (defaults as a
    zone's: `{1000, 1000}`, 12)
  * `:hysteresis` — metres past its region an entity stays with its zone (default 2; less
    than a cell)
  * `:shadow_every` — shadows go to the neighbours on every that many ticks (default 1, every
    tick; with the manual clock a world of zones computes exactly what one zone does only
    then). Between two updates a neighbour dead-reckons them, and their margin grows by what
    an entity moves in that time at `:max_speed` (metres per second, the fastest an entity
    moves; required with `:shadow_every` above 1). The message of every tick still goes (its
    handoffs and acknowledgements), without shadows between updates.
  * `:shadow_late` — ticks a neighbour's shadows may be late (realtime clock) before they are
    dropped rather than drawn wrong (default 3; with `:shadow_every` k above 1, k + 2; at
    least k - 1). With the realtime clock and k above 1 the zones send their cells out of
    phase: an entity handed between two neighbours may be missing from (or shown twice in)
    a third's shadows for up to k ticks.
  * `:data_dir` — each zone persists into a directory of its own under it
  * `:cluster` — `true`: the world is spread over the nodes of the cluster
    (`Overworld.Cluster`; docs/cluster.md). Every node starts the world with the same options
    (its own `:data_dir`, required), and runs the zones whose home is that node
    (`Overworld.Cluster.Placement`); when a node joins or drains (`Overworld.Cluster.drain/0`),
    the zones whose home changes move with their state (a snapshot of their last tick and
    their journal), and a node that sees no majority of the configured nodes runs none. The
    zones find their neighbours on any node. Default `false`: every zone on this node. With
    more than one configured node the zones' `:durability` is `:replicated` unless given:
    each zone's files are copied as they are written to its replica node, where it restarts
    when its node dies (docs/cluster.md).
  * any other option of `Overworld.Zone` (`:tick_rate`, `:clock`, `:workers`, `:wire`,
    `:args`, ...), the same for every zone; not `:id`, `:region`, `:id_space`, `:world`

  * **Players cross too**: a player's avatar is handed over like any entity, with its
    player; its session follows it to the new zone on the same connection (its inputs go
    there from the next tick). A server serves a world under one zone name
    (`zones: %{"world" => {:world, name}}`).
  * **Game code may veto a crossing** (`c:Overworld.Zone.handle_crossing/3`): the entity stays,
    stopped at the edge of the margin.
  * **Crashes and restarts lose and duplicate nothing**: handoffs survive zone server kills
    (the in-memory copy) and, with a `:data_dir`, `kill -9` of the node (journaled on both
    sides, docs/persistence.md).

  Not done yet: a client sees one zone at a time (at a crossing its view starts over from the
  new zone's keyframes), see docs/architecture.md, "Worlds of many zones".
  """

  alias Overworld.Names
  alias Overworld.Zone.Memory
  alias Overworld.World.{Layout, Place}

  @world_keys [
    :name,
    :zones,
    :regions,
    :size,
    :cell_size,
    :hysteresis,
    :shadow_every,
    :max_speed,
    :shadow_late,
    :cluster
  ]
  @zone_only [:id, :region, :id_space, :world]

  @doc false
  @spec child_spec({module, keyword}) :: Supervisor.child_spec()
  def child_spec({module, opts}) do
    {name, specs} = zone_specs(module, durability(opts))

    placed =
      case Keyword.get(opts, :cluster, false) do
        false ->
          nil

        true ->
          unless opts[:data_dir],
            do: raise(ArgumentError, "Overworld.World: :cluster needs a :data_dir")

          for %{start: {_, _, [config]}} = spec <- specs,
              do: {config.id, spec, Overworld.Zone.Store.dir(config)}

        other ->
          raise ArgumentError,
                "Overworld.World: expected :cluster to be a boolean, got: #{inspect(other)}"
      end

    %{
      id: {__MODULE__, name},
      start: {Overworld.World.Supervisor, :start_link, [name, specs, placed]},
      type: :supervisor,
      restart: :transient
    }
  end

  # A world over a cluster of more than one configured node replicates its zones' files.
  defp durability(opts) do
    if Keyword.get(opts, :cluster) == true and not Keyword.has_key?(opts, :durability) and
         Overworld.Cluster.clustered?(),
       do: Keyword.put(opts, :durability, :replicated),
       else: opts
  end

  @doc """
  The zones' child specs of a world (options validated; raises `ArgumentError` with the
  reason when they are not valid).
  """
  @spec zone_specs(module, keyword) :: {term, [Supervisor.child_spec()]}
  def zone_specs(module, opts) do
    unless Keyword.keyword?(opts), do: raise(ArgumentError, "expected a keyword list of options")

    case Keyword.take(opts, @zone_only) do
      [] ->
        :ok

      given ->
        raise ArgumentError,
              "Overworld.World: #{inspect(Keyword.keys(given))} are set per zone by the world"
    end

    name = Keyword.get(opts, :name) || raise ArgumentError, "Overworld.World: :name is required"

    layout =
      Layout.new!(
        size: Keyword.get(opts, :size, {1000, 1000}),
        cell_size: Keyword.get(opts, :cell_size, 12),
        zones: if(opts[:regions], do: nil, else: Keyword.get(opts, :zones, {1, 1})),
        regions: opts[:regions]
      )

    every = Keyword.get(opts, :shadow_every, 1)

    place_opts = [
      hysteresis: Keyword.get(opts, :hysteresis, 2),
      every: every,
      late: Keyword.get(opts, :shadow_late, Place.default_late(every)),
      max_speed: opts[:max_speed],
      tick_rate: Keyword.get(opts, :tick_rate, 30)
    ]

    zone_opts = Keyword.drop(opts, @world_keys ++ [:data_dir])

    specs =
      for %{id: rid, index: i} <- layout.regions do
        place = Place.new!(name, layout, rid, place_opts)
        dir = opts[:data_dir] && Path.join(opts[:data_dir], "zone-#{i}")

        zone_opts =
          [id: {name, rid}, world: place] ++
            if(dir, do: [data_dir: dir], else: []) ++ zone_opts

        Supervisor.child_spec(Overworld.Zone.child_spec({module, zone_opts}), id: {:zone, rid})
      end

    {name, specs}
  end

  @doc "The zone ids of a running world (`{name, region id}`), or [] when it is not running."
  @spec zones(term) :: [term]
  def zones(name) do
    case Names.whereis(Names.placer(name)) do
      nil ->
        case Names.whereis(Names.world(name)) do
          nil -> []
          pid -> for {{:zone, rid}, _, _, _} <- Supervisor.which_children(pid), do: {name, rid}
        end

      # Spread over a cluster: those that run, wherever.
      placer ->
        for id <- Overworld.World.Placer.zones(placer), Overworld.Zone.whereis(id), do: id
    end
  end

  @doc """
  Ticks every zone of a world on the manual clock `count` times (each zone's tick n waits for
  its neighbours' tick n - 1). Answers `{:ok, tick}` once all are done. Zones behind the
  others (one restarted from its files went back to its last durable tick) tick until they
  reach them first: all end at the same tick, `count` past the newest.
  """
  @spec tick_now(term, pos_integer) :: {:ok, non_neg_integer} | {:error, term}
  def tick_now(name, count \\ 1) when is_integer(count) and count > 0 do
    at = for z <- zones(name), do: {z, Overworld.Zone.info(z).tick}
    target = Enum.max(Enum.map(at, &elem(&1, 1)), fn -> 0 end) + count

    at
    |> Enum.map(fn {z, t} -> Task.async(fn -> Overworld.Zone.tick_now(z, target - t) end) end)
    |> Task.await_many(:infinity)
    |> Enum.uniq()
    |> case do
      [{:ok, tick}] -> {:ok, tick}
      [] -> {:error, :not_found}
      other -> {:error, other}
    end
  end

  @doc """
  The zone of a running world a player should be served by: the one that has it, else the
  one its id hashes to (where it joins). nil when the world is not running. A player whose
  avatar is crossing a border (handed away by a zone within the last `wait` ms, not yet
  adopted by its neighbour) is waited for, at most `wait` ms: a client reconnecting then
  finds its avatar, not a second one.

  No message to any zone: each node running zones of the world reads their tables, all
  nodes at once (one `:erpc` call each, at most 2 s; a node that does not answer counts as
  holding nothing). No mirror of a zone on another node is started for the lookup.
  """
  @spec zone_for(term, term, non_neg_integer) :: term | nil
  def zone_for(name, player, wait \\ 2_000) do
    case name |> zones() |> Enum.sort() do
      [] -> nil
      zones -> holder(zones, player, wait, System.monotonic_time(:millisecond) + wait)
    end
  end

  defp holder(zones, player, wait, until) do
    answers =
      case zones |> Enum.map(&zone_node/1) |> Enum.uniq() |> Enum.reject(&is_nil/1) do
        nodes when nodes in [[], [node()]] ->
          [held_here(zones, player, wait)]

        nodes ->
          for {:ok, answer} <-
                :erpc.multicall(nodes, __MODULE__, :held_here, [zones, player, wait], 2_000),
              do: answer
      end

    cond do
      held = Enum.find_value(answers, &(match?({:held, _}, &1) && elem(&1, 1))) ->
        held

      :moving in answers and System.monotonic_time(:millisecond) < until ->
        Process.sleep(5)
        holder(zones, player, wait, until)

      true ->
        Enum.at(zones, :erlang.phash2(player, length(zones)))
    end
  end

  defp zone_node(zone) do
    case Overworld.Zone.whereis(zone) do
      pid when is_pid(pid) -> node(pid)
      nil -> nil
    end
  end

  @doc false
  # On a node running zones of a world: which of `zones` running here holds `player`
  # (`{:held, zone}`, the first in order), else `:moving` when one of them handed its avatar
  # away within the last `wait` ms (this node's clock), else nil. Read from the zones' tables.
  @spec held_here([term], term, non_neg_integer) :: {:held, term} | :moving | nil
  def held_here(zones, player, wait) do
    here = for z <- zones, {_, config} <- [Names.lookup(Names.zone(z))], do: {z, config}
    now = System.monotonic_time(:millisecond)

    cond do
      zone = Enum.find_value(here, &(Memory.player_entity(memory(&1), player) && elem(&1, 0))) ->
        {:held, zone}

      Enum.any?(here, fn z ->
        at = Memory.moved(memory(z), player)
        at != nil and now - at < wait
      end) ->
        :moving

      true ->
        nil
    end
  rescue
    # (A zone stopping meanwhile: its tables went.)
    ArgumentError -> nil
  end

  defp memory({_zone, config}), do: config.shared.memory

  @doc "Every entity of the world (each zone's, at its last tick)."
  @spec entities(term) :: [Overworld.Entity.t()]
  def entities(name), do: Enum.flat_map(zones(name), &Overworld.Zone.entities/1)

  @doc "The entities per zone of the world."
  @spec counts(term) :: %{optional(term) => non_neg_integer}
  def counts(name), do: Map.new(zones(name), &{&1, Overworld.Zone.count(&1)})
end

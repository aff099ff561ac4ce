defmodule Overworld.Zone.Release do
  @moduledoc false
  # A zone letting go of its state so that another node can run it (`Overworld.Zone.release/1`,
  # used when a world's zone moves between the nodes of a cluster: `Overworld.World.Placer`).
  #
  # The server stops its clock (no tick starts again: the timer is dropped, queued manual
  # ticks are answered `{:error, :released}`), lets the tick in flight finish, writes a
  # snapshot of that tick (the one due may be under way first: it waits for it), fsyncs the
  # journal, and only then answers `{:ok, tick}`: the zone's directory now holds everything
  # it ever acknowledged, and nothing after. The server leaves the cluster's `:pg` group and
  # the registry at the same moment (the zone is no longer found by its id: messages go to
  # its next incarnation), and from then on refuses what would change it (`{:error, :moved}`)
  # until it is stopped.
  #
  # State: `st.release` is nil, `{:waiting, from}` (a tick or a snapshot is under way),
  # `{:snapshot, from, tick}` (ours is being written), `:released`, or `:fenced`.
  #
  # Fencing (a zone of a world over a cluster, docs/cluster.md "Ownership"): before each tick
  # and before a release the zone checks that its node still owns it (`owner?/1`: the
  # generation it was started under, and the node's lease). A zone that does not is fenced
  # for good: no tick starts again (so nothing more is journaled, acknowledged or published),
  # no snapshot is written, it is found no more (the cluster's group and the registry), calls
  # that would change it are refused, and its placer is told, which stops it.

  require Logger
  alias Overworld.Zone.{Durable, State}

  @doc "Starts the release asked for by `from` (a `GenServer.call`)."
  @spec begin(State.t(), GenServer.from()) :: {:reply, term, State.t()} | {:noreply, State.t()}
  def begin(%State{store: nil} = st, _from), do: {:reply, {:error, :no_data_dir}, st}
  def begin(%State{release: r} = st, _from) when r != nil, do: {:reply, {:error, :moved}, st}

  def begin(st, from) do
    if owner?(st) do
      {:noreply, step(%{stop_clock(st, :released) | release: {:waiting, from}})}
    else
      {:reply, {:error, :fenced}, fence(st)}
    end
  end

  defp stop_clock(st, answer) do
    if st.clock && st.clock.timer, do: :erlang.cancel_timer(st.clock.timer)
    for {caller, _} <- :queue.to_list(st.manual), do: GenServer.reply(caller, {:error, answer})
    # (Snapshots asked for and not yet taken will not be: the zone is moving. One taken is
    # answered once written.)
    for caller <- st.snapshot_asked, do: GenServer.reply(caller, {:error, :moved})
    %{st | clock: nil, manual: :queue.new(), snapshot_asked: []}
  end

  @doc """
  Whether the zone's node still owns it (always, for a zone not placed by a world over a
  cluster): `Overworld.Cluster.owner?/1` of the generation it was started under.
  """
  @spec owner?(State.t()) :: boolean
  def owner?(%State{config: %{owner: nil}}), do: true
  def owner?(%State{config: %{owner: {gen, _epoch}}}), do: Overworld.Cluster.owner?(gen)

  @doc "Fences the zone (see the module's notes): it changes no more; its placer is told."
  @spec fence(State.t()) :: State.t()
  def fence(%State{release: :fenced} = st), do: st

  def fence(st) do
    %{id: id, owner: {gen, epoch}} = st.config

    Logger.error(
      "zone #{inspect(id)} fenced at tick #{st.tick}: this node no longer owns it " <>
        "(epoch #{epoch}, generation #{gen}; now #{Overworld.Cluster.generation()}, " <>
        "lease #{if Overworld.Cluster.leased?(), do: "held", else: "lapsed"})"
    )

    _ = Overworld.Cluster.unregister_zone(id)
    Overworld.Names.unregister(Overworld.Names.zone(id))

    with %{name: world} <- st.config.world,
         placer when is_pid(placer) <-
           Overworld.Names.whereis(Overworld.Names.placer(world)),
         do: send(placer, {:fenced, id, gen})

    %{stop_clock(st, :fenced) | release: :fenced}
  end

  @doc """
  Goes on with a release once nothing is under way (called after a tick and after a
  snapshot is written): our snapshot of the last tick.
  """
  @spec step(State.t()) :: State.t()
  def step(%State{release: {:waiting, from}, running: nil, snapshotting: false} = st) do
    {st, job} = Durable.snapshot_now(st)
    for pid <- Tuple.to_list(st.workers), do: send(pid, {:jobs_now, st.epoch, [job]})
    %{st | release: {:snapshot, from, st.tick}}
  end

  def step(st), do: st

  @doc "A snapshot was written (or dropped): ours ends the release."
  @spec snapshot_done(State.t(), non_neg_integer) :: State.t()
  def snapshot_done(%State{release: {:snapshot, from, tick}} = st, tick) do
    :ok = Overworld.Persistence.Journal.sync(st.journal)
    _ = Overworld.Cluster.unregister_zone(st.config.id)
    Overworld.Names.unregister(Overworld.Names.zone(st.config.id))
    GenServer.reply(from, {:ok, tick})
    %{st | release: :released}
  end

  def snapshot_done(st, _tick), do: step(st)
end

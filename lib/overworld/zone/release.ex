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
  # `{:snapshot, from, tick}` (ours is being written), or `:released`.

  alias Overworld.Zone.{Durable, State}

  @doc "Starts the release asked for by `from` (a `GenServer.call`)."
  @spec begin(State.t(), GenServer.from()) :: {:reply, term, State.t()} | {:noreply, State.t()}
  def begin(%State{store: nil} = st, _from), do: {:reply, {:error, :no_data_dir}, st}
  def begin(%State{release: r} = st, _from) when r != nil, do: {:reply, {:error, :moved}, st}

  def begin(st, from) do
    if st.clock && st.clock.timer, do: :erlang.cancel_timer(st.clock.timer)
    for {caller, _} <- :queue.to_list(st.manual), do: GenServer.reply(caller, {:error, :released})
    {:noreply, step(%{st | clock: nil, manual: :queue.new(), release: {:waiting, from}})}
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

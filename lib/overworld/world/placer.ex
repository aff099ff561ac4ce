defmodule Overworld.World.Placer do
  @moduledoc false
  # A world spread over a cluster (`Overworld.World`, option `cluster: true`): one placer per
  # world on every node runs the world's zones whose home is this node
  # (`Overworld.Cluster.Placement` over the live members, `Overworld.Cluster.nodes/0`), and
  # follows the members (`:pg.monitor/2` of the `:members` group, and a look every second):
  #
  #   * a zone homed here that runs nowhere (and is not on its way here) starts from its
  #     directory (empty the first time: init/1's share of the world);
  #   * a zone that runs here and is homed elsewhere now moves there, with its state: the
  #     placer tells the new home it is coming (that placer then starts nothing for it), the
  #     zone is released (`Overworld.Zone.release/1`: a snapshot of its last tick, the journal
  #     synced), its files travel in chunks (`Overworld.World.Handover`), the new home installs
  #     them and starts the zone from them, and only then is the zone stopped here and its
  #     directory removed. A hand-over that fails on the way starts the zone here again from
  #     its own files (released: they hold everything it did);
  #   * a node that does not see a majority of the cluster's configured nodes
  #     (`Overworld.Cluster.quorum/0`) runs none of the world's zones: it stops those it ran.
  #
  # Not on any hot path: zones and their neighbours talk directly (by pid, found through the
  # cluster's `:pg` groups); the placer only starts, stops and moves them.

  use GenServer
  require Logger

  alias Overworld.{Cluster, Names}
  alias Overworld.Cluster.Placement
  alias Overworld.World.Handover
  alias Overworld.Zone.Replica

  @look_ms 1_000

  @typedoc "A zone of the world: its id, its child spec and its directory."
  @type zone :: {term, Supervisor.child_spec(), Path.t()}

  @doc false
  @spec start_link({term, [zone]}) :: GenServer.on_start()
  def start_link({name, zones}),
    do: GenServer.start_link(__MODULE__, {name, zones}, name: Names.via(Names.placer(name)))

  @doc "The ids of the world's zones (wherever they run)."
  @spec zones(pid) :: [term]
  def zones(placer), do: GenServer.call(placer, :zones)

  # The placer of world `name` on node `node`, or nil.
  defp on(name, node) do
    Enum.find(:pg.get_members(Cluster.scope(), {:placer, name}), &(node(&1) == node))
  end

  @doc """
  Starts this node's replica of zone `id` of world `name` for the journal writer `writer`
  (`Overworld.Zone.Replica`, under `Overworld.Replicas`), called by the writer through
  `:erpc` (in a process of its own here: never waiting on the placer, which may be starting
  a zone whose own writer waits on another node). Not for a zone that runs here, nor for a
  writer whose node is not a member, or whose zone is not the one the cluster finds: a stale
  owner (a node back from a pause) gets no replica, so it acknowledges nothing.
  """
  @spec start_replica(term, term, pid) :: {:ok, pid} | {:error, term}
  def start_replica(name, id, writer) do
    zone = Cluster.zone(id)

    case :persistent_term.get({__MODULE__, name}, %{}) do
      %{^id => dir} ->
        cond do
          here?(id) ->
            {:error, :runs_here}

          node(writer) not in Cluster.live() or (zone != nil and node(zone) != node(writer)) ->
            {:error, :not_the_owner}

          true ->
            :ok = Replica.stop(id)
            DynamicSupervisor.start_child(Overworld.Replicas, {Replica, {id, dir, writer}})
        end

      _ ->
        {:error, :unknown_zone}
    end
  end

  @impl true
  def init({name, zones}) do
    Process.flag(:trap_exit, true)
    # Where this node keeps each zone's files (read by start_replica/3).
    dirs = Map.new(zones, fn {id, _spec, dir} -> {id, dir} end)

    if :persistent_term.get({__MODULE__, name}, nil) != dirs,
      do: :persistent_term.put({__MODULE__, name}, dirs)

    :ok = :pg.join(Cluster.scope(), {:placer, name}, self())
    {ref, _} = :pg.monitor(Cluster.scope(), :members)
    send(self(), :place)

    {:ok,
     %{
       name: name,
       zones: zones,
       sup: Names.whereis(Names.world_zones(name)),
       ref: ref,
       # id => zone supervisor pid (zones running here)
       running: %{},
       # id => the pid of the process handing it over (out, from here; in, to here)
       out: %{},
       in: %{},
       # id => chunks received so far
       files: %{},
       # zones that stopped by themselves: not started again until their home changes
       ended: %{}
     }}
  end

  @impl true
  def handle_call(:zones, _from, st), do: {:reply, Enum.map(st.zones, &elem(&1, 0)), st}

  # Another node hands us a zone: first it says so (we start nothing for it meanwhile), then
  # the chunks of its files, then the adoption.
  def handle_call({:incoming, id, from}, _from, st) do
    Process.monitor(from)
    # (No replica of it starts here until it runs: start_replica/3. Its old node's writer,
    # still alive until the zone starts here, would otherwise seed one into the directory the
    # hand-over installs.)
    arriving(id, true)
    :ok = Replica.stop(id)

    # A zone still running here while the cluster moves it here from elsewhere is stale (this
    # node was cut off or paused while its zone restarted on another): it stops, and the
    # files coming in replace its own.
    st =
      if is_map_key(st.running, id) do
        Logger.warning("zone #{inspect(id)}: a stale copy ran here; it stops for the one coming")
        stop(st, id)
      else
        st
      end

    {:reply, :ok, %{st | in: Map.put(st.in, id, from), files: Map.put(st.files, id, %{})}}
  end

  def handle_call({:chunk, id, chunk}, _from, st) when is_map_key(st.files, id) do
    {:reply, :ok, %{st | files: Map.update!(st.files, id, &Handover.add(&1, chunk))}}
  end

  def handle_call({:adopt, id, tick}, _from, st) when is_map_key(st.files, id) do
    {_, spec, dir} = List.keyfind(st.zones, id, 0)

    {files, st} =
      {st.files[id], %{st | files: Map.delete(st.files, id), in: Map.delete(st.in, id)}}

    result =
      with :ok <- Handover.install(dir, files),
           {:ok, st} <- start(st, id, spec) do
        Logger.info("zone #{inspect(id)} moved here at tick #{tick}")
        {:reply, :ok, st}
      else
        error -> {:reply, error, st}
      end

    arriving(id, false)
    result
  end

  def handle_call(_msg, _from, st), do: {:reply, {:error, :unknown}, st}

  @impl true
  def handle_info({ref, _join_or_leave, :members, _pids}, %{ref: ref} = st),
    do: {:noreply, place(st)}

  def handle_info(:place, st) do
    Process.send_after(self(), :place, @look_ms)
    {:noreply, place(st)}
  end

  # A hand-over of ours is over.
  def handle_info({:handed, id, result}, st) do
    st = %{st | out: Map.delete(st.out, id)}

    case result do
      :ok ->
        # (No replica of it starts here until it stopped: the new node's writer may already
        # ask for one, start_replica/3.) Its files stay: they are the zone as it was handed
        # over, and until the new node's writer has seeded a replica they are the only other
        # copy of it (nothing leaves the zone meanwhile: a handoff waits for a replica). This
        # node is that replica's place when it was the zone's home before the new node came.
        arriving(id, true)
        st = stop(st, id)
        arriving(id, false)
        {:noreply, st}

      {:error, reason} ->
        Logger.error("zone #{inspect(id)} not handed over (#{inspect(reason)}): runs here again")
        {_, spec, _} = List.keyfind(st.zones, id, 0)
        {_, st} = start(stop(st, id), id, spec)
        {:noreply, st}
    end
  end

  def handle_info({:DOWN, _ref, :process, pid, _reason}, st) do
    case Enum.find(st.running, fn {_, p} -> p == pid end) do
      {id, _} ->
        {:noreply,
         %{st | running: Map.delete(st.running, id), ended: Map.put(st.ended, id, true)}}

      nil ->
        # A node that was handing us a zone went away: we may start it from what we have.
        gone = for {id, ^pid} <- st.in, do: id
        for id <- gone, do: arriving(id, false)
        {:noreply, %{st | in: Map.drop(st.in, gone), files: Map.drop(st.files, gone)}}
    end
  end

  def handle_info({:EXIT, _pid, _reason}, st), do: {:noreply, st}
  def handle_info(_msg, st), do: {:noreply, st}

  ## Placing

  defp place(st) do
    nodes = Cluster.nodes()

    if Cluster.quorate?() do
      Enum.reduce(st.zones, st, fn {id, spec, dir}, st ->
        place_zone(st, id, spec, dir, Placement.home(id, nodes))
      end)
    else
      for {id, _} <- st.running, not is_map_key(st.out, id) do
        Logger.warning("zone #{inspect(id)} stops: this node sees no majority of the cluster")
      end

      Enum.reduce(Map.keys(st.running), st, &stop(&2, &1))
    end
  end

  defp place_zone(st, id, spec, _dir, home) when home == node() do
    cond do
      is_map_key(st.running, id) or is_map_key(st.in, id) or is_map_key(st.ended, id) -> st
      Overworld.Zone.whereis(id) != nil -> st
      elsewhere?(st.name, id) -> st
      true -> elem(start(st, id, spec), 1)
    end
  end

  defp place_zone(st, id, _spec, dir, home) do
    st = %{st | ended: Map.delete(st.ended, id)}

    with true <- is_map_key(st.running, id) and not is_map_key(st.out, id),
         to when is_pid(to) <- on(st.name, home) do
      me = self()
      pid = spawn_link(fn -> send(me, {:handed, id, hand_over(id, dir, to)}) end)
      %{st | out: Map.put(st.out, id, pid)}
    else
      _ -> st
    end
  end

  # Whether the zone runs on another node of the world: asked there directly (its local
  # registry, read by a process of its own: never a placer, which may be asking us the same)
  # before a zone starts here, since this node's copy of the `:pg` groups may lag behind a
  # node that just connected. A node that does not answer in time may run it.
  defp elsewhere?(name, id) do
    key = Names.zone(id)

    :pg.get_members(Cluster.scope(), {:placer, name})
    |> Enum.map(&node/1)
    |> Enum.reject(&(&1 == node()))
    |> Enum.any?(fn n ->
      try do
        :erpc.call(n, Names, :whereis, [key], 2_000) != nil
      catch
        :error, {:erpc, :timeout} -> true
        _, _ -> false
      end
    end)
  end

  # Whether the zone has anything on this node besides a replica: its server, its store (a
  # released zone until it stops: its files are in use), or it arrives or leaves (marked).
  defp here?(id) do
    Names.whereis(Names.zone(id)) != nil or Names.whereis(Names.zone_store(id)) != nil or
      Names.whereis(Names.arriving(id)) != nil
  end

  # Marks a zone arriving on this node (handed over, or starting from its files), or leaving
  # it (its directory removed): no replica of it starts here meanwhile (start_replica/3).
  defp arriving(id, true) do
    _ = Names.register(Names.arriving(id))
    :ok
  end

  defp arriving(id, false), do: Names.unregister(Names.arriving(id))

  defp start(st, id, spec) do
    # (This node's replica of the zone, if any, stops writing: the zone starts from its files.)
    arriving(id, true)
    :ok = Replica.stop(id)
    started = DynamicSupervisor.start_child(st.sup, spec)
    # (Still arriving when it came by a hand-over: adopt ends that.)
    unless is_map_key(st.in, id), do: arriving(id, false)

    case started do
      {:ok, pid} ->
        Process.monitor(pid)
        {:ok, %{st | running: Map.put(st.running, id, pid), ended: Map.delete(st.ended, id)}}

      {:error, reason} = error ->
        Logger.error("zone #{inspect(id)} did not start: #{inspect(reason)}")
        {error, st}
    end
  end

  defp stop(st, id) do
    case Map.pop(st.running, id) do
      {nil, _} ->
        st

      {pid, running} ->
        _ = DynamicSupervisor.terminate_child(st.sup, pid)
        %{st | running: running}
    end
  end

  # (In a process of its own: the placer goes on answering meanwhile.)
  defp hand_over(id, dir, to) do
    with :ok <- GenServer.call(to, {:incoming, id, self()}, 15_000),
         {:ok, tick} <- Overworld.Zone.release(id),
         {:ok, chunks} <- Handover.chunks(dir),
         :ok <- Handover.call_each(to, chunks, &{:chunk, id, &1}) do
      GenServer.call(to, {:adopt, id, tick}, 60_000)
    end
  catch
    :exit, reason -> {:error, {:exit, reason}}
  end
end

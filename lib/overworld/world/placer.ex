defmodule Overworld.World.Placer do
  @moduledoc false
  # A world spread over a cluster (`Overworld.World`, option `cluster: true`): one placer per
  # world on every node runs the world's zones whose home is this node
  # (`Overworld.Cluster.Placement` over the live members, `Overworld.Cluster.nodes/0`), and
  # follows the members (`:pg.monitor/2` of the `:members` group, and a look every second):
  #
  #   * a zone homed here that runs nowhere (and is not on its way here) starts from the
  #     newest copy of its files in the cluster (`Overworld.World.Copies.survey/3`): its own
  #     directory (empty the first time: init/1's share of the world), or, when another node
  #     holds a copy of a higher ownership epoch, that copy, fetched first (that node sends it
  #     as a hand-over). Every start is a new epoch, written into the directory first;
  #   * a zone that runs here and is homed elsewhere now moves there, with its state: the
  #     placer tells the new home it is coming (that placer then starts nothing for it), the
  #     zone is released (`Overworld.Zone.release/1`: a snapshot of its last tick, the journal
  #     synced), its files travel in chunks (`Overworld.World.Handover`), the new home installs
  #     them and starts the zone from them, and only then is the zone stopped here and its
  #     directory removed. A hand-over that fails on the way starts the zone here again from
  #     its own files (released: they hold everything it did);
  #   * a node that does not see a majority of the cluster's configured nodes
  #     (`Overworld.Cluster.quorate?/0`) or whose lease lapsed (`Overworld.Cluster.leased?/0`)
  #     runs none of the world's zones: it stops those it ran; a zone started under an older
  #     ownership generation (`Overworld.Cluster.owner?/1`: the lease lapsed meanwhile) is
  #     fenced and stopped, and starts again (from the newest copy) only if still homed here.
  #
  # Not on any hot path: zones and their neighbours talk directly (by pid, found through the
  # cluster's `:pg` groups); the placer only starts, stops and moves them.

  use GenServer
  require Logger

  alias Overworld.{Cluster, Names}
  alias Overworld.Cluster.Placement
  alias Overworld.World.{Copies, Handover}
  alias Overworld.Zone.Replica

  @look_ms 1_000
  # How long a start waits for the newer copy it asked another node for.
  @fetch_ms 30_000

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
  writer whose node is not a member, or whose zone is not the one the cluster finds, or whose
  ownership `epoch` is older than the copy here: a stale owner (a node back from a pause)
  gets no replica, so it acknowledges nothing.
  """
  @spec start_replica(term, term, pid, non_neg_integer) :: {:ok, pid} | {:error, term}
  def start_replica(name, id, writer, epoch) do
    zone = Cluster.zone(id)

    case :persistent_term.get({__MODULE__, name}, %{}) do
      %{^id => dir} ->
        cond do
          Copies.busy?(id) ->
            {:error, :runs_here}

          node(writer) not in Cluster.live() or (zone != nil and node(zone) != node(writer)) ->
            {:error, :not_the_owner}

          (mine = Copies.epoch(dir)) > epoch ->
            {:error, {:stale_epoch, epoch, mine}}

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
       ended: %{},
       # id => the ownership generation it was started under (Overworld.Cluster.owner?/1)
       gens: %{},
       # id => when we stop waiting for the newer copy another node was asked to send
       fetching: %{}
     }}
  end

  @impl true
  def handle_call(:zones, _from, st), do: {:reply, Enum.map(st.zones, &elem(&1, 0)), st}

  # Another node hands us a zone: first it says so (we start nothing for it meanwhile), then
  # the chunks of its files, then the adoption.
  def handle_call({:incoming, id, from, epoch}, _from, st) do
    {_, _, dir} = List.keyfind(st.zones, id, 0)
    mine = Copies.epoch(dir)

    cond do
      # (One at a time: another node's files for it are coming already. A hand-over refused
      # so leaves the zone running on its node, which tries again at its next look.)
      Map.get(st.in, id, from) != from ->
        {:reply, {:error, :incoming_already}, st}

      # (A copy older than ours is stale: its node lost the zone while paused or cut off.)
      mine > epoch ->
        Logger.warning(
          "zone #{inspect(id)}: a copy of epoch #{epoch} from #{node(from)} refused (ours: #{mine})"
        )

        {:reply, {:error, {:stale_epoch, epoch, mine}}, st}

      # (This node may run no zone now: it would be fenced at once.)
      not (Cluster.quorate?() and Cluster.leased?()) ->
        {:reply, {:error, :not_owner_now}, st}

      true ->
        incoming(st, id, from)
    end
  end

  # (Chunks and the adoption are taken from the process that announced them only.)
  def handle_call({:chunk, id, chunk}, {pid, _}, st) when :erlang.map_get(id, st.in) == pid do
    {:reply, :ok, %{st | files: Map.update!(st.files, id, &Handover.add(&1, chunk))}}
  end

  # (`how`: the tick a zone was released at, or `{:copy, node}` for a newer copy fetched
  # from that node before a start.)
  def handle_call({:adopt, id, how}, {pid, _}, st) when :erlang.map_get(id, st.in) == pid do
    {_, spec, dir} = List.keyfind(st.zones, id, 0)

    {files, st} =
      {st.files[id], %{st | files: Map.delete(st.files, id), in: Map.delete(st.in, id)}}

    result =
      with :ok <- Handover.install(dir, files),
           {:ok, st} <- start(st, id, spec) do
        case how do
          {:copy, n} -> Logger.info("zone #{inspect(id)} starts from the newer copy of #{n}")
          tick -> Logger.info("zone #{inspect(id)} moved here at tick #{tick}")
        end

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
        # ask for one, start_replica/4.) Its files stay: they are the zone as it was handed
        # over, and until the new node's writer has seeded a replica they are the only other
        # copy of it (nothing leaves the zone meanwhile: a handoff waits for a replica). This
        # node is that replica's place when it was the zone's home before the new node came.
        arriving(id, true)
        st = stop(st, id)
        arriving(id, false)
        {:noreply, st}

      {:refused, {:stale_epoch, _, _} = reason} ->
        # (Our copy is older than the new home's: this node lost the zone meanwhile.)
        Logger.error("zone #{inspect(id)} not handed over (#{inspect(reason)}): it stops here")
        {:noreply, stop(st, id)}

      {:refused, reason} ->
        # (Refused before the zone was released: it runs on here, and the next look tries
        # again.)
        Logger.info("zone #{inspect(id)} not handed over yet: #{inspect(reason)}")
        {:noreply, st}

      {:error, reason} ->
        Logger.error("zone #{inspect(id)} not handed over (#{inspect(reason)}): runs here again")
        {_, spec, _} = List.keyfind(st.zones, id, 0)
        {_, st} = start(stop(st, id), id, spec)
        {:noreply, st}
    end
  end

  # A zone of ours found that this node no longer owns it (Overworld.Zone.Release.fence/1).
  # (It starts again, from the newest copy, at the next look if it is still homed here. A
  # notice of a zone stopped and started again since, under a newer generation, is late.)
  def handle_info({:fenced, id, gen}, st) do
    if Map.get(st.gens, id) == gen, do: {:noreply, stop(st, id)}, else: {:noreply, st}
  end

  # Another node's placer, about to start a zone, asks for our newer copy of it.
  def handle_info({:send_copy, id, to}, st) do
    {_, _, dir} = List.keyfind(st.zones, id, 0)

    if Copies.busy?(id) or is_map_key(st.in, id) or not Copies.copy?(dir) do
      send(to, {:no_copy, id, node()})
    else
      spawn_link(fn -> send_copy(id, dir, to) end)
    end

    {:noreply, st}
  end

  def handle_info({:no_copy, id, _node}, st),
    do: {:noreply, %{st | fetching: Map.delete(st.fetching, id)}}

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

  # (A hand-over, or a newer copy, accepted.)
  defp incoming(st, id, from) do
    Process.monitor(from)
    # (No replica of it starts here until it runs: start_replica/4. Its old node's writer,
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

    {:reply, :ok,
     %{
       st
       | in: Map.put(st.in, id, from),
         files: Map.put(st.files, id, %{}),
         fetching: Map.delete(st.fetching, id)
     }}
  end

  ## Placing

  defp place(st) do
    nodes = Cluster.nodes()
    # (Zones started under an older generation: this node's lease lapsed since. Fenced.)
    stale = for {id, gen} <- st.gens, is_map_key(st.running, id), not Cluster.owner?(gen), do: id

    for id <- stale,
        do: Logger.warning("zone #{inspect(id)} stops: this node's lease lapsed since it started")

    st = Enum.reduce(stale, st, &stop(&2, &1))

    cond do
      not Cluster.quorate?() ->
        for {id, _} <- st.running, not is_map_key(st.out, id) do
          Logger.warning("zone #{inspect(id)} stops: this node sees no majority of the cluster")
        end

        Enum.reduce(Map.keys(st.running), st, &stop(&2, &1))

      not Cluster.leased?() ->
        # (Not yet, or no more, sure that no other node takes this one for lost.)
        st

      true ->
        Enum.reduce(st.zones, st, fn {id, spec, dir}, st ->
          place_zone(st, id, spec, dir, Placement.home(id, nodes))
        end)
    end
  end

  defp place_zone(st, id, spec, dir, home) when home == node() do
    now = System.monotonic_time(:millisecond)

    cond do
      is_map_key(st.running, id) or is_map_key(st.in, id) or is_map_key(st.ended, id) -> st
      Map.get(st.fetching, id, now) > now -> st
      Overworld.Zone.whereis(id) != nil -> st
      true -> start_newest(%{st | fetching: Map.delete(st.fetching, id)}, id, spec, dir)
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

  # A zone homed here that runs nowhere: from the newest copy in the cluster (asked of the
  # other nodes directly, never of a placer, which may be asking us the same; this node's
  # copy of the `:pg` groups may lag behind a node that just connected).
  defp start_newest(st, id, spec, dir) do
    case Copies.survey(st.name, id, dir) do
      :elsewhere ->
        st

      {:own, _epoch} ->
        elem(start(st, id, spec), 1)

      {:fetch, n, epoch} ->
        case on(st.name, n) do
          nil ->
            st

          placer ->
            Logger.info(
              "zone #{inspect(id)}: #{n} holds a newer copy (epoch #{epoch}, ours " <>
                "#{Copies.epoch(dir)}): fetched before it starts"
            )

            send(placer, {:send_copy, id, self()})
            deadline = System.monotonic_time(:millisecond) + @fetch_ms
            %{st | fetching: Map.put(st.fetching, id, deadline)}
        end
    end
  end

  # Marks a zone arriving on this node (handed over, or starting from its files), or leaving
  # it (its directory removed): no replica of it starts here meanwhile (start_replica/4).
  defp arriving(id, true) do
    _ = Names.register(Names.arriving(id))
    :ok
  end

  defp arriving(id, false), do: Names.unregister(Names.arriving(id))

  # A start is a new ownership epoch (one more than the copy's), written into the zone's
  # directory before the zone starts, under this node's current generation.
  defp start(st, id, spec) do
    # (This node's replica of the zone, if any, stops writing: the zone starts from its files.)
    arriving(id, true)
    :ok = Replica.stop(id)
    {_, _, dir} = List.keyfind(st.zones, id, 0)
    epoch = Copies.epoch(dir) + 1
    gen = Cluster.generation()

    started =
      with :ok <- Copies.put_epoch(dir, epoch),
           do: DynamicSupervisor.start_child(st.sup, owned(spec, gen, epoch))

    # (Still arriving when it came by a hand-over: adopt ends that.)
    unless is_map_key(st.in, id), do: arriving(id, false)

    case started do
      {:ok, pid} ->
        Process.monitor(pid)

        {:ok,
         %{
           st
           | running: Map.put(st.running, id, pid),
             gens: Map.put(st.gens, id, gen),
             ended: Map.delete(st.ended, id)
         }}

      {:error, reason} = error ->
        Logger.error("zone #{inspect(id)} did not start: #{inspect(reason)}")
        {error, st}
    end
  end

  # The zone's spec with its ownership: its config's `owner` (Overworld.Zone.Config).
  defp owned(%{start: {m, f, [config]}} = spec, gen, epoch),
    do: %{spec | start: {m, f, [%{config | owner: {gen, epoch}}]}}

  defp stop(st, id) do
    case Map.pop(st.running, id) do
      {nil, _} ->
        st

      {pid, running} ->
        _ = DynamicSupervisor.terminate_child(st.sup, pid)
        %{st | running: running, gens: Map.delete(st.gens, id)}
    end
  end

  # (In a process of its own: the placer goes on answering meanwhile.)
  defp hand_over(id, dir, to) do
    with {:incoming, :ok} <- {:incoming, announce(to, id, dir)},
         {:ok, tick} <- Overworld.Zone.release(id) do
      send_files(to, id, dir, tick)
    else
      {:incoming, {:error, reason}} -> {:refused, reason}
      {:incoming, other} -> {:refused, other}
      error -> error
    end
  catch
    :exit, reason -> {:error, {:exit, reason}}
  end

  # The new home is told a zone is coming, and its epoch (it refuses an older copy than its
  # own, and any while it may run no zone).
  defp announce(to, id, dir) do
    GenServer.call(to, {:incoming, id, self(), Copies.epoch(dir)}, 15_000)
  catch
    :exit, reason -> {:error, {:exit, reason}}
  end

  # Our copy of a zone that runs nowhere, to the placer `to` of the node where it starts
  # (it is newer than that node's): as a hand-over, without a zone to release. (In a
  # process of its own.)
  defp send_copy(id, dir, to) do
    with :ok <- announce(to, id, dir),
         :ok <- send_files(to, id, dir, {:copy, node()}) do
      :ok
    else
      error ->
        Logger.error("zone #{inspect(id)}: our copy not sent to #{node(to)}: #{inspect(error)}")
        send(to, {:no_copy, id, node()})
    end
  end

  # The zone's files to the placer `to` that was told they come (announce/3), chunk by chunk,
  # then the adoption (`how`: the tick the zone was released at, or `{:copy, node}`).
  defp send_files(to, id, dir, how) do
    with {:ok, chunks} <- Handover.chunks(dir),
         :ok <- Handover.call_each(to, chunks, &{:chunk, id, &1}) do
      GenServer.call(to, {:adopt, id, how}, 60_000)
    end
  catch
    :exit, reason -> {:error, {:exit, reason}}
  end
end

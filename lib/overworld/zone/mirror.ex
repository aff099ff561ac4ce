defmodule Overworld.Zone.Mirror do
  @moduledoc false
  # A zone that runs on another node of the cluster, as this node's sessions see it: one
  # mirror per remote zone per node (started when a session or an observer first looks the
  # zone up: `Overworld.Zone.config/1`), so that the zone's published tick travels once to
  # each node that has observers of it, and the sessions there build their frames from it as
  # they would on the zone's node.
  #
  #   * **Blocks out.** The mirror subscribes to the zone as a node (`{:mirror, pid}`): after
  #     each tick every bucket worker sends it its part of what it wrote into the zone's wire
  #     table (the stripe's delta blocks and index, the keyframes asked for, its avatars'
  #     positions and input acknowledgements: `{:overworld_wire, ...}`, binaries and all). The
  #     mirror writes them into a wire table of its own with the same `Overworld.Zone.Wire`
  #     functions, and once every worker's part of a tick is in, tells its subscribers
  #     (`{:overworld_tick, zone, n, t0}`, as the zone's workers do): an observer on this node
  #     reads exactly what one on the zone's node reads, so its frames are the same bytes.
  #   * **Inputs in.** The sessions write their players' inputs into the mirror's input slots
  #     (`Overworld.Zone.Inputs`, one table, latest wins); after each tick the mirror takes
  #     the new ones and sends them to the zone's node in one message (`:erpc.cast/4` of
  #     `put_inputs/2`: written there into the zone's own slots, as a local session would).
  #   * **Keyframes asked for** by its observers go to the zone's workers.
  #   * The config it answers (`config/1`) is the zone's, with the mirror's tables in
  #     `shared` (`shared.mirror` is the mirror: what only the zone knows, such as a player's
  #     avatar, is asked of its node).
  #
  # A zone server that restarts, or moves to another node, is followed: the mirror subscribes
  # to the new one (its tables stay; published ticks that go back, a zone restarted from its
  # files, replace the newer ones). A mirror without subscribers for 30 s stops.

  use GenServer
  require Logger

  alias Overworld.{Cluster, Names}
  alias Overworld.Zone.{Inputs, Metrics, Wire}

  @idle_ms 30_000
  @follow_ms 30_000

  @doc "The config of this node's mirror of remote zone `id` (started if need be), or nil."
  @spec config(term) :: Overworld.Zone.Config.t() | nil
  def config(id), do: lookup(id) || start(id)

  defp start(id) do
    case Cluster.zone(id) do
      nil ->
        nil

      pid when node(pid) == node() ->
        nil

      _pid ->
        # (`:ignore`: another session started it at the same time.)
        case DynamicSupervisor.start_child(Overworld.Mirrors, {__MODULE__, id}) do
          {:ok, _} -> lookup(id)
          :ignore -> lookup(id)
          {:error, _} -> nil
        end
    end
  end

  defp lookup(id) do
    case Names.lookup(Names.mirror(id)) do
      {_pid, config} -> config
      nil -> nil
    end
  end

  @doc """
  The avatar of `player` in remote zone `id` (asked of the zone's node, at most 2 s), or nil.
  (Not through the mirror's process: it may be waiting on a zone server that restarts.)
  """
  @spec player_entity(term, term) :: pos_integer | nil
  def player_entity(id, player) do
    case Cluster.zone(id) do
      pid when is_pid(pid) and node(pid) != node() ->
        :erpc.call(node(pid), Overworld.Zone, :player_entity, [id, player], 2_000)

      _ ->
        nil
    end
  catch
    :exit, _ -> nil
    :error, _ -> nil
  end

  @doc false
  # On the zone's node: inputs of players whose session is on another node, into the zone's
  # slots (latest wins; sequence numbers acknowledged as for a local session).
  @spec put_inputs(term, [{pos_integer, term, non_neg_integer | nil}]) :: :ok
  def put_inputs(id, batch) do
    case Names.lookup(Names.zone(id)) do
      {_pid, %{shared: %{inputs: inputs}}} ->
        Enum.each(batch, fn {entity, input, seq} -> Inputs.put(inputs, entity, input, seq) end)

      nil ->
        :ok
    end
  end

  @doc false
  def child_spec(id),
    do: %{id: {__MODULE__, id}, start: {__MODULE__, :start_link, [id]}, restart: :temporary}

  @doc false
  def start_link(id) do
    case Cluster.zone(id) do
      nil ->
        {:error, :not_found}

      zone ->
        case :erpc.call(node(zone), Overworld.Zone, :config, [id], 5_000) do
          %{wire: nil} ->
            {:error, :no_wire}

          %{} = remote ->
            GenServer.start_link(__MODULE__, {id, zone, remote})

          nil ->
            {:error, :not_found}
        end
    end
  catch
    :error, reason -> {:error, reason}
  end

  @impl true
  def init({id, zone, remote}) do
    # The mirror's tables, made here so that it owns them (they go with it): a wire table and
    # one input slot table (every avatar routed to it); no memory table (the zone's node has
    # the zone's memory).
    shared = Metrics.new(1, true)
    :ets.delete(shared.memory)
    shared = %{shared | memory: nil, mirror: self()}
    config = %{remote | shared: shared}

    case Names.register(Names.mirror(id), config) do
      {:ok, _} ->
        st = %{
          id: id,
          config: config,
          zone: nil,
          workers: {},
          subscribers: %{},
          parts: %{},
          newest: nil,
          idle: nil
        }

        case follow(st, zone) do
          {:ok, st} -> {:ok, arm_idle(st)}
          :error -> {:stop, :normal}
        end

      {:error, {:already_registered, _}} ->
        :ignore
    end
  end

  # Subscribes to the zone server `zone` as this node's mirror.
  defp follow(st, zone) do
    case GenServer.call(zone, {:mirror, self()}, 5_000) do
      {:ok, workers} ->
        Process.monitor(zone)
        {:ok, %{st | zone: zone, workers: workers}}

      _ ->
        :error
    end
  catch
    :exit, _ -> :error
  end

  @impl true
  def handle_call({:subscribe, pid}, _from, st) do
    if is_map_key(st.subscribers, pid) do
      {:reply, :ok, st}
    else
      ref = Process.monitor(pid)
      {:reply, :ok, %{st | subscribers: Map.put(st.subscribers, pid, ref)}}
    end
  end

  def handle_call({:unsubscribe, pid}, _from, st) do
    case Map.pop(st.subscribers, pid) do
      {nil, _} ->
        {:reply, :ok, st}

      {ref, subs} ->
        Process.demonitor(ref, [:flush])
        {:reply, :ok, arm_idle(%{st | subscribers: subs})}
    end
  end

  @impl true
  def handle_info({:overworld_wire, _id, w, n, data, index, first, positions, acks, kfs}, st) do
    table = st.config.shared.wire
    # A zone restarted from its files ticks again from an older tick: the newer blocks of the
    # lost timeline go (as the zone's own table does).
    st =
      if st.newest != nil and n <= st.newest and not is_map_key(st.parts, n) do
        Wire.forget_ticks(table)
        %{st | newest: nil, parts: %{}}
      else
        st
      end

    Wire.put_tick(table, w, n, data, index, first)
    :ets.insert(table, positions)
    if acks != [], do: Wire.put_acks(table, acks)
    if kfs != [], do: Wire.put_keyframes(table, n, kfs)

    count = Map.get(st.parts, n, 0) + 1

    if count == tuple_size(st.workers) do
      Wire.put_newest(table, n)
      notice = {:overworld_tick, st.id, n, System.monotonic_time()}
      for {pid, _} <- st.subscribers, do: send(pid, notice)
      send_inputs(st)
      # (Parts of older ticks whose others never came, dropped on a congested link, go.)
      {:noreply, %{st | parts: Map.reject(st.parts, fn {m, _} -> m <= n end), newest: n}}
    else
      {:noreply, %{st | parts: Map.put(st.parts, n, count)}}
    end
  end

  def handle_info({:wire_want, w, keys}, st) do
    if w < tuple_size(st.workers), do: send(elem(st.workers, w), {:wire_want, keys})
    {:noreply, st}
  end

  def handle_info({:DOWN, _ref, :process, pid, _reason}, %{zone: pid} = st) do
    # The zone server restarts, or moves: followed.
    {:noreply, await_zone(%{st | zone: nil}, System.monotonic_time(:millisecond) + @follow_ms)}
  end

  def handle_info({:DOWN, _ref, :process, pid, _reason}, st) do
    {:noreply, arm_idle(%{st | subscribers: Map.delete(st.subscribers, pid)})}
  end

  def handle_info({:await_zone, deadline}, st), do: {:noreply, await_zone(st, deadline)}

  def handle_info(:idle, %{subscribers: subs} = st) when map_size(subs) == 0,
    do: {:stop, :normal, st}

  def handle_info(:idle, st), do: {:noreply, %{st | idle: nil}}
  def handle_info(_msg, st), do: {:noreply, st}

  defp await_zone(st, deadline) do
    with zone when is_pid(zone) <- Cluster.zone(st.id),
         {:ok, st} <- follow(st, zone) do
      %{st | parts: %{}}
    else
      _ ->
        if System.monotonic_time(:millisecond) > deadline do
          Logger.warning("mirror of zone #{inspect(st.id)}: the zone is gone")
          exit(:normal)
        end

        Process.send_after(self(), {:await_zone, deadline}, 20)
        st
    end
  end

  defp arm_idle(%{subscribers: subs, idle: nil} = st) when map_size(subs) == 0,
    do: %{st | idle: Process.send_after(self(), :idle, @idle_ms)}

  defp arm_idle(st), do: st

  # The inputs written since the last tick, in one message to the zone's node.
  defp send_inputs(%{zone: nil}), do: :ok

  defp send_inputs(st) do
    case Inputs.take(st.config.shared.inputs, 0, :all) do
      {taken, _acks} when map_size(taken) == 0 ->
        :ok

      {taken, acks} ->
        seqs = Map.new(acks)
        batch = for {id, input} <- taken, do: {id, input, Map.get(seqs, id)}
        :erpc.cast(node(st.zone), __MODULE__, :put_inputs, [st.id, batch])
    end
  end
end

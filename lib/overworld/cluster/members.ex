defmodule Overworld.Cluster.Members do
  @moduledoc false
  # This node's member process (see Overworld.Cluster): it joins the `:members` group of the
  # cluster's `:pg` scope, and, once the node joined a cluster (`join/2`), connects to the
  # configured nodes that are not connected, now and every `retry` ms (in a process of its
  # own: a connection to a host that does not answer takes seconds to fail). Not on any hot
  # path: it only keeps connections up.
  #
  # Heartbeats: once joined, it sends the member process of every connected configured node a
  # heartbeat every 500 ms and disconnects a node that answered none for `heartbeat` ms (a
  # hung node: SIGSTOP, a long pause), so that its zones restart elsewhere within that bound
  # rather than the distribution's tick time (60 s by default). A node back from a pause
  # hears nothing from the others for as long, so it disconnects them in turn at its first
  # look: it loses the majority and stops its zones. It runs at high priority (a busy node's
  # heartbeats still go), and never waits on a connection (`:noconnect`; on a busy one, a
  # process of its own sends).
  #
  # The lease (docs/cluster.md, "Ownership"): each heartbeat carries the time it was sent
  # (this node's monotonic clock) and comes back echoed. A node counts another as heard when
  # a heartbeat *from* it arrives, so an echo of ours sent at `t` proves that node will not
  # take this one for lost before `t + heartbeat`. Once echoes sent at `t` or later came back
  # from a majority of the configured nodes (this one counted), this node may act as the
  # owner of its zones until `t + heartbeat - 500 ms` (`lease_until/3`): before any other node
  # can start them elsewhere. The lease and a generation number live in an atomics array
  # (`Overworld.Cluster.owner?/1`, read by every zone at every tick); the generation goes up
  # whenever the lease is seen to have lapsed, a connected node goes down without a majority
  # left, or the node joins or leaves a cluster: a zone started under an older generation is
  # fenced for good (it ticks, journals and publishes no more; its placer stops it).
  use GenServer
  require Logger

  alias Overworld.Cluster.Config

  @beat_ms 500

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc false
  @spec join(Config.t(), pos_integer, pos_integer) :: [node]
  def join(config, retry, heartbeat),
    do: GenServer.call(__MODULE__, {:join, config, retry, heartbeat}, 30_000)

  @doc false
  @spec drain() :: :ok
  def drain, do: GenServer.call(__MODULE__, :drain)

  @doc false
  @spec leave() :: :ok
  def leave, do: GenServer.call(__MODULE__, :leave)

  @impl true
  def init(nil) do
    :ok = :pg.join(Overworld.Cluster.scope(), :members, self())
    Process.flag(:priority, :high)
    :timer.send_interval(@beat_ms, :beat)
    # (A node of its own holds its lease for ever.)
    Overworld.Cluster.put_lease(:forever)

    {:ok,
     %{
       config: nil,
       retry: nil,
       timer: nil,
       heartbeat: nil,
       heard: %{},
       echoes: %{},
       connecting: nil,
       monitoring: false
     }}
  end

  @doc """
  The time (ms, this node's monotonic clock) until which this node may act as its zones'
  owner: `echoes` holds, for each other configured node, the newest send time of ours it
  echoed; a majority of the `configured` nodes must have echoed one, this node counted, and
  the lease runs `lease_ms` from the oldest echo that completes that majority. nil without
  a majority; `:forever` for a cluster of one.

      iex> alias Overworld.Cluster.Members
      iex> Members.lease_until(%{b: 100, c: 300}, 3, 3_500)
      3800
      iex> Members.lease_until(%{b: 100, c: 300, d: 200, e: 50}, 5, 3_500)
      3700
      iex> Members.lease_until(%{b: 100}, 5, 3_500)
      nil
      iex> Members.lease_until(%{}, 1, 3_500)
      :forever
  """
  @spec lease_until(%{optional(node) => integer}, pos_integer, pos_integer) ::
          integer | nil | :forever
  def lease_until(echoes, configured, lease_ms) do
    case div(configured, 2) do
      0 ->
        :forever

      others ->
        case echoes |> Map.values() |> Enum.sort(:desc) |> Enum.at(others - 1) do
          nil -> nil
          t -> t + lease_ms
        end
    end
  end

  @impl true
  def handle_call(:drain, _from, st) do
    scope = Overworld.Cluster.scope()
    :ok = :pg.join(scope, :draining, self())
    _ = :pg.leave(scope, :members, self())
    {:reply, :ok, st}
  end

  def handle_call(:leave, _from, st) do
    if st.timer, do: Process.cancel_timer(st.timer)
    Overworld.Cluster.put_configured(nil)
    # (Zones owned under the cluster's rules are fenced: a node of its own again.)
    Overworld.Cluster.new_generation()
    Overworld.Cluster.put_lease(:forever)

    {:reply, :ok,
     %{st | config: nil, retry: nil, timer: nil, heartbeat: nil, heard: %{}, echoes: %{}}}
  end

  def handle_call({:join, config, retry, heartbeat}, _from, st) do
    if st.timer, do: Process.cancel_timer(st.timer)
    connected = connect(config)
    # (Only a node with a name can join: it watches the others go down from now.)
    unless st.monitoring, do: :ok = :net_kernel.monitor_nodes(true)
    st = %{st | monitoring: true}
    # (Zones started before, under other rules, are fenced; the lease comes with the first
    # echoes, in a round trip: the heartbeats go at once.)
    Overworld.Cluster.new_generation()
    st = renew(%{st | config: config, retry: retry, heartbeat: heartbeat, timer: arm(retry)})
    send(self(), :beat)
    {:reply, connected, st}
  end

  @impl true
  def handle_info(:connect, %{config: config} = st) when config != nil do
    # (One attempt at a time; the next is armed when it is over.)
    if st.connecting == nil do
      {pid, _} = spawn_monitor(fn -> connect(config) end)
      {:noreply, %{st | timer: nil, connecting: pid}}
    else
      {:noreply, %{st | timer: arm(st.retry)}}
    end
  end

  def handle_info({:DOWN, _, :process, pid, _}, %{connecting: pid} = st) do
    timer = if st.config, do: arm(st.retry)
    {:noreply, %{st | connecting: nil, timer: timer}}
  end

  # Heartbeats (only once joined).
  def handle_info(:beat, %{config: nil} = st), do: {:noreply, st}

  def handle_info(:beat, st) do
    now = System.monotonic_time(:millisecond)
    configured = Overworld.Cluster.configured() || []
    up = Enum.filter(Node.list(), &(&1 in configured))
    # A node connected since the last look is heard from now (its grace starts).
    heard = Map.new(up, &{&1, Map.get(st.heard, &1, now)})

    silent = for {n, at} <- heard, now - at > st.heartbeat, do: n

    for n <- silent do
      Logger.warning("cluster: #{n} answered no heartbeat for #{now - heard[n]} ms: disconnected")

      Node.disconnect(n)
    end

    for n <- up -- silent, do: send_to(n, {:heartbeat, node(), now})

    {:noreply, renew(%{st | heard: Map.drop(heard, silent), echoes: Map.drop(st.echoes, silent)})}
  end

  # A heartbeat from another node: it is heard from now, and its send time goes back.
  def handle_info({:heartbeat, from, t}, st) do
    send_to(from, {:heartbeat_ack, node(), t})

    heard =
      if is_map_key(st.heard, from),
        do: Map.put(st.heard, from, System.monotonic_time(:millisecond)),
        else: st.heard

    {:noreply, %{st | heard: heard}}
  end

  # An echo of one of ours: that node heard us at `t` or later.
  def handle_info({:heartbeat_ack, from, t}, st) do
    echoes = Map.update(st.echoes, from, t, &max(&1, t))
    {:noreply, renew(%{st | echoes: echoes})}
  end

  def handle_info({:nodedown, n}, st),
    do:
      {:noreply, renew(%{st | heard: Map.delete(st.heard, n), echoes: Map.delete(st.echoes, n)})}

  def handle_info(_msg, st), do: {:noreply, st}

  # The lease from the echoes so far (none without a configured cluster: `:forever`).
  defp renew(%{config: nil} = st), do: st

  defp renew(st) do
    configured = Overworld.Cluster.configured() || []
    echoes = Map.take(st.echoes, configured)
    until = lease_until(echoes, max(length(configured), 1), st.heartbeat - @beat_ms)
    Overworld.Cluster.put_lease(until || :lapsed)
    st
  end

  defp arm(retry), do: Process.send_after(self(), :connect, retry)

  # To the member process of node `n`, never waiting: a connection whose buffer is full
  # (`:nosuspend` refused: a busy link, mirrors and replicas at full flow) gets the message
  # from a process of its own, which waits its turn there, rather than losing it (a lost
  # heartbeat would count against a node that is only busy).
  defp send_to(n, msg) do
    case :erlang.send({__MODULE__, n}, msg, [:noconnect, :nosuspend]) do
      :nosuspend -> spawn(fn -> :erlang.send({__MODULE__, n}, msg, [:noconnect]) end)
      _ -> :ok
    end
  end

  # The configured nodes connected after this attempt (this one left out). The connections
  # are tried side by side: one to an unreachable host takes the distribution's set-up time
  # (7 s by default), and the others do not wait for it.
  defp connect(config) do
    up = MapSet.new(Node.list())
    configured = Config.nodes(config)
    Overworld.Cluster.put_configured(configured)

    {connected, down} =
      configured
      |> Enum.reject(&(&1 == node()))
      |> Enum.split_with(&MapSet.member?(up, &1))

    tried =
      down
      |> Task.async_stream(&{&1, Node.connect(&1)},
        timeout: 15_000,
        on_timeout: :kill_task,
        ordered: false
      )
      |> Enum.flat_map(fn
        {:ok, {n, true}} -> [n]
        _ -> []
      end)

    connected ++ tried
  end
end

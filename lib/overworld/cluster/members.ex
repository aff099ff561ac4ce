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
  # heartbeats still go), and never waits on a connection (`:noconnect`, `:nosuspend`).
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

    {:ok, %{config: nil, retry: nil, timer: nil, heartbeat: nil, heard: %{}, connecting: nil}}
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
    {:reply, :ok, %{st | config: nil, retry: nil, timer: nil, heartbeat: nil, heard: %{}}}
  end

  def handle_call({:join, config, retry, heartbeat}, _from, st) do
    if st.timer, do: Process.cancel_timer(st.timer)
    connected = connect(config)

    {:reply, connected,
     %{st | config: config, retry: retry, heartbeat: heartbeat, timer: arm(retry)}}
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

    for n <- up -- silent,
        do: :erlang.send({__MODULE__, n}, {:heartbeat, node()}, [:noconnect, :nosuspend])

    {:noreply, %{st | heard: Map.drop(heard, silent)}}
  end

  def handle_info({:heartbeat, from}, st) do
    :erlang.send({__MODULE__, from}, {:heartbeat_ack, node()}, [:noconnect, :nosuspend])
    {:noreply, st}
  end

  def handle_info({:heartbeat_ack, from}, st) when is_map_key(st.heard, from),
    do: {:noreply, put_in(st.heard[from], System.monotonic_time(:millisecond))}

  def handle_info(_msg, st), do: {:noreply, st}

  defp arm(retry), do: Process.send_after(self(), :connect, retry)

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

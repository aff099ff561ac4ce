defmodule Overworld.Cluster.Members do
  @moduledoc false
  # This node's member process (see Overworld.Cluster): it joins the `:members` group of the
  # cluster's `:pg` scope, and, once the node joined a cluster (`join/2`), connects to the
  # configured nodes that are not connected, now and every `retry` ms. Not on any hot path:
  # it only keeps connections up.
  use GenServer

  alias Overworld.Cluster.Config

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, nil, name: __MODULE__)

  @doc false
  @spec join(Config.t(), pos_integer) :: [node]
  def join(config, retry), do: GenServer.call(__MODULE__, {:join, config, retry}, 30_000)

  @doc false
  @spec drain() :: :ok
  def drain, do: GenServer.call(__MODULE__, :drain)

  @doc false
  @spec leave() :: :ok
  def leave, do: GenServer.call(__MODULE__, :leave)

  @impl true
  def init(nil) do
    :ok = :pg.join(Overworld.Cluster.scope(), :members, self())
    {:ok, %{config: nil, retry: nil, timer: nil}}
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
    {:reply, :ok, %{st | config: nil, retry: nil, timer: nil}}
  end

  def handle_call({:join, config, retry}, _from, st) do
    if st.timer, do: Process.cancel_timer(st.timer)
    connected = connect(config)
    {:reply, connected, %{st | config: config, retry: retry, timer: arm(retry)}}
  end

  @impl true
  def handle_info(:connect, %{config: config} = st) when config != nil do
    connect(config)
    {:noreply, %{st | timer: arm(st.retry)}}
  end

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

defmodule Overworld.Cluster do
  @moduledoc """
  The nodes of an Overworld cluster (distributed Erlang), as every node sees them.

  Every node that runs the `:overworld` application is a **member**: a process of it joins
  the `:pg` group `:members` of the scope `Overworld.Cluster` (started with the application),
  so `nodes/0` lists the live members without asking any process, and a node that goes down
  leaves the group on every other node at once (`:pg` watches the connections). Where a zone
  runs is `Overworld.Cluster.Placement.home/2` over `nodes/0`: every node computes the same
  answer.

  A node joins a cluster with `join/1` and its configuration (`Overworld.Cluster.Config`, from
  the environment): the cookie is set, and the node connects to every configured node, and
  again every `:retry` ms (default 1,000) to those not connected (a node started before the
  others, a DNS name whose records change).
  """

  import Bitwise
  alias Overworld.Cluster.{Config, Members, Placement}

  @scope __MODULE__

  @doc false
  def scope, do: @scope

  @doc false
  # The application's children: the `:pg` scope, then the member process that joins it.
  @spec child_specs() :: [Supervisor.child_spec()]
  def child_specs do
    [
      %{id: :pg, start: {:pg, :start_link, [@scope]}},
      Members
    ]
  end

  @doc """
  The live member nodes, this one included, sorted: the nodes zones are placed on. A node
  that drains (`drain/0`) is not one of them any more.
  """
  @spec nodes() :: [node]
  def nodes, do: group_nodes([:members])

  @doc "The live nodes of the cluster: the members and those draining (`drain/0`), sorted."
  @spec live() :: [node]
  def live, do: group_nodes([:members, :draining])

  defp group_nodes(groups) do
    groups
    |> Enum.flat_map(&:pg.get_members(@scope, &1))
    |> Enum.map(&node/1)
    |> Enum.uniq()
    |> Enum.sort()
  end

  @doc """
  Drains this node: it stays in the cluster (it counts for the majority) but no zone is
  placed on it any more, so its zones move to their new homes (with their state, players
  staying connected) and none comes back. For a node about to be stopped.
  """
  @spec drain() :: :ok
  def drain, do: Members.drain()

  @doc "The home node of a zone among the live members (see `Overworld.Cluster.Placement`)."
  @spec home(term) :: node | nil
  def home(zone), do: Placement.home(zone, nodes())

  @doc """
  The server of zone `id` wherever it runs in the cluster (nil when none runs): read from the
  `:pg` group every zone server joins, without a message to any process. (Two only while a
  zone moves between nodes, or in a partition: the one on the lowest node is answered.)
  """
  @spec zone(term) :: pid | nil
  def zone(id) do
    case :pg.get_members(@scope, {:zone, id}) do
      [] -> nil
      [pid] -> pid
      pids -> Enum.min_by(pids, &node/1)
    end
  end

  @doc """
  Whether `live` (default: the live members) holds a majority of the cluster's configured
  nodes (those of the configuration `join/2` was given; for a DNS name, as last resolved).
  A node that has not joined a configured cluster is always quorate (a cluster of its own).

      iex> Overworld.Cluster.quorate?([:a@h, :b@h], [:a@h, :b@h, :c@h])
      true
      iex> Overworld.Cluster.quorate?([:a@h, :x@h], [:a@h, :b@h, :c@h])
      false
      iex> Overworld.Cluster.quorate?([:a@h], nil)
      true
  """
  @spec quorate?([node], [node] | nil) :: boolean
  def quorate?(live \\ live(), configured \\ configured())
  def quorate?(_live, nil), do: true

  def quorate?(live, configured) do
    seen = Enum.count(Enum.uniq(configured), &(&1 in live))
    seen * 2 > length(Enum.uniq(configured))
  end

  @doc """
  Whether process `pid` is alive: one of this node as `Process.alive?/1` says (which raises for
  a process of another node); one of another node while that node is connected (a session on
  a gateway node, a zone server on its node: they go with their node, or tell their peers
  when they end).

      iex> Overworld.Cluster.alive?(self())
      true
  """
  @spec alive?(pid) :: boolean
  def alive?(pid) when node(pid) == node(), do: Process.alive?(pid)
  def alive?(pid), do: node(pid) in Node.list()

  ## Ownership: the lease and the generation (docs/cluster.md, "Ownership")

  @doc false
  # The atomics behind owner?/1: [generation, lease end in ms (monotonic)]. Made once.
  def lease_ref do
    case :persistent_term.get({__MODULE__, :lease}, nil) do
      nil ->
        ref = :atomics.new(2, signed: true)
        :persistent_term.put({__MODULE__, :lease}, ref)
        ref

      ref ->
        ref
    end
  end

  @forever 1 <<< 62

  @doc """
  The ownership generation of this node: it goes up whenever this node's lease lapsed, it
  lost the majority, or it joined or left a cluster. A zone of a world over a cluster is
  started under the current generation, and is fenced once it changes (`owner?/1`).
  """
  @spec generation() :: integer
  def generation, do: :atomics.get(lease_ref(), 1)

  @doc """
  Whether a zone started under generation `gen` may still act as its owner: tick, journal,
  acknowledge, publish. True while the generation is the same and this node's lease runs
  (echoes of its heartbeats from a majority of the configured nodes, recent enough that none
  of them can have taken this node for lost). Read by every zone at every tick: two atomics
  reads and the clock.
  """
  @spec owner?(integer) :: boolean
  def owner?(gen) do
    ref = lease_ref()
    # (The end first: the generation is written before a renewed end, so a zone that reads
    # an end renewed after a lapse reads the new generation too.)
    until = :atomics.get(ref, 2)
    :atomics.get(ref, 1) == gen and System.monotonic_time(:millisecond) <= until
  end

  @doc "Whether this node's lease runs (zones may start here): see `owner?/1`."
  @spec leased?() :: boolean
  def leased?, do: System.monotonic_time(:millisecond) <= :atomics.get(lease_ref(), 2)

  @doc false
  # The member process renews the lease (`:forever`, `:lapsed` or a time, ms of the monotonic
  # clock); a lease that had lapsed before (or lapses now) starts a new generation.
  @spec put_lease(integer | :forever | :lapsed) :: :ok
  def put_lease(until) do
    ref = lease_ref()
    now = System.monotonic_time(:millisecond)

    until =
      case until do
        :forever -> @forever
        :lapsed -> -@forever
        ms when is_integer(ms) -> ms
      end

    if :atomics.get(ref, 2) < now or until < now, do: :atomics.add(ref, 1, 1)

    :atomics.put(ref, 2, until)
  end

  @doc false
  @spec new_generation() :: :ok
  def new_generation, do: :atomics.add(lease_ref(), 1, 1)

  ## The VM's settings for a cluster

  @doc """
  The emulator flags every node of a cluster starts with (beside a name and a cookie): OTP
  25's `global` disconnects healthy nodes from each other when one of them drops a hung node
  a little before the others do (`prevent_overlapping_partitions`, on by default), which
  would take the majority from all of them at once. Overworld handles partitions itself (the
  majority rule, heartbeats, leases: docs/cluster.md), so the flag is off. (Given in
  `vm.args`, `ELIXIR_ERL_OPTIONS` or `elixir --erl`; `global` reads it when it starts.)

      iex> Overworld.Cluster.vm_flags()
      "-kernel prevent_overlapping_partitions false"
  """
  @spec vm_flags() :: String.t()
  def vm_flags, do: "-kernel prevent_overlapping_partitions false"

  @doc """
  For a node that starts distribution itself (`Node.start/2`, as tests and tools do), before
  it does: the setting of `vm_flags/0`, with `global` restarted to read it. Does nothing on a
  node that is already distributed (the flag must then come with the VM's arguments).
  """
  @spec prepare_distribution() :: :ok
  def prepare_distribution do
    if not Node.alive?() and
         :application.get_env(:kernel, :prevent_overlapping_partitions) != {:ok, false} do
      :ok = :application.set_env(:kernel, :prevent_overlapping_partitions, false)
      :ok = :supervisor.terminate_child(:kernel_sup, :global_name_server)
      {:ok, _} = :supervisor.restart_child(:kernel_sup, :global_name_server)
    end

    :ok
  end

  @doc "Whether this node joined a cluster of more than one configured node."
  @spec clustered?() :: boolean
  def clustered?, do: length(configured() || []) > 1

  @doc """
  Joins the cluster the environment `env` configures (`Config.from_env/1`), if any:
  `{:ok, :none}` without one, `{:ok, connected}` (as `join/2`), `{:error, message}` for a bad
  setting (naming the variable), `{:error, :not_alive}` for a node without a name.
  """
  @spec join_env(%{optional(String.t()) => String.t()}) ::
          {:ok, :none | [node]} | {:error, String.t() | :not_alive}
  def join_env(env \\ System.get_env()) do
    with {:ok, config} <- Config.from_env(env) do
      case config do
        %Config{nodes: [], dns: nil} -> {:ok, :none}
        config -> join(config)
      end
    end
  end

  @doc "The cluster's configured nodes (nil before `join/2`, and for a node of its own)."
  @spec configured() :: [node] | nil
  def configured, do: :persistent_term.get({__MODULE__, :configured}, nil)

  @doc false
  # (Written by the member process at each attempt to connect, only when it changed; nil
  # when it leaves the cluster.)
  @spec put_configured([node] | nil) :: :ok
  def put_configured(nil) do
    _ = :persistent_term.erase({__MODULE__, :configured})
    :ok
  end

  def put_configured(nodes) do
    if configured() != nodes, do: :persistent_term.put({__MODULE__, :configured}, nodes)
    :ok
  end

  @doc false
  # A zone's server makes itself found (`zone/1`); it leaves the group when it exits.
  @spec register_zone(term) :: :ok
  def register_zone(id), do: :pg.join(@scope, {:zone, id}, self())

  @doc false
  # A zone released to another node is no longer found here (`Overworld.Zone.Release`).
  @spec unregister_zone(term) :: :ok | :not_joined
  def unregister_zone(id), do: :pg.leave(@scope, {:zone, id}, self())

  @doc """
  Joins the cluster of `config`: sets the cookie (if the configuration has one) and connects
  to its nodes, now and every `:retry` ms (default 1_000) to those not connected. Answers the
  nodes connected now. A node that is not alive (started without a name) cannot join:
  `{:error, :not_alive}`.

  Once joined, the nodes send each other heartbeats every 500 ms, and a node disconnects any
  that answered none for `:heartbeat` ms (default 4_000): a hung node is seen as lost within
  that bound, whatever the distribution's tick time (docs/cluster.md, "Surviving a node's
  loss").
  """
  @spec join(Config.t(), keyword) :: {:ok, [node]} | {:error, :not_alive}
  def join(%Config{} = config, opts \\ []) do
    retry = Keyword.get(opts, :retry, 1_000)
    heartbeat = Keyword.get(opts, :heartbeat, 4_000)

    unless is_integer(retry) and retry > 0,
      do: raise(ArgumentError, "expected :retry to be a positive integer, got: #{inspect(retry)}")

    unless is_integer(heartbeat) and heartbeat >= 1_000,
      do:
        raise(
          ArgumentError,
          "expected :heartbeat to be an integer of at least 1000 (ms), got: #{inspect(heartbeat)}"
        )

    if Node.alive?() do
      if :application.get_env(:kernel, :prevent_overlapping_partitions) != {:ok, false} do
        require Logger

        Logger.warning(
          "cluster: this node runs without `#{vm_flags()}`: `global` may disconnect healthy " <>
            "nodes from each other when one is lost (docs/cluster.md)"
        )
      end

      if config.cookie, do: Node.set_cookie(config.cookie)
      {:ok, Members.join(config, retry, heartbeat)}
    else
      {:error, :not_alive}
    end
  end

  @doc """
  Leaves the configured cluster: this node stops connecting to the configured nodes and
  forgets them, so it is a cluster of its own again (always quorate). Connections already
  up stay up. For a node taken out of a cluster's configuration, and for tests.
  """
  @spec leave() :: :ok
  def leave, do: Members.leave()
end

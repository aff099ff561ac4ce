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

  @doc "The live member nodes, this one included, sorted."
  @spec nodes() :: [node]
  def nodes do
    @scope
    |> :pg.get_members(:members)
    |> Enum.map(&node/1)
    |> Enum.uniq()
    |> Enum.sort()
  end

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

  @doc false
  # A zone's server makes itself found (`zone/1`); it leaves the group when it exits.
  @spec register_zone(term) :: :ok
  def register_zone(id), do: :pg.join(@scope, {:zone, id}, self())

  @doc """
  Joins the cluster of `config`: sets the cookie (if the configuration has one) and connects
  to its nodes, now and every `:retry` ms to those not connected. Answers the nodes connected
  now. A node that is not alive (started without a name) cannot join: `{:error, :not_alive}`.
  """
  @spec join(Config.t(), keyword) :: {:ok, [node]} | {:error, :not_alive}
  def join(%Config{} = config, opts \\ []) do
    retry = Keyword.get(opts, :retry, 1_000)

    unless is_integer(retry) and retry > 0,
      do: raise(ArgumentError, "expected :retry to be a positive integer, got: #{inspect(retry)}")

    if Node.alive?() do
      if config.cookie, do: Node.set_cookie(config.cookie)
      {:ok, Members.join(config, retry)}
    else
      {:error, :not_alive}
    end
  end
end

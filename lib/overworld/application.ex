defmodule Overworld.Application do
  @moduledoc false
  use Application

  @impl true
  def start(_type, _args) do
    children =
      [
        {Registry,
         keys: :unique, name: Overworld.Registry, partitions: System.schedulers_online()},
        # How the zones were started (an operator may start a stopped one again).
        Overworld.Zone.Started,
        {PartitionSupervisor, child_spec: DynamicSupervisor, name: Overworld.Zones},
        # This node's mirrors of zones running on other nodes (Overworld.Zone.Mirror).
        {DynamicSupervisor, name: Overworld.Mirrors, strategy: :one_for_one},
        # This node's replicas of zones running on other nodes (Overworld.Zone.Replica).
        {DynamicSupervisor, name: Overworld.Replicas, strategy: :one_for_one},
        # The accounts' partition policy (idle until Overworld.Accounts.start/1).
        Overworld.Accounts.Heal,
        # The group commit of this node's Mnesia log (accounts and the embedded storage).
        Overworld.Accounts.Sync,
        # Password hashing off the schedulers' other work (low priority, bounded).
        Overworld.Accounts.Hasher,
        # Mails of email accounts, sent after the answers.
        {Task.Supervisor, name: Overworld.Accounts.Mail},
        # Expired revocations and email codes forgotten.
        Overworld.Accounts.Sweeper,
        # Rate limits of the password routes.
        Overworld.RateLimit,
        # Matches (Overworld.Match): their table, then the matches.
        Overworld.Match.Table,
        Overworld.Match.Lua.Guard,
        {PartitionSupervisor, child_spec: DynamicSupervisor, name: Overworld.Matches}
      ] ++ Overworld.Cluster.child_specs()

    Supervisor.start_link(children, strategy: :one_for_one, name: Overworld.Supervisor)
  end
end

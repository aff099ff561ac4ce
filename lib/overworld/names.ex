defmodule Overworld.Names do
  @moduledoc false
  # Every key of `Overworld.Registry` (a partitioned, unique-keys Registry started by the
  # application) is built here, and every lookup goes through here: processes are named by
  # via-tuples of these keys, never by atoms made at run time.
  #
  #   {:zone, id}              a zone's server; its value is the zone's config (with the
  #                            shared tables and counters: `Overworld.Zone.Config`)
  #   {:zone_sup, id}          a zone's supervisor
  #   {:world, name}           a world's supervisor (Overworld.World)
  #   {:world_zones, name}     a world's zone supervisor (a world spread over a cluster)
  #   {:placer, name}          a world's placer (a world spread over a cluster)
  #   {:zone_store, id}        a zone's store (zones with a data directory)
  #   {:mirror, id}            this node's mirror of a zone on another node; its value: the
  #                            config sessions here use (Overworld.Zone.Mirror)
  #   {:replica, id}           this node's copy of the files of a zone on another node
  #                            (Overworld.Zone.Replica)
  #   {:arriving, id}          held by a world's placer while a zone arrives on this node or
  #                            leaves it (no replica of it starts meanwhile)
  #   {:bucket, id, index}     a zone's bucket worker
  #   {:session, server, user} a user's session on a server
  #   {:observer, server, i}   an operator's observer connection on a server, in slot i
  #                            (1..the server's `observers`: the cap)
  #   {:connections, server}   a server's connection supervisor
  #   {:listener, server}      a server's listener
  #   {:audit, server}         a server's operator audit log writer (Overworld.Operators.Audit)

  @registry Overworld.Registry

  @type key ::
          {:zone, term}
          | {:zone_sup, term}
          | {:world, term}
          | {:world_zones, term}
          | {:placer, term}
          | {:zone_store, term}
          | {:mirror, term}
          | {:replica, term}
          | {:arriving, term}
          | {:bucket, term, non_neg_integer}
          | {:session, atom, term}
          | {:observer, atom, pos_integer}
          | {:connections, atom}
          | {:listener, atom}
          | {:audit, atom}

  @spec zone(term) :: key
  def zone(id), do: {:zone, id}

  @spec zone_sup(term) :: key
  def zone_sup(id), do: {:zone_sup, id}

  @spec world(term) :: key
  def world(name), do: {:world, name}

  @spec world_zones(term) :: key
  def world_zones(name), do: {:world_zones, name}

  @spec placer(term) :: key
  def placer(name), do: {:placer, name}

  @spec mirror(term) :: key
  def mirror(id), do: {:mirror, id}

  @spec zone_store(term) :: key
  def zone_store(id), do: {:zone_store, id}

  @spec replica(term) :: key
  def replica(id), do: {:replica, id}

  @spec arriving(term) :: key
  def arriving(id), do: {:arriving, id}

  @spec bucket(term, non_neg_integer) :: key
  def bucket(id, index), do: {:bucket, id, index}

  @spec sidecar(term) :: key
  def sidecar(id), do: {:sidecar, id}

  @spec session(atom, term) :: key
  def session(server, user), do: {:session, server, user}

  @spec observer(atom, pos_integer) :: key
  def observer(server, i), do: {:observer, server, i}

  @spec connections(atom) :: key
  def connections(server), do: {:connections, server}

  @spec listener(atom) :: key
  def listener(server), do: {:listener, server}

  @spec audit(atom) :: key
  def audit(server), do: {:audit, server}

  @doc "A via-tuple naming a process by `key` (with `value`, registered when it starts)."
  @spec via(key) :: {:via, module, term}
  def via(key), do: {:via, Registry, {@registry, key}}

  @spec via(key, term) :: {:via, module, term}
  def via(key, value), do: {:via, Registry, {@registry, key, value}}

  @doc "The process registered under `key`, or nil."
  @spec whereis(key) :: pid | nil
  def whereis(key) do
    case Registry.lookup(@registry, key) do
      [{pid, _}] -> pid
      [] -> nil
    end
  end

  @doc "The process and its value under `key`, or nil."
  @spec lookup(key) :: {pid, term} | nil
  def lookup(key) do
    case Registry.lookup(@registry, key) do
      [found] -> found
      [] -> nil
    end
  end

  @doc "The zone id a zone server `pid` is registered under, or nil."
  @spec zone_of(pid) :: term | nil
  def zone_of(pid) do
    Enum.find_value(Registry.keys(@registry, pid), fn
      {:zone, id} -> {:ok, id}
      _ -> nil
    end)
    |> case do
      {:ok, id} -> id
      nil -> nil
    end
  end

  @doc "The ids of the running zones."
  @spec zones() :: [term]
  def zones, do: Registry.select(@registry, [{{{:zone, :"$1"}, :_, :_}, [], [:"$1"]}])

  @doc """
  The shared counters and tables (`Overworld.Zone.Metrics`) of the zones running on this
  node, read from their registry values (`Overworld.Zone.Config`) without copying the rest
  of them. No message to anybody.
  """
  @spec zone_shares() :: [Overworld.Zone.Metrics.t()]
  def zone_shares,
    do: Registry.select(@registry, [{{{:zone, :_}, :_, %{shared: :"$1"}}, [], [:"$1"]}])

  @doc false
  # The sessions of a user on this node, of every server.
  @spec sessions_of(term) :: [pid]
  def sessions_of(user),
    do:
      Registry.select(@registry, [
        {{{:session, :_, :"$1"}, :"$2", :_}, [{:==, :"$1", user}], [:"$2"]}
      ])

  @doc false
  # The observer connections of an operator on this node, of every server.
  @spec observers_of(String.t()) :: [pid]
  def observers_of(operator),
    do:
      Registry.select(@registry, [
        {{{:observer, :_, :_}, :"$1", :"$2"}, [{:==, :"$2", operator}], [:"$1"]}
      ])

  @doc false
  # What a session registered with (`Overworld.Session.Hello`): `{server, user, value}` of the
  # session `pid` of this node, or nil.
  @spec session_of(pid) :: {atom, term, term} | nil
  def session_of(pid) do
    Enum.find_value(Registry.keys(@registry, pid), fn
      {:session, server, user} = key ->
        case Registry.lookup(@registry, key) do
          [{^pid, value}] -> {server, user, value}
          _ -> nil
        end

      _ ->
        nil
    end)
  end

  @doc "Registers the calling process under `key`."
  @spec register(key, term) :: {:ok, pid} | {:error, {:already_registered, pid}}
  def register(key, value \\ nil), do: Registry.register(@registry, key, value)

  @spec unregister(key) :: :ok
  def unregister(key), do: Registry.unregister(@registry, key)
end

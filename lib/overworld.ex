defmodule Overworld do
  @moduledoc """
  Overworld: a server-authoritative multiplayer game server framework on Elixir/OTP.

  This module starts and finds zones; `Overworld.Zone` is the behaviour game code implements and
  the API to a running zone.

      {:ok, _} = Overworld.start_zone(MyGame.Arena, id: :arena, wire: MyGame.Wire)
      Overworld.Zone.metrics(:arena)

  docs/guide.md starts a game from nothing.
  """

  @doc """
  Starts a zone running `module` (an `Overworld.Zone`) under the sharded zone supervisor.
  Options are validated (see `Overworld.Zone`); invalid options raise `ArgumentError`. The
  node remembers how (an operator may start it again once stopped: docs/operator-api.md).
  """
  @spec start_zone(module, keyword) :: {:ok, pid} | {:error, term}
  def start_zone(module, opts) do
    # (The options are validated first: a missing id is said as such.)
    spec = Overworld.Zone.child_spec({module, opts})
    id = Keyword.fetch!(opts, :id)

    with {:ok, pid} <- start_child(id, spec) do
      :ok = Overworld.Zone.Started.put(id, module, opts)
      {:ok, pid}
    end
  end

  @doc "Stops a zone (its `terminate/2` runs). Returns `{:error, :not_found}` if it is not running."
  @spec stop_zone(term) :: :ok | {:error, :not_found}
  def stop_zone(id), do: stop_child(id, Overworld.Names.zone_sup(id))

  @doc """
  Starts a world of zones running `module` (see `Overworld.World` for the options): one
  supervisor, a zone per region. Invalid options raise `ArgumentError`.
  """
  @spec start_world(module, keyword) :: {:ok, pid} | {:error, term}
  def start_world(module, opts) do
    spec = Overworld.World.child_spec({module, opts})
    start_child(Keyword.fetch!(opts, :name), spec)
  end

  @doc "Stops a world and its zones. Returns `{:error, :not_found}` if it is not running."
  @spec stop_world(term) :: :ok | {:error, :not_found}
  def stop_world(name), do: stop_child(name, Overworld.Names.world(name))

  # Zones and worlds live under the sharded supervisor, sharded by id (or name).
  defp start_child(key, spec) do
    case DynamicSupervisor.start_child({:via, PartitionSupervisor, {Overworld.Zones, key}}, spec) do
      {:error, {:already_started, _}} -> {:error, :already_started}
      {:error, {{:already_started, _}, _}} -> {:error, :already_started}
      other -> other
    end
  end

  defp stop_child(key, name) do
    case Overworld.Names.whereis(name) do
      nil ->
        {:error, :not_found}

      pid ->
        DynamicSupervisor.terminate_child(
          {:via, PartitionSupervisor, {Overworld.Zones, key}},
          pid
        )
    end
  end

  @doc "The ids of the running zones."
  @spec zones() :: [term]
  def zones, do: Overworld.Names.zones()

  @doc """
  Binds the schedulers to CPUs, if they are not bound yet (the `+sbt db` emulator flag, set at
  run time). Returns `:ok` when they are bound afterwards.

  Each zone's bucket workers are spread one per scheduler. With unbound schedulers the OS may
  run two scheduler threads on one CPU for a few milliseconds after an idle period, so two
  workers that should run in parallel share a core at the start of every tick (measured on our
  2-core VMs: the tick doubled). Binding keeps one scheduler per CPU. Prefer `+sbt db` in
  `vm.args` or `ELIXIR_ERL_OPTIONS`; `mix overworld.server` and the benchmarks call this.
  """
  @spec bind_schedulers() :: :ok | {:error, term}
  def bind_schedulers do
    if bound?() do
      :ok
    else
      # Deprecated as a run-time switch in favour of +sbt, but still honoured by OTP 25, which
      # logs a deprecation warning: keep it out of the log. Schedulers bind as they wake.
      level = :logger.get_primary_config().level
      :logger.set_primary_config(:level, :error)

      try do
        apply(:erlang, :system_flag, [:scheduler_bind_type, :default_bind])
        wait_bound(20)
      rescue
        e -> {:error, e}
      after
        Process.sleep(10)
        :logger.set_primary_config(:level, level)
      end
    end
  end

  defp bound?,
    do: not Enum.member?(Tuple.to_list(:erlang.system_info(:scheduler_bindings)), :unbound)

  defp wait_bound(0), do: if(bound?(), do: :ok, else: {:error, :not_supported})

  defp wait_bound(n) do
    if bound?(), do: :ok, else: Process.sleep(5) && wait_bound(n - 1)
  end
end

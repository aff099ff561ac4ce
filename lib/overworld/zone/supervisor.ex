defmodule Overworld.Zone.Supervisor do
  @moduledoc false
  # One zone: its store (with a data directory), its bucket workers, then its server (`:rest_for_one`: the server depends on the
  # workers). A worker crash takes the bucket supervisor down (it allows no restarts), so the
  # whole zone restarts consistently; a server crash restarts only the server, which resets the
  # workers it finds. The server is significant: when it stops on purpose the zone shuts down.

  use Supervisor
  alias Overworld.Names
  alias Overworld.Zone.{Buckets, Config, Server}

  @spec start_link(Config.t()) :: Supervisor.on_start()
  def start_link(%Config{} = config) do
    Supervisor.start_link(__MODULE__, config,
      name: Overworld.Names.via(Overworld.Names.zone_sup(config.id))
    )
  end

  # Milliseconds a new supervisor waits for the processes of the one it replaces.
  @leftovers_wait 5_000

  @impl true
  def init(config) do
    await_leftovers(config)
    # Made here, in the supervisor's process: it survives a server restart.
    shared = Overworld.Zone.Metrics.new(config.workers, config.wire != nil)

    config = %{
      config
      | shared: Overworld.Metrics.Zones.labelled(shared, config),
        physics: physics(config)
    }

    # The store (zones with a data directory) first: it outlives worker and server restarts.
    store = if config.data_dir, do: [Overworld.Zone.Store.child_spec(config)], else: []
    # The sidecar last: its restarts (it restarts its OS process itself) touch nothing else.
    sidecar =
      if config.physics && config.physics.mode == :sidecar,
        do: [Overworld.Sidecar.child_spec(config.physics)],
        else: []

    children = store ++ [Buckets.child_spec(config), Server.child_spec(config)] ++ sidecar
    # Elixir 1.14's Supervisor.init/2 does not pass :auto_shutdown on; give OTP the flags.
    flags = %{
      strategy: :rest_for_one,
      intensity: config.max_restarts,
      period: config.max_seconds,
      auto_shutdown: :any_significant
    }

    {:ok, {flags, children}}
  end

  # The physics' state, made here (it survives a server restart): the sidecar's counters and
  # generation, the path of its socket (short: a Unix socket's path has at most 107 bytes).
  defp physics(%Config{physics: nil}), do: nil

  defp physics(%Config{physics: p, id: id}) do
    name = "ow-sidecar-#{System.pid()}-#{System.unique_integer([:positive])}.sock"
    %{p | zone: id, ref: Overworld.Sidecar.new_ref(), socket: Path.join(System.tmp_dir!(), name)}
  end

  # A zone supervisor killed leaves its children to stop by themselves: they trap exits, and
  # the server's terminate/2 runs. Until they are gone their names are taken, and a new server
  # (or store, with the journal's files) could not start: its supervisor's restarts would all
  # fail at once, and take the world's supervisor down with them. So the new one waits for
  # them (at most 5 s; usually milliseconds). The wait runs in the parent's restart, as the
  # zone's recovery does (the server's init): calls to the parent (`Overworld.World.zones/1`)
  # wait meanwhile.
  defp await_leftovers(%Config{id: id, workers: workers}) do
    keys =
      [Names.zone(id), Names.zone_store(id)] ++
        for(i <- 0..(workers - 1), do: Names.bucket(id, i))

    refs =
      for key <- keys,
          pid = Names.whereis(key),
          pid != nil and pid != self(),
          do: Process.monitor(pid)

    deadline = System.monotonic_time(:millisecond) + @leftovers_wait

    Enum.each(refs, fn ref ->
      receive do
        {:DOWN, ^ref, :process, _, _} -> :ok
      after
        max(deadline - System.monotonic_time(:millisecond), 0) -> Process.demonitor(ref, [:flush])
      end
    end)
  end
end

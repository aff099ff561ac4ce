defmodule Overworld.Zone.Supervisor do
  @moduledoc false
  # One zone: its store (with a data directory), its bucket workers, then its server (`:rest_for_one`: the server depends on the
  # workers). A worker crash takes the bucket supervisor down (it allows no restarts), so the
  # whole zone restarts consistently; a server crash restarts only the server, which resets the
  # workers it finds. The server is significant: when it stops on purpose the zone shuts down.

  use Supervisor
  alias Overworld.Zone.{Buckets, Config, Server}

  @spec start_link(Config.t()) :: Supervisor.on_start()
  def start_link(%Config{} = config) do
    Supervisor.start_link(__MODULE__, config,
      name: Overworld.Names.via(Overworld.Names.zone_sup(config.id))
    )
  end

  @impl true
  def init(config) do
    # Made here, in the supervisor's process: it survives a server restart.
    config = %{config | shared: Overworld.Zone.Metrics.new(config.workers, config.wire != nil)}
    # The store (zones with a data directory) first: it outlives worker and server restarts.
    store = if config.data_dir, do: [Overworld.Zone.Store.child_spec(config)], else: []
    children = store ++ [Buckets.child_spec(config), Server.child_spec(config)]
    # Elixir 1.14's Supervisor.init/2 does not pass :auto_shutdown on; give OTP the flags.
    flags = %{
      strategy: :rest_for_one,
      intensity: config.max_restarts,
      period: config.max_seconds,
      auto_shutdown: :any_significant
    }

    {:ok, {flags, children}}
  end
end

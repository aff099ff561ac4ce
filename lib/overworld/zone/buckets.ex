defmodule Overworld.Zone.Buckets do
  @moduledoc false
  # The bucket workers of one zone, one per stripe of grid rows. They hold the entities; a worker
  # that dies takes the others with it (no restarts here), and the zone supervisor restarts the
  # zone as a whole, so a stripe is never silently lost.

  use Supervisor
  alias Overworld.Zone.{Bucket, Config}

  @spec start_link(Config.t()) :: Supervisor.on_start()
  def start_link(%Config{} = config), do: Supervisor.start_link(__MODULE__, config)

  @impl true
  def init(config) do
    children = for i <- 0..(config.workers - 1), do: {Bucket, {config, i}}
    Supervisor.init(children, strategy: :one_for_all, max_restarts: 0)
  end
end

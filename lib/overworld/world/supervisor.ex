defmodule Overworld.World.Supervisor do
  @moduledoc false
  # One world: a supervisor of its zones (each a zone supervisor of its own, see
  # Overworld.Zone.Supervisor). A zone that fails beyond its own restarts does not take the
  # others down: its neighbours drop its shadows once they are late (realtime clock).

  use Supervisor

  @spec start_link(term, [Supervisor.child_spec()]) :: Supervisor.on_start()
  def start_link(name, specs) do
    Supervisor.start_link(__MODULE__, specs,
      name: Overworld.Names.via(Overworld.Names.world(name))
    )
  end

  @impl true
  def init(specs), do: Supervisor.init(specs, strategy: :one_for_one)
end

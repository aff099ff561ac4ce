defmodule Overworld.World.Supervisor do
  @moduledoc false
  # One world: a supervisor of its zones (each a zone supervisor of its own, see
  # Overworld.Zone.Supervisor). A zone that fails beyond its own restarts does not take the
  # others down: its neighbours drop its shadows once they are late (realtime clock).

  use Supervisor

  # (`placed`: nil, or a world spread over a cluster: the zones, each with its directory, that
  # its placer starts on their home nodes, Overworld.World.Placer.)
  @spec start_link(term, [Supervisor.child_spec()], [Overworld.World.Placer.zone()] | nil) ::
          Supervisor.on_start()
  def start_link(name, specs, placed \\ nil) do
    Supervisor.start_link(__MODULE__, {name, specs, placed},
      name: Overworld.Names.via(Overworld.Names.world(name))
    )
  end

  @impl true
  def init({_name, specs, nil}), do: Supervisor.init(specs, strategy: :one_for_one)

  def init({name, _specs, placed}) do
    children = [
      {DynamicSupervisor,
       name: Overworld.Names.via(Overworld.Names.world_zones(name)), strategy: :one_for_one},
      {Overworld.World.Placer, {name, placed}}
    ]

    Supervisor.init(children, strategy: :rest_for_one)
  end
end

defmodule Goblins.Application do
  @moduledoc false
  # The goblin world as an application. Under Mix (tests, `mix goblins.server`) it starts
  # nothing: the tasks start what they need. In its release (`MIX_ENV=prod mix release`,
  # whose rel/env.sh.eex sets OVERWORLD_SERVE=1) it serves the goblin world as the
  # environment configures it (Overworld.Release; docs/cluster.md, "Releases").
  use Application

  @impl true
  def start(_type, _args) do
    children =
      if System.get_env("OVERWORLD_SERVE") == "1",
        do: [{Overworld.Release, zone: Goblins, wire: Goblins.Wire}],
        else: []

    Supervisor.start_link(children, strategy: :one_for_one, name: Goblins.Supervisor)
  end
end

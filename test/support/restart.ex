defmodule Overworld.Test.Restart do
  @moduledoc false
  # Killing a zone's server (or a worker) and waiting for its successor, for the recovery tests.

  alias Overworld.Zone

  @doc "The zone's server once it is another than `old` (polled every 5 ms, up to 5 s)."
  def await_new_server(zone, old, tries \\ 1_000) do
    case Zone.whereis(zone) do
      pid when is_pid(pid) and pid != old -> pid
      _ when tries > 0 -> Process.sleep(5) && await_new_server(zone, old, tries - 1)
    end
  end

  @doc "Kills the zone's server and answers its successor once it has started (it answers a call)."
  def kill_server(zone) do
    old = Zone.whereis(zone)
    Process.exit(old, :kill)
    new = await_new_server(zone, old)
    Zone.info(zone)
    new
  end
end

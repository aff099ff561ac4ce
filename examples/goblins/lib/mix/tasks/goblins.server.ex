defmodule Mix.Tasks.Goblins.Server do
  @shortdoc "Serves the goblin world over HTTP/WebSocket and prints its tick statistics"
  @moduledoc """
  Starts the goblin world (`Goblins`, one goblin per 50 m²) and an Overworld server on it,
  and prints the zone's tick statistics every few seconds until stopped (Ctrl-C twice). This
  is what `make run` does (from the repository root).

      mix goblins.server [--entities 10000] [--zones 1x1] [--players anywhere] [--workers N]
                         [--tick-rate 30] [--port 4000]
                         [--data-dir ./data] [--no-persist] [--snapshot-ticks 300]
                         [--interval 5] [--seconds S] [--no-pace] [--max-players N]
                         [--map rooms] [--physics elixir|sidecar]

  `--zones CxR` serves a world of `C x R` zones (`Overworld.World`) of `--entities` goblins
  each, wandering across the borders (`make run` serves 2x2: 40,000 goblins); the world is
  named `goblins` too (one connection sees all of it) and keeps its files in
  `<data-dir>/worlds/goblins/zone-<i>/`.

  `--map rooms` serves the goblin world with walls instead (`Goblins.Rooms`: a maze of rooms,
  goblins walking from room to room on the paths the zone finds for them, pushed apart and
  out of the walls by the zone's physics), computed in Elixir or with `--physics sidecar` by
  the native sidecar (built by `make deps-rust`; without it the zone logs that and computes
  in Elixir). The visualizer draws the walls. Try it with fewer goblins:
  `mix goblins.server --map rooms --physics sidecar --entities 2000 --no-persist`.

  `--players border` makes players appear within 5 m of the world's vertical centre line (the
  border of a 2 x 2 world; for benchmarks of players crossing it) instead of anywhere.

  The zone is named `goblins` (clients connect to `/ws?zone=goblins`, the default zone) and
  keeps its snapshots and journal in `<data-dir>/zones/goblins/`: started again on its files
  (after a crash, a `kill -9`) it recovers the goblins where the last snapshot left them, every
  acknowledged loot pickup and the players, who resume their avatar when they reconnect within
  15 s. `--no-persist` starts a fresh world without files. The server's options and its output
  are those of `mix overworld.server` (`Mix.Tasks.Overworld.Server.serve/3`), with the
  backend of `Goblins.Backend` (match handlers, RPC functions, the matchmaker).
  """
  use Mix.Task

  alias Overworld.Bench.Args

  @switches [
              entities: :integer,
              zones: :string,
              players: :string,
              workers: :integer,
              tick_rate: :integer,
              map: :string,
              physics: :string
            ] ++
              Mix.Tasks.Overworld.Server.server_switches()

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "goblins.server")
    o = Args.positive!(opts, entities: 10_000, tick_rate: 30)
    if opts[:workers], do: Args.at_least!(opts, [:workers])

    zone =
      [tick_rate: o.tick_rate, wire: Goblins.Wire]
      |> then(&if opts[:workers], do: Keyword.put(&1, :workers, opts[:workers]), else: &1)

    players =
      case Keyword.get(opts, :players, "anywhere") do
        p when p in ["anywhere", "border"] -> String.to_atom(p)
        other -> Mix.raise("--players must be anywhere or border, got: #{inspect(other)}")
      end

    {module, args, zone} = world(opts, players, zone)

    served =
      Mix.Tasks.Overworld.Server.served(
        module,
        [id: :goblins, args: args] ++ zone,
        zones: opts[:zones] || "1x1",
        entities_per_zone: o.entities
      )

    Mix.Tasks.Overworld.Server.serve([served], opts, Goblins.Backend.server_options())
  end

  # The plain goblin world, or (`--map rooms`) the one with walls, with its physics.
  defp world(opts, players, zone) do
    case {opts[:map], opts[:physics]} do
      {nil, nil} ->
        {Goblins, [players: players], zone}

      {nil, _} ->
        Mix.raise(
          "--physics goes with --map rooms (the plain goblin world moves its goblins itself)"
        )

      {"rooms", physics} when physics in [nil, "elixir", "sidecar"] ->
        {Goblins.Rooms, [], [physics: String.to_atom(physics || "elixir")] ++ zone}

      {"rooms", other} ->
        Mix.raise("--physics must be elixir or sidecar, got: #{inspect(other)}")

      {other, _} ->
        Mix.raise("--map must be rooms, got: #{inspect(other)}")
    end
  end
end

defmodule Overworld.Release do
  @moduledoc """
  A game served from a release (`mix release`), configured by the environment (docs/cluster.md,
  "Releases"). A game's application adds `{Overworld.Release, zone: MODULE, wire: MODULE}` to
  its children (the goblin example does when `OVERWORLD_SERVE=1`, which its release sets); it
  starts a world of the game's zones and a server on it:

  | variable | meaning (default) |
  | --- | --- |
  | `OVERWORLD_PORT` | the HTTP/WebSocket port (4000; 0 picks a free one) |
  | `OVERWORLD_DATA_DIR` | accounts, token secret and the zones' files (`./data`) |
  | `OVERWORLD_WORLD` | the world's name, as clients send it (the zone module's last part, underscored) |
  | `OVERWORLD_ZONES` | the world's shape, `CxR` (`1x1`) |
  | `OVERWORLD_ENTITIES_PER_ZONE` | entities per zone, for the zone module's `zone_options/2` (1000) |
  | `OVERWORLD_NODES`, `OVERWORLD_DNS`, `OVERWORLD_COOKIE`, `OVERWORLD_COOKIE_FILE` | the cluster (`Overworld.Cluster.Config`): with more than one node the world is spread over them |

  A bad value stops the start with a one-line error naming the variable. Once the server
  listens it prints `os pid N` and `listening on http://127.0.0.1:PORT` on standard output.
  """

  @doc false
  def child_spec(opts) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [opts]}, type: :supervisor}
  end

  @doc """
  Starts the world and the server from the environment (`env`: a map, default the OS
  environment) for the game's `:zone` (a module exporting `zone_options(entities, extra)`) and
  `:wire` modules.
  """
  @spec start_link(keyword, %{optional(String.t()) => String.t()}) :: Supervisor.on_start()
  def start_link(opts, env \\ System.get_env()) do
    zone = Keyword.fetch!(opts, :zone)
    wire = Keyword.get(opts, :wire)
    c = config!(env, zone)
    clustered? = join!(env)

    world =
      zone.zone_options(c.entities * c.cols * c.rows,
        name: c.world,
        zones: {c.cols, c.rows},
        wire: wire,
        data_dir: Path.join([c.data_dir, "worlds", c.world])
      ) ++ if(clustered?, do: [cluster: true], else: [])

    server = [
      port: c.port,
      data_dir: c.data_dir,
      zones: %{c.world => {:world, c.world}},
      default_zone: c.world
    ]

    children = [
      Overworld.World.child_spec({zone, world}),
      {Overworld.Server, server},
      {Task, fn -> announce() end}
    ]

    Supervisor.start_link(children, strategy: :rest_for_one)
  end

  defp announce do
    IO.puts("os pid #{System.pid()}")
    IO.puts("listening on http://127.0.0.1:#{Overworld.Server.port()}")
  end

  @doc """
  The settings in `env` for zone module `zone`, or an `ArgumentError` naming the variable.

      iex> c = Overworld.Release.config!(%{"OVERWORLD_ZONES" => "2x3"}, MyGame.Arena)
      iex> {c.port, c.world, c.cols, c.rows, c.entities}
      {4000, "arena", 2, 3, 1000}
      iex> Overworld.Release.config!(%{"OVERWORLD_PORT" => "x"}, MyGame.Arena)
      ** (ArgumentError) OVERWORLD_PORT: expected a port number in 0..65535, got: "x"
  """
  @spec config!(%{optional(String.t()) => String.t()}, module) :: map
  def config!(env, zone) do
    default_world = zone |> Module.split() |> List.last() |> Macro.underscore()

    {cols, rows} =
      case Regex.run(~r/\A([1-9][0-9]*)x([1-9][0-9]*)\z/, Map.get(env, "OVERWORLD_ZONES", "1x1")) do
        [_, c, r] -> {String.to_integer(c), String.to_integer(r)}
        _ -> bad!("OVERWORLD_ZONES", "CxR (2x2, say)", env["OVERWORLD_ZONES"])
      end

    %{
      port: int!(env, "OVERWORLD_PORT", 4000, 0..65_535, "a port number in 0..65535"),
      data_dir: Map.get(env, "OVERWORLD_DATA_DIR", "./data"),
      world: Map.get(env, "OVERWORLD_WORLD", default_world),
      cols: cols,
      rows: rows,
      entities:
        int!(env, "OVERWORLD_ENTITIES_PER_ZONE", 1000, 1..10_000_000, "a positive integer")
    }
  end

  defp int!(env, var, default, range, what) do
    case Map.fetch(env, var) do
      :error ->
        default

      {:ok, text} ->
        case Integer.parse(text) do
          {n, ""} -> if n in range, do: n, else: bad!(var, what, text)
          _ -> bad!(var, what, text)
        end
    end
  end

  defp bad!(var, what, got),
    do: raise(ArgumentError, "#{var}: expected #{what}, got: #{inspect(got)}")

  # The cluster of the environment, if any: joined (the release runs with a node name).
  # Answers whether it has more than one node.
  defp join!(env) do
    case Overworld.Cluster.join_env(env) do
      {:ok, :none} ->
        false

      {:ok, _connected} ->
        Overworld.Cluster.clustered?()

      {:error, :not_alive} ->
        raise ArgumentError, "a cluster is configured but the node has no name"

      {:error, message} ->
        raise ArgumentError, message
    end
  end
end

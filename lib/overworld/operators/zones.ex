defmodule Overworld.Operators.Zones do
  @moduledoc """
  The zones as the operator API sees them: listed over the cluster, named by a ref, stopped,
  started again, snapshotted, their history dumped.

  A zone's id is any term; the API names it by a **ref**, 16 URL-safe characters (the first
  12 bytes of the SHA-256 of the id's external term format, base64url): stable while the id
  is, and found again by hashing the ids of the running zones (`find/1`), so nothing a client
  sends is ever turned into a term. The id is shown as text (`inspect/2`), for people.

  Every zone of the cluster is listed (`list/1`: this node's, then the other live nodes',
  each asked with a 2-second bound; a node that does not answer is left out), and each action
  runs on the node that runs the zone. Only zones of their own, started with
  `Overworld.start_zone/2`, are stopped and started again here (`{:error, :in_world}` for a
  zone of a world: its world places it; `{:error, :not_managed}` for a zone under a game's
  own supervisor); a zone is started again on the node that serves the request, with the
  options of its last start there (`Overworld.Zone.Started`), and recovers from its files
  when it has a data directory.
  """

  alias Overworld.Zone
  alias Overworld.Zone.History

  @remote_timeout 2_000

  @doc """
  The ref of a zone id.

      iex> Overworld.Operators.Zones.ref(:arena)
      "VhElogESnhtaTeUM"
  """
  @spec ref(term) :: String.t()
  def ref(id) do
    <<r::binary-size(12), _::binary>> =
      :crypto.hash(:sha256, :erlang.term_to_binary(id, [:deterministic]))

    Base.url_encode64(r, padding: false)
  end

  @doc "Whether `text` has the shape of a ref."
  @spec ref?(term) :: boolean
  def ref?(text),
    do: is_binary(text) and byte_size(text) == 16 and Regex.match?(~r/\A[A-Za-z0-9_-]+\z/, text)

  @doc """
  Every running zone of the cluster (`describe/2` of each), and the names of the server's
  zones (`names`: its `:zones` option) that run nowhere: `%{zones: [...], stopped: [...]}`.
  """
  @spec list(%{optional(String.t()) => term}) :: %{zones: [map], stopped: [String.t()]}
  def list(names) do
    remote =
      (Overworld.Cluster.live() -- [node()])
      |> :erpc.multicall(__MODULE__, :here, [names], @remote_timeout)
      |> Enum.flat_map(fn
        {:ok, zones} when is_list(zones) -> zones
        _ -> []
      end)

    stopped =
      for {name, id} <- names, not match?({:world, _}, id), Zone.whereis(id) == nil, do: name

    %{zones: here(names) ++ remote, stopped: Enum.sort(stopped)}
  end

  @doc false
  # This node's zones, described.
  @spec here(map) :: [map]
  def here(names) do
    for id <- Overworld.zones(), d = describe(id, names), d != nil, do: d
  end

  @doc """
  A zone of this node as the API shows it (nil when it is not running): `ref`, `id` (text),
  `name` (its public name in `names`, or nil), `watch` (the name an observer connection gives
  in `zone=`: its own, or its world's; nil when the server serves neither), `module`,
  `world` (the name of its world, or nil), `node`, `tick`, `tick_rate`, `players`, `entities`, `tick_p50_us`, `tick_p99_us`,
  `tick_samples`, `debug`, `history` (ticks it keeps), `persistent` (it has a data directory),
  `obstacles` (how many static obstacles its physics map has: `GET .../obstacles` lists them).
  """
  @spec describe(term, map) :: map | nil
  def describe(id, names) do
    with %Zone.Config{shared: shared} = c when shared != nil <- Zone.config(id),
         m = Zone.Metrics.report(shared) do
      %{
        ref: ref(id),
        id: text(id),
        name: Enum.find_value(names, fn {n, zid} -> zid == id && n end),
        # The name to watch it by (an observer's `zone=`): its own, or its world's.
        watch:
          Enum.find_value(names, fn {n, zid} ->
            (zid == id or (c.world != nil and zid == {:world, c.world.name})) && n
          end),
        module: inspect(c.module),
        world: c.world && text(c.world.name),
        node: Atom.to_string(node()),
        tick: m.tick,
        tick_rate: c.tick_rate,
        players: m.players,
        entities: m.entities,
        tick_p50_us: m.tick_us[:p50],
        tick_p99_us: m.tick_us[:p99],
        tick_samples: m.tick_us[:count],
        debug: c.debug,
        history: c.history,
        persistent: c.data_dir != nil,
        obstacles: obstacles(c.physics)
      }
    end
  end

  defp obstacles(nil), do: 0
  defp obstacles(p), do: tuple_size(p.world.boxes) + tuple_size(p.world.circles)

  @doc """
  An id or a name as text for people: a printable string as it is, anything else inspected
  (bounded).
  """
  @spec text(term) :: String.t()
  def text(term) when is_binary(term) and byte_size(term) <= 200 do
    if String.printable?(term), do: term, else: inspect(term, limit: 20, printable_limit: 200)
  end

  def text(term), do: inspect(term, limit: 20, printable_limit: 200)

  @doc """
  The node running the zone of `ref`, and its id: `{:ok, node, id}` or `{:error,
  :not_found}`.
  """
  @spec find(term) :: {:ok, node, term} | {:error, :not_found}
  def find(ref) do
    with true <- ref?(ref) || {:error, :not_found},
         nil <- find_here(ref) do
      (Overworld.Cluster.live() -- [node()])
      |> :erpc.multicall(__MODULE__, :find_here, [ref], @remote_timeout)
      |> Enum.find_value({:error, :not_found}, fn
        {:ok, {:ok, node, id}} -> {:ok, node, id}
        _ -> nil
      end)
    end
  end

  @doc false
  @spec find_here(String.t()) :: {:ok, node, term} | nil
  def find_here(ref) do
    Enum.find_value(Overworld.zones(), fn id -> ref(id) == ref && {:ok, node(), id} end)
  end

  @doc """
  Runs `fun` (one of this module's `*_here` functions, or `{module, function}`) with the zone
  `id` and `args` on `node`, where the zone runs (`find/1`); `{:error, {:node, reason}}` when
  that node does not answer.
  """
  @spec run(node, term, atom | {module, atom}, list) :: term
  def run(node, id, fun, args \\ [])

  def run(node, id, fun, args) when is_atom(fun), do: run(node, id, {__MODULE__, fun}, args)

  def run(node, id, {module, fun}, args) do
    if node == node(),
      do: apply(module, fun, [id | args]),
      else: :erpc.call(node, module, fun, [id | args], 60_000)
  catch
    kind, reason when kind in [:error, :exit] -> {:error, {:node, reason}}
  end

  @doc false
  # Stops a zone of this node started by `Overworld.start_zone/2`.
  @spec stop_here(term) :: :ok | {:error, term}
  def stop_here(id) do
    case Zone.config(id) do
      nil ->
        {:error, :not_found}

      %{world: w} when w != nil ->
        {:error, :in_world}

      _ ->
        case Overworld.stop_zone(id) do
          :ok -> :ok
          {:error, :not_found} -> if Zone.config(id), do: {:error, :not_managed}, else: :ok
        end
    end
  end

  @doc false
  @spec snapshot_here(term) :: {:ok, non_neg_integer} | {:error, term}
  def snapshot_here(id), do: Zone.snapshot(id)

  @doc false
  # The zone's history as the bytes of a dump file (`mix overworld.replay` reads it).
  @spec history_here(term) :: {:ok, binary, non_neg_integer} | {:error, term}
  def history_here(id) do
    with {:ok, dump} <- Zone.history(id),
         do: {:ok, History.encode(dump), History.last_tick(dump)}
  end

  @doc false
  @spec sessions_here(term, pos_integer) :: {:ok, [map], non_neg_integer}
  def sessions_here(id, limit), do: Overworld.Operators.Sessions.of_zone(id, limit)

  @doc """
  Starts again the zone the server names `name` (`names`: its `:zones` option), on this node,
  with the options of its last start here: `{:ok, describe/2}`, or `{:error, reason}`:
  `:unknown_name`, `:in_world`, `:already_running`, `:not_restartable` (never started here
  by `Overworld.start_zone/2`), or the start's own error.
  """
  @spec start(map, term) :: {:ok, map} | {:error, term}
  def start(names, name) do
    with {:ok, id} <- configured(names, name),
         nil <- Zone.whereis(id) && {:error, :already_running},
         {module, opts} <- Overworld.Zone.Started.get(id) || {:error, :not_restartable},
         {:ok, _pid} <- Overworld.start_zone(module, opts) do
      {:ok, describe(id, names)}
    else
      {:error, :already_started} -> {:error, :already_running}
      {:error, _} = error -> error
    end
  end

  defp configured(names, name) do
    case names do
      %{^name => {:world, _}} -> {:error, :in_world}
      %{^name => id} -> {:ok, id}
      _ -> {:error, :unknown_name}
    end
  end
end

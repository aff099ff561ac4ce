defmodule Overworld.World.Copies do
  @moduledoc false
  # The copies of a zone's files across a cluster, and their ownership epochs
  # (docs/cluster.md, "Ownership").
  #
  # Every start of a zone of a world over a cluster (`Overworld.World.Placer`) is a new
  # ownership epoch: one more than the epoch of the copy it starts from, written into the
  # zone's directory (the file `epoch`, fsynced, renamed into place) before the zone starts.
  # The file travels with the zone's other files: in a hand-over, in a replica's seed
  # (`Overworld.World.Handover`). So the epoch of a copy says which owner wrote it, and the
  # copy with the highest epoch holds everything any owner acknowledged: each owner started
  # from the newest copy there was, and acknowledged only what its replica (the node that
  # starts the zone when it dies) had too.
  #
  # Before a zone starts on its home node, its placer asks every other node running the
  # world what it holds of the zone (`survey/3`, one `:erpc.multicall/5`): a node where it
  # runs (or moves) means no start; a copy with a higher epoch than this node's is fetched
  # first (its node sends it as a hand-over: `Overworld.World.Placer`). Nodes that do not
  # answer within 2 s count as running it (a start waits for the next look); a node that is
  # down is not asked (its copy is older than the live replica's, or the zone had no replica
  # alive when its owner died, and what it acknowledged was on two copies).

  alias Overworld.{Cluster, Names}
  alias Overworld.Persistence.Dir

  @file_name "epoch"

  @doc "The name of the epoch file in a zone's directory."
  @spec file_name() :: String.t()
  def file_name, do: @file_name

  @doc "The ownership epoch of the copy in `dir` (0: none written, or no copy)."
  @spec epoch(Path.t()) :: non_neg_integer
  def epoch(dir) do
    with {:ok, text} <- File.read(Path.join(dir, @file_name)),
         {n, ""} when n >= 0 <- Integer.parse(String.trim(text)) do
      n
    else
      _ -> 0
    end
  end

  @doc """
  Writes epoch `n` into `dir` durably: a temporary file fsynced, renamed over `epoch`, the
  directory fsynced (the directory is made if missing).
  """
  @spec put_epoch(Path.t(), non_neg_integer) :: :ok | {:error, term}
  def put_epoch(dir, n) when is_integer(n) and n >= 0 do
    tmp = Path.join(dir, @file_name <> ".tmp")

    with :ok <- Dir.make(dir),
         :ok <- Dir.write_synced(tmp, Integer.to_string(n)),
         :ok <- File.rename(tmp, Path.join(dir, @file_name)) do
      Dir.sync(dir)
    end
  end

  @doc "Whether `dir` holds a copy of a zone (a snapshot or a journal segment)."
  @spec copy?(Path.t()) :: boolean
  def copy?(dir) do
    case File.ls(dir) do
      {:ok, names} -> Enum.any?(names, &(&1 == "snapshot" or String.starts_with?(&1, "journal.")))
      _ -> false
    end
  end

  @doc """
  What this node holds of zone `id` of world `name` (called by another node's placer through
  `:erpc`): `:busy` (it runs here, or arrives or leaves), `{:copy, epoch}`, `:none`, or
  `:unknown` (the world has not started here).
  """
  @spec describe(term, term) :: :busy | {:copy, non_neg_integer} | :none | :unknown
  def describe(name, id) do
    case :persistent_term.get({Overworld.World.Placer, name}, nil) do
      %{^id => dir} ->
        cond do
          busy?(id) -> :busy
          copy?(dir) -> {:copy, epoch(dir)}
          true -> :none
        end

      _ ->
        :unknown
    end
  end

  @doc """
  Whether zone `id` has anything on this node besides a replica: its server, its store (a
  released zone until it stops: its files are in use), or it arrives or leaves (marked by
  its placer).
  """
  @spec busy?(term) :: boolean
  def busy?(id) do
    Names.whereis(Names.zone(id)) != nil or Names.whereis(Names.zone_store(id)) != nil or
      Names.whereis(Names.arriving(id)) != nil
  end

  @doc """
  Where zone `id` of world `name` should start from, asked before it starts on this node
  (whose copy is in `dir`): `:elsewhere` (it runs on another node, or a node did not answer),
  `{:fetch, node, epoch}` (that node holds a newer copy than this one), or `{:own, epoch}`
  (this node's copy is the newest: its epoch).
  """
  @spec survey(term, term, Path.t()) ::
          :elsewhere | {:fetch, node, non_neg_integer} | {:own, non_neg_integer}
  def survey(name, id, dir) do
    own = epoch(dir)

    # (Every node connected to this one, not only those whose placer it has heard of: its
    # copy of the `:pg` groups lags behind a node that just connected, and a zone running
    # there would be missed.)
    placers = Cluster.scope() |> :pg.get_members({:placer, name}) |> Enum.map(&node/1)
    nodes = Enum.uniq(placers ++ Node.list()) -- [node()]

    answers = Enum.zip(nodes, :erpc.multicall(nodes, __MODULE__, :describe, [name, id], 2_000))

    copies = for {n, {:ok, {:copy, e}}} <- answers, e > own, do: {n, e}

    cond do
      Enum.any?(answers, &elsewhere?/1) -> :elsewhere
      copies == [] -> {:own, own}
      true -> newest(copies)
    end
  end

  defp newest(copies) do
    {n, e} = Enum.max_by(copies, &elem(&1, 1))
    {:fetch, n, e}
  end

  # (A node whose copy of `:pg` may lag behind, or that hangs: asked directly; one that does
  # not answer in time may run the zone.)
  defp elsewhere?({_node, {:ok, :busy}}), do: true
  defp elsewhere?({_node, {:error, {:erpc, :timeout}}}), do: true
  defp elsewhere?(_), do: false
end

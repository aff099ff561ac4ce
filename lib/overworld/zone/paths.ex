defmodule Overworld.Zone.Paths do
  @moduledoc """
  Paths for game code (zone option `:nav`, docs/sidecar.md "Paths in a zone"): an entity asks
  for a path with the zone module's `c:Overworld.Zone.path_to/1`, and gets the answer in the
  next tick's context (`Overworld.Zone.Context.path/2`), computed by the sidecar with the
  bodies of the physics step, or in Elixir (`Overworld.Physics.Nav`: the same paths).

  A request is a function of the state a tick leaves (`path_to/1` of each entity), like the
  physics step: nothing about paths is pending in a snapshot or a history keyframe, and a
  replay or a recovery computes the same answers. An entity that still wants a path after it
  got one asks again; game code keeps the path it got in its entity.

  **The bound.** Each bucket worker computes at most `per_tick` paths per tick, for the
  requests of its stripe (the rows it owns, `Overworld.Zone.Config`'s `stripes`). The
  requests of a stripe, in the order of its cells, are taken from an offset that turns with
  the tick (`rem(tick * per_tick, count)`), so every request gets its turn: the first
  `per_tick` are computed, the next `queue` wait (`:queued`: ask again), the others are
  refused (`{:error, :busy}`).
  """

  require Overworld.Entity
  import Overworld.Entity, only: [entity: 2]
  import Bitwise

  alias Overworld.Physics.Nav

  @enforce_keys [:nav, :agent, :fun, :per_tick, :queue, :stripes]
  defstruct @enforce_keys

  @typedoc """
  A zone's paths: its navigation grid (and the agents' radius it was built with), the zone module's `path_to/1`, the bound, and the first
  key of each worker's stripe (a stripe ends where the next begins).
  """
  @type t :: %__MODULE__{
          nav: Nav.t(),
          agent: non_neg_integer,
          fun: (Overworld.Entity.t() -> {integer, integer} | nil),
          per_tick: pos_integer,
          queue: non_neg_integer,
          stripes: tuple
        }

  @typedoc "A request: the entity's id, where it stands, where it wants to go."
  @type request :: {pos_integer, {integer, integer}, {integer, integer}}

  @typedoc "An answer, as `Overworld.Zone.Context.path/2` gives it."
  @type answer ::
          {:ok, [{integer, integer}]}
          | {:error, :blocked | :unreachable | :too_far | :busy}
          | :queued

  @typedoc "The requests of a stripe for one tick: those computed, the answers of the others."
  @type plan :: {[request], %{optional(pos_integer) => answer}}

  # Query points the sidecar takes (docs/sidecar.md, "Units and ranges").
  @max_coord 1 <<< 40

  @doc false
  # Options of the `nav:` zone option, with their defaults.
  @spec schema() :: Overworld.Options.schema()
  def schema do
    [
      cell: {:pos_number, 1},
      agent: {{:custom, &(is_number(&1) and &1 >= 0), "a number of metres >= 0"}, 0.5},
      max_nodes: {:pos_integer, 20_000},
      per_tick: {:pos_integer, 16},
      queue: {:non_neg_integer, 256}
    ]
  end

  @doc false
  # A zone's paths from its validated `nav:` options; nil when the zone module has no
  # `path_to/1`.
  @spec new(keyword, module, Overworld.Physics.world(), [{integer, integer}]) :: t | nil
  def new(opts, module, world, stripes) do
    o = Overworld.Options.validate!(opts, schema(), "Overworld.Zone :nav")

    if function_exported?(module, :path_to, 1) do
      agent = Overworld.Entity.meters(o.agent)

      nav =
        Nav.new(world, cell: Overworld.Entity.meters(o.cell), agent: agent, max_nodes: o.max_nodes)

      %__MODULE__{
        nav: nav,
        agent: agent,
        fun: Function.capture(module, :path_to, 1),
        per_tick: o.per_tick,
        queue: o.queue,
        stripes: List.to_tuple(stripes)
      }
    end
  end

  @doc """
  The requests among the entities of `pairs` (cells, in order), in that order. A `path_to/1`
  that fails or answers anything but nil or a point of integers makes no request.
  """
  @spec requests([{integer, [Overworld.Entity.t()]}], t) :: [request]
  def requests(pairs, %__MODULE__{fun: fun}) do
    for {_k, list} <- pairs, e <- list, r = request(fun, e), do: r
  end

  defp request(fun, e) do
    case fun.(e) do
      {tx, ty} = to when is_integer(tx) and is_integer(ty) ->
        {entity(e, :id), {entity(e, :x), entity(e, :y)}, to}

      _ ->
        nil
    end
  catch
    _, _ -> nil
  end

  @doc """
  The plan of one stripe's requests (in the order of its cells) for tick `n`: the requests to
  compute, and the answers of the others (`:queued`, `{:error, :busy}`), and of those whose
  points are out of range (`{:error, :blocked}`).

      iex> paths = %Overworld.Zone.Paths{nav: nil, agent: 0, fun: nil, per_tick: 2, queue: 1, stripes: {}}
      iex> reqs = for id <- 1..5, do: {id, {0, 0}, {9, 9}}
      iex> {computed, others} = Overworld.Zone.Paths.plan(reqs, 1, paths)
      iex> {Enum.map(computed, &elem(&1, 0)), others}
      {[3, 4], %{5 => :queued, 1 => {:error, :busy}, 2 => {:error, :busy}}}
  """
  @spec plan([request], non_neg_integer, t) :: plan
  def plan(requests, n, %__MODULE__{per_tick: per_tick, queue: queue}) do
    {requests, out_of_range} = Enum.split_with(requests, &in_range?/1)
    others = Map.new(out_of_range, &{elem(&1, 0), {:error, :blocked}})
    count = length(requests)

    if count <= per_tick do
      {requests, others}
    else
      {before, from} = Enum.split(requests, rem(n * per_tick, count))
      {computed, rest} = Enum.split(from ++ before, per_tick)
      {queued, busy} = Enum.split(rest, queue)
      others = Enum.reduce(queued, others, &Map.put(&2, elem(&1, 0), :queued))
      {computed, Enum.reduce(busy, others, &Map.put(&2, elem(&1, 0), {:error, :busy}))}
    end
  end

  defp in_range?({_id, {fx, fy}, {tx, ty}}),
    do:
      fx in 0..@max_coord and fy in 0..@max_coord and tx in 0..@max_coord and ty in 0..@max_coord

  @doc """
  The plan of a stripe's cells (`pairs`, in order) for tick `n`: `plan/3` of their
  `requests/2`; nothing to compute for a zone without paths (nil).
  """
  @spec stripe([{integer, [Overworld.Entity.t()]}], t | nil, non_neg_integer) :: plan
  def stripe(_pairs, nil, _n), do: {[], %{}}
  def stripe(pairs, paths, n), do: pairs |> requests(paths) |> plan(n, paths)

  @doc "The answers of a plan, its paths computed in Elixir."
  @spec answers(plan, t | nil) :: %{optional(pos_integer) => answer}
  def answers({[], others}, _paths), do: others

  def answers({computed, others}, %__MODULE__{nav: nav}) do
    Enum.reduce(computed, others, fn {id, from, to}, acc ->
      Map.put(acc, id, Nav.path(nav, from, to))
    end)
  end

  @doc """
  The answers of a whole zone held in one process (a replay, `Overworld.Zone.History`): each
  stripe's requests planned as its worker plans them, the paths computed in Elixir.
  """
  @spec all([{integer, [Overworld.Entity.t()]}], t | nil, non_neg_integer) :: %{
          optional(pos_integer) => answer
        }
  def all(_pairs, nil, _n), do: %{}

  def all(pairs, %__MODULE__{stripes: stripes} = paths, n) do
    stripes
    |> Tuple.to_list()
    |> Enum.reduce(%{}, fn {first, stop}, acc ->
      pairs
      |> Enum.filter(fn {k, _} -> k >= first and k < stop end)
      |> stripe(paths, n)
      |> answers(paths)
      |> Map.merge(acc)
    end)
  end

  ## The sidecar's frames (docs/sidecar.md, "The zone's protocol")

  @doc false
  # The query records of the requests to compute: `(tag fx fy tx ty 0 0 0)`, the tag the id.
  @spec queries([request]) :: binary
  def queries(computed) do
    for {id, {fx, fy}, {tx, ty}} <- computed,
        into: <<>>,
        do: <<id::little-64, fx::little-64, fy::little-64, tx::little-64, ty::little-64, 0::192>>
  end

  @doc false
  # The path answers of an answer frame (`(tag status k (x y)*k)*q`), checked to be those of
  # `computed` (same tags, same order): `{:ok, answers}` merged into `others`, or `:error`.
  @spec decode(binary, plan) :: {:ok, %{optional(pos_integer) => answer}} | :error
  def decode(bin, {computed, others}), do: decode(bin, computed, others)

  defp decode(<<>>, [], acc), do: {:ok, acc}

  defp decode(
         <<tag::little-64, status::little-64, k::little-64, rest::binary>>,
         [{tag, _, _} | computed],
         acc
       )
       when k >= 0 and byte_size(rest) >= 16 * k do
    <<points::binary-size(16 * k), rest::binary>> = rest

    case status(status, points) do
      :error -> :error
      answer -> decode(rest, computed, Map.put(acc, tag, answer))
    end
  end

  defp decode(_bin, _computed, _acc), do: :error

  defp status(0, points) when byte_size(points) > 0,
    do: {:ok, for(<<x::little-signed-64, y::little-signed-64 <- points>>, do: {x, y})}

  defp status(1, <<>>), do: {:error, :blocked}
  defp status(2, <<>>), do: {:error, :unreachable}
  defp status(3, <<>>), do: {:error, :too_far}
  defp status(_, _), do: :error

  @doc false
  # The hello's navigation parameters: cell, agent radius, max_nodes (docs/sidecar.md's
  # defaults for a zone without paths).
  @spec hello_params(t | nil) :: [integer]
  def hello_params(nil), do: [1024, 512, 20_000]
  def hello_params(%__MODULE__{nav: nav, agent: agent}), do: [nav.cell, agent, nav.max_nodes]
end

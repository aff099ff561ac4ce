defmodule Overworld.Zone.Bucket.Physics do
  @moduledoc false
  # A bucket worker of a zone with physics (Overworld.Zone.Physics, docs/sidecar.md): as a
  # tick starts, the physics step of the state the last tick left, for our bodies (the
  # sidecar's answer, or our stripe's share computed here); as it ends, our bodies to the
  # sidecar (the N−1 pipeline: it computes the next tick's step while the node sends this
  # tick's frames). The state is the worker's (`Overworld.Zone.Bucket`); these are its
  # physics steps.

  alias Overworld.Sidecar
  alias Overworld.Sidecar.Link
  alias Overworld.Zone.{Bucket, Config, Paths, Physics}

  @doc false
  # The results of this tick's step for our bodies, in the order of our cells, and the
  # answers to our entities' path requests (Overworld.Zone.Paths), without those of the
  # entities a world's tick takes out of our cells as it starts (`back`: Bucket.World.back/2);
  # the time it took
  # (native units). A load step has none (and forgets what was sent). Without the pipeline
  # (`sidecar: [pipeline: false]`), our bodies go to the sidecar of generation `sidecar` now,
  # and we wait for them.
  @spec physics_in(map, non_neg_integer, boolean, map, non_neg_integer) ::
          {[Physics.result()], %{optional(pos_integer) => Paths.answer()}, integer, map}
  def physics_in(%{config: %Config{physics: nil}} = st, _n, _simulate?, _back, _sidecar),
    do: {[], %{}, 0, st}

  def physics_in(st, _n, false, _back, _sidecar),
    do: {[], %{}, 0, %{st | link: Link.drop(st.link), plan: nil}}

  def physics_in(%{config: %Config{physics: p}} = st, n, true, back, sidecar) do
    t = System.monotonic_time()

    st =
      if p.mode == :sidecar and not p.sidecar.pipeline,
        do: send_bodies(st, p, n - 1, sidecar),
        else: st

    # Our requests for this tick: planned when our bodies went to the sidecar, else now (the
    # same cells: the same plan).
    plan = plan(st, p.paths, n)

    {results, paths, st} =
      case Link.await(st.link, p, n - 1, fn -> Bucket.own_pairs(st) end) do
        {{:ok, results, computed}, link} ->
          Sidecar.count(p, :sidecar)
          {results, Map.merge(elem(plan, 1), computed), %{st | link: link}}

        {_none_or_error, link} ->
          if p.mode == :sidecar, do: Sidecar.count(p, :fallback)
          {fallback(st, p), Paths.answers(plan, p.paths), %{st | link: link}}
      end

    {results, paths} = Physics.without({results, paths}, back)
    {results, paths, System.monotonic_time() - t, %{st | plan: nil}}
  end

  # The plan of our path requests for tick `n` (from our cells as the last tick left them).
  defp plan(%{plan: {n, plan}}, _paths, n), do: plan
  defp plan(_st, nil, _n), do: {[], %{}}
  defp plan(st, paths, n), do: Paths.stripe(Bucket.own_pairs(st), paths, n)

  # Our stripe's share of the step, from our cells and the halo around them (all the bodies
  # our bodies' contacts can involve: the same bits as the sidecar's step of the whole zone).
  defp fallback(st, p) do
    {stop, lo, _} = st.bounds
    first = Bucket.first_key(lo, st.config.grid)
    {own, halo} = Enum.split_with(st.view, fn {k, _} -> k >= first and k < stop end)
    Physics.step(Physics.bodies(own, p), Physics.bodies(halo, p), p)
  end

  @doc false
  # At the end of tick `n`: with the pipeline, our bodies to the sidecar of generation
  # `sidecar` (0: none, the link closes).
  @spec physics_out(map, non_neg_integer, non_neg_integer) :: map
  def physics_out(%{config: %Config{physics: %Physics{mode: :sidecar} = p}} = st, n, sidecar)
      when p.sidecar.pipeline,
      do: send_bodies(st, p, n, sidecar)

  def physics_out(st, _n, _sidecar), do: st

  # The bodies of the state of tick `n` (our cells as they are) to the sidecar, with the path
  # requests tick n + 1 answers (planned now, kept for then).
  defp send_bodies(st, _p, _n, 0), do: %{st | link: Link.close(st.link)}

  defp send_bodies(st, p, n, sidecar) do
    own = Bucket.own_pairs(st)
    {computed, _} = plan = Paths.stripe(own, p.paths, n + 1)
    link = Link.request(st.link, p, st.index, sidecar, n, own, computed)
    %{st | link: link, plan: {n + 1, plan}}
  end
end

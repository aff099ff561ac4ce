defmodule Overworld.Metrics.Histogram do
  @moduledoc """
  A lock-free log-linear histogram of non-negative integers (microseconds, bytes, ...) in
  `:atomics`: one writer or many, readers never block anybody.

  Values below 64 have a bucket each; above, every power of two is split into 32 buckets, so a
  reported percentile is within 1/32 (about 3 %) of the true value. Values up to 2^40 fit.
  A histogram also keeps the exact count, sum and maximum.

  Writers go on while a snapshot reads the buckets one by one, so a snapshot's `count` is the
  sum of the bucket counts it read (not the live counter read at another instant): its
  percentiles always rest on exactly the counts they walk, and never exceed its `max`.

      iex> h = Overworld.Metrics.Histogram.new()
      iex> for v <- 1..100, do: Overworld.Metrics.Histogram.record(h, v)
      iex> s = Overworld.Metrics.Histogram.snapshot(h)
      iex> Overworld.Metrics.Histogram.percentile(s, 50)
      50
      iex> {s.count, s.max, s.sum}
      {100, 100, 5050}
  """
  import Bitwise

  @sub 32
  @linear 2 * @sub
  @max_shift 34
  @buckets @linear + @sub * @max_shift
  # atomics layout: 1 count, 2 sum, 3 max, then the buckets
  @offset 3

  @typedoc "A live histogram."
  @type t :: :atomics.atomics_ref()

  @typedoc "A point-in-time copy: bucket counts plus count, sum and max."
  @type snapshot :: %{
          counts: tuple,
          count: non_neg_integer,
          sum: non_neg_integer,
          max: non_neg_integer
        }

  @doc "A new, empty histogram."
  @spec new() :: t
  def new, do: :atomics.new(@buckets + @offset, signed: false)

  @doc """
  The bucket index of a value.

      iex> Overworld.Metrics.Histogram.bucket(5)
      5
      iex> Overworld.Metrics.Histogram.bucket(64)
      64
      iex> Overworld.Metrics.Histogram.bucket(127)
      95
      iex> Overworld.Metrics.Histogram.bucket(128)
      96
  """
  @spec bucket(non_neg_integer) :: non_neg_integer
  def bucket(v) when v < @linear, do: v

  def bucket(v) do
    shift = bit_length(v) - 6
    idx = @linear + (shift - 1) * @sub + ((v >>> shift) - @sub)
    min(idx, @buckets - 1)
  end

  @doc """
  The lowest value that falls in a bucket (what percentiles report).

      iex> Overworld.Metrics.Histogram.bucket_floor(Overworld.Metrics.Histogram.bucket(1000))
      992
      iex> Overworld.Metrics.Histogram.bucket_floor(7)
      7
  """
  @spec bucket_floor(non_neg_integer) :: non_neg_integer
  def bucket_floor(i) when i < @linear, do: i

  def bucket_floor(i) do
    shift = div(i - @linear, @sub) + 1
    (rem(i - @linear, @sub) + @sub) <<< shift
  end

  defp bit_length(v), do: bit_length(v, 0)
  defp bit_length(0, n), do: n
  defp bit_length(v, n), do: bit_length(v >>> 1, n + 1)

  @doc "Records one value (negative values count as 0)."
  @spec record(t, integer) :: :ok
  def record(ref, v) when is_integer(v) do
    v = max(v, 0)
    :atomics.add(ref, 1, 1)
    :atomics.add(ref, 2, v)
    update_max(ref, v)
    :atomics.add(ref, @offset + 1 + bucket(v), 1)
  end

  defp update_max(ref, v) do
    cur = :atomics.get(ref, 3)

    if v > cur do
      case :atomics.compare_exchange(ref, 3, cur, v) do
        :ok -> :ok
        _ -> update_max(ref, v)
      end
    else
      :ok
    end
  end

  @doc "Empties a histogram (for windows that rotate; readers meanwhile may see part of it)."
  @spec reset(t) :: :ok
  def reset(ref) do
    for i <- 1..(@buckets + @offset), do: :atomics.put(ref, i, 0)
    :ok
  end

  @doc """
  Whether `bound` is the floor of a bucket: then `cumulative/2` counts the values below it
  exactly (any integer below 64 is; above, a bucket's floor has its five bits after the
  highest one set and zeros below them).

      iex> Overworld.Metrics.Histogram.exact_bound?(100)
      true
      iex> Overworld.Metrics.Histogram.exact_bound?(1000)
      false
      iex> Overworld.Metrics.Histogram.exact_bound?(1024)
      true
  """
  @spec exact_bound?(non_neg_integer) :: boolean
  def exact_bound?(bound), do: bucket_floor(bucket(bound)) == bound

  @doc """
  Cumulative counts of a live histogram at fixed bounds, read without a snapshot (for an
  exposition with a few fixed buckets, such as Prometheus's `le`): `{below, count, sum}`,
  where `below` holds, for each bound of `indices` (the `bucket/1` of each bound, ascending),
  how many values are below that bound, `count` how many values the buckets read hold (at
  least every value below the last bound) and `sum` the histogram's sum.

  A value stands for the interval up to the next integer (a duration truncated to whole
  microseconds): the values below a bound `b` are those at most `b` before truncation. The
  count at a bound is exact when the bound is a bucket floor (`exact_bound?/1`); for any other
  bound the values of its bucket below it go to the next bound.

  The walk stops once the buckets read hold the count the histogram had when the call began
  (what a value recorded meanwhile adds further up is left for the next read): on a histogram
  of tick durations it reads a few hundred of the #{@buckets} buckets.

      iex> alias Overworld.Metrics.Histogram
      iex> h = Histogram.new()
      iex> for v <- [3, 99, 100, 5000], do: Histogram.record(h, v)
      iex> Histogram.cumulative(h, Enum.map([100, 200], &Histogram.bucket/1))
      {[2, 3], 4, 5202}
  """
  @spec cumulative(t, [non_neg_integer]) ::
          {[non_neg_integer], non_neg_integer, non_neg_integer}
  def cumulative(ref, indices) do
    target = :atomics.get(ref, 1)
    {below, i, acc} = cumulative(ref, indices, 0, 0, target, [])
    {below, add_counts(ref, i, @buckets, acc, target), :atomics.get(ref, 2)}
  end

  defp cumulative(_ref, [], i, acc, _target, out), do: {Enum.reverse(out), i, acc}

  defp cumulative(ref, [to | more], i, acc, target, out) do
    acc = add_counts(ref, i, to, acc, target)
    cumulative(ref, more, max(i, to), acc, target, [acc | out])
  end

  # `acc` plus the counts of buckets i..to-1, or fewer once it holds `target` values.
  defp add_counts(_ref, i, to, acc, target) when i >= to or acc >= target, do: acc

  defp add_counts(ref, i, to, acc, target),
    do: add_counts(ref, i + 1, to, acc + :atomics.get(ref, @offset + 1 + i), target)

  @doc """
  Two snapshots added together (two windows read as one).

      iex> alias Overworld.Metrics.Histogram
      iex> [a, b] = for vs <- [[1, 2], [3]], do: (h = Histogram.new(); Enum.each(vs, &Histogram.record(h, &1)); Histogram.snapshot(h))
      iex> m = Histogram.merge(a, b)
      iex> {m.count, m.sum, m.max, Histogram.percentile(m, 50)}
      {3, 6, 3, 2}
  """
  @spec merge(snapshot, snapshot) :: snapshot
  def merge(a, b) do
    counts = zip_counts(a, b, &(&1 + &2))

    %{
      counts: List.to_tuple(counts),
      count: a.count + b.count,
      sum: a.sum + b.sum,
      max: max(a.max, b.max)
    }
  end

  @doc """
  Copies the current state. `count` is the sum of the bucket counts copied (consistent with
  them whatever writers did meanwhile); `max` is at least the floor of the highest bucket
  copied.
  """
  @spec snapshot(t) :: snapshot
  def snapshot(ref) do
    list = for i <- 1..@buckets, do: :atomics.get(ref, @offset + i)
    counts = List.to_tuple(list)
    max = :atomics.get(ref, 3)

    %{
      counts: counts,
      count: Enum.sum(list),
      sum: :atomics.get(ref, 2),
      max: max(max, highest_floor(list))
    }
  end

  defp highest_floor(list) do
    list
    |> Enum.with_index()
    |> Enum.reduce(0, fn {c, i}, acc -> if c > 0, do: bucket_floor(i), else: acc end)
  end

  @doc """
  What happened between two snapshots (`later` minus `earlier`). The maximum of the window is
  the floor of its highest non-empty bucket (exact maxima exist only since the start), and its
  count the sum of its buckets, so its percentiles never exceed its maximum.

      iex> alias Overworld.Metrics.Histogram
      iex> h = Histogram.new()
      iex> for v <- [10, 20, 30], do: Histogram.record(h, v)
      iex> a = Histogram.snapshot(h)
      iex> for v <- [1000, 2000], do: Histogram.record(h, v)
      iex> w = Histogram.diff(Histogram.snapshot(h), a)
      iex> {w.count, w.max, Histogram.percentile(w, 99)}
      {2, 1984, 1984}
  """
  @spec diff(snapshot, snapshot) :: snapshot
  def diff(later, earlier) do
    counts = zip_counts(later, earlier, &max(&1 - &2, 0))

    %{
      counts: List.to_tuple(counts),
      count: Enum.sum(counts),
      sum: max(later.sum - earlier.sum, 0),
      max: highest_floor(counts)
    }
  end

  @doc """
  A snapshot as a JSON-ready map (the bucket counts as a list), and back from its decoded
  JSON (string keys), as the status route sends it and tools read it.

      iex> alias Overworld.Metrics.Histogram
      iex> h = Histogram.new()
      iex> Histogram.record(h, 40)
      iex> s = Histogram.snapshot(h)
      iex> json = s |> Histogram.to_map() |> :jiffy.encode() |> :jiffy.decode([:return_maps])
      iex> Histogram.from_map(json) == s
      true
  """
  @spec to_map(snapshot) :: map
  def to_map(s), do: %{counts: Tuple.to_list(s.counts), count: s.count, sum: s.sum, max: s.max}

  @doc "See `to_map/1`."
  @spec from_map(map) :: snapshot
  def from_map(%{"counts" => counts, "count" => n, "sum" => sum, "max" => max}),
    do: %{counts: List.to_tuple(counts), count: n, sum: sum, max: max}

  # The two snapshots' bucket counts combined bucket by bucket, as a list.
  defp zip_counts(a, b, fun) do
    a.counts
    |> Tuple.to_list()
    |> Enum.zip_with(Tuple.to_list(b.counts), fun)
  end

  @doc """
  The `p`-th percentile (0 < p <= 100) of a snapshot by nearest rank, as a bucket floor
  (`nil` when empty). `p` may be a float, e.g. `99.9`. It is never above the snapshot's `max`
  (a snapshot whose `count` says more than its buckets hold, as one made by hand or decoded
  from an older tool may, is walked only as far as its buckets go).
  """
  @spec percentile(snapshot, number) :: non_neg_integer | nil
  def percentile(%{count: 0}, _p), do: nil

  def percentile(%{counts: counts, count: count} = s, p) when p > 0 and p <= 100 do
    rank = max(1, ceil_int(p * count / 100))
    v = walk(counts, 0, 0, rank, 0)
    if is_integer(s[:max]) and s.max > 0, do: min(v, s.max), else: v
  end

  defp ceil_int(f), do: f |> Float.ceil() |> trunc()

  # `last` is the highest non-empty bucket so far: what a rank past the buckets' total gets.
  defp walk(counts, i, acc, rank, last) do
    c = elem(counts, i)
    acc = acc + c
    last = if c > 0, do: i, else: last

    cond do
      acc >= rank -> bucket_floor(i)
      i == tuple_size(counts) - 1 -> bucket_floor(last)
      true -> walk(counts, i + 1, acc, rank, last)
    end
  end

  @doc """
  A summary of a snapshot: count, mean, p50, p90, p99, p99.9 and max.

      iex> h = Overworld.Metrics.Histogram.new()
      iex> Overworld.Metrics.Histogram.record(h, 10)
      iex> Overworld.Metrics.Histogram.summary(Overworld.Metrics.Histogram.snapshot(h))
      %{count: 1, mean: 10.0, p50: 10, p90: 10, p99: 10, p999: 10, max: 10}
  """
  @spec summary(snapshot) :: map
  def summary(%{count: count, sum: sum, max: max} = s) do
    %{
      count: count,
      mean: if(count > 0, do: sum / count, else: nil),
      p50: percentile(s, 50),
      p90: percentile(s, 90),
      p99: percentile(s, 99),
      p999: percentile(s, 99.9),
      max: if(count > 0, do: max, else: nil)
    }
  end
end

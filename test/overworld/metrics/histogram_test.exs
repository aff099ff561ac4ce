defmodule Overworld.Metrics.HistogramTest do
  use ExUnit.Case, async: true
  doctest Overworld.Metrics.Histogram

  alias Overworld.Metrics.Histogram
  alias Overworld.Test.Prop

  test "percentiles are within 1/32 below the exact nearest-rank value (property)" do
    Prop.check(
      :proper.forall(
        :proper_types.non_empty(:proper_types.list(:proper_types.integer(0, 10_000_000))),
        fn values ->
          h = Histogram.new()
          Enum.each(values, &Histogram.record(h, &1))
          s = Histogram.snapshot(h)
          sorted = Enum.sort(values)

          Enum.all?([1, 50, 90, 99, 99.9, 100], fn p ->
            exact = Enum.at(sorted, max(ceil(p * length(sorted) / 100) - 1, 0))
            got = Histogram.percentile(s, p)
            got <= exact and got >= exact - div(exact, 32)
          end) and s.max == List.last(sorted) and s.count == length(values)
        end
      ),
      200
    )
  end

  test "cumulative counts the values below exact bounds (property)" do
    bounds = [1, 50, 100, 160, 1024, 1600, 25_600, 409_600]
    assert Enum.all?(bounds, &Histogram.exact_bound?/1)
    indices = Enum.map(bounds, &Histogram.bucket/1)

    Prop.check(
      :proper.forall(
        :proper_types.list(:proper_types.integer(0, 1_000_000)),
        fn values ->
          h = Histogram.new()
          Enum.each(values, &Histogram.record(h, &1))
          {below, count, sum} = Histogram.cumulative(h, indices)

          below == Enum.map(bounds, fn b -> Enum.count(values, &(&1 < b)) end) and
            count == length(values) and sum == Enum.sum(values)
        end
      ),
      200
    )
  end

  test "diff gives the window between two snapshots" do
    h = Histogram.new()
    Enum.each(1..10, &Histogram.record(h, &1))
    a = Histogram.snapshot(h)
    Enum.each([1000, 1000, 2000], &Histogram.record(h, &1))
    d = Histogram.diff(Histogram.snapshot(h), a)
    assert d.count == 3
    assert d.sum == 4000
    assert Histogram.percentile(d, 50) == Histogram.bucket_floor(Histogram.bucket(1000))
    assert d.max == Histogram.bucket_floor(Histogram.bucket(2000))
  end

  test "concurrent writers lose nothing" do
    h = Histogram.new()

    1..4
    |> Enum.map(fn _ -> Task.async(fn -> Enum.each(1..5_000, &Histogram.record(h, &1)) end) end)
    |> Enum.each(&Task.await/1)

    s = Histogram.snapshot(h)
    assert s.count == 20_000
    assert s.max == 5_000
    assert s.sum == 4 * div(5_000 * 5_001, 2)
  end

  test "snapshots and windows taken while writers record stay consistent: no percentile above the maximum" do
    h = Histogram.new()
    # Writers of small values and, now and then, huge ones, as a saturated zone's ticks.
    writers =
      for k <- 1..3 do
        spawn_link(fn ->
          Stream.iterate(1, &(&1 + 1))
          |> Enum.each(fn i ->
            Histogram.record(h, if(rem(i, 97) == 0, do: 5_000_000 * k, else: rem(i, 5_000)))
          end)
        end)
      end

    prev = Histogram.snapshot(h)

    Enum.reduce(1..300, prev, fn _, prev ->
      s = Histogram.snapshot(h)
      assert s.count == s.counts |> Tuple.to_list() |> Enum.sum()

      for snap <- [s, Histogram.diff(s, prev)], snap.count > 0, p <- [50, 99, 99.9, 100] do
        assert Histogram.percentile(snap, p) <= snap.max,
               "p#{p} #{Histogram.percentile(snap, p)} above max #{snap.max}"
      end

      s
    end)

    Enum.each(writers, &(Process.unlink(&1) && Process.exit(&1, :kill)))
  end

  test "a snapshot whose count says more than its buckets hold is walked only as far as they go" do
    h = Histogram.new()
    Enum.each([10, 20, 30], &Histogram.record(h, &1))
    # As a snapshot read the live counter after the buckets (what the old code did) could be.
    s = %{Histogram.snapshot(h) | count: 1_000, max: 0}
    assert Histogram.percentile(s, 99) == 30
    assert Histogram.percentile(%{s | max: 25}, 99) == 25
  end

  test "reset empties a histogram and merge adds two" do
    a = Histogram.new()
    b = Histogram.new()
    Enum.each(1..10, &Histogram.record(a, &1))
    Histogram.record(b, 1_000)
    m = Histogram.merge(Histogram.snapshot(a), Histogram.snapshot(b))
    assert {m.count, m.sum, m.max} == {11, 1055, 1000}
    assert Histogram.percentile(m, 100) == Histogram.bucket_floor(Histogram.bucket(1000))
    :ok = Histogram.reset(a)
    assert %{count: 0, sum: 0, max: 0} = Histogram.snapshot(a)
    assert Histogram.percentile(Histogram.snapshot(a), 50) == nil
  end
end

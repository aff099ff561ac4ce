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
end

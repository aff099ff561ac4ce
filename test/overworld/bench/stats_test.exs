defmodule Overworld.Bench.StatsTest do
  use ExUnit.Case, async: true
  doctest Overworld.Bench.Stats

  alias Overworld.Bench.Stats
  alias Overworld.Metrics.Histogram

  test "the median of even and odd counts, against its definition" do
    for n <- 1..40, _ <- 1..5 do
      samples = for _ <- 1..n, do: :rand.uniform(1_000) - 500
      sorted = Enum.sort(samples)

      want =
        if rem(n, 2) == 1,
          do: Enum.at(sorted, div(n, 2)),
          else: (Enum.at(sorted, div(n, 2) - 1) + Enum.at(sorted, div(n, 2))) / 2

      assert Stats.median(samples) == want
      s = Stats.summary(samples)
      assert s.median == want
      # p50 is nearest-rank: a sample, the lower middle one for an even count.
      assert s.p50 == Enum.at(sorted, div(n - 1, 2))
      assert s.p50 <= s.median
    end
  end

  test "nearest-rank percentiles of even counts are samples at rank ceil(p n / 100)" do
    samples = Enum.shuffle(Enum.to_list(1..10))
    assert %{p50: 5, median: 5.5, p90: 9, p99: 10, p999: 10, max: 10} = Stats.summary(samples)
    assert %{p50: 1, median: 1.5, p90: 2, max: 2} = Stats.summary([2, 1])
  end

  test "a percentile with fewer than 100 samples above it is not printed" do
    for n <- [1, 2, 99, 100, 9_999] do
      text = Stats.describe(Stats.summary(Enum.to_list(1..n)), [50, 99])
      refute text =~ ~r/p99 \d/, "n = #{n}: #{text}"
      assert text =~ "max #{n} (#{n} sample"
      assert text =~ "a p99 needs 10000"
    end

    text = Stats.describe(Stats.summary(Enum.to_list(1..10_000)), [50, 99])
    assert text == "median 5000.5, p99 9900, max 10000 (10000 samples; 100 above the p99)"
  end

  test "a histogram's summary: p50 (a bucket floor, no median) and the count, in ticks" do
    h = Histogram.new()
    for v <- 1..300, do: Histogram.record(h, v)
    s = Histogram.summary(Histogram.snapshot(h))

    assert Stats.describe(s, [50, 99], unit: " µs", of: "ticks") ==
             "p50 #{s.p50} µs, max 300 µs (300 ticks; a p99 needs 10000)"

    assert Stats.describe(Histogram.summary(Histogram.snapshot(Histogram.new())), [50, 99],
             of: "ticks"
           ) == "no ticks"
  end
end

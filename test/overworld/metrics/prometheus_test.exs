defmodule Overworld.Metrics.PrometheusTest do
  use ExUnit.Case, async: true
  doctest Overworld.Metrics.Prometheus

  alias Overworld.Metrics.Prometheus, as: P

  test "label values keep any text, escaped" do
    for value <- ["plain", ~S(back\slash), ~S(quote"d), "new\nline", ~S(all\"\n) <> "\n", "ünï"] do
      line = IO.iodata_to_binary(P.sample("m", P.labels(v: value), 1))
      assert [_, escaped] = Regex.run(~r/^m\{v="((?:[^"\\\n]|\\[\\"n])*)"\} 1\n$/, line)
      # Unescaping gives the value back.
      back =
        Regex.replace(~r/\\([\\"n])/, escaped, fn
          _, "n" -> "\n"
          _, c -> c
        end)

      assert back == value
    end
  end

  test "a histogram without labels" do
    text = IO.iodata_to_binary(P.histogram("h", [], ["1"], [0], 2, 3))
    assert text == ~s(h_bucket{le="1"} 0\nh_bucket{le="+Inf"} 2\nh_sum 3\nh_count 2\n)
  end

  test "floats" do
    assert IO.iodata_to_binary(P.sample("g", [], 0.25)) == "g 0.25\n"
  end
end

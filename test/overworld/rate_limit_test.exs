defmodule Overworld.RateLimitTest do
  use ExUnit.Case, async: true
  doctest Overworld.RateLimit

  alias Overworld.RateLimit

  test "count hits in a window; beyond the limit, a retry-after within the window" do
    key = {:test, make_ref()}
    assert :ok = RateLimit.hit(key, {3, 60})
    assert :ok = RateLimit.check(key, {3, 60})
    assert :ok = RateLimit.hit(key, {3, 60})
    assert :ok = RateLimit.hit(key, {3, 60})
    assert {:error, {:rate_limited, s}} = RateLimit.check(key, {3, 60})
    assert s in 1..60
    assert {:error, {:rate_limited, _}} = RateLimit.hit(key, {3, 60})
    # Another key, or another window length, counts apart.
    assert :ok = RateLimit.hit({:test, make_ref()}, {3, 60})
    assert :ok = RateLimit.hit(key, {3, 3600})
    assert :ok = RateLimit.reset(key, 60)
    assert :ok = RateLimit.hit(key, {3, 60})
  end

  test "concurrent hits are all counted" do
    key = {:test, make_ref()}

    answers =
      1..8
      |> Enum.map(fn _ ->
        Task.async(fn -> for _ <- 1..100, do: RateLimit.hit(key, {500, 3600}) end)
      end)
      |> Enum.flat_map(&Task.await/1)

    assert Enum.count(answers, &(&1 == :ok)) == 500
    assert Enum.count(answers, &match?({:error, {:rate_limited, _}}, &1)) == 300

    assert {:error, _} = RateLimit.check(key, {800, 3600})
    assert :ok = RateLimit.check(key, {801, 3600})
  end
end

defmodule Overworld.Accounts.HasherTest do
  # The pool is the node's: not async (the queue bound is changed).
  use ExUnit.Case, async: false

  alias Overworld.Accounts.{Hasher, Password}

  setup do
    on_exit(fn -> Hasher.configure(max_queue: 8) end)
  end

  test "hash and verify in the pool" do
    assert {:ok, hash} = Hasher.hash("open sesame", 100)
    assert {:ok, true} = Hasher.verify("open sesame", hash)
    assert {:ok, false} = Hasher.verify("open says me", hash)
    assert Password.verify("open sesame", hash)
  end

  test "a full pool answers busy at once, with a retry-after, and loses nothing it took" do
    Hasher.configure(max_queue: 1)
    n = System.schedulers_online()
    me = self()

    # Fill every worker's single place with a slow job.
    slow =
      for _ <- 1..n do
        Task.async(fn -> Hasher.hash("slow one", 400_000) end)
      end

    Process.sleep(30)
    {us, answer} = :timer.tc(fn -> Hasher.hash("one more", 100) end)
    assert {:error, {:busy, retry}} = answer
    assert is_integer(retry) and retry >= 1
    assert us < 50_000
    assert Enum.all?(Hasher.stats().queued, &(&1 == 1))

    for t <- slow, do: assert({:ok, {:pbkdf2_sha256, 400_000, _, _}} = Task.await(t, 60_000))
    assert Enum.all?(Hasher.stats().queued, &(&1 == 0))
    assert {:ok, _} = Hasher.hash("now there is room", 100)
    _ = me
  end

  test "a caller that gives up gets :timeout and the queue place comes back" do
    assert {:error, :timeout} = Hasher.hash("too slow", 2_000_000, 10)
    Process.sleep(10)
    # (The worker ends the 2,000,000-iteration job it had started: up to 30 s.)
    Overworld.Test.Cluster.eventually(fn -> Enum.all?(Hasher.stats().queued, &(&1 == 0)) end, 600)
  end
end

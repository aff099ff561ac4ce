defmodule Overworld.Accounts.PasswordTest do
  use ExUnit.Case, async: true
  doctest Overworld.Accounts.Password

  alias Overworld.Accounts.Password
  alias Overworld.Test.Prop

  test "derive/4 gives :crypto.pbkdf2_hmac/5's bytes (property)" do
    Prop.check(
      :proper.forall(
        :proper_types.tuple([
          # Passwords longer than a SHA-256 block (64 bytes) are hashed first: both sides.
          :proper_types.binary(),
          :proper_types.binary(),
          :proper_types.integer(1, 300),
          :proper_types.integer(1, 32)
        ]),
        fn {password, salt, iterations, length} ->
          Password.derive(password, salt, iterations, length) ==
            :crypto.pbkdf2_hmac(:sha256, password, salt, iterations, length)
        end
      ),
      200
    )

    long = :binary.copy("p", 100)
    assert Password.derive(long, "s", 5, 32) == :crypto.pbkdf2_hmac(:sha256, long, "s", 5, 32)
  end

  test "a hash keeps its iteration count and a salt of its own" do
    {:pbkdf2_sha256, 50, salt1, key1} = Password.hash("hunter22", 50)
    {:pbkdf2_sha256, 50, salt2, key2} = Password.hash("hunter22", 50)
    assert byte_size(salt1) == 16 and byte_size(key1) == 32
    assert salt1 != salt2 and key1 != key2
    assert key1 == :crypto.pbkdf2_hmac(:sha256, "hunter22", salt1, 50, 32)
    assert Password.default_iterations() == 600_000
  end

  test "derive/4 yields to other processes: a 10 ms sleep stays near 10 ms during hashing" do
    hashers =
      for _ <- 1..(2 * System.schedulers_online()),
          do: Task.async(fn -> Password.hash("p", 150_000) end)

    Process.sleep(20)

    delays =
      for _ <- 1..5 do
        {us, _} = :timer.tc(fn -> Process.sleep(10) end)
        us
      end

    Enum.each(hashers, &Task.await(&1, 30_000))
    # The crypto NIF would hold every scheduler for the whole derivation (tens of ms), so
    # every sleep would be late: the median is judged (one late sleep is a stall of the
    # machine, as a fresh-clone run saw: 16.6, 60.9, 11.4, 12.0, 11.9 ms).
    median = delays |> Enum.sort() |> Enum.at(2)
    assert median < 40_000, "sleeps took #{inspect(delays)} µs"
  end
end

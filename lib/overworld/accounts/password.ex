defmodule Overworld.Accounts.Password do
  @moduledoc """
  Password hashes: PBKDF2-HMAC-SHA256 (RFC 8018) with a 16-byte random salt and a 32-byte
  derived key, from `:crypto`'s SHA-256.

  The default iteration count is #{600_000} (OWASP's figure for PBKDF2-HMAC-SHA256);
  `Overworld.Server`'s `accounts: [password_iterations: n]` sets another for new hashes (a hash
  keeps the count it was made with, so raising it later leaves old passwords valid).

  Why not `:crypto.pbkdf2_hmac/5`: on OTP 25 it is a plain NIF, not a dirty one, and holds a
  scheduler for the whole derivation (137 ms at 600,000 iterations on this project's 2-vCPU
  machine), stalling every zone and connection that scheduler runs. `derive/4` computes the
  same bytes (a test compares them) one HMAC at a time: SHA-256 contexts keyed once with the
  password's inner and outer pads, so each iteration is two short `:crypto` calls the BEAM can
  preempt between. It costs about 1.05 µs per iteration here, 4.6 times the NIF's CPU, and it
  runs in `Overworld.Accounts.Hasher`'s low-priority workers, so hashing only takes the CPU the
  rest of the node leaves.

  A stored hash is `{:pbkdf2_sha256, iterations, salt, derived_key}`; as text (`encode/1`,
  `decode/1`: operators' hashes in a server's configuration, `Overworld.Operators`) it is
  `pbkdf2-sha256$<iterations>$<salt>$<derived key>`, salt and key in unpadded base64.
  """

  import Bitwise

  @default_iterations 600_000
  @salt_bytes 16
  @key_bytes 32
  @block 64

  @typedoc "A stored password hash."
  @type hash :: {:pbkdf2_sha256, pos_integer, binary, binary}

  @doc "The default iteration count."
  @spec default_iterations() :: pos_integer
  def default_iterations, do: @default_iterations

  @doc """
  Hashes a password with a fresh random salt. (Slow by design: call it through
  `Overworld.Accounts.Hasher`.)
  """
  @spec hash(binary, pos_integer) :: hash
  def hash(password, iterations \\ @default_iterations) do
    salt = :crypto.strong_rand_bytes(@salt_bytes)
    {:pbkdf2_sha256, iterations, salt, derive(password, salt, iterations, @key_bytes)}
  end

  @doc """
  Checks a password against a stored hash, comparing in constant time.

      iex> h = Overworld.Accounts.Password.hash("correct horse", 10)
      iex> Overworld.Accounts.Password.verify("correct horse", h)
      true
      iex> Overworld.Accounts.Password.verify("wrong horse", h)
      false
  """
  @spec verify(binary, hash) :: boolean
  def verify(password, {:pbkdf2_sha256, iterations, salt, key}) do
    :crypto.hash_equals(derive(password, salt, iterations, byte_size(key)), key)
  end

  @doc """
  A hash that no password matches, made once per iteration count (kept in
  `:persistent_term`): checked when a name or an address is unknown, so that it costs one
  PBKDF2 as a known one does and no time tells them apart.
  """
  @spec decoy(pos_integer) :: hash
  def decoy(iterations) do
    key = {__MODULE__, :decoy, iterations}

    case :persistent_term.get(key, nil) do
      nil ->
        hash =
          {:pbkdf2_sha256, iterations, :crypto.strong_rand_bytes(16),
           :crypto.strong_rand_bytes(32)}

        :persistent_term.put(key, hash)
        hash

      hash ->
        hash
    end
  end

  @doc """
  A hash as text: `pbkdf2-sha256$<iterations>$<salt>$<derived key>` (unpadded base64).

      iex> Overworld.Accounts.Password.encode({:pbkdf2_sha256, 1000, "salty salt", <<1, 2, 3>>})
      "pbkdf2-sha256$1000$c2FsdHkgc2FsdA$AQID"
  """
  @spec encode(hash) :: String.t()
  def encode({:pbkdf2_sha256, iterations, salt, key}),
    do: "pbkdf2-sha256$#{iterations}$#{b64(salt)}$#{b64(key)}"

  @doc """
  A hash from its text (`encode/1`; base64 with or without padding): `:error` unless it is
  one, with 1 to 100,000,000 iterations, a salt of at least 8 bytes and a key of 16 to 32.

      iex> h = Overworld.Accounts.Password.hash("pw", 10)
      iex> Overworld.Accounts.Password.decode(Overworld.Accounts.Password.encode(h)) == {:ok, h}
      true
      iex> Overworld.Accounts.Password.decode("pbkdf2-sha256$0$c2FsdHkgc2FsdA$AQID")
      :error
      iex> Overworld.Accounts.Password.decode("md5$abc")
      :error
  """
  @spec decode(term) :: {:ok, hash} | :error
  def decode(text) when is_binary(text) do
    with ["pbkdf2-sha256", n, salt, key] <- String.split(text, "$"),
         {iterations, ""} when iterations in 1..100_000_000 <- Integer.parse(n),
         {:ok, salt} when byte_size(salt) >= 8 <- unb64(salt),
         {:ok, key} when byte_size(key) in 16..@key_bytes <- unb64(key) do
      {:ok, {:pbkdf2_sha256, iterations, salt, key}}
    else
      _ -> :error
    end
  end

  def decode(_text), do: :error

  defp b64(bytes), do: Base.encode64(bytes, padding: false)
  defp unb64(text), do: Base.decode64(String.trim_trailing(text, "="), padding: false)

  @doc """
  PBKDF2-HMAC-SHA256 of `password` and `salt`: `length` bytes (at most 32: one block).

      iex> Overworld.Accounts.Password.derive("password", "salt", 2, 32) |> Base.encode16(case: :lower)
      "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43"
      iex> Overworld.Accounts.Password.derive("password", "salt", 1000, 32) ==
      ...>   :crypto.pbkdf2_hmac(:sha256, "password", "salt", 1000, 32)
      true
  """
  @spec derive(binary, binary, pos_integer, 1..32) :: binary
  def derive(password, salt, iterations, length)
      when is_binary(password) and is_binary(salt) and is_integer(iterations) and
             iterations > 0 and length in 1..@key_bytes do
    key = if byte_size(password) > @block, do: :crypto.hash(:sha256, password), else: password
    key = key <> :binary.copy(<<0>>, @block - byte_size(key))
    inner = :crypto.hash_update(:crypto.hash_init(:sha256), pad(key, 0x36))
    outer = :crypto.hash_update(:crypto.hash_init(:sha256), pad(key, 0x5C))
    u = hmac(inner, outer, salt <> <<1::32>>)
    <<out::binary-size(length), _::binary>> = iterate(inner, outer, u, u, iterations - 1)
    out
  end

  defp iterate(_inner, _outer, _u, acc, 0), do: acc

  defp iterate(inner, outer, u, acc, n) do
    u = hmac(inner, outer, u)
    iterate(inner, outer, u, :crypto.exor(acc, u), n - 1)
  end

  defp hmac(inner, outer, data),
    do:
      :crypto.hash_final(
        :crypto.hash_update(outer, :crypto.hash_final(:crypto.hash_update(inner, data)))
      )

  defp pad(key, byte), do: for(<<b <- key>>, into: <<>>, do: <<bxor(b, byte)>>)
end

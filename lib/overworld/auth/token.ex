defmodule Overworld.Auth.Token do
  @moduledoc """
  HMAC-SHA256 signed session, refresh and operator tokens.

  A token is two unpadded base64url parts joined by a dot: a compact binary payload and the
  HMAC-SHA256 of the payload bytes.

      payload = <<version::8, type::8, kid::32, expires_at::64, generation::32, sid::binary-8,
                  user_id_size::8, user_id::binary>>

  `version` is 2, `type` is 1 for `:session`, 2 for `:refresh` and 3 for `:operator` (an
  operator's token, `Overworld.Operators`: its "user id" is the operator's name, its
  generation a fingerprint of the operator's password hash), `kid` names the key that
  signed the token (see `Overworld.Auth.Token.Key`), `expires_at` is in unix seconds,
  `generation` is the account's token generation when the token was made and `sid` the id of
  the login it belongs to (8 random bytes, shared by the session and refresh tokens of one
  login and those refreshed from them): `Overworld.Accounts.check_token/1` refuses a token
  whose generation is behind its account's (the account was disabled, or logged out
  everywhere) or whose login was logged out. The user id is at most 255 bytes. All integers
  are big-endian and unsigned. Tokens of version 1 (without generation and sid) still verify,
  as generation 0 and sid nil.

  `verify/4` takes one key or a list of keys, so a server can rotate its secret: sign with the
  new key and verify with `[new, old]` until the old tokens have expired. It never raises on what
  a client sends, never makes atoms from it, compares MACs in constant time, and reports the first
  failure in this order: `:malformed`, `:unknown_key`, `:bad_signature`, `:wrong_type`,
  `:expired`.

  The secret lives in a file of the data directory (`load_or_create_secret/1`), created on first
  boot and readable by its owner only.
  """
  import Bitwise

  defmodule Key do
    @moduledoc """
    A signing key: the secret and its key id.

    The key id is the first four bytes of the SHA-256 of the secret, as an unsigned integer; it is
    carried in every token so that `Overworld.Auth.Token.verify/4` can pick the right key. Build
    keys with `Overworld.Auth.Token.key/1`.
    """
    @enforce_keys [:kid, :secret]
    defstruct [:kid, :secret]

    @typedoc "A key id (a 32-bit unsigned integer) and a secret of at least 32 bytes."
    @type t :: %__MODULE__{kid: non_neg_integer, secret: binary}

    defimpl Inspect do
      # The secret never shows in logs or crash reports.
      def inspect(%{kid: kid}, _opts), do: "#Overworld.Auth.Token.Key<kid: #{kid}>"
    end
  end

  @version 2
  @sid_size 8
  @max_token_size 1024
  @max_user_id_size 255
  @min_secret_size 32
  @mac_size 32
  @secret_file "secret"

  @typedoc """
  The kind of a token: a player's short-lived session token or long-lived refresh token, or
  an operator's token. A token of one type is refused (`:wrong_type`) where another is
  expected: a player's token never opens the operator API, an operator's never a player's
  route or WebSocket.
  """
  @type type :: :session | :refresh | :operator

  @typedoc "What a valid token says."
  @type claims :: %{
          user_id: binary,
          expires_at: integer,
          type: type,
          generation: non_neg_integer,
          sid: binary | nil
        }

  @typedoc "Whom a token is for: a user id (generation 0, a new sid), or all three."
  @type subject :: binary | %{user_id: binary, generation: non_neg_integer, sid: binary}

  @typedoc "Why a token was refused."
  @type error :: :malformed | :unknown_key | :bad_signature | :expired | :wrong_type

  @doc """
  Makes a key from a secret of at least 32 bytes; raises `ArgumentError` for a shorter one.

      iex> key = Overworld.Auth.Token.key(:binary.copy(<<7>>, 32))
      iex> key.kid
      1269854094
  """
  @spec key(binary) :: Key.t()
  def key(secret) when is_binary(secret) and byte_size(secret) >= @min_secret_size do
    <<kid::32, _::binary>> = :crypto.hash(:sha256, secret)
    %Key{kid: kid, secret: secret}
  end

  def key(secret) when is_binary(secret) do
    raise ArgumentError,
          "expected a secret of at least #{@min_secret_size} bytes, got #{byte_size(secret)} bytes"
  end

  def key(other) do
    raise ArgumentError, "expected a secret binary, got: #{inspect(other)}"
  end

  @doc """
  Reads the secret of a data directory, creating it on first boot.

  The secret is the file `secret` in `dir` (the directory is created if needed). On first boot 32
  random bytes are written to a new file that is made private (mode 0600) before any secret byte
  is written, synced to disc, and renamed into place. Later boots read it and refuse a file that
  is shorter than 32 bytes (`{:error, {:secret_too_short, path, size}}`) or that its group or
  other users may access (`{:error, {:insecure_secret_file, path, mode}}`).
  """
  @spec load_or_create_secret(Path.t()) :: {:ok, binary} | {:error, term}
  def load_or_create_secret(dir) do
    path = Path.join(dir, @secret_file)

    with :ok <- File.mkdir_p(dir) do
      case File.stat(path) do
        {:ok, stat} -> read_secret(path, stat)
        {:error, :enoent} -> create_secret(dir, path)
        {:error, reason} -> {:error, {:secret_file, path, reason}}
      end
    end
  end

  defp read_secret(path, %File.Stat{type: :regular, mode: mode}) when (mode &&& 0o077) != 0,
    do: {:error, {:insecure_secret_file, path, mode &&& 0o777}}

  defp read_secret(path, %File.Stat{type: :regular}) do
    case File.read(path) do
      {:ok, secret} when byte_size(secret) >= @min_secret_size -> {:ok, secret}
      {:ok, secret} -> {:error, {:secret_too_short, path, byte_size(secret)}}
      {:error, reason} -> {:error, {:secret_file, path, reason}}
    end
  end

  defp read_secret(path, %File.Stat{type: type}), do: {:error, {:secret_file, path, type}}

  # The new file is made in a fresh private directory, so that nobody else can open it, even
  # in the moment between its creation and its chmod. `File.mkdir/1` fails if the directory
  # exists, so a planted file or link cannot be reused.
  defp create_secret(dir, path) do
    staging =
      Path.join(dir, ".secret-" <> Base.encode16(:crypto.strong_rand_bytes(8), case: :lower))

    tmp = Path.join(staging, @secret_file)
    secret = :crypto.strong_rand_bytes(@min_secret_size)

    result =
      with :ok <- File.mkdir(staging),
           :ok <- File.chmod(staging, 0o700),
           :ok <- File.touch(tmp),
           :ok <- File.chmod(tmp, 0o600),
           :ok <- Overworld.Persistence.Dir.write_synced(tmp, secret),
           # A hard link never replaces an existing file: when two servers boot at once on a
           # fresh directory, the first link wins and the other reads the secret it made.
           :ok <- File.ln(tmp, path) do
        {:ok, secret}
      end

    File.rm_rf(staging)

    case result do
      {:ok, secret} -> {:ok, secret}
      {:error, :eexist} -> read_secret(path, File.stat!(path))
      {:error, reason} -> {:error, {:secret_file, path, reason}}
    end
  end

  @doc """
  Signs a token of `type` for a subject (a user id of at most 255 bytes, or a map with the
  user id, the account's generation and the login's sid) that expires `ttl_seconds` after
  `now` (unix seconds).

      iex> key = Overworld.Auth.Token.key(:binary.copy("k", 32))
      iex> subject = %{user_id: "user-1", generation: 3, sid: "8 bytes!"}
      iex> token = Overworld.Auth.Token.sign(key, :session, subject, 60, 1_700_000_000)
      iex> Overworld.Auth.Token.verify(key, token, :session, 1_700_000_030)
      {:ok, %{user_id: "user-1", expires_at: 1_700_000_060, type: :session, generation: 3, sid: "8 bytes!"}}
      iex> Overworld.Auth.Token.verify(key, token, :session, 1_700_000_060)
      {:error, :expired}
  """
  @spec sign(Key.t(), type, subject, pos_integer, integer) :: binary
  def sign(key, type, subject, ttl_seconds, now \\ System.system_time(:second))

  def sign(key, type, user_id, ttl, now) when is_binary(user_id),
    do: sign(key, type, %{user_id: user_id, generation: 0, sid: new_sid()}, ttl, now)

  def sign(
        %Key{kid: kid, secret: secret},
        type,
        %{user_id: user_id, generation: gen, sid: sid},
        ttl,
        now
      )
      when type in [:session, :refresh, :operator] and is_binary(user_id) and
             byte_size(user_id) <= @max_user_id_size and is_integer(gen) and gen >= 0 and
             gen < 1 <<< 32 and byte_size(sid) == @sid_size and is_integer(ttl) and ttl > 0 and
             is_integer(now) and now + ttl < 1 <<< 64 and now + ttl >= 0 do
    payload =
      <<@version, type_byte(type), kid::32, now + ttl::64, gen::32, sid::binary,
        byte_size(user_id), user_id::binary>>

    encode(payload) <> "." <> encode(:crypto.mac(:hmac, :sha256, secret, payload))
  end

  @doc "A new login id (`sid`): 8 random bytes."
  @spec new_sid() :: binary
  def new_sid, do: :crypto.strong_rand_bytes(@sid_size)

  @doc """
  Verifies a token of `type` with one key or a list of keys at `now` (unix seconds).

  Anything may be passed as the token: what is not a well-formed token, including a token longer
  than 1024 bytes, is `{:error, :malformed}`. A token is expired from its `expires_at` on.

      iex> old = Overworld.Auth.Token.key(:binary.copy("o", 32))
      iex> new = Overworld.Auth.Token.key(:binary.copy("n", 32))
      iex> token = Overworld.Auth.Token.sign(old, :refresh, "user-1", 3600, 0)
      iex> {:ok, %{user_id: "user-1"}} = Overworld.Auth.Token.verify([new, old], token, :refresh, 10)
      iex> Overworld.Auth.Token.verify(new, token, :refresh, 10)
      {:error, :unknown_key}
      iex> Overworld.Auth.Token.verify([new, old], token, :session, 10)
      {:error, :wrong_type}
      iex> Overworld.Auth.Token.verify(old, "not a token", :refresh, 10)
      {:error, :malformed}
  """
  @spec verify(Key.t() | [Key.t()], term, type, integer) :: {:ok, claims} | {:error, error}
  def verify(keys, token, type, now \\ System.system_time(:second))

  def verify(%Key{} = key, token, type, now), do: verify([key], token, type, now)

  def verify(keys, token, type, now)
      when is_list(keys) and type in [:session, :refresh, :operator] and is_integer(now) do
    with {:ok, payload, mac} <- decode(token),
         {:ok, token_type, kid, expires_at, gen, sid, user_id} <- parse(payload),
         {:ok, candidates} <- keys_for(keys, kid),
         :ok <- check_mac(candidates, payload, mac),
         :ok <- check_type(token_type, type),
         :ok <- check_expiry(expires_at, now) do
      {:ok,
       %{user_id: user_id, expires_at: expires_at, type: token_type, generation: gen, sid: sid}}
    end
  end

  defp decode(token) when is_binary(token) and byte_size(token) <= @max_token_size do
    with [payload64, mac64] <- :binary.split(token, "."),
         {:ok, payload} <- decode_part(payload64),
         {:ok, mac} when byte_size(mac) == @mac_size <- decode_part(mac64) do
      {:ok, payload, mac}
    else
      _ -> {:error, :malformed}
    end
  end

  defp decode(_token), do: {:error, :malformed}

  # Only the canonical encoding is accepted: no padding, no stray bits, so each token has one
  # spelling.
  defp decode_part(part) do
    case Base.url_decode64(part, padding: false) do
      {:ok, bytes} -> if encode(bytes) == part, do: {:ok, bytes}, else: :error
      :error -> :error
    end
  end

  defp parse(
         <<@version, type, kid::32, expires_at::64, gen::32, sid::binary-size(@sid_size), size,
           user_id::binary-size(size)>>
       )
       when type in [1, 2, 3],
       do: {:ok, type_atom(type), kid, expires_at, gen, sid, user_id}

  # Version 1, before generations and sids.
  defp parse(<<1, type, kid::32, expires_at::64, size, user_id::binary-size(size)>>)
       when type in [1, 2],
       do: {:ok, type_atom(type), kid, expires_at, 0, nil, user_id}

  defp parse(_payload), do: {:error, :malformed}

  defp keys_for(keys, kid) do
    case for(%Key{kid: ^kid} = key <- keys, do: key) do
      [] -> {:error, :unknown_key}
      candidates -> {:ok, candidates}
    end
  end

  defp check_mac(candidates, payload, mac) do
    if Enum.any?(
         candidates,
         &:crypto.hash_equals(:crypto.mac(:hmac, :sha256, &1.secret, payload), mac)
       ),
       do: :ok,
       else: {:error, :bad_signature}
  end

  defp check_type(type, type), do: :ok
  defp check_type(_token_type, _type), do: {:error, :wrong_type}

  defp check_expiry(expires_at, now) when now < expires_at, do: :ok
  defp check_expiry(_expires_at, _now), do: {:error, :expired}

  defp encode(bytes), do: Base.url_encode64(bytes, padding: false)

  defp type_byte(:session), do: 1
  defp type_byte(:refresh), do: 2
  defp type_byte(:operator), do: 3

  defp type_atom(1), do: :session
  defp type_atom(2), do: :refresh
  defp type_atom(3), do: :operator
end

defmodule Overworld.Auth.TokenTest do
  use ExUnit.Case, async: true
  doctest Overworld.Auth.Token

  import Bitwise

  alias Overworld.Auth.Token
  alias Overworld.Auth.Token.Key
  alias Overworld.Test.Prop

  @now 1_700_000_000

  setup do
    %{key: Token.key(:crypto.strong_rand_bytes(32))}
  end

  defp tamper_byte(binary, index) do
    <<before::binary-size(index), byte, rest::binary>> = binary
    <<before::binary, bxor(byte, 1), rest::binary>>
  end

  defp parts(token) do
    [payload, mac] = String.split(token, ".")
    {Base.url_decode64!(payload, padding: false), Base.url_decode64!(mac, padding: false)}
  end

  defp join(payload, mac),
    do:
      Base.url_encode64(payload, padding: false) <> "." <> Base.url_encode64(mac, padding: false)

  describe "key/1" do
    test "derives the kid from the secret" do
      secret = :crypto.strong_rand_bytes(32)
      <<kid::32, _::binary>> = :crypto.hash(:sha256, secret)
      assert %Key{kid: ^kid, secret: ^secret} = Token.key(secret)
    end

    test "refuses short secrets" do
      assert_raise ArgumentError, fn -> Token.key(:crypto.strong_rand_bytes(31)) end
      assert_raise ArgumentError, fn -> Token.key(:not_a_secret) end
    end

    test "does not show the secret when inspected" do
      secret = :binary.copy("s", 32)
      refute inspect(Token.key(secret)) =~ secret
    end
  end

  describe "sign/5 and verify/4" do
    test "round trip", %{key: key} do
      token = Token.sign(key, :session, "user-42", 300, @now)
      assert is_binary(token)
      refute token =~ "="

      assert {:ok, %{user_id: "user-42", expires_at: expires, type: :session} = claims} =
               Token.verify(key, token, :session, @now)

      assert expires == @now + 300
      # A user id alone: generation 0 and a new login id.
      assert %{generation: 0, sid: <<_::binary-size(8)>>} = claims

      refresh = Token.sign(key, :refresh, "user-42", 86_400, @now)
      assert {:ok, %{type: :refresh}} = Token.verify([key], refresh, :refresh, @now + 86_399)
    end

    test "the payload has the documented layout", %{key: key} do
      {payload, mac} = parts(Token.sign(key, :refresh, "abc", 10, @now))
      kid = key.kid
      expires_at = @now + 10
      assert <<2, 2, ^kid::32, ^expires_at::64, 0::32, _sid::binary-size(8), 3, "abc">> = payload

      assert mac == :crypto.mac(:hmac, :sha256, key.secret, payload)

      subject = %{user_id: "abc", generation: 7, sid: "ABCDEFGH"}
      {payload, _mac} = parts(Token.sign(key, :session, subject, 10, @now))
      assert <<2, 1, ^kid::32, ^expires_at::64, 7::32, "ABCDEFGH", 3, "abc">> = payload
    end

    test "tokens of version 1 still verify, as generation 0 without a sid", %{key: key} do
      payload = <<1, 1, key.kid::32, @now + 60::64, 3, "abc">>
      token = join(payload, :crypto.mac(:hmac, :sha256, key.secret, payload))

      assert Token.verify(key, token, :session, @now) ==
               {:ok,
                %{user_id: "abc", expires_at: @now + 60, type: :session, generation: 0, sid: nil}}
    end

    test "user ids of 0 to 255 bytes, any bytes", %{key: key} do
      for user_id <- ["", <<0, 255, ?.>>, :binary.copy("u", 255)] do
        token = Token.sign(key, :session, user_id, 1, @now)
        assert {:ok, %{user_id: ^user_id}} = Token.verify(key, token, :session, @now)
      end

      assert_raise FunctionClauseError, fn ->
        Token.sign(key, :session, :binary.copy("u", 256), 1, @now)
      end
    end

    test "sign refuses bad arguments", %{key: key} do
      assert_raise FunctionClauseError, fn -> Token.sign(key, :other, "u", 1, @now) end
      assert_raise FunctionClauseError, fn -> Token.sign(key, :session, "u", 0, @now) end
      assert_raise FunctionClauseError, fn -> Token.sign(key, :session, :u, 1, @now) end
    end

    test "uses the current time by default", %{key: key} do
      token = Token.sign(key, :session, "u", 60)
      assert {:ok, %{expires_at: expires_at}} = Token.verify(key, token, :session)
      assert_in_delta expires_at, System.system_time(:second) + 60, 5
    end

    test "expired from expires_at on", %{key: key} do
      token = Token.sign(key, :session, "u", 60, @now)
      assert {:ok, _} = Token.verify(key, token, :session, @now + 59)
      assert Token.verify(key, token, :session, @now + 60) == {:error, :expired}
      assert Token.verify(key, token, :session, @now + 10_000) == {:error, :expired}
    end

    test "a session token is not a refresh token, and the reverse", %{key: key} do
      session = Token.sign(key, :session, "u", 60, @now)
      refresh = Token.sign(key, :refresh, "u", 60, @now)
      assert Token.verify(key, session, :refresh, @now) == {:error, :wrong_type}
      assert Token.verify(key, refresh, :session, @now) == {:error, :wrong_type}
      # The type is checked before the expiry.
      assert Token.verify(key, session, :refresh, @now + 60) == {:error, :wrong_type}
    end
  end

  describe "tampering" do
    test "every flipped payload bit after the kid breaks the signature", %{key: key} do
      {payload, mac} = parts(Token.sign(key, :session, "user-42", 60, @now))

      for index <- 6..(byte_size(payload) - 1) do
        tampered = join(tamper_byte(payload, index), mac)

        assert Token.verify(key, tampered, :session, @now) in [
                 {:error, :bad_signature},
                 {:error, :malformed}
               ]
      end

      # The expiry pushed into the future.
      <<head::binary-size(6), expires_at::64, tail::binary>> = payload
      later = join(<<head::binary, expires_at + 3600::64, tail::binary>>, mac)
      assert Token.verify(key, later, :session, @now) == {:error, :bad_signature}

      # Another user id of the same size.
      other = join(:binary.replace(payload, "user-42", "user-43"), mac)
      assert Token.verify(key, other, :session, @now) == {:error, :bad_signature}
    end

    test "a changed type byte", %{key: key} do
      {payload, mac} = parts(Token.sign(key, :session, "u", 60, @now))
      <<2, 1, rest::binary>> = payload

      assert Token.verify(key, join(<<2, 2, rest::binary>>, mac), :refresh, @now) ==
               {:error, :bad_signature}

      # (3 is an operator's token: the signature no longer matches.)
      assert Token.verify(key, join(<<2, 3, rest::binary>>, mac), :operator, @now) ==
               {:error, :bad_signature}

      assert Token.verify(key, join(<<2, 4, rest::binary>>, mac), :session, @now) ==
               {:error, :malformed}

      assert Token.verify(key, join(<<3, 1, rest::binary>>, mac), :session, @now) ==
               {:error, :malformed}
    end

    test "an operator's token is refused where a player's is expected, and the reverse",
         %{key: key} do
      subject = %{user_id: "alice", generation: 7, sid: "8 bytes!"}
      operator = Token.sign(key, :operator, subject, 60, @now)

      assert {:ok, %{user_id: "alice", type: :operator, generation: 7}} =
               Token.verify(key, operator, :operator, @now)

      assert Token.verify(key, operator, :session, @now) == {:error, :wrong_type}
      assert Token.verify(key, operator, :refresh, @now) == {:error, :wrong_type}
      session = Token.sign(key, :session, subject, 60, @now)
      assert Token.verify(key, session, :operator, @now) == {:error, :wrong_type}
    end

    test "a changed kid is an unknown key", %{key: key} do
      {<<2, 1, kid::32, rest::binary>>, mac} = parts(Token.sign(key, :session, "u", 60, @now))
      tampered = join(<<2, 1, bxor(kid, 1)::32, rest::binary>>, mac)
      assert Token.verify(key, tampered, :session, @now) == {:error, :unknown_key}
    end

    test "a tampered MAC", %{key: key} do
      {payload, mac} = parts(Token.sign(key, :session, "u", 60, @now))

      for index <- [0, 15, 31] do
        assert Token.verify(key, join(payload, tamper_byte(mac, index)), :session, @now) ==
                 {:error, :bad_signature}
      end

      assert Token.verify(key, join(payload, :binary.copy(<<0>>, 32)), :session, @now) ==
               {:error, :bad_signature}
    end

    test "a tampered character of the text", %{key: key} do
      token = Token.sign(key, :session, "user-42", 60, @now)

      for index <- 0..(byte_size(token) - 1), :binary.at(token, index) != ?. do
        tampered = tamper_byte(token, index)

        assert {:error, reason} = Token.verify(key, tampered, :session, @now)
        assert reason in [:malformed, :unknown_key, :bad_signature]
      end
    end

    test "truncated tokens", %{key: key} do
      token = Token.sign(key, :session, "user-42", 60, @now)

      for size <- 0..(byte_size(token) - 1) do
        assert Token.verify(key, binary_part(token, 0, size), :session, @now) ==
                 {:error, :malformed}
      end

      {payload, mac} = parts(token)
      short_mac = join(payload, binary_part(mac, 0, 31))
      assert Token.verify(key, short_mac, :session, @now) == {:error, :malformed}
      short_payload = join(binary_part(payload, 0, byte_size(payload) - 1), mac)
      assert Token.verify(key, short_payload, :session, @now) == {:error, :malformed}
      long_payload = join(payload <> "x", mac)
      assert Token.verify(key, long_payload, :session, @now) == {:error, :malformed}
    end

    test "extra dots, padding and other spellings", %{key: key} do
      token = Token.sign(key, :session, "user-42", 60, @now)
      [payload64, mac64] = String.split(token, ".")

      for bad <- [
            token <> ".",
            "." <> token,
            token <> "." <> mac64,
            payload64 <> ".." <> mac64,
            payload64 <> mac64,
            payload64 <> "==." <> mac64,
            token <> "=",
            " " <> token,
            token <> "\n",
            String.replace(token, "-", "+"),
            String.replace(token, "_", "/")
          ],
          bad != token do
        assert Token.verify(key, bad, :session, @now) == {:error, :malformed}, inspect(bad)
      end
    end

    test "garbage and non-binaries never raise", %{key: key} do
      for bad <- [
            "",
            ".",
            "..",
            "a.b",
            "garbage",
            <<0, 255, 1>>,
            :binary.copy("A", 5000) <> "." <> :binary.copy("A", 43),
            :binary.copy("A", 1025),
            nil,
            :session,
            42,
            'abc.def',
            {:token},
            %{},
            [Token.sign(key, :session, "u", 60, @now)],
            self()
          ] do
        assert Token.verify(key, bad, :session, @now) == {:error, :malformed}
      end
    end

    test "tokens longer than 1024 bytes are malformed even when signed", %{key: key} do
      # A 255-byte user id makes a 372-byte token: a valid token fits well under the limit.
      token = Token.sign(key, :session, :binary.copy("u", 255), 60, @now)
      assert byte_size(token) < 1024
      assert {:ok, _} = Token.verify(key, token, :session, @now)

      assert Token.verify(key, token <> :binary.copy("A", 1024), :session, @now) ==
               {:error, :malformed}
    end
  end

  describe "keys" do
    test "a token of another secret has an unknown key", %{key: key} do
      other = Token.key(:crypto.strong_rand_bytes(32))
      token = Token.sign(other, :session, "u", 60, @now)
      assert Token.verify(key, token, :session, @now) == {:error, :unknown_key}
      assert Token.verify([], token, :session, @now) == {:error, :unknown_key}
    end

    test "the same kid with another secret is a bad signature", %{key: key} do
      impostor = %Key{kid: key.kid, secret: :crypto.strong_rand_bytes(32)}
      token = Token.sign(impostor, :session, "u", 60, @now)
      assert Token.verify(key, token, :session, @now) == {:error, :bad_signature}
      # The signature is checked before the type and the expiry.
      assert Token.verify(key, token, :refresh, @now + 3600) == {:error, :bad_signature}
      # Keys sharing a kid are all tried.
      assert {:ok, _} = Token.verify([key, impostor], token, :session, @now)
    end

    test "rotation: verifying with [new, old] accepts tokens of both", %{key: old} do
      new = Token.key(:crypto.strong_rand_bytes(32))
      old_token = Token.sign(old, :refresh, "u", 60, @now)
      new_token = Token.sign(new, :refresh, "u", 60, @now)

      assert {:ok, %{user_id: "u"}} = Token.verify([new, old], old_token, :refresh, @now)
      assert {:ok, %{user_id: "u"}} = Token.verify([new, old], new_token, :refresh, @now)
      assert Token.verify(new, old_token, :refresh, @now) == {:error, :unknown_key}
    end
  end

  describe "load_or_create_secret/1" do
    @describetag :tmp_dir

    test "creates a private secret once, then reads it", %{tmp_dir: tmp_dir} do
      dir = Path.join(tmp_dir, "data/nested")
      path = Path.join(dir, "secret")

      assert {:ok, secret} = Token.load_or_create_secret(dir)
      assert byte_size(secret) == 32
      assert File.read!(path) == secret
      assert (File.stat!(path).mode &&& 0o777) == 0o600
      # Nothing is left behind but the secret.
      assert File.ls!(dir) == ["secret"]

      assert Token.load_or_create_secret(dir) == {:ok, secret}
      assert %Key{} = Token.key(secret)
    end

    test "servers booting at once on a fresh directory all get the one secret on disc",
         %{tmp_dir: tmp_dir} do
      for round <- 1..5 do
        dir = Path.join(tmp_dir, "race-#{round}")

        secrets =
          1..8
          |> Enum.map(fn _ -> Task.async(fn -> Token.load_or_create_secret(dir) end) end)
          |> Enum.map(&Task.await/1)

        assert [{:ok, secret}] = Enum.uniq(secrets)
        assert File.read!(Path.join(dir, "secret")) == secret
        assert File.ls!(dir) == ["secret"]
      end
    end

    test "two data directories have different secrets", %{tmp_dir: tmp_dir} do
      assert {:ok, a} = Token.load_or_create_secret(Path.join(tmp_dir, "a"))
      assert {:ok, b} = Token.load_or_create_secret(Path.join(tmp_dir, "b"))
      assert a != b
    end

    test "refuses a secret file others may read", %{tmp_dir: tmp_dir} do
      path = Path.join(tmp_dir, "secret")
      assert {:ok, _} = Token.load_or_create_secret(tmp_dir)

      for mode <- [0o644, 0o640, 0o604, 0o601, 0o610] do
        File.chmod!(path, mode)

        assert Token.load_or_create_secret(tmp_dir) ==
                 {:error, {:insecure_secret_file, path, mode}}
      end

      File.chmod!(path, 0o400)
      assert {:ok, _} = Token.load_or_create_secret(tmp_dir)
    end

    test "refuses a short secret file", %{tmp_dir: tmp_dir} do
      path = Path.join(tmp_dir, "secret")
      File.write!(path, :binary.copy("s", 31))
      File.chmod!(path, 0o600)
      assert Token.load_or_create_secret(tmp_dir) == {:error, {:secret_too_short, path, 31}}
    end

    test "refuses a directory in place of the file", %{tmp_dir: tmp_dir} do
      path = Path.join(tmp_dir, "secret")
      File.mkdir_p!(path)
      assert {:error, {:secret_file, ^path, _}} = Token.load_or_create_secret(tmp_dir)
    end
  end

  describe "properties" do
    test "random binaries never verify and never raise", %{key: key} do
      Prop.check(
        :proper.forall(
          :proper_types.oneof([
            :proper_types.binary(),
            # Base64url text with a dot somewhere, closer to the real shape.
            :proper_types.bind(
              :proper_types.tuple([
                :proper_types.list(:proper_types.elements('.-_Az0=')),
                :proper_types.binary()
              ]),
              fn {chars, bytes} ->
                List.to_string(chars) <> Base.url_encode64(bytes, padding: false)
              end,
              false
            ),
            # Well-formed payloads of the right kid with random MACs.
            :proper_types.bind(
              :proper_types.tuple([
                :proper_types.integer(0, 1 <<< 40),
                :proper_types.binary(),
                :proper_types.binary(32)
              ]),
              fn {expires_at, user_id, mac} ->
                user_id = binary_part(user_id, 0, min(byte_size(user_id), 255))

                join(
                  <<1, 1, key.kid::32, expires_at::64, byte_size(user_id), user_id::binary>>,
                  mac
                )
              end,
              false
            )
          ]),
          fn token ->
            match?({:error, _}, Token.verify(key, token, :session, @now)) and
              match?({:error, _}, Token.verify([key], token, :refresh, @now))
          end
        ),
        500
      )
    end

    test "signed tokens verify with their claims (property)", %{key: key} do
      Prop.check(
        :proper.forall(
          :proper_types.tuple([
            :proper_types.binary(),
            :proper_types.elements([:session, :refresh]),
            :proper_types.integer(1, 1_000_000),
            :proper_types.integer(0, 1 <<< 40)
          ]),
          fn {user_id, type, ttl, now} ->
            user_id = binary_part(user_id, 0, min(byte_size(user_id), 255))
            token = Token.sign(key, type, user_id, ttl, now)

            match?(
              {:ok, %{user_id: ^user_id, expires_at: e, type: ^type, generation: 0}}
              when e == now + ttl,
              Token.verify(key, token, type, now + ttl - 1)
            ) and
              Token.verify(key, token, type, now + ttl) == {:error, :expired}
          end
        )
      )
    end
  end
end

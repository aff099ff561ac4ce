defmodule Overworld.WebTest do
  # The HTTP routes over real sockets: health, status, the status page, device authentication
  # and refresh, and the errors (each bad request with a witness player that must keep
  # receiving snapshots).
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Server}
  alias Overworld.Auth.Token

  @name Overworld.WebTest.Server

  setup do
    log_info()

    world =
      start_world(@name, {__MODULE__, :critters},
        critters: 300,
        session_ttl: 600,
        refresh_ttl: 86_400
      )

    {:ok, world: world}
  end

  defp get(w, path), do: Client.request(host(), w.port, "GET", path)
  defp post(w, path, body), do: Client.request(host(), w.port, "POST", path, body)
  defp decode(body), do: :jiffy.decode(body, [:return_maps])

  defp post_json(w, path, map) do
    {:ok, status, _headers, body} = post(w, path, :jiffy.encode(map))
    {status, decode(body)}
  end

  describe "CORS (game pages served from another origin)" do
    test "API answers allow any origin; preflights get 204 with the methods", %{world: w} do
      assert {:ok, 204, headers, ""} =
               Client.request(host(), w.port, "OPTIONS", "/api/v1/auth/device")

      assert headers["access-control-allow-origin"] == "*"
      assert headers["access-control-allow-methods"] == "POST, OPTIONS"
      assert headers["access-control-allow-headers"] =~ "content-type"

      assert {:ok, 200, headers, _} =
               post(w, "/api/v1/auth/device", :jiffy.encode(%{device_id: "cors-device-0001"}))

      assert headers["access-control-allow-origin"] == "*"
      assert {:ok, 400, headers, _} = post(w, "/api/v1/auth/device", "{")
      assert headers["access-control-allow-origin"] == "*"
      # The status page is not an API: no CORS header.
      assert {:ok, 200, headers, _} = get(w, "/")
      refute Map.has_key?(headers, "access-control-allow-origin")
      # OPTIONS on an unknown path is still a 404.
      assert {:ok, 404, _, _} = Client.request(host(), w.port, "OPTIONS", "/nope")
    end
  end

  describe "GET" do
    test "/healthz", %{world: w} do
      assert {:ok, 200, headers, body} = get(w, "/healthz")
      assert headers["content-type"] == "application/json"
      assert decode(body) == %{"status" => "ok"}
    end

    test "/api/v1/status: the zone, and sessions and players rising with a client",
         %{world: w} do
      assert {:ok, 200, _, body} = get(w, "/api/v1/status")
      s = decode(body)
      assert [%{"name" => "critters", "entities" => 300} = z] = s["zones"]
      assert is_integer(z["tick"])

      for k <- ~w(uptime_ms sessions connections bytes_out frames_out inputs inputs_dropped
                  frames_skipped closed_slow refused memory_bytes),
          do: assert(is_integer(s[k]), "#{k} missing")

      p = w |> join() |> snapshots(3)
      assert {:ok, 200, _, body} = get(w, "/api/v1/status")
      s2 = decode(body)
      assert s2["sessions"] == s["sessions"] + 1
      assert [%{"players" => players, "entities" => 301}] = s2["zones"]
      assert players == hd(s["zones"])["players"] + 1
      assert [%{"tick" => tick, "tick_p50_us" => p50, "tick_p99_us" => p99} = z2] = s2["zones"]
      assert tick > z["tick"]
      assert is_integer(p50) and is_integer(p99) and p99 >= p50
      # The percentiles say how many ticks they rest on (every tick the zone ran here).
      assert z2["tick_samples"] > z["tick_samples"] and z2["tick_samples"] <= tick
      assert z2["tick_max_us"] >= p99
      assert s2["frames_out"] > s["frames_out"]
      assert s2["bytes_out"] > s["bytes_out"]
      Client.close(p.conn)
    end

    test "/: the status page", %{world: w} do
      assert {:ok, 200, headers, body} = get(w, "/")
      assert headers["content-type"] =~ "text/html"
      assert body =~ "<html"
      assert body =~ "/api/v1/status"
    end
  end

  describe "POST /api/v1/auth/device" do
    test "creates the account the first time, finds it after", %{world: w} do
      id = device()
      assert {200, a} = post_json(w, "/api/v1/auth/device", %{device_id: id})
      assert a["created"] == true
      assert a["user_id"] =~ ~r/\A[0-9a-f]{32}\z/
      assert a["expires_in"] == 600
      assert a["refresh_expires_in"] == 86_400

      keys = Server.config(@name).keys
      assert {:ok, %{user_id: user}} = Token.verify(keys, a["token"], :session)
      assert user == a["user_id"]
      assert {:ok, %{user_id: ^user}} = Token.verify(keys, a["refresh_token"], :refresh)

      assert {200, b} = post_json(w, "/api/v1/auth/device", %{device_id: id})
      assert b["created"] == false
      assert b["user_id"] == a["user_id"]
    end
  end

  describe "POST /api/v1/auth/refresh" do
    test "a refresh token gets new tokens of the same user", %{world: w} do
      a = auth(w)
      [key | _] = Server.config(@name).keys
      # A refresh token made a while ago: the new ones are different.
      old = Token.sign(key, :refresh, a["user_id"], 86_400, System.system_time(:second) - 100)

      assert {200, r} = post_json(w, "/api/v1/auth/refresh", %{refresh_token: old})
      assert r["user_id"] == a["user_id"]
      refute Map.has_key?(r, "created")
      assert r["refresh_token"] != old
      assert {:ok, %{user_id: user}} = Token.verify(key, r["token"], :session)
      assert user == a["user_id"]

      # The new session token opens a session.
      p = join(w, auth: %{"token" => r["token"], "user_id" => user})
      assert p.entity > 0
      Client.close(p.conn)
    end
  end

  describe "errors (the witness keeps its snapshots)" do
    setup %{world: w}, do: {:ok, witness: join(w)}

    test "a session token given as refresh token: 401 wrong_type", %{world: w, witness: wit} do
      a = auth(w)

      log =
        capture_log(fn ->
          assert {401, %{"error" => "invalid_token", "message" => "wrong_type"}} =
                   post_json(w, "/api/v1/auth/refresh", %{refresh_token: a["token"]})
        end)

      assert log =~ "refused refresh token: wrong_type"
      alive!(wit, w)
    end

    test "refresh tokens expired, tampered, from another secret, of no user: 401",
         %{world: w, witness: wit} do
      a = auth(w)
      [key | _] = Server.config(@name).keys
      now = System.system_time(:second)
      other = Token.key(:crypto.strong_rand_bytes(32))

      capture_log(fn ->
        for {token, why} <- [
              {Token.sign(key, :refresh, a["user_id"], 10, now - 100), "expired"},
              {String.replace_suffix(a["refresh_token"], String.last(a["refresh_token"]), "A") <>
                 "A", "malformed"},
              {Token.sign(other, :refresh, a["user_id"], 100), "unknown_key"},
              {"garbage", "malformed"},
              {Token.sign(key, :refresh, "no-such-user", 100), "unknown user"}
            ] do
          assert {401, %{"error" => "invalid_token", "message" => ^why}} =
                   post_json(w, "/api/v1/auth/refresh", %{refresh_token: token})
        end

        # Same length, one character changed: the signature does not match.
        [payload, mac] = String.split(a["refresh_token"], ".")
        <<c, rest::binary>> = mac
        tampered = payload <> "." <> <<if(c == ?A, do: ?B, else: ?A), rest::binary>>

        assert {401, %{"message" => "bad_signature"}} =
                 post_json(w, "/api/v1/auth/refresh", %{refresh_token: tampered})
      end)

      alive!(wit, w)
    end

    test "bad bodies: 400 bad_json, invalid_body, invalid_device_id", %{world: w, witness: wit} do
      assert {:ok, 400, _, body} = post(w, "/api/v1/auth/device", "{not json")
      assert %{"error" => "bad_json"} = decode(body)
      assert {:ok, 400, _, body} = post(w, "/api/v1/auth/device", "")
      assert %{"error" => "bad_json"} = decode(body)
      assert {400, %{"error" => "invalid_body"}} = post_json(w, "/api/v1/auth/device", [1, 2])
      assert {400, %{"error" => "invalid_body"}} = post_json(w, "/api/v1/auth/device", %{})

      assert {400, %{"error" => "invalid_body"}} =
               post_json(w, "/api/v1/auth/device", %{device_id: 12_345_678_901})

      for bad <- ["short", String.duplicate("a", 129), "has spaces in it", "tab\there-1234"],
          do:
            assert(
              {400, %{"error" => "invalid_device_id"}} =
                post_json(w, "/api/v1/auth/device", %{device_id: bad})
            )

      assert {:ok, 400, _, body} =
               post(w, "/api/v1/auth/device", <<"{\"device_id\": \"", 0xFF, "\"}">>)

      assert %{"error" => "bad_json"} = decode(body)
      assert {400, %{"error" => "invalid_body"}} = post_json(w, "/api/v1/auth/refresh", %{})
      alive!(wit, w)
    end

    test "404 for unknown paths, 405 with Allow for another method", %{world: w, witness: wit} do
      assert {:ok, 404, _, body} = get(w, "/nope")
      assert %{"error" => "not_found"} = decode(body)
      assert {:ok, 404, _, body} = get(w, "/%FF%00")
      assert %{"error" => "not_found"} = decode(body)

      assert {:ok, 405, headers, body} = get(w, "/api/v1/auth/device")
      assert headers["allow"] == "POST"
      assert %{"error" => "method_not_allowed"} = decode(body)

      assert {:ok, 405, headers, _} = post(w, "/healthz", "")
      assert headers["allow"] == "GET"
      assert {:ok, 405, _, _} = Client.request(host(), w.port, "DELETE", "/")
      alive!(wit, w)
    end

    test "raw bytes in the path and method do not break the answer", %{world: w, witness: wit} do
      reply = raw_http(w, <<"GET /", 0xFF, 0xFE, "?x HTTP/1.1\r\nconnection: close\r\n\r\n">>)
      assert status(reply) == 404
      assert %{"error" => "not_found"} = json_body(reply)

      reply =
        raw_http(
          w,
          "PATCH /" <> String.duplicate("é", 200) <> " HTTP/1.1\r\nconnection: close\r\n\r\n"
        )

      assert status(reply) == 404
      alive!(wit, w)
    end
  end
end

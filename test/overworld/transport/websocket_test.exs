defmodule Overworld.Transport.WebSocketTest do
  # The frame reader on its own (frames built by `Overworld.Client.frame/3`), then the upgrade
  # and every framing violation over real sockets, each with a witness player that must keep
  # receiving snapshots.
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase

  alias Overworld.Client
  alias Overworld.Transport.WebSocket, as: WS

  @name Overworld.Transport.WebSocketTest.Server

  defp f(op, payload, opts \\ []), do: Client.frame(op, payload, opts)

  describe "next/2" do
    test "a masked binary frame is one message; what follows is left in the buffer" do
      ws = WS.new(100)
      second = f(2, "two")
      assert {:message, :binary, "one", rest, ws} = WS.next(f(2, "one") <> second, ws)
      assert rest == second
      assert {:message, :binary, "two", "", _} = WS.next(rest, ws)
    end

    test "every proper prefix of a frame is :more" do
      ws = WS.new(1000)
      frame = f(2, :binary.copy("abc", 100))

      for n <- 0..(byte_size(frame) - 1),
          do: assert(WS.next(binary_part(frame, 0, n), ws) == :more)

      assert {:message, :binary, _, "", _} = WS.next(frame, ws)
    end

    test "a message split in fragments is put together" do
      bytes = f(2, "ab", fin: false) <> f(0, "cd", fin: false) <> f(0, "ef")
      assert {:message, :binary, "abcdef", "", ws} = WS.next(bytes, WS.new(100))
      # The state is clean for the next message.
      assert {:message, :binary, "x", "", _} = WS.next(f(2, "x"), ws)
    end

    test "fragments already received are kept when the rest trickles in" do
      first = f(2, "ab", fin: false)
      last = f(0, "cd")
      partial = binary_part(last, 0, 3)

      assert {:more, ^partial, ws} = WS.next(first <> partial, WS.new(100))
      assert ws.size == 2
      assert {:message, :binary, "abcd", "", _} = WS.next(partial <> binary_part(last, 3, 5), ws)

      # Byte by byte: the same message.
      bytes = f(2, "ab", fin: false) <> f(0, "cd", fin: false) <> f(0, "ef")

      {event, _, _} =
        bytes
        |> :binary.bin_to_list()
        |> Enum.reduce({nil, <<>>, WS.new(100)}, fn b, {_, buf, ws} ->
          case WS.next(buf <> <<b>>, ws) do
            :more -> {:more, buf <> <<b>>, ws}
            {:more, rest, ws} -> {:more, rest, ws}
            {:message, _, _, _, _} = m -> {m, <<>>, ws}
          end
        end)

      assert {:message, :binary, "abcdef", "", _} = event
    end

    test "a ping between fragments is answered on its own; the message goes on" do
      bytes = f(2, "ab", fin: false) <> f(9, "hi") <> f(0, "cd")
      assert {:ping, "hi", rest, ws} = WS.next(bytes, WS.new(100))
      assert {:message, :binary, "abcd", "", _} = WS.next(rest, ws)

      pong = f(2, "ab", fin: false) <> f(10, "") <> f(0, "cd")
      assert {:pong, rest, ws} = WS.next(pong, WS.new(100))
      assert {:message, :binary, "abcd", "", _} = WS.next(rest, ws)
    end

    test "control frames do not count towards the size of the message around them" do
      bytes = f(2, :binary.copy("a", 90), fin: false) <> f(9, :binary.copy("p", 100)) <> f(0, "b")
      assert {:ping, _, rest, ws} = WS.next(bytes, WS.new(100))
      assert {:message, :binary, m, "", _} = WS.next(rest, ws)
      assert byte_size(m) == 91
    end

    test "the size limit holds for a frame and for a message's fragments together" do
      assert {:message, :binary, _, _, _} = WS.next(f(2, :binary.copy("a", 100)), WS.new(100))
      assert {:error, 1009, _} = WS.next(f(2, :binary.copy("a", 101)), WS.new(100))
      # The header alone is enough to refuse.
      <<header::binary-size(8), _::binary>> = f(2, :binary.copy("a", 5000))
      assert {:error, 1009, _} = WS.next(header, WS.new(100))

      bytes = f(2, :binary.copy("a", 60), fin: false) <> f(0, :binary.copy("a", 41))
      assert {:error, 1009, _} = WS.next(bytes, WS.new(100))

      bytes = f(2, :binary.copy("a", 60), fin: false) <> f(0, :binary.copy("a", 40))
      assert {:message, :binary, _, "", _} = WS.next(bytes, WS.new(100))
    end

    test "text: UTF-8 is checked, across fragments too" do
      ws = WS.new(100)
      assert {:message, :text, "é", "", _} = WS.next(f(1, "é"), ws)

      assert {:message, :text, "é", "", _} =
               WS.next(f(1, <<0xC3>>, fin: false) <> f(0, <<0xA9>>), ws)

      assert {:error, 1007, _} = WS.next(f(1, <<0xC3>>), ws)
      assert {:error, 1007, _} = WS.next(f(1, <<0xFF, 0xFE>>), ws)
      assert {:error, 1007, _} = WS.next(f(1, <<0xC3>>, fin: false) <> f(0, ""), ws)
      # Binary messages are not text.
      assert {:message, :binary, <<0xFF>>, "", _} = WS.next(f(2, <<0xFF>>), ws)
    end

    test "close frames: code and reason, or none" do
      ws = WS.new(100)
      assert {:close, nil, ""} = WS.next(f(8, ""), ws)
      assert {:close, 1000, "bye"} = WS.next(f(8, <<1000::16, "bye">>), ws)
      assert {:close, 4321, ""} = WS.next(f(8, <<4321::16>>), ws)
      assert {:error, 1007, _} = WS.next(f(8, <<1000::16, 0xFF>>), ws)
      assert {:error, 1002, _} = WS.next(f(8, <<999::16>>), ws)
      assert {:error, 1002, _} = WS.next(f(8, <<1005::16>>), ws)
      assert {:error, 1002, _} = WS.next(f(8, <<3>>), ws)
    end

    test "protocol errors are 1002" do
      ws = WS.new(1000)
      assert {:error, 1002, "client frames must be masked"} = WS.next(f(2, "x", mask: false), ws)

      for rsv <- 1..7, do: assert({:error, 1002, _} = WS.next(f(2, "x", rsv: rsv), ws))

      for op <- [3, 4, 5, 6, 7, 11, 12, 13, 14, 15],
          do: assert({:error, 1002, _} = WS.next(f(op, "x"), ws))

      # Fragmented or oversized control frames.
      for op <- [8, 9, 10], do: assert({:error, 1002, _} = WS.next(f(op, "x", fin: false), ws))
      assert {:error, 1002, _} = WS.next(f(9, :binary.copy("p", 126)), ws)
      # Continuations outside a message, a new message inside one.
      assert {:error, 1002, _} = WS.next(f(0, "x"), ws)
      assert {:error, 1002, _} = WS.next(f(2, "a", fin: false) <> f(2, "b"), ws)
      assert {:error, 1002, _} = WS.next(f(2, "a", fin: false) <> f(1, "b"), ws)
    end

    test "server frames: lengths in 7, 16 and 64 bits, never masked, close reasons cut to fit" do
      for n <- [0, 125, 126, 65_535, 65_536] do
        bin = IO.iodata_to_binary(WS.binary(:binary.copy("z", n)))
        assert {:ok, {:binary, payload}, ""} = Client.parse(bin)
        assert byte_size(payload) == n
      end

      close = IO.iodata_to_binary(WS.close(4002, :binary.copy("r", 300)))
      assert {:ok, {:close, 4002, reason}, ""} = Client.parse(close)
      assert byte_size(reason) == 123
    end
  end

  describe "upgrade/1" do
    alias Overworld.Transport.HTTP.Request

    defp req(headers, opts \\ []) do
      base = %{
        "upgrade" => "websocket",
        "connection" => "keep-alive, Upgrade",
        "sec-websocket-version" => "13",
        "sec-websocket-key" => "dGhlIHNhbXBsZSBub25jZQ=="
      }

      %Request{
        method: Keyword.get(opts, :method, "GET"),
        path: "/ws",
        query: "",
        version: Keyword.get(opts, :version, {1, 1}),
        headers: Map.merge(base, headers) |> Map.reject(fn {_, v} -> v == nil end)
      }
    end

    test "the RFC 6455 example key" do
      assert WS.upgrade(req(%{})) == {:ok, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="}
      assert {:ok, _} = WS.upgrade(req(%{"upgrade" => "WebSocket", "connection" => "upgrade"}))
    end

    test "refusals" do
      assert {:error, 426, _, _} = WS.upgrade(req(%{"upgrade" => nil}))
      assert {:error, 400, _, _} = WS.upgrade(req(%{"connection" => "keep-alive"}))

      assert {:error, 426, [{"sec-websocket-version", "13"}], _} =
               WS.upgrade(req(%{"sec-websocket-version" => "8"}))

      assert {:error, 400, _, _} = WS.upgrade(req(%{"sec-websocket-key" => nil}))
      assert {:error, 400, _, _} = WS.upgrade(req(%{"sec-websocket-key" => "c2hvcnQ="}))
      assert {:error, 400, _, _} = WS.upgrade(req(%{"sec-websocket-key" => "not base64!!"}))
      assert {:error, 400, _, _} = WS.upgrade(req(%{}, version: {1, 0}))
      assert {:error, 405, [{"allow", "GET"}], _} = WS.upgrade(req(%{}, method: "POST"))
    end
  end

  describe "over a socket" do
    setup do
      log_info()
      world = start_world(@name, {__MODULE__, :critters}, critters: 300, max_message_size: 1024)
      {:ok, world: world, witness: join(world)}
    end

    defp upgrade_request(headers, method \\ "GET") do
      [
        method,
        " /ws HTTP/1.1\r\nhost: x\r\n",
        Enum.map(headers, fn {k, v} -> [k, ": ", v, "\r\n"] end),
        "\r\n"
      ]
    end

    @good [
      {"upgrade", "websocket"},
      {"connection", "Upgrade"},
      {"sec-websocket-version", "13"},
      {"sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="}
    ]

    test "bad upgrades: 400 without a key, 426 for another version, 405 for POST",
         %{world: w, witness: witness} do
      log =
        capture_log(fn ->
          r = raw_http(w, upgrade_request(List.keydelete(@good, "sec-websocket-key", 0)))
          assert status(r) == 400
          assert %{"error" => "bad_upgrade"} = json_body(r)

          r =
            raw_http(
              w,
              upgrade_request(
                List.keyreplace(
                  @good,
                  "sec-websocket-version",
                  0,
                  {"sec-websocket-version", "12"}
                )
              )
            )

          assert status(r) == 426
          assert r =~ "sec-websocket-version: 13"

          r = raw_http(w, upgrade_request(@good, "POST"))
          assert status(r) == 405
          assert r =~ "allow: GET"
          assert %{"error" => "method_not_allowed"} = json_body(r)

          r = raw_http(w, upgrade_request(List.keydelete(@good, "upgrade", 0)))
          assert status(r) == 426

          # A malformed escape is kept as it is: no such zone.
          r =
            raw_http(
              w,
              upgrade_request(@good)
              |> IO.iodata_to_binary()
              |> String.replace("/ws", "/ws?zone=%zz")
            )

          assert status(r) == 404
          assert %{"error" => "not_found"} = json_body(r)
        end)

      assert log =~ "upgrade refused with 400"
      assert log =~ "upgrade refused with 426"
      assert log =~ "upgrade refused with 405"
      alive!(witness, w)
    end

    test "the upgrade answers 101 with the accept key", %{world: w} do
      r = raw_http(w, upgrade_request(@good), 300)
      assert r =~ "HTTP/1.1 101 Switching Protocols\r\n"
      assert r =~ "sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"
    end

    # Sends `bytes` on a new player's connection (after HELLO): the close code it gets and the
    # log.
    defp violate(w, bytes, opts \\ []) do
      p = if opts[:hello] == false, do: %{conn: connect(w)}, else: join(w)

      with_log(fn ->
        :ok = Client.send_raw(p.conn, bytes)
        expect_close(p.conn)
      end)
    end

    for {what, frames, code} <- [
          {"an unmasked frame", quote(do: f(2, "x", mask: false)), 1002},
          {"reserved bits", quote(do: f(2, "x", rsv: 4)), 1002},
          {"an unknown opcode", quote(do: f(3, "x")), 1002},
          {"a fragmented ping", quote(do: f(9, "x", fin: false)), 1002},
          {"a ping over 125 bytes", quote(do: f(9, :binary.copy("p", 126))), 1002},
          {"a continuation without a start", quote(do: f(0, "x")), 1002},
          {"a message over max_message_size", quote(do: f(2, :binary.copy("a", 1025))), 1009},
          {"fragments over max_message_size",
           quote(do: f(2, :binary.copy("a", 600), fin: false) <> f(0, :binary.copy("a", 600))),
           1009},
          {"invalid UTF-8 in a text message", quote(do: f(1, <<0xC3, 0x28>>)), 1007},
          {"a valid text message", quote(do: f(1, "hello")), 1003},
          {"a close with invalid UTF-8", quote(do: f(8, <<1000::16, 0xFF>>)), 1007}
        ] do
      test "#{what}: close #{code}", %{world: w, witness: witness} do
        {{code, errors}, log} = violate(w, unquote(frames))
        assert code == unquote(code)
        assert errors == []
        assert log =~ "closing with #{unquote(code)}"
        alive!(witness, w)
      end
    end

    test "a violation before HELLO closes too", %{world: w, witness: witness} do
      {{1002, []}, log} = violate(w, f(2, "x", mask: false), hello: false)
      assert log =~ "client frames must be masked"
      alive!(witness, w)
    end

    test "a fragmented HELLO with a ping inside works; the ping gets its pong", %{world: w} do
      a = auth(w)
      conn = connect(w)

      hello =
        Overworld.Protocol.encode(%{
          type: :hello,
          version: Overworld.Protocol.version(),
          token: a["token"]
        })

      <<h1::binary-size(5), h2::binary-size(10), h3::binary>> = hello

      bytes = f(2, h1, fin: false) <> f(9, "are you there") <> f(0, h2, fin: false) <> f(0, h3)
      # Trickled in, a few bytes at a time.
      for <<chunk::binary-size(3) <- bytes>>, do: :ok = Client.send_raw(conn, chunk)

      rest =
        binary_part(bytes, byte_size(bytes) - rem(byte_size(bytes), 3), rem(byte_size(bytes), 3))

      :ok = Client.send_raw(conn, rest)

      assert {{:pong, "are you there"}, conn} = recv(conn)
      assert {%{type: :handshake, entity_id: id}, conn} = recv_msg(conn)
      assert id > 0
      Client.close(conn)
    end

    test "a client's close without a code, and 1001: answered, the player stays (grace)",
         %{world: w} do
      p = join(w)
      :ok = Client.send_raw(p.conn, f(8, ""))
      assert {1000, []} = expect_close(p.conn)
      Process.sleep(50)
      assert Map.has_key?(players(w), p.user)

      p = join(w)
      :ok = Client.send_raw(p.conn, f(8, <<1001::16, "going away">>))
      assert {1000, []} = expect_close(p.conn)
      Process.sleep(50)
      assert Map.has_key?(players(w), p.user)
    end
  end
end

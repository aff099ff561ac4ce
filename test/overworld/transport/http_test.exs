defmodule Overworld.Transport.HTTPTest do
  # The request reader on a real socket pair, then malformed requests against a running server
  # (each with a witness player that must keep receiving snapshots).
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  import Overworld.Test.ServerCase

  alias Overworld.Transport.HTTP
  alias Overworld.Transport.HTTP.Request

  @name Overworld.Transport.HTTPTest.Server

  describe "read/3 on a socket pair" do
    setup do
      {:ok, l} = :gen_tcp.listen(0, [:binary, active: false, ip: {127, 0, 0, 1}])
      {:ok, port} = :inet.port(l)
      {:ok, client} = :gen_tcp.connect(~c"127.0.0.1", port, [:binary, active: false])
      {:ok, server} = :gen_tcp.accept(l)
      :gen_tcp.close(l)

      on_exit(fn ->
        :gen_tcp.close(client)
        :gen_tcp.close(server)
      end)

      {:ok, client: client, server: server}
    end

    defp read(ctx, bytes, max_body \\ 100) do
      :ok = :gen_tcp.send(ctx.client, bytes)
      HTTP.read(ctx.server, 300, max_body)
    end

    test "a request: method, path and query, headers in lower case (repeated ones joined)",
         ctx do
      assert {:ok, %Request{} = r} =
               read(
                 ctx,
                 "GET /a/b?x=1&y=2 HTTP/1.1\r\nHost: h\r\nX-Thing: 1\r\nx-thing: 2\r\n\r\n"
               )

      assert r.method == "GET"
      assert r.path == "/a/b"
      assert r.query == "x=1&y=2"
      assert r.version == {1, 1}
      assert r.headers == %{"host" => "h", "x-thing" => "1, 2"}
      assert r.body == ""
    end

    test "a body by Content-Length; what follows is the next request", ctx do
      bytes =
        "POST /p HTTP/1.1\r\ncontent-length: 5\r\n\r\nhello" <>
          "\r\nDELETE /q HTTP/1.0\r\n\r\n"

      assert {:ok, %Request{method: "POST", path: "/p", body: "hello"}} = read(ctx, bytes)

      assert {:ok, %Request{method: "DELETE", path: "/q", version: {1, 0}}} =
               HTTP.read(ctx.server, 300, 100)
    end

    test "any method name is kept as a string", ctx do
      assert {:ok, %Request{method: "BREW"}} = read(ctx, "BREW /pot HTTP/1.1\r\n\r\n")
    end

    test "garbage and malformed lines: 400", ctx do
      assert {:error, 400, "malformed request line"} = read(ctx, "\x00\x01garbage\r\n\r\n")
    end

    test "a malformed header: 400", ctx do
      assert {:error, 400, "malformed header"} = read(ctx, "GET / HTTP/1.1\r\nnocolon\r\n\r\n")
    end

    test "an absolute or * target: 400", ctx do
      assert {:error, 400, "unsupported request target"} =
               read(ctx, "GET http://example.com/ HTTP/1.1\r\n\r\n")
    end

    test "HTTP/2.0: 505", ctx do
      assert {:error, 505, _} = read(ctx, "GET / HTTP/2.0\r\n\r\n")
    end

    test "64 headers are fine, 65 are too many: 431", ctx do
      h64 = String.duplicate("x: y\r\n", 64)
      assert {:ok, _} = read(ctx, "GET / HTTP/1.1\r\n" <> h64 <> "\r\n")

      assert {:error, 431, "too many headers"} =
               read(ctx, "GET / HTTP/1.1\r\n" <> h64 <> "z: 1\r\n\r\n")
    end

    test "a header line over 8 KiB: 431", ctx do
      long = "GET / HTTP/1.1\r\nx: " <> String.duplicate("a", 9_000) <> "\r\n\r\n"
      assert {:error, 431, _} = read(ctx, long)
    end

    test "bodies: too large 413, chunked 411, bad lengths 400", ctx do
      assert {:error, 413, _} = read(ctx, "POST / HTTP/1.1\r\ncontent-length: 101\r\n\r\n")
    end

    test "chunked: 411", ctx do
      assert {:error, 411, _} = read(ctx, "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n")
    end

    test "a negative Content-Length: 400", ctx do
      assert {:error, 400, "invalid Content-Length"} =
               read(ctx, "POST / HTTP/1.1\r\ncontent-length: -1\r\n\r\n")
    end

    test "a request line not finished in time: 408", ctx do
      assert {:error, 408, _} = read(ctx, "GET / HTT")
    end

    test "a body not finished in time: 408", ctx do
      assert {:error, 408, _} = read(ctx, "POST / HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc")
    end

    test "a line over 8 KiB leaves the socket open for the answer", ctx do
      assert {:error, 431, _} =
               read(ctx, "GET /" <> String.duplicate("a", 9_000) <> " HTTP/1.1\r\n")

      assert :ok = :gen_tcp.send(ctx.server, "answer")
      assert {:ok, "answer"} = :gen_tcp.recv(ctx.client, 0, 1_000)
    end

    test "the peer leaves: :closed", ctx do
      :gen_tcp.close(ctx.client)
      assert {:error, :closed} = HTTP.read(ctx.server, 300, 100)
    end
  end

  describe "keep_alive?/1 and response/4" do
    test "HTTP/1.1 keeps the connection unless told otherwise; 1.0 only when asked" do
      r = %Request{version: {1, 1}, headers: %{}}
      assert HTTP.keep_alive?(r)
      refute HTTP.keep_alive?(%{r | headers: %{"connection" => "Close"}})
      refute HTTP.keep_alive?(%{r | version: {1, 0}})
      assert HTTP.keep_alive?(%{r | version: {1, 0}, headers: %{"connection" => "keep-alive"}})
    end

    test "a response: status line, length, headers, body" do
      bin = IO.iodata_to_binary(HTTP.response(404, [{"x-a", "b"}], ["no", "pe"], false))

      assert bin ==
               "HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\nconnection: close\r\n" <>
                 "x-a: b\r\n\r\nnope"

      assert IO.iodata_to_binary(HTTP.response(200, [], "", true)) ==
               "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
    end
  end

  describe "a server" do
    setup do
      log_info()
      world = start_world(@name, {__MODULE__, :critters}, critters: 300, request_timeout: 300)
      {:ok, world: world, witness: join(world)}
    end

    for {what, bytes, status, line} <- [
          {"a garbage request line", "\x00\x01\x02garbage\r\n\r\n", 400,
           "http: 400 malformed request line"},
          {"too many headers", "GET / HTTP/1.1\r\n" <> String.duplicate("x: y\r\n", 80) <> "\r\n",
           431, "http: 431 too many headers"},
          {"a header over 8 KiB",
           "GET / HTTP/1.1\r\nx: " <> String.duplicate("a", 10_000) <> "\r\n\r\n", 431,
           "http: 431 request line or header too long"},
          {"a request line over 8 KiB",
           "GET /" <> String.duplicate("a", 10_000) <> " HTTP/1.1\r\n\r\n", 431,
           "http: 431 request line or header too long"},
          {"HTTP/2.0", "GET / HTTP/2.0\r\n\r\n", 505, "http: 505"},
          {"a body over 64 KiB",
           "POST /api/v1/auth/device HTTP/1.1\r\ncontent-length: 70000\r\n\r\n", 413,
           "http: 413"},
          {"a chunked body",
           "POST /api/v1/auth/device HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n", 411,
           "http: 411"}
        ] do
      test "#{what}: #{status}, logged, the connection closed", %{world: w, witness: witness} do
        {reply, log} = with_log(fn -> raw_http(w, unquote(bytes)) end)
        assert status(reply) == unquote(status)
        assert reply =~ "connection: close\r\n"
        assert %{"error" => "bad_request", "message" => _} = json_body(reply)
        assert log =~ unquote(line)
        alive!(witness, w)
      end
    end

    test "a request that never ends: closed after request_timeout, quietly",
         %{world: w, witness: witness} do
      t0 = System.monotonic_time(:millisecond)
      assert raw_http(w, "GET /healthz HTTP/1.1\r\nhost: x\r\n") == ""
      assert System.monotonic_time(:millisecond) - t0 >= 250
      alive!(witness, w)
    end

    test "a trickling request is cut off at request_timeout", %{world: w, witness: witness} do
      {:ok, sock} = :gen_tcp.connect(~c"127.0.0.1", w.port, [:binary, active: false])
      t0 = System.monotonic_time(:millisecond)

      result =
        Enum.reduce_while(1..40, :open, fn _, _ ->
          Process.sleep(25)

          case :gen_tcp.send(sock, "x") do
            :ok ->
              case :gen_tcp.recv(sock, 0, 0) do
                {:error, :timeout} -> {:cont, :open}
                other -> {:halt, other}
              end

            error ->
              {:halt, error}
          end
        end)

      assert result != :open
      assert System.monotonic_time(:millisecond) - t0 < 800
      :gen_tcp.close(sock)
      alive!(witness, w)
    end

    test "keep-alive: several requests on one connection, pipelined too", %{world: w} do
      {:ok, sock} = :gen_tcp.connect(~c"127.0.0.1", w.port, [:binary, active: false])
      req = "GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n"
      :ok = :gen_tcp.send(sock, req)
      assert {:ok, first} = :gen_tcp.recv(sock, 0, 1_000)
      assert status(first) == 200
      refute first =~ "connection: close"

      :ok = :gen_tcp.send(sock, [req, req, "GET /healthz HTTP/1.1\r\nconnection: close\r\n\r\n"])
      replies = read_until_closed(sock, <<>>)
      assert length(String.split(replies, "HTTP/1.1 200 OK")) == 4
      assert replies =~ "connection: close\r\n"
    end

    test "HTTP/1.0 closes after the response", %{world: w} do
      reply = raw_http(w, "GET /healthz HTTP/1.0\r\n\r\n")
      assert status(reply) == 200
      assert reply =~ "connection: close\r\n"
      assert json_body(reply) == %{"status" => "ok"}
    end
  end

  defp read_until_closed(sock, acc) do
    case :gen_tcp.recv(sock, 0, 1_000) do
      {:ok, data} -> read_until_closed(sock, acc <> data)
      {:error, :closed} -> acc
    end
  end
end

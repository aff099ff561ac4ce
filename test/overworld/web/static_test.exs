defmodule Overworld.Web.StaticTest do
  # The console's files at /console over a real socket: the page, its scripts and style with
  # their content types, revalidation by ETag, and 404 for anything else under /console
  # (unknown names, traversal attempts, encoded or not).
  use ExUnit.Case, async: true
  import Overworld.Test.ServerCase

  alias Overworld.Client

  @name Overworld.Web.StaticTest.Server

  setup do
    {:ok, world: start_world(@name, {__MODULE__, :critters}, critters: 10)}
  end

  defp get(w, path, headers \\ []),
    do: Client.request(host(), w.port, "GET", path, "", headers: headers)

  defp priv(name), do: File.read!(Path.join(Overworld.Web.Static.dir(), name))

  test "GET /console and /console/ answer the page; it loads its script and style from /console",
       %{
         world: w
       } do
    for path <- ["/console", "/console/", "/console/index.html"] do
      assert {:ok, 200, headers, body} = get(w, path)
      assert headers["content-type"] == "text/html; charset=utf-8"
      assert body == priv("index.html")
      assert headers["content-security-policy"] =~ "script-src 'self'"

      # Its own server only, the WebSocket included (same-origin ws:/wss: is 'self'), not any host.
      assert headers["content-security-policy"] =~ "connect-src 'self';"
      refute headers["content-security-policy"] =~ "ws:"
      assert headers["x-content-type-options"] == "nosniff"
      assert body =~ ~s(src="/console/app.js")
      assert body =~ ~s(href="/console/app.css")
    end
  end

  test "the script and the style, with their content types and an ETag to revalidate", %{world: w} do
    assert {:ok, 200, headers, body} = get(w, "/console/app.js")
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    assert body == priv("app.js")
    assert headers["cache-control"] == "no-cache"
    assert <<?", _::binary>> = etag = headers["etag"]

    assert {:ok, 304, _, ""} = get(w, "/console/app.js", [{"if-none-match", etag}])
    assert {:ok, 304, _, ""} = get(w, "/console/app.js", [{"if-none-match", "\"x\", W/" <> etag}])
    assert {:ok, 200, _, _} = get(w, "/console/app.js", [{"if-none-match", "\"other\""}])

    assert {:ok, 200, headers, body} = get(w, "/console/worker.js")
    assert headers["content-type"] == "text/javascript; charset=utf-8"
    assert body == priv("worker.js")

    assert {:ok, 200, headers, body} = get(w, "/console/app.css")
    assert headers["content-type"] == "text/css; charset=utf-8"
    assert body == priv("app.css")
    refute headers["etag"] == etag
    # Not an API: no CORS header.
    refute Map.has_key?(headers, "access-control-allow-origin")
  end

  test "unknown files and traversal attempts answer 404", %{world: w} do
    for path <- [
          "/console/nope.js",
          "/console/app.js/",
          "/console/../mix.exs",
          "/console/..%2fmix.exs",
          "/console/%2e%2e/%2e%2e/mix.exs",
          "/console/static/../app.js",
          "/console//app.js",
          "/console/.",
          "/consolex",
          "/console/app.js%00"
        ] do
      assert {:ok, 404, headers, body} = get(w, path), path
      assert headers["content-type"] == "application/json"
      assert %{"error" => "not_found"} = :jiffy.decode(body, [:return_maps])
    end

    # The same with a raw request line (no client-side normalisation of the path).
    reply = raw_http(w, "GET /console/../../mix.exs HTTP/1.1\r\nconnection: close\r\n\r\n")
    assert status(reply) == 404
  end

  test "other methods answer 405 with Allow: GET", %{world: w} do
    assert {:ok, 405, headers, _} = Client.request(host(), w.port, "POST", "/console/app.js", "")
    assert headers["allow"] == "GET"
  end
end

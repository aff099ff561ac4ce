defmodule Overworld.Web.Static do
  @moduledoc false
  # The visualizer and operator console at `GET /console` (and `/console/...`): the files
  # clients/console builds into priv/static/console (committed, so a game depending on
  # Overworld gets them without building anything). Only the files the build makes are
  # served, by name: a path is looked up among them, never joined to a directory, so no
  # `..` or encoded separator reaches the file system. They are read once from the
  # application's priv directory, at the first request, and kept in :persistent_term (four
  # small binaries, written once per node); a rebuilt console is served after a restart.
  #
  # Every answer carries an ETag (a hash of the file) and `cache-control: no-cache`: the
  # browser asks again each time and gets a 304 while the file is unchanged (the names carry
  # no hash of their content, so nothing may be cached without asking).

  alias Overworld.Web

  @files %{
    "index.html" => "text/html; charset=utf-8",
    "app.js" => "text/javascript; charset=utf-8",
    "worker.js" => "text/javascript; charset=utf-8",
    "app.css" => "text/css; charset=utf-8"
  }

  # The page loads only its own scripts (and its decoding worker) and styles and talks only to
  # its own server (HTTP and the WebSocket): nothing from a CDN, nothing inline. `connect-src
  # 'self'` covers the page's own ws:/wss: origin (CSP Level 3; Chromium since 71, Safari 16,
  # the browsers the console is built for), and nothing else: `ws: wss:` let it connect
  # anywhere.
  @csp "default-src 'self'; script-src 'self'; worker-src 'self'; style-src 'self'; img-src 'self' data: blob:; " <>
         "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'"

  @doc false
  # Whether a path is the console's (answered by `serve/2`, a 404 for unknown files).
  @spec path?(binary) :: boolean
  def path?("/console"), do: true
  def path?("/console/" <> _), do: true
  def path?(_), do: false

  @doc false
  @spec serve(binary, Overworld.Transport.HTTP.Request.t()) :: Web.response()
  def serve(path, req) do
    with name when is_binary(name) <- file_name(path),
         %{^name => file} <- files() do
      if etag_matches?(Map.get(req.headers, "if-none-match"), file.etag),
        do: {304, headers(name, file), ""},
        else: {200, [{"content-type", @files[name]} | headers(name, file)], file.body}
    else
      _ -> Web.error(404, "not_found", "no console file #{Web.printable(path, 100)}")
    end
  end

  defp file_name("/console"), do: "index.html"
  defp file_name("/console/"), do: "index.html"
  defp file_name("/console/" <> name) when is_map_key(@files, name), do: name
  defp file_name(_), do: nil

  defp headers(name, file) do
    base = [
      {"etag", file.etag},
      {"cache-control", "no-cache"},
      {"x-content-type-options", "nosniff"}
    ]

    if name == "index.html",
      do: [{"content-security-policy", @csp}, {"referrer-policy", "no-referrer"} | base],
      else: base
  end

  # `If-None-Match` lists ETags (or is `*`); weak ones match too (RFC 9110 §13.1.2).
  defp etag_matches?(nil, _etag), do: false

  defp etag_matches?(header, etag) do
    header
    |> String.split(",")
    |> Enum.any?(fn t ->
      t = String.trim(t)
      t == "*" or t == etag or t == "W/" <> etag
    end)
  end

  @doc false
  # The console's files found in the priv directory, by name: `%{body, etag}` each (a file the
  # build did not make there is missing: 404).
  @spec files() :: %{optional(binary) => %{body: binary, etag: binary}}
  def files do
    dir = dir()

    case :persistent_term.get({__MODULE__, dir}, nil) do
      nil ->
        files = load(dir)
        :persistent_term.put({__MODULE__, dir}, files)
        files

      files ->
        files
    end
  end

  @doc false
  @spec dir() :: Path.t()
  def dir, do: Application.app_dir(:overworld, "priv/static/console")

  defp load(dir) do
    for {name, _type} <- @files,
        {:ok, body} <- [File.read(Path.join(dir, name))],
        into: %{} do
      hash =
        :crypto.hash(:sha256, body) |> binary_part(0, 12) |> Base.url_encode64(padding: false)

      {name, %{body: body, etag: ~s("#{hash}")}}
    end
  end
end

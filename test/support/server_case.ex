defmodule Overworld.Test.ServerCase do
  @moduledoc false
  # Helpers of the network tests: a zone of the test game (`Overworld.Test.Game`) and an
  # `Overworld.Server` started under the test supervisor, players over real sockets
  # (`Overworld.Client`), and the checks every robustness test makes (a witness player keeps
  # receiving snapshots that apply).

  import ExUnit.Assertions
  import ExUnit.Callbacks, only: [start_supervised!: 1]

  alias Overworld.{Client, Protocol, Server}
  alias Overworld.Protocol.Snapshot
  alias Overworld.Test.{DataDir, Game}

  @host "127.0.0.1"
  @recv 3_000

  # The modules whose info lines the tests look for in the log (the test config logs warnings
  # and above only).
  @logging [
    Overworld.Session,
    Overworld.Session.Hello,
    Overworld.Session.Upgrade,
    Overworld.Transport.Conn,
    Overworld.Transport.Listener,
    Overworld.Web
  ]

  def host, do: @host

  @doc "Lets the network modules log at :info (for `ExUnit.CaptureLog`)."
  def log_info, do: Logger.put_module_level(@logging, :info)

  @doc """
  Starts a test game zone (`critters` critters, id `zone`) and a server `name` on a free port
  serving it as "critters" (the default zone). `opts` are more server options; `:critters`
  and `:zone_opts` shape the zone. Answers `%{name, port, zone}`.

  The critters carry no coins unless `zone_opts` says `coins: true`: a player who happens to
  touch one would get loot EVENTs the tests of messages do not expect.
  """
  def start_world(name, zone, opts \\ []) do
    {critters, opts} = Keyword.pop(opts, :critters, 400)
    {zone_opts, opts} = Keyword.pop(opts, :zone_opts, [])
    zone_opts = Keyword.merge([id: zone, wire: Game.Wire, coins: false], zone_opts)
    start_supervised!({Overworld.Zone, {Game, Game.zone_options(critters, zone_opts)}})

    server_opts =
      [
        name: name,
        port: 0,
        acceptors: 2,
        data_dir: DataDir.path(),
        zones: %{"critters" => zone},
        default_zone: "critters"
      ]
      |> Keyword.merge(opts)

    # Servers of modules running at once would each create the secret on a fresh data
    # directory, and keep different ones (the last rename wins on disc): made once here.
    {:ok, _} =
      :global.trans({__MODULE__, :secret}, fn ->
        Overworld.Auth.Token.load_or_create_secret(DataDir.path())
      end)

    start_supervised!({Overworld.Server, server_opts})
    %{name: name, port: Server.port(name), zone: zone}
  end

  @doc "A new device id (unique per call and per run)."
  def device, do: "dev-" <> Base.encode16(:crypto.strong_rand_bytes(10), case: :lower)

  @doc "Authenticates a new device: the JSON answer (token, refresh_token, user_id, ...)."
  def auth(%{port: port}) do
    assert {:ok, %{"token" => _, "user_id" => _} = auth} =
             Client.authenticate_device(@host, port, device())

    auth
  end

  @doc "Opens a WebSocket (no HELLO yet)."
  def connect(%{port: port}, path \\ "/ws", opts \\ []) do
    assert {:ok, conn} = Client.connect(@host, port, path, opts)
    conn
  end

  @doc """
  A player: a new account, a WebSocket, HELLO, the HANDSHAKE. Answers
  `%{conn, view, templates, entity, user, token, refresh}`. Options: `:path` (default
  "/ws"), `:auth` (an earlier `auth/1` answer: the same user again).
  """
  def join(world, opts \\ []) do
    auth = Keyword.get_lazy(opts, :auth, fn -> auth(world) end)
    conn = connect(world, Keyword.get(opts, :path, "/ws"))

    :ok =
      Client.send_msg(conn, %{
        type: :hello,
        version: Overworld.Protocol.version(),
        token: auth["token"]
      })

    {%{type: :handshake} = hs, conn} = recv_msg(conn)

    %{
      conn: conn,
      view: Snapshot.View.new(hs.cols, hs.rows),
      templates: hs.templates,
      entity: hs.entity_id,
      handshake: hs,
      user: auth["user_id"],
      token: auth["token"],
      auth: auth
    }
  end

  @doc """
  The next frame, typed: `{:snapshot, binary}`, a decoded message map, `{:close, code,
  reason}`, `{:ping | :pong | :text, data}`, or `{:error, reason}` when the socket ends.
  """
  def recv(conn, timeout \\ @recv) do
    case Client.recv(conn, timeout) do
      {:ok, {:binary, <<0x02, _::binary>> = snap}, conn} ->
        {{:snapshot, snap}, conn}

      {:ok, {:binary, bin}, conn} ->
        assert {:ok, msg} = Protocol.decode(bin)
        {msg, conn}

      {:ok, frame, conn} ->
        {frame, conn}

      {:error, reason} ->
        {{:error, reason}, conn}
    end
  end

  @doc "The next message that is not a snapshot."
  def recv_msg(conn, timeout \\ @recv) do
    case recv(conn, timeout) do
      {{:snapshot, _}, conn} -> recv_msg(conn, timeout)
      other -> other
    end
  end

  @doc """
  The next message that is not a snapshot, for a player: the snapshots before it are applied.
  Answers `{message, player}`.
  """
  def next_msg(player) do
    case recv(player.conn) do
      {{:snapshot, snap}, conn} ->
        assert {:ok, view} = Snapshot.apply(player.view, snap, player.templates)
        next_msg(%{player | conn: conn, view: view})

      {msg, conn} ->
        {msg, %{player | conn: conn}}
    end
  end

  @doc "Receives `n` snapshots, applying each to the player's view (other messages skipped)."
  def snapshots(player, n) when n <= 0, do: player

  def snapshots(player, n) do
    case recv(player.conn) do
      {{:snapshot, snap}, conn} ->
        assert {:ok, view} = Snapshot.apply(player.view, snap, player.templates)
        assert view.tick > player.view.tick
        snapshots(%{player | conn: conn, view: view}, n - 1)

      {{:error, reason}, _conn} ->
        flunk("expected a snapshot, the socket ended: #{inspect(reason)}")

      {{:close, code, reason}, _conn} ->
        flunk("expected a snapshot, got close #{code} #{inspect(reason)}")

      {_other, conn} ->
        snapshots(%{player | conn: conn}, n)
    end
  end

  @doc "Receives and applies snapshots until the view reaches `tick`."
  def until_tick(player, tick) do
    if player.view.tick >= tick, do: player, else: player |> snapshots(1) |> until_tick(tick)
  end

  @doc """
  The witness check: the zone's tick now, then snapshots (applied) until the player's view is
  three ticks past it, so snapshots made after whatever just happened did arrive.
  """
  def alive!(player, %{zone: zone}) do
    %{tick: now} = Overworld.Zone.info(zone)
    until_tick(player, now + 3)
  end

  @doc """
  Reads frames until the server's close: answers `{code, errors}`, the ERROR messages seen
  before it (codes). Snapshots and other messages are skipped.
  """
  def expect_close(conn, errors \\ []) do
    case recv(conn) do
      {{:close, code, _reason}, conn} ->
        Client.close(conn)
        {code, Enum.reverse(errors)}

      {%{type: :error, code: c}, conn} ->
        expect_close(conn, [c | errors])

      {{:error, reason}, _conn} ->
        flunk("expected a close frame, the socket ended: #{inspect(reason)}")

      {_other, conn} ->
        expect_close(conn, errors)
    end
  end

  @doc "Sends raw bytes on a new TCP connection and reads until the server closes it."
  def raw_http(%{port: port}, data, timeout \\ @recv) do
    {:ok, sock} =
      :gen_tcp.connect(String.to_charlist(@host), port, [:binary, active: false], timeout)

    :ok = :gen_tcp.send(sock, data)
    reply = read_all(sock, <<>>, timeout)
    :gen_tcp.close(sock)
    reply
  end

  defp read_all(sock, acc, timeout) do
    case :gen_tcp.recv(sock, 0, timeout) do
      {:ok, data} -> read_all(sock, acc <> data, timeout)
      {:error, _} -> acc
    end
  end

  @doc "The status code of a raw HTTP response."
  def status(<<"HTTP/1.1 ", code::binary-size(3), _::binary>>), do: String.to_integer(code)
  def status(other), do: flunk("not an HTTP response: #{inspect(other)}")

  @doc "The JSON body of a raw HTTP response."
  def json_body(response) do
    [_head, body] = :binary.split(response, "\r\n\r\n")
    :jiffy.decode(body, [:return_maps])
  end

  @doc """
  An HTTP request to the world's server (`body`: a map sent as JSON, or raw text; `token`: a
  bearer token, or nil for none): `{status, JSON answer (nulls as nil) or the raw body,
  headers}`.
  """
  def api(%{port: port}, method, path, body, token \\ nil) do
    headers = if token, do: [headers: [{"authorization", "Bearer " <> token}]], else: []
    body = if is_map(body), do: :jiffy.encode(body), else: body || ""
    {:ok, status, headers, reply} = Client.request(@host, port, method, path, body, headers)

    json =
      case Overworld.Web.decode_json(reply, null_term: nil) do
        {:ok, j} -> j
        :error -> reply
      end

    {status, json, Map.new(headers)}
  end

  @doc "An operator's token (`POST /api/v1/operator/login`; fails on anything but 200)."
  def operator_login(world, name, password) do
    {200, %{"token" => token}, _} =
      api(world, "POST", "/api/v1/operator/login", %{name: name, password: password})

    token
  end

  @doc "Polls `fun` until it answers a truthy value (every 20 ms, for up to `timeout` ms)."
  def eventually(fun, timeout \\ 3_000) do
    deadline = System.monotonic_time(:millisecond) + timeout
    poll(fun, deadline)
  end

  defp poll(fun, deadline) do
    case fun.() do
      v when v not in [nil, false] ->
        v

      _ ->
        if System.monotonic_time(:millisecond) > deadline do
          flunk("condition not met in time")
        else
          Process.sleep(20)
          poll(fun, deadline)
        end
    end
  end

  @doc "The zone's players (user id => entity id)."
  def players(%{zone: zone}), do: Overworld.Zone.info(zone).players
end

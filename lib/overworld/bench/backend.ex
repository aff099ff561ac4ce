defmodule Overworld.Bench.Backend do
  @moduledoc false
  # The workloads of `mix overworld.bench.backend` (Nakama's published benchmark workloads):
  # the server in a node of its own on one core (`+S 1`, pinned with taskset to CPU 0), the
  # load on the other (wrk for the HTTP workloads, this node's WebSocket players for the
  # matches, both pinned to CPU 1).

  alias Overworld.{Client, Protocol}
  alias Overworld.Metrics.{CPU, Histogram}

  @host "127.0.0.1"
  @server :backend_bench

  ## The server

  @doc """
  Starts the server's node pinned to CPU `cpu` with one scheduler, serving the backend
  (match handlers "echo" in Elixir and "echo_lua" in Lua, RPC "echo_elixir" and "echo_lua")
  in a fresh data directory. Answers `%{peer, node, port, os_pid, dir}`.
  """
  @spec start_server(non_neg_integer, keyword) :: map
  def start_server(cpu, opts \\ []) do
    Overworld.Bench.Peer.distributed!("backendbench", @host)
    name = :"backend_server_#{System.unique_integer([:positive])}"
    {peer, node} = Overworld.Bench.Peer.start(name, [~c"+S", ~c"1:1", ~c"+SDcpu", ~c"1:1"])
    os_pid = :erpc.call(node, System, :pid, [])
    _ = pin(os_pid, cpu)

    dir =
      Path.join(
        System.tmp_dir!(),
        "overworld-backend-#{Base.encode16(:crypto.strong_rand_bytes(6), case: :lower)}"
      )

    server_opts = [
      name: @server,
      port: 0,
      acceptors: 4,
      data_dir: dir,
      zones: %{},
      matches: [handlers: %{"echo" => Overworld.Bench.EchoMatch}],
      rpc: %{"echo_elixir" => &__MODULE__.echo/2},
      lua: [dir: lua_dir(), workers: 1, timeout: 1_000],
      storage: Keyword.get(opts, :storage, [])
    ]

    port = :erpc.call(node, Overworld.Bench.Peer, :serve, [server_opts])

    if delay = opts[:fsync_delay_ms],
      do: :ok = :erpc.call(node, Overworld.Accounts.Sync, :set_delay, [delay])

    %{peer: peer, node: node, port: port, os_pid: os_pid, dir: dir}
  end

  @doc "The Elixir RPC of the workload: answers its payload."
  def echo(_ctx, payload), do: {:ok, payload}

  @doc "The Lua scripts of the workload (priv/bench/lua)."
  def lua_dir, do: Application.app_dir(:overworld, "priv/bench/lua")

  @doc """
  Pins every thread of an OS process to one CPU (or, given a list as taskset prints it,
  `"0-1"`, to those); answers the CPU list it had, to restore it.
  """
  @spec pin(String.t() | integer, non_neg_integer | String.t()) :: String.t()
  def pin(os_pid, cpus) do
    {was, 0} = System.cmd("taskset", ["-c", "-p", "#{os_pid}"])
    {_, 0} = System.cmd("taskset", ["-a", "-p", "-c", "#{cpus}", "#{os_pid}"])
    was |> String.split(":") |> List.last() |> String.trim()
  end

  @doc "Stops the server's node and removes its data."
  def stop_server(s) do
    :peer.stop(s.peer)
    File.rm_rf(s.dir)
    :ok
  end

  @doc "CPU seconds (user + system) an OS process has used (0.0 when gone)."
  @spec cpu_seconds(String.t() | integer) :: float
  def cpu_seconds(os_pid), do: CPU.os_seconds(os_pid) || 0.0

  ## HTTP workloads with wrk

  @doc """
  Runs wrk (one thread, `connections`, `seconds`, pinned to CPU `cpu`) with a Lua script
  against the server: requests/s, latency percentiles (ms), non-2xx answers, wrk's CPU.
  """
  @spec wrk(map, binary, pos_integer, pos_integer, non_neg_integer) :: map
  def wrk(s, script, connections, seconds, cpu) do
    path = Path.join(System.tmp_dir!(), "overworld-wrk-#{System.unique_integer([:positive])}.lua")
    File.write!(path, script)
    cpu0 = cpu_seconds(s.os_pid)
    t0 = System.monotonic_time(:millisecond)

    cmd =
      "taskset -c #{cpu} wrk -t1 -c#{connections} -d#{seconds}s --latency -s #{path} " <>
        "http://#{@host}:#{s.port} ; cat /proc/$$/stat"

    {out, _} = System.cmd("sh", ["-c", cmd], stderr_to_stdout: true)
    wall = (System.monotonic_time(:millisecond) - t0) / 1000
    server_cpu = cpu_seconds(s.os_pid) - cpu0
    File.rm(path)

    parse_wrk(out)
    |> Map.merge(%{
      server_cpu: server_cpu / wall,
      generator_cpu: wrk_cpu(out) / wall,
      wall_s: wall
    })
  end

  defp parse_wrk(out) do
    rps = capture(out, ~r/Requests\/sec:\s+([\d.]+)/) |> to_float()
    requests = capture(out, ~r/(\d+) requests in/) |> to_int()
    non2xx = capture(out, ~r/Non-2xx or 3xx responses:\s+(\d+)/) |> to_int()
    errors = capture(out, ~r/Socket errors: (.+)/)

    latency =
      for p <- ["50", "75", "90", "99"], into: %{} do
        {String.to_atom("p#{p}_ms"),
         Regex.run(~r/^\s+#{p}%\s+([\d.]+)(us|ms|s)\s*$/m, out) |> ms()}
      end

    Map.merge(latency, %{
      requests_per_s: rps,
      requests: requests,
      non_2xx: non2xx || 0,
      socket_errors: errors,
      output: out
    })
  end

  defp capture(out, re) do
    case Regex.run(re, out, capture: :all_but_first) do
      [v] -> v
      _ -> nil
    end
  end

  defp to_float(nil), do: nil
  defp to_float(s), do: elem(Float.parse(s), 0)
  defp to_int(nil), do: nil
  defp to_int(s), do: String.to_integer(s)

  defp ms([_, v, "us"]), do: to_float(v) / 1000
  defp ms([_, v, "ms"]), do: to_float(v)
  defp ms([_, v, "s"]), do: to_float(v) * 1000
  defp ms(_), do: nil

  @doc false
  # The shell's children's CPU (cutime + cstime of /proc/$$/stat, printed after the load
  # generator, wrk or tsung, ended).
  @spec wrk_cpu(String.t()) :: float
  def wrk_cpu(out) do
    case Regex.run(~r/^\d+ \(sh\) .+$/m, out) do
      [line] -> CPU.stat_seconds(line, :children) || 0.0
      _ -> 0.0
    end
  end

  @doc "wrk's script for new device accounts (`prefix`-1, -2, ...)."
  def register_script(prefix) do
    """
    counter = 0
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    request = function()
      counter = counter + 1
      return wrk.format(nil, "/api/v1/auth/device", nil, '{"device_id":"#{prefix}-' .. counter .. '"}')
    end
    """
  end

  @doc "wrk's script for logins of the devices `prefix`-1 .. -`count` (made before)."
  def login_script(prefix, count) do
    """
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    request = function()
      return wrk.format(nil, "/api/v1/auth/device", nil, '{"device_id":"#{prefix}-' .. math.random(1, #{count}) .. '"}')
    end
    """
  end

  @doc "wrk's script for an RPC with a session token."
  def rpc_script(id, token) do
    """
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    wrk.headers["Authorization"] = "Bearer #{token}"
    wrk.body = '{"n":1,"s":"hello"}'
    wrk.path = "/api/v1/rpc/#{id}"
    """
  end

  @doc """
  wrk's script for the storage workload: each request is one user's (a random one of
  `users`, `[{token, user_id}]`) write of one object (a random key of 100 in collection
  "bench", a small JSON value, durable before the answer) or, every other request, a read of
  one (owner-readable).
  """
  def storage_script(users) do
    list = Enum.map_join(users, ",\n", fn {t, u} -> ~s({"#{t}", "#{u}"}) end)

    """
    users = {
    #{list}
    }
    counter = 0
    wrk.method = "POST"
    wrk.headers["Content-Type"] = "application/json"
    request = function()
      counter = counter + 1
      local u = users[math.random(1, #users)]
      local key = "k" .. math.random(1, 100)
      wrk.headers["Authorization"] = "Bearer " .. u[1]
      if counter % 2 == 1 then
        return wrk.format(nil, "/api/v1/storage/write", nil,
          '{"objects":[{"collection":"bench","key":"' .. key .. '","value":{"score":' .. counter .. ',"name":"bench"},"read":1}]}')
      else
        return wrk.format(nil, "/api/v1/storage/read", nil,
          '{"object_ids":[{"collection":"bench","key":"' .. key .. '","user_id":"' .. u[2] .. '"}]}')
      end
    end
    """
  end

  @doc "Makes `count` device accounts `prefix`-1.. (in parallel); answers their tokens."
  @spec devices(map, binary, non_neg_integer) :: [binary]
  def devices(s, prefix, count), do: s |> device_sessions(prefix, count) |> Enum.map(&elem(&1, 0))

  @doc "Makes `count` device accounts `prefix`-1.. (in parallel): `[{token, user_id}]`."
  @spec device_sessions(map, binary, non_neg_integer) :: [{binary, binary}]
  def device_sessions(_s, _prefix, 0), do: []

  def device_sessions(s, prefix, count) do
    1..count
    |> Task.async_stream(
      fn i ->
        {:ok, %{"token" => t, "user_id" => u}} =
          Client.authenticate_device(@host, s.port, "#{prefix}-#{i}")

        {t, u}
      end,
      max_concurrency: 32,
      timeout: 60_000
    )
    |> Enum.map(fn {:ok, tu} -> tu end)
  end

  ## The match workload

  @doc """
  Starts `count` players (more of an earlier step: `from`) in matches of 10 of `handler` at 10
  ticks a second: each player sends every 500 ms, alternately, an echo (op 1, its send time)
  and a broadcast (op 2). Echo round trips go into `hist` (µs); frames received are counted
  in `frames` (an :atomics of 1). Answers the players' pids.
  """
  @spec players(map, binary, [binary], Histogram.t(), :atomics.atomics_ref()) :: [pid]
  def players(s, handler, tokens, hist, frames) do
    tokens
    |> Enum.chunk_every(10)
    |> Enum.flat_map(fn group ->
      me = self()
      [leader | rest] = group
      lpid = spawn_link(fn -> player(s.port, leader, {:create, handler, me}, hist, frames) end)

      match_id =
        receive do
          {:match, ^lpid, id} -> id
        after
          20_000 -> raise "no match created for a group (server overloaded?)"
        end

      [
        lpid
        | for(
            t <- rest,
            do: spawn_link(fn -> player(s.port, t, {:join, match_id}, hist, frames) end)
          )
      ]
    end)
  end

  defp player(port, token, role, hist, frames) do
    {:ok, c} = Client.connect(@host, port, "/ws?zone=")
    :ok = Client.send_msg(c, %{type: :hello, version: Protocol.version(), token: token})
    {:ok, {:binary, hs}, c} = Client.recv(c, 30_000)
    {:ok, %{type: :handshake}} = Protocol.decode(hs)

    {match_id, c} =
      case role do
        {:create, handler, parent} ->
          {%{"match_id" => id}, c} =
            request(c, "match_create", %{name: handler, params: %{rate: 10}})

          send(parent, {:match, self(), id})
          {id, c}

        {:join, id} ->
          {id, c}
      end

    {%{"match_id" => ^match_id}, c} = request(c, "match_join", %{match_id: match_id})
    :inet.setopts(c.sock, active: 64)
    # Spread over the 500 ms.
    Process.send_after(self(), :send, :rand.uniform(500))
    loop(%{sock: c.sock, buf: c.buf, match_id: match_id, op: 1, hist: hist, frames: frames})
  end

  defp request(c, method, body) do
    :ok = Client.send_msg(c, %{type: :request, id: 1, method: method, body: :jiffy.encode(body)})
    await_response(c)
  end

  defp await_response(c) do
    {:ok, {:binary, bin}, c} = Client.recv(c, 30_000)

    case Protocol.decode(bin) do
      {:ok, %{type: :response, status: 200, body: b}} -> {:jiffy.decode(b, [:return_maps]), c}
      {:ok, %{type: :response} = r} -> raise "request refused: #{inspect(r)}"
      _ -> await_response(c)
    end
  end

  defp loop(st) do
    receive do
      :send ->
        Process.send_after(self(), :send, 500)

        payload =
          if st.op == 1,
            do: <<System.monotonic_time(:microsecond)::signed-64>>,
            else: :binary.copy("b", 32)

        msg = %{type: :match_send, match_id: st.match_id, op: st.op, payload: payload}
        :gen_tcp.send(st.sock, Client.frame(2, Protocol.encode(msg)))
        loop(%{st | op: 3 - st.op})

      {:tcp, _, data} ->
        loop(frames(%{st | buf: st.buf <> data}))

      {:tcp_passive, sock} ->
        :inet.setopts(sock, active: 64)
        loop(st)

      {:tcp_closed, _} ->
        :closed

      :stop ->
        :gen_tcp.close(st.sock)
    end
  end

  defp frames(st) do
    case Client.parse(st.buf) do
      {:ok, {:binary, bin}, rest} ->
        :atomics.add(st.frames, 1, 1)

        case Protocol.decode(bin) do
          {:ok, %{type: :match_data, messages: ms}} ->
            now = System.monotonic_time(:microsecond)
            for {1, "", <<t::signed-64>>} <- ms, do: Histogram.record(st.hist, now - t)

          _ ->
            :ok
        end

        frames(%{st | buf: rest})

      {:ok, _other, rest} ->
        frames(%{st | buf: rest})

      :more ->
        st
    end
  end

  @doc """
  The server's memory growth per match of `handler` with no player: `count` made (and ended),
  a second after they started ticking.
  """
  @spec idle_matches(map, binary, pos_integer) :: non_neg_integer
  def idle_matches(s, handler, count) do
    m0 = collected_memory(s)
    ids = create_matches(s, handler, count)
    Process.sleep(1_000)
    grown = collected_memory(s) - m0
    for id <- ids, do: :erpc.call(s.node, Overworld.Match, :shutdown, [id, 0])
    Process.sleep(500)
    max(div(grown, count), 0)
  end

  @doc "Makes `count` matches of `handler` (echo or echo_lua) on the server: their ids."
  @spec create_matches(map, binary, non_neg_integer) :: [binary]
  def create_matches(s, handler, count) do
    code = """
    handler = case #{inspect(handler)} do
      "echo" -> Overworld.Bench.EchoMatch
      name -> {Overworld.Match.Lua, {Overworld.Server.config(#{inspect(@server)}).lua, name}}
    end
    for _ <- 1..#{count}//1, do: elem(Overworld.Match.create(handler, %{"rate" => 10}), 1)
    """

    {ids, _} = :erpc.call(s.node, Code, :eval_string, [code])
    ids
  end

  # The server node's memory once every process was collected (no garbage counted).
  defp collected_memory(s) do
    {m, _} =
      :erpc.call(s.node, Code, :eval_string, [
        "for p <- Process.list(), do: :erlang.garbage_collect(p)\n:erlang.memory(:total)"
      ])

    m
  end

  @doc "The server node's memory (bytes)."
  def memory(s), do: :erpc.call(s.node, :erlang, :memory, [:total])
end

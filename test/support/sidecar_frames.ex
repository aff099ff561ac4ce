defmodule Overworld.Test.SidecarFrames do
  @moduledoc """
  The test frames of the native sidecar (docs/sidecar.md, "The test frames"): the scenes
  `overworld-sidecar step` and `overworld-sidecar path` read on their standard input, and their
  answers. Every number is a little-endian signed 64-bit integer, after a 4-byte magic and an
  unsigned 32-bit version (1).

      step in:  "OWPS" u32=1  W H R  nb nc n  (x0 y0 x1 y1)*nb  (cx cy r)*nc  (id x y vx vy r m)*n
      step out: "OWPR" u32=1  n  (id x y)*n
      path in:  "OWNS" u32=1  W H cell agent max_nodes  nb nc q  (x0 y0 x1 y1)*nb  (cx cy r)*nc  (fx fy tx ty)*q
      path out: "OWNR" u32=1  q  (status k (x y)*k)*q      (status: 0 ok, 1 blocked, 2 unreachable, 3 too_far)

  The encoders do not check the ranges (the tests write refused frames too); the decoders
  return `{:error, reason}` for a frame that does not parse.
  """

  require ExUnit.Assertions

  @version 1

  @root Path.expand("../..", __DIR__)

  @doc """
  Builds the sidecar (`sidecar/cargo.sh build --release`, quick when it is up to date) and
  answers its executable; raises with cargo's output when the build fails.
  """
  @spec build_sidecar!() :: Path.t()
  def build_sidecar! do
    cargo = Path.join(@root, "sidecar/cargo.sh")

    case System.cmd(cargo, ["build", "--release", "--quiet"], stderr_to_stdout: true) do
      {_, 0} -> :ok
      {out, status} -> raise "building the sidecar failed (#{cargo}, status #{status}):\n#{out}"
    end

    exe = Path.join(@root, "sidecar/target/release/overworld-sidecar")
    unless File.exists?(exe), do: raise("no sidecar at #{exe} after the build")
    exe
  end

  @doc """
  Waits until the sidecar of a zone's physics `p` is ready, up to 5 s, and answers its
  generation; fails the test otherwise.
  """
  @spec ready!(Overworld.Zone.Physics.t()) :: pos_integer
  def ready!(p),
    do: Overworld.Sidecar.await(p, 5_000) || ExUnit.Assertions.flunk("no sidecar ready in 5 s")

  @doc """
  Starts a zone of `module` with `opts` (and a new id, which it answers), stopped when the
  test exits.
  """
  @spec start_zone!(module, keyword) :: term
  def start_zone!(module, opts) do
    id = {module, make_ref()}
    {:ok, _} = Overworld.start_zone(module, [id: id] ++ opts)
    ExUnit.Callbacks.on_exit(fn -> Overworld.stop_zone(id) end)
    id
  end

  @doc """
  Runs a `:manual` zone with history (`debug: true`) for `ticks` ticks, then replays its
  history (`Overworld.Zone.History.replay/1`): every hash of the last `ticks - 15` ticks or
  more checked, none differs.
  """
  @spec assert_replays!(term, pos_integer) :: :ok
  def assert_replays!(id, ticks) do
    {:ok, _} = Overworld.Zone.tick_now(id, ticks)
    {:ok, dump} = Overworld.Zone.History.dump(id)
    result = Overworld.Zone.History.replay(dump)
    ExUnit.Assertions.assert(result.checked >= ticks - 15, inspect(result))
    ExUnit.Assertions.assert(result.mismatches == [] and result.first_mismatch == nil)
    :ok
  end

  @doc """
  For each transport, a zone started by `start.(opts)` (with `opts` choosing the sidecar and
  the transport) and run by `run.(id)` for `ticks` ticks on 2 workers must give `want`,
  every tick after the first computed by the sidecar, without a failure.
  """
  @spec assert_over_transports!((keyword -> term), (term -> term), term, pos_integer) :: :ok
  def assert_over_transports!(start, run, want, ticks) do
    exe = build_sidecar!()

    for transport <- [:socket, :shm] do
      opts = [
        physics: :sidecar,
        transport: transport,
        sidecar: [executable: exe, deadline_ms: 1_000]
      ]

      id = start.(opts)
      p = Overworld.Zone.config(id).physics
      ready!(p)
      ExUnit.Assertions.assert(run.(id) == want, "over #{transport}")
      c = Overworld.Sidecar.counters(p)

      ExUnit.Assertions.assert(
        c.sidecar == 2 * (ticks - 1) and c.failures == 0,
        "over #{transport}: #{inspect(c)}"
      )
    end

    :ok
  end

  @doc """
  An "OWPS" frame: a world `width` × `height`, its `boxes` `{x0, y0, x1, y1}` and `circles`
  `{cx, cy, r}`, the tick rate and the bodies `{id, x, y, vx, vy, r, m}`.
  """
  @spec step_frame(integer, integer, integer, [tuple], [tuple], [tuple]) :: binary
  def step_frame(width, height, tick_rate, boxes, circles, bodies) do
    IO.iodata_to_binary([
      header("OWPS"),
      words([width, height, tick_rate, length(boxes), length(circles), length(bodies)]),
      obstacles(boxes, circles),
      Enum.map(bodies, fn {id, x, y, vx, vy, r, m} -> words([id, x, y, vx, vy, r, m]) end)
    ])
  end

  @doc "Decodes an \"OWPR\" answer: `{:ok, [{id, x, y}]}`."
  @spec decode_step_answer(binary) :: {:ok, [{integer, integer, integer}]} | {:error, term}
  def decode_step_answer(
        <<"OWPR", @version::little-unsigned-32, n::little-signed-64, rest::binary>>
      )
      when byte_size(rest) == n * 24 do
    {:ok,
     for(<<id::little-signed-64, x::little-signed-64, y::little-signed-64 <- rest>>,
       do: {id, x, y}
     )}
  end

  def decode_step_answer(other), do: {:error, {:not_an_answer, byte_size(other)}}

  @doc """
  An "OWNS" frame: a world, the navigation grid's options (`cell`, `agent`, `max_nodes`), its
  obstacles and the queries `{{fx, fy}, {tx, ty}}`.
  """
  @spec path_frame(integer, integer, integer, integer, integer, [tuple], [tuple], [tuple]) ::
          binary
  def path_frame(width, height, cell, agent, max_nodes, boxes, circles, queries) do
    IO.iodata_to_binary([
      header("OWNS"),
      words([
        width,
        height,
        cell,
        agent,
        max_nodes,
        length(boxes),
        length(circles),
        length(queries)
      ]),
      obstacles(boxes, circles),
      Enum.map(queries, fn {{fx, fy}, {tx, ty}} -> words([fx, fy, tx, ty]) end)
    ])
  end

  @doc """
  Decodes an "OWNR" answer: `{:ok, paths}`, each path as `Overworld.Physics.Nav.path/3`
  returns it (`{:ok, waypoints}` or `{:error, :blocked | :unreachable | :too_far}`).
  """
  @spec decode_path_answer(binary) :: {:ok, [term]} | {:error, term}
  def decode_path_answer(
        <<"OWNR", @version::little-unsigned-32, q::little-signed-64, rest::binary>>
      ),
      do: paths(rest, q, [])

  def decode_path_answer(other), do: {:error, {:not_an_answer, byte_size(other)}}

  defp paths(<<>>, 0, acc), do: {:ok, Enum.reverse(acc)}

  defp paths(<<status::little-signed-64, k::little-signed-64, rest::binary>>, q, acc)
       when q > 0 and k >= 0 and byte_size(rest) >= k * 16 do
    <<points::binary-size(k * 16), rest::binary>> = rest
    waypoints = for <<x::little-signed-64, y::little-signed-64 <- points>>, do: {x, y}

    path =
      case {status, k} do
        {0, _} -> {:ok, waypoints}
        {1, 0} -> {:error, :blocked}
        {2, 0} -> {:error, :unreachable}
        {3, 0} -> {:error, :too_far}
        _ -> :bad
      end

    if path == :bad, do: {:error, {:status, status, k}}, else: paths(rest, q - 1, [path | acc])
  end

  defp paths(rest, q, _acc), do: {:error, {:truncated, q, byte_size(rest)}}

  defp header(magic), do: [magic, <<@version::little-unsigned-32>>]

  defp words(values), do: for(v <- values, do: <<v::little-signed-64>>)

  defp obstacles(boxes, circles) do
    [
      Enum.map(boxes, fn {x0, y0, x1, y1} -> words([x0, y0, x1, y1]) end),
      Enum.map(circles, fn {cx, cy, r} -> words([cx, cy, r]) end)
    ]
  end
end

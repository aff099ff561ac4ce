defmodule Overworld.Protocol.Vectors do
  @moduledoc false
  # Byte-exact test vectors shared by the Elixir and TypeScript tests (protocol/vectors/*.json):
  # for every field type, keyframes and deltas with their values and exact bytes. The cases are
  # built from fixed values and a fixed xorshift stream, so regenerating them gives the same file;
  # the Elixir tests check the file against the encoder, the TypeScript tests decode it.

  import Bitwise
  alias Overworld.Protocol.Snapshot
  alias Overworld.Template
  alias Overworld.Template.Field

  defmodule Wire do
    @moduledoc false
    use Overworld.Template

    template :every_type, id: 7, kinds: [:vector] do
      field(:u, :uint, bits: 5, from: {:data, 0})
      field(:i, :int, min: -1000, max: 1000, from: {:data, 1})
      field(:x, :fixed, max: 16384, precision: 1 / 64)
      field(:vx, :fixed, min: -16, max: 16, precision: 1 / 128, diff_bits: 6)
      field(:heading, :angle, bits: 10)
      field(:state, :enum, values: [:idle, :wander, :flee, :chase, :dead])
      field(:flag, :bool, from: {:data, 2})
    end

    template :position, id: 1, kinds: [:walker] do
      field(:x, :fixed, max: 16384, precision: 1 / 64)
      field(:y, :fixed, max: 16384, precision: 1 / 64)
      field(:heading, :angle, bits: 8)
    end

    # A third template (template indexes are 2 bits wide), an enum of integers (negative
    # included) and a number whose changes always travel whole (diff_bits 0).
    template :marker, id: 9, kinds: [:marker] do
      field(:level, :enum, values: [-5, 0, 10, 1000], from: {:data, 0})
      field(:count, :uint, bits: 12, diff_bits: 0, from: {:data, 1})
    end

    # Typed inputs: every type a client may send.
    input :controls, id: 3 do
      field(:mx, :int, min: -127, max: 127)
      field(:my, :int, min: -127, max: 127)
      field(:aim, :angle, bits: 8)
      field(:stance, :enum, values: [:walk, :run, :crouch])
      field(:fire, :bool)
      field(:charge, :uint, max: 1000)
      field(:throttle, :fixed, min: -1, max: 1, precision: 1 / 256)
    end
  end

  @doc "The file name => JSON-ready map of every vector file."
  @spec files() :: %{String.t() => map}
  def files,
    do: %{
      "templates.json" => templates(),
      "messages.json" => messages(),
      "snapshots.json" => snapshots(),
      "frames.json" => frames(),
      "world.json" => world_frames()
    }

  # A sequence of snapshots over a few cells: a keyframe snapshot, then deltas in which entities
  # change, move between cells, appear, disappear and change template, and a cell leaves the view.
  defp snapshots do
    alias Overworld.Protocol.Snapshot
    ts = Wire.__templates__()
    [a, b, c] = ts

    q = fn t, seed -> elem(random_values(t, seed), 0) end

    states = [
      %{
        10 => [{1, 0, q.(a, 1)}, {5, 1, q.(b, 2)}],
        11 => [{7, 0, q.(a, 3)}],
        30 => [{40, 1, q.(b, 4)}]
      },
      %{
        10 => [{1, 0, q.(a, 5)}, {5, 1, q.(b, 2)}],
        11 => [{7, 0, nudge(a, q.(a, 3), 1)}],
        30 => [{40, 1, q.(b, 4)}]
      },
      %{
        10 => [{5, 1, q.(b, 6)}],
        11 => [{1, 0, q.(a, 5)}, {7, 0, q.(a, 3)}, {9, 1, q.(b, 7)}],
        30 => [{40, 1, q.(b, 4)}]
      },
      %{
        10 => [{5, 0, q.(a, 8)}],
        11 => [{1, 0, q.(a, 5)}, {9, 1, q.(b, 7)}],
        12 => [{2, 1, q.(b, 9)}, {3, 2, q.(c, 12)}],
        30 => [{40, 1, q.(b, 10)}]
      },
      %{
        10 => [],
        11 => [{1, 0, q.(a, 11)}, {9, 1, q.(b, 7)}],
        12 => [{2, 1, q.(b, 9)}, {3, 2, q.(c, 13)}, {5, 0, q.(a, 8)}]
      }
    ]

    {steps, {_, view}} =
      states
      |> Enum.with_index(1)
      |> Enum.map_reduce({nil, %Snapshot.View{}}, fn {state, tick}, {prev, view} ->
        state = state |> Enum.reject(fn {_k, es} -> es == [] end) |> Map.new()

        {blocks, left} =
          case prev do
            nil ->
              {for({k, es} <- Enum.sort(state), do: Snapshot.keyframe_block(k, es, ts)), []}

            prev ->
              # Cell 30 leaves the view in the last step; every other cell changes by deltas.
              left = for k <- Map.keys(prev), not Map.has_key?(state, k), k == 30, do: k

              keys =
                (Map.keys(prev) ++ Map.keys(state))
                |> Enum.uniq()
                |> Enum.sort()
                |> Enum.reject(&(&1 in left))

              {for(
                 k <- keys,
                 b = Snapshot.delta_block(k, Map.get(prev, k, []), Map.get(state, k, []), ts),
                 b != nil,
                 do: b
               ), left}
          end

        msg = IO.iodata_to_binary(Snapshot.encode(tick, tick - 1, blocks, left))
        {step, view} = step(view, tick, msg, ts)
        {step, {state, view}}
      end)

    %{
      "description" =>
        "Snapshots (docs/protocol.md, 'Snapshots'), applied in order to an empty view; " <>
          "templates are those of templates.json in that order (template index = position). " <>
          "After each snapshot the view holds exactly `view`: cells in key order, entities by " <>
          "id; `ticks`: [cell, tick] pairs, the tick each cell is at (a cell held back keeps " <>
          "the one it had); `entities`: every entity by id, the copy of the cell at the newest " <>
          "tick when two cells hold one. Keys are made up (no grid: any key is a cell here). " <>
          "Step 3 changes entity 5's template (it leaves its cell with op 10 and arrives " <>
          "again in the same block). The last five steps are protocol 2's cases: a delta " <>
          "for a cell never held and a cell leaving that was never held (an unknown cell is " <>
          "empty); a cell held back while an entity of it moved to a cell sent (two copies, the " <>
          "newer current), runs that also name cells not held (ignored) and an extension of " <>
          "an unknown type (skipped); the cell catching up; an empty keyframe (count 0: the " <>
          "cell is no longer held); a snapshot two ticks after the last announcing a send " <>
          "interval of 2 (extension 1; `send_interval`: the interval the view holds after " <>
          "each step, 1 until announced).",
      "templates" => Enum.map(ts, & &1.id),
      "snapshots" => steps ++ v2_steps(ts, view, length(steps) + 1)
    }
  end

  # A snapshot applied to the client's view: the step's JSON and the new view.
  defp step(view, tick, msg, ts) do
    {:ok, view} = Snapshot.apply(view, msg, ts)

    {Map.merge(%{"tick" => tick, "hex" => Base.encode16(msg, case: :lower)}, view_json(view, ts)),
     view}
  end

  defp view_json(view, ts) do
    entry = fn {id, ti, q} ->
      %{"id" => id, "template" => Enum.at(ts, ti).id, "q" => Tuple.to_list(q)}
    end

    %{
      "view" =>
        for(
          {k, es} <- Enum.sort(view.cells),
          do: %{"cell" => k, "entities" => Enum.map(es, entry)}
        ),
      "ticks" => for({k, t} <- Enum.sort(view.ticks), do: [k, t]),
      "entities" =>
        for({id, {ti, q}} <- Enum.sort(Snapshot.View.entities(view)), do: entry.({id, ti, q})),
      "send_interval" => view.send_interval
    }
  end

  # Protocol 2's cases, on the view the first steps left (which holds cells 11 and 12).
  defp v2_steps(ts, view, t1) do
    [a, b, _c] = ts
    q = fn t, seed -> elem(random_values(t, seed), 0) end

    # A delta block for cell 50, which the client never held (empty: arrivals only), and cell
    # 70 leaving, never held either (nothing to drop).
    block = Snapshot.delta_block(50, [], [{60, 1, q.(b, 21)}], ts)

    {s1, view} =
      step(view, t1, IO.iodata_to_binary(Snapshot.encode(t1, t1 - 1, [block], [70])), ts)

    # Entity 1 moves from cell 11 to cell 13: the block of 13 is sent (1 arrives there), the
    # block of 11 held back (listed as behind): two copies of 1, the one in 13 (at the newest
    # tick) current. With an extension of an unknown type, which the client skips. The runs
    # of cells held back also name cells 95..96, which the client does not hold (cells in
    # view, empty: ignored).
    [{1, 0, q1} | rest11] = old11 = Map.fetch!(view.cells, 11)
    block = Snapshot.delta_block(13, [], [{1, 0, nudge(a, q1, 2)}], ts)
    msg = Snapshot.encode(t1 + 1, t1, [block], [], 0, [{11, 1}, {95, 2}], [{99, <<1, 2, 3>>}])
    {s2, view} = step(view, t1 + 1, IO.iodata_to_binary(msg), ts)

    # Cell 11 catches up: its delta from what the client holds (1 left it).
    block = Snapshot.delta_block(11, old11, rest11, ts)

    {s3, view} =
      step(view, t1 + 2, IO.iodata_to_binary(Snapshot.encode(t1 + 2, t1 + 1, [block], [])), ts)

    # Cell 12, asked for again as a keyframe, is empty now: a keyframe of 0 entities, and the
    # client no longer holds the cell.
    block = Snapshot.keyframe_block(12, [], ts)

    {s4, view} =
      step(view, t1 + 3, IO.iodata_to_binary(Snapshot.encode(t1 + 3, t1 + 2, [block], [])), ts)

    # The server lowers the snapshot rate: this snapshot, two ticks after the last, announces a
    # send interval of 2 (extension 1, beside an unknown one the client skips) and carries
    # what changed in both ticks (entity 1 moved again).
    [{1, 0, q1} | _] = old13 = Map.fetch!(view.cells, 13)
    block = Snapshot.delta_block(13, old13, [{1, 0, nudge(a, q1, 3)} | tl(old13)], ts)

    msg = Snapshot.encode(t1 + 5, t1 + 3, [block], [], 0, [], [{99, <<>>}, {1, <<2>>}])

    {s5, _view} = step(view, t1 + 5, IO.iodata_to_binary(msg), ts)

    [s1, s2, s3, s4, s5]
  end

  defmodule Drifters do
    @moduledoc false
    # 80 walkers drifting through a 120 m world at up to 4 m/s, bouncing off the edges, with
    # velocities from each one's xorshift stream: the zone behind frames.json.
    use Overworld.Zone
    require Overworld.Entity
    import Overworld.Entity, only: [entity: 2]

    @impl true
    def init(_args) do
      walkers =
        for i <- 1..80 do
          {vx, s} = Overworld.Random.uniform(i * 7919, 8193)
          {vy, _} = Overworld.Random.uniform(s, 8193)

          [
            kind: :walker,
            x: rem(i * 48_271, 120 * 1024),
            y: rem(i * 16_807 + i * i * 97, 120 * 1024),
            vx: vx - 4096,
            vy: vy - 4096,
            heading: rem(i * 2654, 65_536)
          ]
        end

      {:ok, %{}, [{:spawn, walkers}]}
    end

    @impl true
    def handle_entity(e, _view, ctx) do
      e = move(e, ctx, 0, 120 * 1024)
      turn = if rem(ctx.tick + entity(e, :id), 5) == 0, do: 700, else: 0
      {:ok, entity(e, heading: rem(entity(e, :heading) + turn, 65_536))}
    end

    @doc false
    # A tick of straight walking, bouncing off the edges of the box [lo, hi] (units) both ways.
    @spec move(Overworld.Entity.t(), map, integer, integer) :: Overworld.Entity.t()
    def move(e, ctx, lo, hi) do
      {x, vx} = bounce(entity(e, :x) + div(entity(e, :vx), ctx.tick_rate), entity(e, :vx), lo, hi)
      {y, vy} = bounce(entity(e, :y) + div(entity(e, :vy), ctx.tick_rate), entity(e, :vy), lo, hi)
      entity(e, x: x, y: y, vx: vx, vy: vy)
    end

    defp bounce(p, v, lo, _hi) when p < lo, do: {2 * lo - p, -v}
    defp bounce(p, v, _lo, hi) when p > hi, do: {2 * hi - p, -v}
    defp bounce(p, v, _lo, _hi), do: {p, v}
  end

  defmodule Crossers do
    @moduledoc false
    # 24 walkers at 8 to 16 m/s bouncing in the box [40, 80] m x [40, 80] m around the corner of
    # the four zones of a 120 m world: the zone behind world.json.
    use Overworld.Zone

    @impl true
    def init(_args) do
      walkers =
        for i <- 1..24 do
          a = i * 2 * :math.pi() / 24 + 0.3
          v = 8192 + rem(i * 977, 8192)

          [
            kind: :walker,
            x: (44 + rem(i * 7, 32)) * 1024,
            y: (44 + rem(i * 13, 32)) * 1024,
            vx: round(v * :math.cos(a)),
            vy: round(v * :math.sin(a)),
            heading: rem(i * 2654, 65_536)
          ]
        end

      {:ok, %{}, [{:spawn, walkers}]}
    end

    @impl true
    def handle_entity(e, _view, ctx),
      do: {:ok, Overworld.Protocol.Vectors.Drifters.move(e, ctx, 40 * 1024, 80 * 1024)}
  end

  # Frames of a real observer (`Overworld.Interest`) of a real zone, tick after tick: the
  # observer walks across the world (cells enter and leave), its byte budget is small (cells
  # wait and catch up with several blocks in one frame), and it resyncs once (baseline 0).
  defp frames do
    alias Overworld.{Interest, Zone}
    alias Overworld.Protocol.Snapshot

    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Drifters,
        id: id,
        clock: :manual,
        workers: 1,
        size: {120, 120},
        wire: Wire
      )

    try do
      {:ok, obs} = Interest.new(id, radius: 25, leave_radius: 45, budget: 4_500)
      ts = Wire.__templates__()
      g = Zone.config(id).grid

      grid = grid_json(g)

      {steps, _} =
        Enum.map_reduce(1..40, {obs, %Snapshot.View{}}, fn n, {obs, view} ->
          {:ok, ^n} = Zone.tick_now(id)
          obs = if n == 25, do: Interest.resync(obs, :vectors), else: obs
          # From the south-west corner towards the north-east, 2 m per tick.
          pos = {(20 + 2 * n) * 1024, (15 + 2 * n) * 1024}
          {frame, info, obs} = Interest.frame(obs, n, pos)
          msg = IO.iodata_to_binary(frame)
          {:ok, view} = Snapshot.apply(view, msg, ts)

          entities = entities_json(view, ts)

          step = %{
            "tick" => n,
            "hex" => Base.encode16(msg, case: :lower),
            "left" => info.left_keys,
            "deferred" => info.deferred,
            "behind" => for({k, c} <- info.behind, do: [k, c]),
            "cells" => view.cells |> Map.keys() |> Enum.sort(),
            "ticks" => for({k, t} <- Enum.sort(view.ticks), do: [k, t]),
            "entities" => entities
          }

          {step, {obs, view}}
        end)

      %{
        "description" =>
          "Frames of an observer of a real zone (Overworld.Interest): applied in order to an " <>
            "empty view, after each the view holds exactly `cells` (keys) and `entities` (by " <>
            "id). They include several blocks of one cell in a frame, keyframes of cells " <>
            "entering the view, cells leaving it (`left`: the keys the frame lists, some " <>
            "never held: cells in view that were empty), cells held back by the byte budget " <>
            "(`behind`: the runs [first key, count] the frame lists, again some not held; " <>
            "`deferred`: how many items waited, the server's own count, not on the wire), " <>
            "`ticks`: [cell, tick] the tick each cell is at, and a frame with baseline 0 (a " <>
            "resync: the client drops everything first). `grid`: the zone's HANDSHAKE " <>
            "figures (units; key = (row + 1) * (cols + 2) + col + 1). Templates: those of " <>
            "templates.json, in that order.",
        "grid" => grid,
        "templates" => Enum.map(Wire.__templates__(), & &1.id),
        "frames" => steps
      }
    after
      Overworld.stop_zone(id)
    end
  end

  # Frames of a world observer (`Overworld.Interest.World`) at the corner of the four zones of
  # a 2 x 2 world of crossers: the zones tick one after the other and the frames are built with
  # zone {1, 0} one tick behind, so entities crossing its borders are handed (op 11) before
  # their new zone publishes them, or published by it before the old zone's op 11.
  defp world_frames do
    alias Overworld.{World, Zone}
    alias Overworld.Interest.World, as: WorldView
    alias Overworld.Protocol.Snapshot

    name = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_world(Crossers,
        name: name,
        zones: {2, 2},
        clock: :manual,
        workers: 1,
        size: {120, 120},
        cell_size: 12,
        wire: Wire
      )

    try do
      {:ok, obs} = WorldView.new(name, radius: 30, leave_radius: 50, budget: 1_000_000)
      ts = Wire.__templates__()
      g = Zone.config({name, {0, 0}}).grid
      space = Snapshot.View.new(g.cols, g.rows).space
      last = {name, {1, 0}}
      order = name |> World.zones() |> Enum.sort() |> Enum.reject(&(&1 == last))

      grid = grid_json(g)

      {steps, _} =
        Enum.map_reduce(1..60, {obs, Snapshot.View.new(g.cols, g.rows)}, fn n, {obs, view} ->
          for z <- order, do: {:ok, ^n} = Zone.tick_now(z)
          # Around the corner (60, 60) m, 12 m away.
          a = 2 * :math.pi() * n / 60

          {x, y} =
            {round((60 + 12 * :math.cos(a)) * 1024), round((60 + 12 * :math.sin(a)) * 1024)}

          {frame, _info, obs} = WorldView.frame(obs, {name, {0, 0}}, n, x, y)
          {:ok, ^n} = Zone.tick_now(last)
          msg = IO.iodata_to_binary(frame)
          {:ok, view} = Snapshot.apply(view, msg, ts)

          entities = entities_json(view, ts)

          step = %{
            "tick" => view.tick,
            "hex" => Base.encode16(msg, case: :lower),
            "cells" => view.cells |> Map.keys() |> Enum.sort(),
            "handed" => view.handed |> Map.keys() |> Enum.sort(),
            "both" => both(view, space),
            "entities" => entities
          }

          {step, {obs, view}}
        end)

      %{
        "description" =>
          "Frames of an observer at the corner of the four zones of a 2 x 2 world " <>
            "(Overworld.Interest.World; docs/protocol.md, \"A world of zones\"): applied in " <>
            "order to an empty view, after each the view holds exactly `cells` (keys; those at " <>
            "or past (cols + 2) * (rows + 2) are band keys), `handed` (ids handed to another " <>
            "zone with op 11 that no cell holds yet) and `entities` (the resolved view: of " <>
            "two copies of an id at the same tick the region cell's, handed ones as they " <>
            "were). One zone's ticks lag the others' by one, so the frames hold both orders of " <>
            "a handoff: op 11 first (the entity shown from `handed` for a frame) and the new " <>
            "zone's arrival first (the band and the region cell both hold it). `grid`: the " <>
            "HANDSHAKE figures. Templates: those of templates.json, in that order.",
        "grid" => grid,
        "templates" => Enum.map(Wire.__templates__(), & &1.id),
        "frames" => steps
      }
    after
      Overworld.stop_world(name)
    end
  end

  # The HANDSHAKE's grid figures.
  defp grid_json(g),
    do: %{
      "width" => g.width,
      "height" => g.height,
      "cell_size" => g.cell,
      "cols" => g.cols,
      "rows" => g.rows
    }

  # The entities a view shows, by id, as the vector files list them.
  defp entities_json(view, ts) do
    for {eid, {ti, q}} <- Enum.sort(Overworld.Protocol.Snapshot.View.entities(view)),
        do: %{"id" => eid, "template" => Enum.at(ts, ti).id, "q" => Tuple.to_list(q)}
  end

  # The ids a band cell and a region cell both hold.
  defp both(view, space) do
    at = fn band? ->
      for {k, es} <- view.cells, k >= space == band?, {id, _, _} <- es, into: MapSet.new(), do: id
    end

    MapSet.intersection(at.(true), at.(false)) |> Enum.sort()
  end

  defp messages do
    cases = [
      %{type: :hello, version: 2, token: ""},
      %{type: :hello, version: 2, token: "eyJ1c2VyIjoxfQ.c2ln"},
      %{type: :hello, version: 65535, token: "ü"},
      %{type: :input, seq: 0, ack: 0, payload: ""},
      %{type: :input, seq: 1, ack: 300, payload: <<127, 129, 0>>},
      %{type: :input, seq: 9_007_199_254_740_991, ack: 2_097_152, payload: "move"},
      %{type: :client_event, seq: 1, payload: <<1, 2, 3>>},
      %{type: :client_event, seq: 16_384, payload: ""},
      %{type: :ping, client_time: 0},
      %{type: :ping, client_time: 1_764_000_000_123},
      %{type: :resync, reason: 2, last_tick: 4_500},
      %{type: :event, seq: 1, payload: "loot"},
      %{type: :event, seq: 128, payload: <<0, 255>>},
      %{type: :pong, client_time: 1_764_000_000_123, server_tick: 90_000},
      %{type: :error, code: 1, message: "unsupported protocol version 9, this server speaks 2"},
      %{type: :error, code: 1008, message: ""},
      %{type: :request, id: 1, method: "rpc", body: ~s({"id":"echo","payload":{"n":1}})},
      %{type: :request, id: 300, method: "match_join", body: ~s({"match_id":"m.1"})},
      %{type: :match_send, match_id: "m.1", op: 2, payload: <<1, 2, 255>>},
      %{type: :response, id: 1, status: 200, body: ~s({"payload":{"n":1}})},
      %{
        type: :response,
        id: 2,
        status: 404,
        body: ~s({"error":"not_found","message":"no rpc x"})
      },
      %{type: :match_data, match_id: "m.1", messages: [{1, "u1", "hi"}, {130, "", ""}]},
      %{
        type: :notify,
        kind: "match_presence",
        body: ~s({"match_id":"m.1","joins":[{"user_id":"u1"}],"leaves":[]})
      },
      %{
        type: :handshake,
        version: 2,
        tick_rate: 30,
        entity_id: 10_001,
        width: 724_077,
        height: 724_077,
        cell_size: 12_288,
        cols: 59,
        rows: 59,
        templates: Wire.__templates__(),
        input: Wire.__input__(),
        extensions: [{99, <<1, 2, 3>>}]
      },
      # A connection that joined no zone.
      Overworld.Protocol.handshake()
    ]

    %{
      "description" =>
        "Wire messages (docs/protocol.md, 'Messages'): each case is a message and its exact " <>
          "bytes; every kind but SNAPSHOT, whose vectors are snapshots.json and frames.json. " <>
          "Names: `client_event` is the client's RELIABLE (0x42), `event` the server's " <>
          "RELIABLE (0x03, EVENT); `seq` is `input_seq` in an INPUT and `reliable_seq` in a " <>
          "RELIABLE; `ack` is INPUT's `ack_tick`. `payload`, `token` and `message` are given " <>
          "as hex (`*_hex`) since they are bytes; a handshake's `templates` are ids of " <>
          "templates.json's `templates` (in that order), its `input` the id of templates.json's " <>
          "`input` (null: none). The second handshake is the one of a connection that joined " <>
          "no zone (no grid: every figure 0, no templates). `body` (REQUEST, RESPONSE, NOTIFY) " <>
          "is JSON text, given as a string; a MATCH_DATA's `messages` are " <>
          "`{op, sender, payload_hex}`. The TypeScript client encodes the client-to-server " <>
          "cases and decodes the others.",
      "messages" =>
        Enum.map(cases, fn m ->
          %{
            "message" => message_json(m),
            "hex" => Base.encode16(Overworld.Protocol.encode(m), case: :lower)
          }
        end)
    }
  end

  defp message_json(m) do
    Map.new(m, fn
      {:type, t} ->
        {"type", to_string(t)}

      {:templates, ts} ->
        {"templates", Enum.map(ts, & &1.id)}

      {:input, nil} ->
        {"input", :null}

      {:input, t} ->
        {"input", t.id}

      {:extensions, list} ->
        {"extensions",
         for({t, b} <- list, do: %{"type" => t, "hex" => Base.encode16(b, case: :lower)})}

      {:messages, list} ->
        {"messages",
         for(
           {op, sender, p} <- list,
           do: %{"op" => op, "sender" => sender, "payload_hex" => Base.encode16(p, case: :lower)}
         )}

      {k, v} when k in [:payload, :token, :message] ->
        {"#{k}_hex", Base.encode16(v, case: :lower)}

      {k, v} ->
        {to_string(k), v}
    end)
  end

  defp templates do
    %{
      "description" =>
        "Entity template encoding (docs/protocol.md, 'Templates'). Bits are written most " <>
          "significant first; `hex` is the record padded with zero bits to a whole byte and " <>
          "`bits` its exact length. Values: `q` the quantized integer, `value` what it stands " <>
          "for (units of 1/1024 m for fixed, 1/65536 turn for angles). Keyframe: every field. " <>
          "Delta: a mask (one bit per field, first field first), then per changed field: a " <>
          "field of diff_bits 0 (every enum and bool) its value; others 1 + a signed " <>
          "difference of diff_bits bits when it fits, i.e. in -2^(d-1)..2^(d-1)-1 (the " <>
          "cases include -2^(d-1), the lowest that fits, and +2^(d-1), one past the highest, " <>
          "sent whole), or 0 + the full value. `input`: an input layout (every field type); " <>
          "`inputs`: values a client gives (in the same units), the INPUT payload they make " <>
          "(quantized as the table says: clamped to 0..2^bits-1, angles wrapped, fixed " <>
          "values floored to their step) and `decoded`, what the server makes of the payload " <>
          "(numbers clamped again to the declared range, which the HANDSHAKE does not carry: " <>
          "mx, my -127..127, charge 0..1000, throttle -1..1 m).",
      "templates" => Enum.map(Wire.__templates__(), &schema/1),
      "keyframes" => Enum.flat_map(Wire.__templates__(), &keyframes/1),
      "deltas" => Enum.flat_map(Wire.__templates__(), &deltas/1),
      "input" => schema(Wire.__input__()),
      "inputs" => inputs(Wire.__input__())
    }
  end

  # Typed inputs: values (what the client gives) and the INPUT payload they make (a keyframe of
  # the input layout, padded to a byte).
  defp inputs(t) do
    exact = for q <- samples(t, 6), do: Template.to_map(t, q)

    # Values a client may give that are not exactly a quantized value: past the declared range
    # but within the bits (the server clamps them), past the bits (the client clamps), angles
    # past a turn or negative (wrapped), fixed values off their step (floored).
    given = [
      %{mx: 128, my: -128, aim: 70_000, stance: :run, fire: true, charge: 1023, throttle: 1024},
      %{mx: 500, my: -500, aim: -1, stance: :crouch, fire: false, charge: 5000, throttle: -2000},
      %{mx: 3, my: -3, aim: 255, stance: :walk, fire: true, charge: 7, throttle: 301}
    ]

    for values <- exact ++ given do
      bin = Template.encode_input(t, values)
      {:ok, decoded} = Template.decode_input(t, bin)
      json = &Map.new(&1, fn {k, v} -> {to_string(k), value_json(v)} end)

      %{
        "values" => json.(values),
        "hex" => Base.encode16(bin, case: :lower),
        "decoded" => json.(decoded)
      }
    end
  end

  defp schema(%Template{} = t) do
    %{
      "id" => t.id,
      "name" => to_string(t.name),
      "fields" =>
        Enum.map(t.fields, fn %Field{} = f ->
          %{
            "name" => to_string(f.name),
            "type" => to_string(f.type),
            "bits" => f.bits,
            "min" => f.min,
            "step" => f.step,
            "diff_bits" => f.diff_bits,
            "values" => if(f.values, do: Enum.map(f.values, &value_json/1), else: :null)
          }
        end)
    }
  end

  defp value_json(v) when is_boolean(v), do: v
  defp value_json(v) when is_atom(v), do: to_string(v)
  defp value_json(v), do: v

  # Edge values (all zeros, all ones) and a stream of pseudo-random ones.
  defp samples(t, n) do
    zeros = t.fields |> Enum.map(fn _ -> 0 end) |> List.to_tuple()
    ones = t.fields |> Enum.map(&max_q/1) |> List.to_tuple()
    {rest, _} = Enum.map_reduce(1..n, t.id * 7919 + 1, fn _, s -> random_values(t, s) end)
    [zeros, ones | rest]
  end

  defp max_q(%Field{values: values}) when is_list(values), do: length(values) - 1
  defp max_q(%Field{bits: b}), do: (1 <<< b) - 1

  defp random_values(t, s) do
    {vals, s} =
      Enum.map_reduce(t.fields, s, fn f, s ->
        s = Overworld.Random.next(s)
        {rem(s, max_q(f) + 1), s}
      end)

    {List.to_tuple(vals), s}
  end

  defp keyframes(t) do
    for q <- samples(t, 8) do
      bits = Template.encode_keyframe(t, q)

      %{
        "template" => t.id,
        "values" => values_json(t, q),
        "bits" => bit_size(bits),
        "hex" => hex(bits)
      }
    end
  end

  defp deltas(t) do
    [base | _] = samples = samples(t, 10)

    mid = t.fields |> Enum.map(&div(max_q(&1), 2)) |> List.to_tuple()

    pairs =
      Enum.zip(samples, tl(samples)) ++
        [{base, nudge(t, base, 1)}, {nudge(t, base, 3), nudge(t, base, -2)}] ++
        [{mid, edge(t, mid, -1)}, {mid, edge(t, mid, 1)}]

    for {old, new} <- pairs, bits = Template.encode_delta(t, old, new), bits != nil do
      %{
        "template" => t.id,
        "old" => values_json(t, old),
        "new" => values_json(t, new),
        "bits" => bit_size(bits),
        "hex" => hex(bits)
      }
    end
  end

  # Small changes (so the short differences and the angle wrap appear in the vectors).
  defp nudge(t, q, by) do
    t.fields
    |> Enum.with_index()
    |> Enum.map(fn
      {%Field{type: :angle, bits: b}, i} -> Integer.mod(elem(q, i) + by, 1 <<< b)
      {%Field{values: values}, i} when is_list(values) -> elem(q, i)
      {f, i} -> (elem(q, i) + by) |> max(0) |> min(max_q(f))
    end)
    |> List.to_tuple()
  end

  # Every numeric field moved by half its difference range: -2^(diff_bits-1) still travels as a
  # difference, +2^(diff_bits-1) no longer fits (the full value goes).
  defp edge(t, q, sign) do
    t.fields
    |> Enum.with_index()
    |> Enum.map(fn
      {%Field{values: nil, diff_bits: d} = f, i} when d > 0 ->
        Integer.mod(elem(q, i) + sign * (1 <<< (d - 1)), max_q(f) + 1)

      {_f, i} ->
        elem(q, i)
    end)
    |> List.to_tuple()
  end

  # Quantized values, and what each stands for.
  defp values_json(t, q) do
    t.fields
    |> Enum.with_index()
    |> Enum.map(fn {f, i} ->
      %{"q" => elem(q, i), "value" => value_json(Field.dequantize(f, elem(q, i)))}
    end)
  end

  defp hex(bits) do
    pad = rem(8 - rem(bit_size(bits), 8), 8)
    Base.encode16(<<bits::bitstring, 0::size(pad)>>, case: :lower)
  end
end

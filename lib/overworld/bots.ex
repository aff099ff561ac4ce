defmodule Overworld.Bots do
  @moduledoc """
  The bot swarm of `mix overworld.bots`: in-BEAM clients speaking the real protocol over real
  sockets (`Overworld.Client`). Each bot authenticates its device over HTTP, opens a WebSocket,
  sends HELLO, and then plays: every `1 / input_hz` seconds an INPUT whose payload its input
  module makes (`Overworld.Bots.Input`; by default `Overworld.Bots.Wander`, a random walk over
  the zone's input layout from the HANDSHAKE). A game whose inputs are raw bytes gives its own.

  Measured (shared `:counters` and `Overworld.Metrics.Histogram`s, so no per-sample lists):
  snapshots and bytes received, the interval between a bot's consecutive snapshots (and its
  distance from the tick period: the jitter), and the input-to-acknowledgement latency (from
  sending INPUT `seq` to receiving the first snapshot whose `input_ack` ≥ `seq`).

  With `:decode`, a bot also applies every snapshot to a client view
  (`Overworld.Protocol.Snapshot.View`, as the SDK does; a world's band keys and handed entities
  included) and counts: snapshots decoded and refused (`decode_errors`; it then asks for a
  RESYNC), snapshots in which its own avatar is not shown (`self_missing`, after its first 10),
  entities that stood within #{40} m of it in one snapshot and are shown nowhere in the next
  (`vanished`: a blink, or a despawn; `vanished_held_back` instead when either snapshot held
  cells back for the byte budget: an entity that moved from a cell sent into a cell held back
  is shown again when that cell's blocks come, docs/protocol.md), and its crossings of the world's centre lines (the
  borders of a 2 × 2 world). Its input module gets the avatar's position
  (`c:Overworld.Bots.Input.observe/2`).
  """
  require Logger
  alias Overworld.Client
  alias Overworld.Metrics.Histogram
  alias Overworld.Protocol.Snapshot
  alias Overworld.Template.Field

  use Overworld.Metrics.Counters, [
    :connected,
    :failed,
    :snapshots,
    :bytes,
    :inputs,
    :closed,
    # With `:decode`:
    :decoded,
    :decode_errors,
    :self_missing,
    :vanished,
    :vanished_held_back,
    :crossings
  ]

  @typedoc "Shared measurements of a swarm."
  @type t :: %{
          counters: :counters.counters_ref(),
          interval: Histogram.t(),
          jitter: Histogram.t(),
          ack: Histogram.t()
        }

  @doc false
  @spec new() :: t
  def new do
    %{
      counters: new_counters(),
      interval: Histogram.new(),
      jitter: Histogram.new(),
      ack: Histogram.new()
    }
  end

  @doc false
  @spec counts(t) :: %{atom => non_neg_integer}
  def counts(%{counters: c}), do: read_counters(c)

  @doc false
  @spec snapshot(t) :: map
  def snapshot(m) do
    %{
      counts: counts(m),
      interval: Histogram.snapshot(m.interval),
      jitter: Histogram.snapshot(m.jitter),
      ack: Histogram.snapshot(m.ack),
      at: System.monotonic_time(:microsecond)
    }
  end

  @doc """
  Starts one bot (linked to the caller). Options: `:host`, `:port`, `:path` (with its query),
  `:device` (device id), `:input_hz`, `:input` (an `Overworld.Bots.Input` module, default
  `Overworld.Bots.Wander`), `:ip` (local address), `:seed`, `:decode` (boolean, default false).
  """
  @spec start(t, keyword) :: pid
  def start(m, opts), do: spawn_link(fn -> run(m, opts) end)

  defp run(m, opts) do
    host = Keyword.fetch!(opts, :host)
    port = Keyword.fetch!(opts, :port)
    copts = if ip = opts[:ip], do: [ip: ip], else: []
    seed = Keyword.get(opts, :seed, 1)
    input = Keyword.get(opts, :input, Overworld.Bots.Wander)

    with {:ok, %{"token" => token}} <-
           Client.authenticate_device(host, port, Keyword.fetch!(opts, :device), copts),
         {:ok, c} <- Client.connect(host, port, Keyword.fetch!(opts, :path), copts),
         :ok <-
           Client.send_msg(c, %{type: :hello, version: Overworld.Protocol.version(), token: token}),
         {:ok, {:binary, hs}, c} <- Client.recv(c, 10_000),
         {:ok, %{type: :handshake, tick_rate: rate} = hs} <- Overworld.Protocol.decode(hs) do
      :counters.add(m.counters, counter(:connected), 1)
      :ok = :inet.setopts(c.sock, active: 100)
      period = div(1_000_000, max(rate, 1))
      every = div(1000, Keyword.get(opts, :input_hz, 10))
      Process.send_after(self(), :input, :rand.uniform(every))

      # (Loaded first: the optional callbacks are looked up on the loaded module.)
      Code.ensure_loaded(input)

      state =
        if function_exported?(input, :init, 3),
          do: input.init(seed, hs.input, hs),
          else: input.init(seed, hs.input)

      loop(%{
        m: m,
        c: c,
        buf: c.buf,
        period: period,
        every: every,
        seq: 0,
        pending: :queue.new(),
        tick: 0,
        last: nil,
        input: {input, state},
        decode: if(opts[:decode], do: decoder(hs, input))
      })
    else
      _ -> :counters.add(m.counters, counter(:failed), 1)
    end
  end

  defp loop(%{c: %{sock: sock}} = b) do
    receive do
      {:tcp, ^sock, data} ->
        loop(frames(%{b | buf: b.buf <> data}))

      {:tcp_passive, ^sock} ->
        :inet.setopts(sock, active: 100)
        loop(b)

      {:tcp_closed, ^sock} ->
        :counters.add(b.m.counters, counter(:closed), 1)

      :input ->
        Process.send_after(self(), :input, b.every)
        loop(input(b))

      :stop ->
        Client.close(b.c)
    end
  end

  defp input(%{input: {mod, state}} = b) do
    {payload, state} = mod.next(state)
    seq = b.seq + 1
    Client.send_msg(b.c, %{type: :input, seq: seq, ack: b.tick, payload: payload})
    :counters.add(b.m.counters, counter(:inputs), 1)
    now = System.monotonic_time(:microsecond)
    %{b | seq: seq, input: {mod, state}, pending: :queue.in({seq, now}, b.pending)}
  end

  defp frames(b) do
    case Client.parse(b.buf) do
      {:ok, {:binary, <<2, _::binary>> = snap}, rest} -> frames(snapshot(%{b | buf: rest}, snap))
      {:ok, {:close, _, _}, _rest} -> %{b | buf: <<>>}
      {:ok, _other, rest} -> frames(%{b | buf: rest})
      :more -> b
    end
  end

  # Only the header is read (tick, baseline, input ack): bots do not hold the world.
  defp snapshot(b, <<2, rest::binary>> = snap) do
    now = System.monotonic_time(:microsecond)
    m = b.m
    :counters.add(m.counters, counter(:snapshots), 1)
    :counters.add(m.counters, counter(:bytes), byte_size(snap) + frame_header(byte_size(snap)))

    if b.last do
      interval = now - b.last
      Histogram.record(m.interval, interval)
      Histogram.record(m.jitter, abs(interval - b.period))
    end

    with {:ok, tick, rest} <- Overworld.Protocol.Codec.read_varint(rest),
         {:ok, _baseline, rest} <- Overworld.Protocol.Codec.read_varint(rest),
         {:ok, ack, _} <- Overworld.Protocol.Codec.read_varint(rest) do
      decode(%{b | last: now, tick: tick, pending: acked(b.pending, ack, now, m.ack)}, snap)
    else
      _ -> decode(%{b | last: now}, snap)
    end
  end

  ## Decoding bots

  # Within this distance (units) of the bot, an entity shown in one snapshot must be shown in
  # the next.
  @near 40 * 1024

  defp decoder(hs, input) do
    templates = hs.templates

    xy =
      Enum.map(templates, fn t ->
        names = Enum.map(t.fields, &to_string(&1.name))
        {i, j} = {Enum.find_index(names, &(&1 == "x")), Enum.find_index(names, &(&1 == "y"))}
        i && j && {i, Enum.at(t.fields, i), j, Enum.at(t.fields, j)}
      end)
      |> List.to_tuple()

    %{
      view: Snapshot.View.new(hs.cols, hs.rows),
      templates: templates,
      xy: xy,
      me: hs.entity_id,
      observe?: function_exported?(input, :observe, 2),
      mid: {div(hs.width, 2), div(hs.height, 2)},
      quadrant: nil,
      near: [],
      held_back?: false,
      frames: 0
    }
  end

  defp decode(%{decode: nil} = b, _snap), do: b

  defp decode(%{decode: d, m: m} = b, snap) do
    case Snapshot.apply(d.view, snap, d.templates) do
      {:ok, view} ->
        :counters.add(m.counters, counter(:decoded), 1)
        shown = Snapshot.View.entities(view)
        d = %{d | view: view, frames: d.frames + 1}

        case position(d, shown[d.me]) do
          nil ->
            if d.frames > 10 do
              :counters.add(m.counters, counter(:self_missing), 1)

              Logger.warning(
                "bot of entity #{d.me}: its avatar is not in snapshot #{view.tick} " <>
                  "(#{map_size(view.cells)} cells, cells held back: #{held_back?(view)}, " <>
                  "#{map_size(view.handed)} handed)"
              )
            end

            %{b | decode: d}

          {x, y} = at ->
            gone = Enum.count(d.near, &(not is_map_key(shown, &1)))
            held_back? = held_back?(view)

            if gone > 0 do
              kind = if held_back? or d.held_back?, do: :vanished_held_back, else: :vanished
              :counters.add(m.counters, counter(kind), gone)
            end

            {mx, my} = d.mid
            quadrant = {x > mx, y > my}

            if d.quadrant && quadrant != d.quadrant,
              do: :counters.add(m.counters, counter(:crossings), 1)

            near =
              for {id, e} <- shown,
                  {ex, ey} <- [position(d, e)],
                  (ex - x) * (ex - x) + (ey - y) * (ey - y) < @near * @near,
                  do: id

            {mod, st} = b.input
            st = if d.observe?, do: mod.observe(st, at), else: st
            d = %{d | near: near, quadrant: quadrant, held_back?: held_back?}
            %{b | decode: d, input: {mod, st}}
        end

      {:error, why} ->
        Logger.warning(
          "bot of entity #{d.me}: snapshot refused (#{inspect(why)}), asking a resync"
        )

        :counters.add(m.counters, counter(:decode_errors), 1)
        Client.send_msg(b.c, %{type: :resync, reason: 3, last_tick: d.view.tick})
        %{b | decode: %{d | near: []}}
    end
  end

  # Whether the snapshot held cells back (cells at an older tick than the view's).
  defp held_back?(%Snapshot.View{ticks: ticks, tick: tick}),
    do: Enum.any?(ticks, fn {_k, t} -> t < tick end)

  # An entity's position (units) from its template's x and y fields; nil without them.
  defp position(_d, nil), do: nil

  defp position(d, {ti, q}) do
    case elem(d.xy, ti) do
      nil -> nil
      {i, fx, j, fy} -> {Field.dequantize(fx, elem(q, i)), Field.dequantize(fy, elem(q, j))}
    end
  end

  defp frame_header(n) when n < 126, do: 2
  defp frame_header(n) when n < 65_536, do: 4
  defp frame_header(_n), do: 10

  defp acked(pending, ack, now, h) do
    case :queue.peek(pending) do
      {:value, {seq, sent}} when seq <= ack ->
        Histogram.record(h, now - sent)
        acked(:queue.drop(pending), ack, now, h)

      _ ->
        pending
    end
  end
end

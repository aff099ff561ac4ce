defmodule Overworld.Bots.Input do
  @moduledoc """
  What a bot of `mix overworld.bots` (`Overworld.Bots`) sends as the payload of each INPUT. The
  default, `Overworld.Bots.Wander`, plays any zone that declares its input layout (its typed
  inputs, `Overworld.Template`'s `input`); a game whose inputs are raw bytes can give the bots a
  module of its own (`mix overworld.bots --input MyGame.BotInput`).

  1. `c:init/2` once per bot, with the bot's seed (bots differ by seed; runs are repeatable) and
     the zone's input layout from the HANDSHAKE (nil when the zone declares none); or, when the
     module defines it, `c:init/3`, which gets the whole HANDSHAKE too (the world's size).
  2. `c:next/1` before every INPUT: the payload bytes and the next state.
  3. `c:observe/2` (optional), with bots that decode their snapshots (`mix overworld.bots
     --decode`): the position of the bot's own avatar (units) after every snapshot.
  """

  @doc "The state of one bot's inputs, from its seed and the zone's input layout (or nil)."
  @callback init(seed :: integer, layout :: Overworld.Template.t() | nil) :: state :: term

  @doc "The payload of the bot's next INPUT, and the state after it."
  @callback next(state :: term) :: {payload :: binary, state :: term}

  @doc "As `c:init/2`, with the decoded HANDSHAKE (`Overworld.Protocol.decode/1`)."
  @callback init(seed :: integer, layout :: Overworld.Template.t() | nil, handshake :: map) ::
              state :: term

  @doc "The bot's avatar stands at `{x, y}` (units) after the last snapshot."
  @callback observe(state :: term, {integer, integer}) :: state :: term

  @optional_callbacks init: 3, observe: 2
end

defmodule Overworld.Bots.BorderWalk do
  @moduledoc """
  A bot input that walks back and forth across a border between zones: the avatar heads for
  the nearer of the world's two centre lines (`x = width / 2` or `y = height / 2`: the borders
  of a world of 2 × 2 zones, or of any even split), then walks across it and back, turning
  15 m past it on either side (so it crosses the hysteresis band and is handed over each time).
  It needs the avatar's position: run the bots with `--decode`. The stick is the input layout's
  `mx`, `my` (-127..127, the goblin world's); a zone without a layout gets them as two signed
  bytes.

      iex> w = Overworld.Bots.BorderWalk
      iex> s = w.init(1, nil, %{width: 200 * 1024, height: 200 * 1024})
      iex> {<<0, 0>>, s} = w.next(s)
      iex> s = w.observe(s, {90 * 1024, 30 * 1024})
      iex> {<<127, 0>>, s} = w.next(s)
      iex> s = w.observe(s, {116 * 1024, 30 * 1024})
      iex> {<<-127::signed-8, 0>>, _} = w.next(s)
  """
  @behaviour Overworld.Bots.Input

  alias Overworld.Template

  # How far past the line the walk turns (units).
  @past 15 * 1024

  @impl true
  def init(seed, layout), do: init(seed, layout, %{width: 0, height: 0})

  @impl true
  def init(_seed, layout, hs),
    do: %{layout: layout, mid: {div(hs.width, 2), div(hs.height, 2)}, at: nil, axis: nil, side: 1}

  @impl true
  def observe(st, {x, y}) do
    {mx, my} = st.mid
    # The nearer line, chosen once; the first side is the far one.
    st =
      if st.axis,
        do: st,
        else:
          if(abs(x - mx) <= abs(y - my),
            do: %{st | axis: 0, side: if(x < mx, do: 1, else: -1)},
            else: %{st | axis: 1, side: if(y < my, do: 1, else: -1)}
          )

    p = elem({x, y}, st.axis)
    line = elem(st.mid, st.axis)
    side = if st.side * (p - line) >= @past, do: -st.side, else: st.side
    %{st | at: {x, y}, side: side}
  end

  @impl true
  def next(%{at: nil} = st), do: {encode(st.layout, 0, 0), st}

  def next(%{axis: 0, side: s} = st), do: {encode(st.layout, 127 * s, 0), st}
  def next(%{axis: 1, side: s} = st), do: {encode(st.layout, 0, 127 * s), st}

  defp encode(nil, mx, my), do: <<mx::signed-8, my::signed-8>>

  defp encode(%Template{fields: fields} = layout, mx, my) do
    values =
      Map.new(fields, fn f ->
        v =
          case to_string(f.name) do
            "mx" -> mx
            "my" -> my
            _ -> rest(f)
          end

        {f.name, v}
      end)

    Template.encode_input(layout, values)
  end

  # (An enum's first value; a bool's values are false, true.)
  defp rest(%{values: [v | _]}), do: v
  defp rest(_field), do: 0
end

defmodule Overworld.Bots.Wander do
  @moduledoc """
  The bots' default input: a random walk over the zone's input layout. Each field takes a
  random value in its range (integers, fixed-point lengths and angles uniformly; an enum one of
  its values; a bool either), kept for the next inputs and changed with probability 1/10 each
  time, and the payload is the layout's encoding (`Overworld.Template.encode_input/2`). A zone
  without a layout gets two random signed bytes, -127..127, a stick's axes.

      iex> layout = Overworld.Template.Test.Wire.__input__()
      iex> {bin, _} = Overworld.Bots.Wander.next(Overworld.Bots.Wander.init(1, layout))
      iex> {:ok, %{turn: turn, jump: jump}} = Overworld.Template.decode_input(layout, bin)
      iex> turn in -127..127 and is_boolean(jump)
      true
  """
  @behaviour Overworld.Bots.Input

  alias Overworld.Template
  alias Overworld.Template.Field

  @impl true
  def init(seed, layout), do: {:rand.seed_s(:exsss, {seed, 7, 11}), layout, nil}

  @impl true
  def next({rand, layout, values}) do
    {turn, rand} = :rand.uniform_s(10, rand)

    {values, rand} = if values == nil or turn == 1, do: draw(layout, rand), else: {values, rand}

    {encode(layout, values), {rand, layout, values}}
  end

  defp draw(nil, rand) do
    {x, rand} = :rand.uniform_s(255, rand)
    {y, rand} = :rand.uniform_s(255, rand)
    {{x - 128, y - 128}, rand}
  end

  defp draw(%Template{fields: fields}, rand) do
    {pairs, rand} =
      Enum.map_reduce(fields, rand, fn f, rand ->
        {v, rand} = value(f, rand)
        {{f.name, v}, rand}
      end)

    {Map.new(pairs), rand}
  end

  defp value(%Field{values: [_ | _] = values}, rand) do
    {i, rand} = :rand.uniform_s(length(values), rand)
    {Enum.at(values, i - 1), rand}
  end

  defp value(%Field{bits: b} = f, rand) do
    {q, rand} = :rand.uniform_s(Bitwise.bsl(1, b), rand)
    {Field.dequantize(f, q - 1), rand}
  end

  defp encode(nil, {x, y}), do: <<max(x, -127)::signed-8, max(y, -127)::signed-8>>
  defp encode(layout, values), do: Template.encode_input(layout, values)
end

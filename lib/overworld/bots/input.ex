defmodule Overworld.Bots.Input do
  @moduledoc """
  What a bot of `mix overworld.bots` (`Overworld.Bots`) sends as the payload of each INPUT. The
  default, `Overworld.Bots.Wander`, plays any zone that declares its input layout (its typed
  inputs, `Overworld.Template`'s `input`); a game whose inputs are raw bytes can give the bots a
  module of its own (`mix overworld.bots --input MyGame.BotInput`).

  1. `c:init/2` once per bot, with the bot's seed (bots differ by seed; runs are repeatable) and
     the zone's input layout from the HANDSHAKE (nil when the zone declares none).
  2. `c:next/1` before every INPUT: the payload bytes and the next state.
  """

  @doc "The state of one bot's inputs, from its seed and the zone's input layout (or nil)."
  @callback init(seed :: integer, layout :: Overworld.Template.t() | nil) :: state :: term

  @doc "The payload of the bot's next INPUT, and the state after it."
  @callback next(state :: term) :: {payload :: binary, state :: term}
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

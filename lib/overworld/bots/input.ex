defmodule Overworld.Bots.Input do
  @moduledoc """
  What a bot of `mix overworld.bots` (`Overworld.Bots`) sends as the payload of each INPUT:
  a game whose inputs are not `Overworld.Bots.Stick`'s gives the bots a module of its own
  (`mix overworld.bots --input MyGame.BotInput`).

  1. `c:init/1` once per bot, with the bot's seed (bots differ by seed; runs are repeatable).
  2. `c:next/1` before every INPUT: the payload bytes (what the game's
     `c:Overworld.Zone.decode_input/1` reads) and the next state.
  """

  @doc "The state of one bot's inputs, from its seed."
  @callback init(seed :: integer) :: state :: term

  @doc "The payload of the bot's next INPUT, and the state after it."
  @callback next(state :: term) :: {payload :: binary, state :: term}
end

defmodule Overworld.Bots.Stick do
  @moduledoc """
  The bots' default input: a stick's two axes as two signed bytes `x, y` in -127..127 (full
  deflection 127), walking at random: a new direction on the first input and with probability
  1/10 on each one after.

      iex> s = Overworld.Bots.Stick.init(1)
      iex> {<<x::signed-8, y::signed-8>>, _} = Overworld.Bots.Stick.next(s)
      iex> x in -127..127 and y in -127..127
      true
  """
  @behaviour Overworld.Bots.Input

  @impl true
  def init(seed), do: {:rand.seed_s(:exsss, {seed, 7, 11}), nil}

  @impl true
  def next({rand, dir}) do
    {turn, rand} = :rand.uniform_s(10, rand)

    {{x, y}, rand} =
      if dir == nil or turn == 1 do
        {x, rand} = :rand.uniform_s(255, rand)
        {y, rand} = :rand.uniform_s(255, rand)
        {{max(x - 128, -127), max(y - 128, -127)}, rand}
      else
        {dir, rand}
      end

    {<<x::signed-8, y::signed-8>>, {rand, {x, y}}}
  end
end

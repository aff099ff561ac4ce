defmodule Overworld.Random do
  @moduledoc """
  The deterministic pseudo-random generator of the simulation: a 32-bit xorshift.

  Every entity carries its own generator state (`entity(e, :rng)`), seeded at spawn from the
  zone seed and the entity id with `seed_for/2`, so an entity's draws never depend on which
  worker simulates it or in which order: the same seed and inputs give the same world on one
  worker or many. The state is a positive integer below 2^32; a draw advances the state first
  and uses the new state. The same functions are written in the native reference
  (`bench/reference`) and described in `docs/goblins-scenario.md`.
  """
  import Bitwise

  @mask 0xFFFFFFFF

  @typedoc "A generator state: an integer in 1..2^32-1."
  @type state :: pos_integer

  @doc """
  Advances a state by one xorshift32 step.

      iex> Overworld.Random.next(1)
      270369
      iex> Overworld.Random.next(270369)
      67634689
  """
  @spec next(state) :: state
  def next(x) do
    x = bxor(x, band(x <<< 13, @mask))
    x = bxor(x, x >>> 17)
    bxor(x, band(x <<< 5, @mask))
  end

  @doc """
  Draws an integer in `0..n-1`; returns it with the new state.

      iex> {v, s} = Overworld.Random.uniform(1, 10)
      iex> {v, s}
      {9, 270369}
  """
  @spec uniform(state, pos_integer) :: {non_neg_integer, state}
  def uniform(state, n) when is_integer(n) and n > 0 do
    s = next(state)
    {rem(s, n), s}
  end

  @doc """
  Seeds an entity's generator from a zone seed and the entity id (the lowbias32 integer hash).
  Never returns 0, which would make xorshift stick.

      iex> Overworld.Random.seed_for(0, 1)
      3298878556
      iex> Overworld.Random.seed_for(0, 1) == Overworld.Random.seed_for(1, 1)
      false
  """
  @spec seed_for(integer, integer) :: state
  def seed_for(seed, id) do
    h = band(seed * 0x9E3779B1 + id * 0x85EBCA77, @mask)
    h = bxor(h, h >>> 16)
    h = band(h * 0x7FEB352D, @mask)
    h = bxor(h, h >>> 15)
    h = band(h * 0x846CA68B, @mask)
    h = bxor(h, h >>> 16)
    if h == 0, do: 0x6D2B79F5, else: h
  end
end

defmodule Overworld.Protocol.Codec do
  @moduledoc """
  The byte-level pieces of the wire format (docs/protocol.md): varints, zigzag, strings.

  Readers answer `{:ok, value, rest}` or `{:error, reason}`; they never raise and never create
  atoms. Varints carry at most 53 bits, so that a JavaScript number holds them exactly.

      iex> Overworld.Protocol.Codec.varint(300)
      <<172, 2>>
      iex> Overworld.Protocol.Codec.read_varint(<<172, 2, 9>>)
      {:ok, 300, <<9>>}
      iex> Overworld.Protocol.Codec.zigzag(-3)
      5
      iex> Overworld.Protocol.Codec.read_string(<<3, "abc", 1>>)
      {:ok, "abc", <<1>>}
  """
  import Bitwise

  @max (1 <<< 53) - 1

  @doc "An unsigned LEB128 varint (0..2^53-1)."
  @spec varint(non_neg_integer) :: binary
  def varint(n) when is_integer(n) and n >= 0 and n <= @max, do: leb(n, <<>>)

  defp leb(n, acc) when n < 128, do: <<acc::binary, n>>
  defp leb(n, acc), do: leb(n >>> 7, <<acc::binary, 1::1, band(n, 127)::7>>)

  @doc "Reads a varint."
  @spec read_varint(binary) :: {:ok, non_neg_integer, binary} | {:error, atom}
  def read_varint(bin), do: read_leb(bin, 0, 0)

  defp read_leb(_bin, _acc, shift) when shift > 49, do: {:error, :varint_too_long}
  defp read_leb(<<0::1, v::7, rest::binary>>, acc, shift), do: check(acc + (v <<< shift), rest)

  defp read_leb(<<1::1, v::7, rest::binary>>, acc, shift),
    do: read_leb(rest, acc + (v <<< shift), shift + 7)

  defp read_leb(_bin, _acc, _shift), do: {:error, :truncated}

  defp check(v, rest) when v <= @max, do: {:ok, v, rest}
  defp check(_v, _rest), do: {:error, :varint_too_long}

  @doc """
  Zigzag: signed integers to unsigned ones (0, -1, 1, -2 ... → 0, 1, 2, 3 ...).

      iex> Enum.map([0, -1, 1, -2, 2], &Overworld.Protocol.Codec.zigzag/1)
      [0, 1, 2, 3, 4]
      iex> Overworld.Protocol.Codec.unzigzag(5)
      -3
  """
  @spec zigzag(integer) :: non_neg_integer
  def zigzag(n) when n >= 0, do: n * 2
  def zigzag(n), do: -n * 2 - 1

  @spec unzigzag(non_neg_integer) :: integer
  def unzigzag(u) when rem(u, 2) == 0, do: div(u, 2)
  def unzigzag(u), do: -div(u + 1, 2)

  @doc "A string: varint byte length, then the bytes (UTF-8 text by convention)."
  @spec string(binary) :: binary
  def string(s) when is_binary(s), do: <<varint(byte_size(s))::binary, s::binary>>

  @doc "Reads a string (at most `max` bytes, default 65535)."
  @spec read_string(binary, non_neg_integer) :: {:ok, binary, binary} | {:error, atom}
  def read_string(bin, max \\ 65_535) do
    with {:ok, n, rest} <- read_varint(bin) do
      case rest do
        _ when n > max -> {:error, :string_too_long}
        <<s::binary-size(n), rest::binary>> -> {:ok, s, rest}
        _ -> {:error, :truncated}
      end
    end
  end
end

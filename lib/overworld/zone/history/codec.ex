defmodule Overworld.Zone.History.Codec do
  @moduledoc false
  # The file format of a history dump (`Overworld.Zone.History.write/2`): a magic, the format
  # version, the CRC-32 of what follows the header and its length, then the zone module's name
  # (to load it before decoding) and the compressed term.

  alias Overworld.Spatial.Grid
  alias Overworld.Zone.{Config, History}

  @magic "OVERWORLD-HISTORY"
  @version 1

  @spec version() :: pos_integer
  def version, do: @version

  @spec encode(History.dump()) :: binary
  def encode(%{format: 1, config: %Config{module: module}} = dump) do
    name = Atom.to_string(module)

    body =
      <<byte_size(name)::16, name::binary, :erlang.term_to_binary(dump, [:compressed])::binary>>

    <<@magic, @version::8, :erlang.crc32(body)::32, byte_size(body)::64, body::binary>>
  end

  @spec decode(binary, keyword) :: {:ok, History.dump()} | {:error, term}
  def decode(bin, opts \\ [])

  def decode(<<@magic, @version::8, crc::32, size::64, body::binary>>, opts) do
    cond do
      byte_size(body) < size -> {:error, {:truncated, byte_size(body), size}}
      byte_size(body) > size -> {:error, {:trailing_bytes, byte_size(body) - size}}
      :erlang.crc32(body) != crc -> {:error, :checksum}
      true -> decode_body(body, Keyword.get(opts, :atoms, :existing))
    end
  end

  def decode(<<@magic, version::8, _::binary>>, _opts),
    do: {:error, {:unsupported_version, version}}

  def decode(_other, _opts), do: {:error, :not_a_dump}

  # By default (`atoms: :existing`) the term is decoded with `:safe`: it may create no atom,
  # so a file from anywhere cannot fill the atom table of a long-running node (the checksum
  # only proves the file was not damaged, not where it came from). Its atoms are mostly those
  # of the zone's game code (entity kinds, states, the game state) and of Overworld's structs,
  # which exist once their modules are loaded; modules load on demand, so the zone module
  # named in the header is loaded first (its name becomes an atom only if its .beam is on the
  # code path). Other atoms (a zone id or game data made at run time, the node name in a pid
  # or reference) may not exist here: such a dump is refused, unless the caller allows them
  # with `atoms: :create` (`mix overworld.replay`: a short-lived tool reading the operator's
  # own file, where atoms cost nothing; decoding still runs no code).
  defp decode_body(<<len::16, name::binary-size(len), term::binary>>, atoms) do
    with :ok <- load_module(name) do
      for m <- [Config, Grid, Overworld.Entity], do: Code.ensure_loaded(m)
      safe = if atoms == :create, do: [], else: [:safe]

      try do
        case :erlang.binary_to_term(term, safe) do
          %{format: 1, config: %Config{}, keyframe: %{}, ticks: ticks} = dump
          when is_list(ticks) ->
            {:ok, dump}

          _ ->
            {:error, :not_a_dump}
        end
      rescue
        ArgumentError -> {:error, if(safe == [], do: :not_a_dump, else: {:unknown_atoms, name})}
      end
    end
  end

  defp decode_body(_, _atoms), do: {:error, :not_a_dump}

  defp load_module(name) do
    file = String.to_charlist(name <> ".beam")

    module =
      try do
        String.to_existing_atom(name)
      rescue
        ArgumentError -> if :code.where_is_file(file) != :non_existing, do: String.to_atom(name)
      end

    case module && Code.ensure_loaded(module) do
      {:module, _} -> :ok
      _ -> {:error, {:unknown_module, name}}
    end
  end
end

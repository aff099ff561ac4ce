defmodule Overworld.World.Handover do
  @moduledoc false
  # A zone's files on their way to another node (`Overworld.World.Placer`): read from the
  # zone's directory once it was released (`Overworld.Zone.release/1`: a snapshot of its last
  # tick, the journal synced), sent in chunks of at most 256 KiB (one large snapshot does not
  # hold up the other messages on the same distribution link for long), and installed on the
  # new node: written into a directory beside the zone's, each file fsynced, then renamed over
  # the zone's directory (the parent fsynced), so the zone starting there finds the whole set
  # or its old one, never a part.

  alias Overworld.Persistence.Dir

  @chunk 256 * 1024

  @typedoc "A chunk of a file: its name in the zone's directory, and bytes."
  @type chunk :: {String.t(), binary}

  @doc """
  The chunks of the files a zone needs to start from its directory: the snapshots, the
  journal's segments and the epoch, in order (a file's chunks in order).
  """
  @spec chunks(Path.t()) :: {:ok, [chunk]} | {:error, term}
  def chunks(dir) do
    with {:ok, names} <- File.ls(dir) do
      names
      |> Enum.filter(&zone_file?/1)
      |> Enum.sort()
      |> Enum.reduce_while({:ok, []}, fn name, {:ok, acc} ->
        case File.read(Path.join(dir, name)) do
          {:ok, bytes} -> {:cont, {:ok, split(name, bytes, acc)}}
          {:error, reason} -> {:halt, {:error, {name, reason}}}
        end
      end)
      |> case do
        {:ok, acc} -> {:ok, Enum.reverse(acc)}
        error -> error
      end
    end
  end

  # (The epoch file too: the copy's ownership epoch, Overworld.World.Copies.)
  defp zone_file?(name),
    do: name in ["snapshot", "snapshot.prev", "epoch"] or String.starts_with?(name, "journal.")

  defp split(name, bytes, acc), do: Enum.reverse(Enum.map(split(bytes), &{name, &1}), acc)

  @doc "Bytes in chunks of at most 256 KiB (one at least)."
  @spec split(binary) :: [binary]
  def split(bytes) when byte_size(bytes) <= @chunk, do: [bytes]
  def split(<<part::binary-size(@chunk), rest::binary>>), do: [part | split(rest)]

  @doc """
  Sends chunks one call at a time (`message.(chunk)` to `server`, which answers `:ok`), so
  that no more than one chunk is on the distribution link at once; stops at the first other
  answer.
  """
  @spec call_each(GenServer.server(), [term], (term -> term)) :: :ok | term
  def call_each(server, chunks, message) do
    Enum.reduce_while(chunks, :ok, fn chunk, :ok ->
      case GenServer.call(server, message.(chunk), 30_000) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  @doc "Adds a received chunk to the files so far (a map of names to chunks, newest first)."
  @spec add(%{optional(String.t()) => [binary]}, chunk) :: %{optional(String.t()) => [binary]}
  def add(files, {name, bytes}) when is_binary(name) and is_binary(bytes) do
    if zone_file?(name) and Path.basename(name) == name,
      do: Map.update(files, name, [bytes], &[bytes | &1]),
      else: raise(ArgumentError, "not a zone file: #{inspect(name)}")
  end

  @doc """
  Installs the files received (`add/2`) as the zone directory `dir`, replacing what was
  there.
  """
  @spec install(Path.t(), %{optional(String.t()) => [binary]}) :: :ok | {:error, term}
  def install(dir, files) do
    incoming = dir <> ".incoming"
    old = dir <> ".old"
    _ = File.rm_rf(incoming)
    _ = File.rm_rf(old)

    with :ok <- Dir.make(incoming),
         :ok <- write_all(incoming, files),
         :ok <- Dir.sync(incoming),
         :ok <- set_aside(dir, old),
         :ok <- File.rename(incoming, dir),
         :ok <- Dir.sync(Path.dirname(dir)) do
      _ = File.rm_rf(old)
      :ok
    end
  end

  defp write_all(dir, files) do
    Enum.reduce_while(files, :ok, fn {name, parts}, :ok ->
      case Dir.write_synced(Path.join(dir, name), Enum.reverse(parts)) do
        :ok -> {:cont, :ok}
        error -> {:halt, error}
      end
    end)
  end

  defp set_aside(dir, old) do
    case File.rename(dir, old) do
      :ok -> :ok
      {:error, :enoent} -> :ok
      error -> error
    end
  end
end

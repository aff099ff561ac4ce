defmodule Overworld.Persistence.SnapshotFile do
  @moduledoc """
  A zone's snapshot on disk: the whole state as one checksummed file, replaced atomically
  (issue 5 builds zone recovery on it; DESIGN.md §7).

  ## Format

  `"OWS"`, a format version byte (1), then `<<length::64, crc32::32, payload::binary>>`, the
  payload being the state as `:erlang.term_to_binary/1`. A file whose length, checksum or
  payload does not verify is refused as a whole.

  ## Writing

  `write/2` writes `<name>.tmp`, fsyncs it, reads it back and verifies it, then keeps the
  current snapshot as `<name>.prev`, renames the new one into place and fsyncs the directory
  (`Overworld.Persistence.Dir`: the renames survive a power loss). A crash at any point
  leaves a valid snapshot behind: before the renames, the current one; between them, the
  previous one (`read/1` falls back to it).

      iex> dir = Path.join(System.tmp_dir!(), "snap-doc-#{System.os_time()}")
      iex> path = Path.join(dir, "zone.snap")
      iex> :ok = Overworld.Persistence.SnapshotFile.write(path, %{tick: 30, entities: [1, 2]})
      iex> Overworld.Persistence.SnapshotFile.read(path)
      {:ok, %{tick: 30, entities: [1, 2]}, :current}
      iex> File.rm_rf!(dir) != []
      true
  """

  alias Overworld.Persistence.Dir

  @magic <<"OWS", 1>>

  @doc "Encodes a state as a snapshot file's bytes."
  @spec encode(term) :: iodata
  def encode(state) do
    payload = :erlang.term_to_binary(state)
    [@magic, <<byte_size(payload)::64, :erlang.crc32(payload)::32>>, payload]
  end

  @doc """
  Decodes a snapshot file's bytes; never raises.

      iex> alias Overworld.Persistence.SnapshotFile
      iex> SnapshotFile.decode(IO.iodata_to_binary(SnapshotFile.encode({:state, 1})))
      {:ok, {:state, 1}}
      iex> SnapshotFile.decode("OWS" <> <<1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 0, 0, 0>>)
      {:error, :truncated}
      iex> SnapshotFile.decode("hello")
      {:error, :not_a_snapshot}
  """
  @spec decode(binary) :: {:ok, term} | {:error, atom}
  def decode(<<@magic, len::64, crc::32, payload::binary-size(len)>>) do
    if :erlang.crc32(payload) == crc do
      try do
        {:ok, :erlang.binary_to_term(payload, [:safe])}
      rescue
        ArgumentError -> {:error, :undecodable}
      end
    else
      {:error, :bad_checksum}
    end
  end

  def decode(<<@magic, len::64, _crc::32, rest::binary>>) when byte_size(rest) > len,
    do: {:error, :trailing_bytes}

  def decode(<<@magic, _::binary>>), do: {:error, :truncated}
  def decode(<<"OWS", _version, _::binary>>), do: {:error, :unknown_version}
  def decode(_), do: {:error, :not_a_snapshot}

  @doc """
  Writes a snapshot (see the moduledoc): `:ok` once the new file is synced, verified and in
  place.
  """
  @spec write(Path.t(), term) :: :ok | {:error, term}
  def write(path, state), do: install(path, IO.iodata_to_binary(encode(state)))

  @doc """
  Writes the bytes of an encoded snapshot (`encode/1`, or a file another node wrote) as
  `write/2` does: the previous file kept, `:ok` once the new one is synced, verified and in
  place.
  """
  @spec install(Path.t(), binary) :: :ok | {:error, term}
  def install(path, bytes) when is_binary(bytes) do
    tmp = path <> ".tmp"
    dir = Path.dirname(path)

    with :ok <- Dir.make(dir),
         :ok <- Dir.write_synced(tmp, bytes),
         # Read back: the bytes on disk are the bytes written (they carry their checksum; decoding
         # them again would only prove that term_to_binary/1 works, at a cost).
         {:ok, ^bytes} <- File.read(tmp),
         :ok <- keep_previous(path),
         :ok <- File.rename(tmp, path),
         # The renames are durable too (the directory's entries).
         :ok <- Dir.sync(dir) do
      :ok
    else
      {:ok, _other} -> {:error, :verify_failed}
      {:error, reason} -> {:error, reason}
    end
  end

  defp keep_previous(path) do
    case File.rename(path, path <> ".prev") do
      :ok -> :ok
      {:error, :enoent} -> :ok
      error -> error
    end
  end

  @doc """
  The newest valid snapshot: `{:ok, state, :current | :previous}`, or
  `{:error, :no_snapshot}` when neither file verifies (each refusal is in `reasons`).
  """
  @spec read(Path.t()) :: {:ok, term, :current | :previous} | {:error, :no_snapshot, map}
  def read(path) do
    with {:error, current} <- read_one(path),
         {:error, previous} <- read_one(path <> ".prev") do
      {:error, :no_snapshot, %{current: current, previous: previous}}
    else
      {:ok, state, ^path} -> {:ok, state, :current}
      {:ok, state, _prev} -> {:ok, state, :previous}
    end
  end

  defp read_one(file) do
    with {:ok, bin} <- File.read(file),
         {:ok, state} <- decode(bin) do
      {:ok, state, file}
    end
  end
end

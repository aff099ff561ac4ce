defmodule Overworld.Persistence.Dir do
  @moduledoc """
  Durable directory entries.

  A file's fsync makes its bytes durable, not its name. After a file is created or renamed,
  the directory holding it is fsynced as well; otherwise a power loss may bring the directory
  back as it was before (a new journal segment missing with the acknowledged records in it, a
  renamed snapshot under its old name). Directories are opened with OTP's `:directory` mode
  of `:file.open/2` and synced like a file.
  """

  @doc """
  Fsyncs the directory `dir` (its entries: names created, renamed or removed in it).

      iex> Overworld.Persistence.Dir.sync(System.tmp_dir!())
      :ok
      iex> Overworld.Persistence.Dir.sync("/nonexistent/overworld")
      {:error, :enoent}
  """
  @spec sync(Path.t()) :: :ok | {:error, term}
  def sync(dir) do
    with {:ok, io} <- :file.open(dir, [:read, :raw, :directory]) do
      try do
        :file.sync(io)
      after
        :file.close(io)
      end
    end
  end

  @doc """
  Makes `dir` and any missing parent (as `File.mkdir_p/1`), fsyncing the parent of each
  directory it creates, so the new directories survive a power loss too.
  """
  @spec make(Path.t()) :: :ok | {:error, term}
  def make(dir) do
    dir = Path.expand(dir)

    if File.dir?(dir) do
      :ok
    else
      parent = Path.dirname(dir)

      with :ok <- if(parent == dir, do: :ok, else: make(parent)),
           :ok <- mkdir(dir) do
        sync(parent)
      end
    end
  end

  defp mkdir(dir) do
    case File.mkdir(dir) do
      {:error, :eexist} -> if File.dir?(dir), do: :ok, else: {:error, :eexist}
      other -> other
    end
  end

  @doc """
  Writes `bytes` to the file `path` (created or truncated) and fsyncs it. (Its name is durable
  once its directory is synced: `sync/1`.)
  """
  @spec write_synced(Path.t(), iodata) :: :ok | {:error, term}
  def write_synced(path, bytes) do
    with {:ok, io} <- :file.open(path, [:write, :raw, :binary]) do
      try do
        with :ok <- :file.write(io, bytes), do: :file.sync(io)
      after
        :file.close(io)
      end
    end
  end
end

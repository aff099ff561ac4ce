defmodule Overworld.Operators.Audit do
  @moduledoc """
  The audit log of a server's operator actions: who did what, to what, when, from where, and
  how it went.

  One JSON object per line, appended to a file of the server's data directory
  (`Overworld.Operators.Settings`' `:audit_file`):

      {"at":"2024-05-01T12:00:00.123Z","operator":"alice","action":"disable",
       "target":"3f0c...","result":"ok","address":"10.0.0.7"}

  `at` is UTC (ISO 8601, milliseconds); `operator` the name (for a failed login, the name
  given); `result` `"ok"` or the error's code. Passwords and tokens are never written.

  Each `log/2` answers once its line is on disk (written, then `fdatasync`): an action is in
  the log before its answer goes. One process per server writes (it owns the file); operator
  actions are few, so each line has its own sync. When a line would take the file past
  `:audit_max_bytes` the file is rotated first (`<file>.1` the newest of the `:audit_files`
  kept). `read/2` reads the newest lines back in the caller, from the files. A line torn by a
  crash is skipped when read, and a writer that starts again ends it first, so the next
  line is whole.
  """
  use GenServer
  require Logger

  alias Overworld.Persistence.Dir

  @typedoc "What an entry says (`at` is added by `log/2`)."
  @type entry :: %{
          required(:operator) => String.t() | nil,
          required(:action) => String.t(),
          optional(:target) => String.t() | nil,
          required(:result) => String.t(),
          optional(:address) => String.t() | nil
        }

  @doc false
  def child_spec({server, settings}) do
    %{id: __MODULE__, start: {__MODULE__, :start_link, [{server, settings}]}}
  end

  @doc false
  @spec start_link({atom, map}) :: GenServer.on_start()
  def start_link({server, settings}),
    do: GenServer.start_link(__MODULE__, settings, name: via(server))

  defp via(server), do: Overworld.Names.via(Overworld.Names.audit(server))

  @doc """
  Appends an entry to the audit log of the server `server`, stamped with the time; answers
  once it is on disk, or `{:error, reason}` (the reason is also logged).
  """
  @spec log(atom, entry) :: :ok | {:error, term}
  def log(server, entry) do
    at = DateTime.utc_now() |> DateTime.truncate(:millisecond) |> DateTime.to_iso8601()

    fields =
      for k <- [:operator, :action, :target, :result, :address],
          into: %{at: at},
          do: {k, Map.get(entry, k) || :null}

    GenServer.call(via(server), {:append, [:jiffy.encode(fields), ?\n]}, 30_000)
  catch
    :exit, reason ->
      Logger.error("operator audit: not written (#{inspect(reason)}): #{inspect(entry)}")
      {:error, :audit_unavailable}
  end

  @doc """
  The newest `limit` entries of an audit log (`settings`: the server's
  `Overworld.Operators.Settings`, or `%{audit_file: path, audit_files: n}`), newest first, as
  maps with string keys.
  """
  @spec read(map, non_neg_integer) :: [map]
  def read(%{audit_file: path, audit_files: n}, limit) when is_integer(limit) and limit >= 0 do
    [path | for(i <- 1..n//1, do: "#{path}.#{i}")]
    |> Stream.flat_map(&newest/1)
    |> Enum.take(limit)
  end

  # A file's entries, newest first, decoded as they are taken (only whole lines: the last part
  # after a newline is a line being written, or torn).
  defp newest(file) do
    case File.read(file) do
      {:ok, bin} ->
        bin
        |> :binary.split("\n", [:global])
        |> Enum.drop(-1)
        |> Enum.reverse()
        |> Stream.flat_map(&decode/1)

      {:error, _} ->
        []
    end
  end

  defp decode(line) do
    case :jiffy.decode(line, [:return_maps, {:null_term, nil}]) do
      %{"at" => _} = entry -> [entry]
      _ -> []
    end
  catch
    _, _ -> []
  end

  ## The writer

  @impl true
  def init(settings) do
    path = settings.audit_file

    with :ok <- Dir.make(Path.dirname(path)),
         {:ok, io} <- :file.open(path, [:append, :raw, :binary, :read]),
         {:ok, size} <- whole(io, path) do
      {:ok,
       %{
         io: io,
         size: size,
         path: path,
         max: settings.audit_max_bytes,
         files: settings.audit_files
       }}
    else
      {:error, reason} -> {:stop, {:audit_file, path, reason}}
    end
  end

  # The file's size, after ending a line torn by a crash (the next one starts on its own line).
  defp whole(io, path) do
    case File.stat(path) do
      {:ok, %{size: 0}} ->
        {:ok, 0}

      {:ok, %{size: size}} ->
        case :file.pread(io, size - 1, 1) do
          {:ok, "\n"} -> {:ok, size}
          {:ok, _} -> with :ok <- :file.write(io, "\n"), do: {:ok, size + 1}
          other -> {:error, {:read, other}}
        end

      {:error, reason} ->
        {:error, reason}
    end
  end

  @impl true
  def handle_call({:append, line}, _from, st) do
    bytes = IO.iodata_length(line)

    {rotated, st} = rotate(st, bytes)

    with :ok <- rotated,
         :ok <- :file.write(st.io, line),
         :ok <- :file.datasync(st.io) do
      {:reply, :ok, %{st | size: st.size + bytes}}
    else
      {:error, reason} ->
        Logger.error("operator audit: #{st.path}: #{inspect(reason)}")
        {:reply, {:error, reason}, st}
    end
  end

  defp rotate(%{size: size, max: max} = st, bytes) when size == 0 or size + bytes <= max,
    do: {:ok, st}

  defp rotate(st, _bytes) do
    :ok = :file.close(st.io)

    for i <- (st.files - 1)..1//-1 do
      File.rename("#{st.path}.#{i}", "#{st.path}.#{i + 1}")
    end

    with :ok <- File.rename(st.path, st.path <> ".1"),
         {:ok, io} <- :file.open(st.path, [:append, :raw, :binary, :read]),
         :ok <- Dir.sync(Path.dirname(st.path)) do
      {:ok, %{st | io: io, size: 0}}
    else
      {:error, reason} ->
        # (Whatever happened, the writer goes on with a file of that name: the line is not
        # written, and the next one tries again.)
        {:ok, io} = :file.open(st.path, [:append, :raw, :binary, :read])
        {:ok, %{size: size}} = File.stat(st.path)
        {{:error, {:rotate, reason}}, %{st | io: io, size: size}}
    end
  end

  @impl true
  def terminate(_reason, st), do: :file.close(st.io)
end

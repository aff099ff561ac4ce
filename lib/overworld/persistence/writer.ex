defmodule Overworld.Persistence.Writer do
  @moduledoc """
  Writes a zone's snapshots off the tick path (issue 5; DESIGN.md §7): the zone hands over an
  immutable state with `submit/3` (a message; the zone never waits on disk), and this process
  serializes and writes it with `Overworld.Persistence.SnapshotFile.write/2`.

  At most one state waits: a state submitted while a write is running replaces the one
  waiting (the newest wins; the queue is bounded at one). `info/1` tells the last tick
  written, how long its write took, how many writes were made, replaced and failed.

      iex> dir = Path.join(System.tmp_dir!(), "writer-doc-#{System.os_time()}")
      iex> {:ok, w} = Overworld.Persistence.Writer.start_link(path: Path.join(dir, "z.snap"))
      iex> :ok = Overworld.Persistence.Writer.submit(w, 30, %{tick: 30})
      iex> Overworld.Persistence.Writer.flush(w)
      :ok
      iex> Overworld.Persistence.Writer.info(w).last_tick
      30
      iex> File.rm_rf!(dir) != []
      true
  """
  use GenServer
  require Logger

  alias Overworld.Persistence.SnapshotFile

  @type info :: %{
          last_tick: non_neg_integer | nil,
          last_write_us: non_neg_integer | nil,
          writes: non_neg_integer,
          replaced: non_neg_integer,
          failures: non_neg_integer
        }

  @doc "Starts a writer. Options: `:path` (the snapshot file, required), `:name`."
  @spec start_link(keyword) :: GenServer.on_start()
  def start_link(opts) do
    path = Keyword.get(opts, :path)

    unless is_binary(path),
      do: raise(ArgumentError, "expected :path to be a file path (string), got: #{inspect(path)}")

    GenServer.start_link(__MODULE__, path, Keyword.take(opts, [:name]))
  end

  @doc "Hands a state over for writing (asynchronous)."
  @spec submit(GenServer.server(), non_neg_integer, term) :: :ok
  def submit(w, tick, state), do: send(w, {:submit, tick, state}) && :ok

  @doc "Waits until every state submitted so far is written (or replaced by a newer one)."
  @spec flush(GenServer.server(), timeout) :: :ok
  def flush(w, timeout \\ 30_000), do: GenServer.call(w, :flush, timeout)

  @doc "What the writer has done (see the moduledoc)."
  @spec info(GenServer.server()) :: info
  def info(w), do: GenServer.call(w, :info)

  @impl true
  def init(path) do
    {:ok,
     %{
       path: path,
       waiting: nil,
       last_tick: nil,
       last_write_us: nil,
       writes: 0,
       replaced: 0,
       failures: 0
     }}
  end

  # Every submission in the mailbox is taken before writing, so only the newest is written.
  @impl true
  def handle_info({:submit, tick, state}, st), do: {:noreply, write(newest(tick, state, st))}
  def handle_info(_other, st), do: {:noreply, st}

  @impl true
  def handle_call(:flush, _from, st), do: {:reply, :ok, drain(st)}
  def handle_call(:info, _from, st), do: {:reply, Map.drop(st, [:path, :waiting]), st}

  defp drain(st) do
    receive do
      {:submit, tick, state} -> drain(write(newest(tick, state, st)))
    after
      0 -> st
    end
  end

  defp newest(tick, state, st) do
    receive do
      {:submit, t, s} -> newest(t, s, %{st | replaced: st.replaced + 1})
    after
      0 -> %{st | waiting: {tick, state}}
    end
  end

  defp write(%{waiting: {tick, state}} = st) do
    {us, result} = :timer.tc(fn -> SnapshotFile.write(st.path, state) end)

    case result do
      :ok ->
        %{st | waiting: nil, last_tick: tick, last_write_us: us, writes: st.writes + 1}

      {:error, reason} ->
        Logger.error("snapshot of tick #{tick} to #{st.path} failed: #{inspect(reason)}")
        %{st | waiting: nil, failures: st.failures + 1}
    end
  end
end

defmodule Overworld.Accounts.Hasher do
  @moduledoc """
  The node's bounded pool for password hashing (`Overworld.Accounts.Password`).

  One worker per scheduler, each a process at low priority: the hashes take only the CPU that
  zones, sessions and the rest leave. A caller picks a worker round robin (an `:atomics`
  counter, no process in between), sends it the job and waits for the answer; each worker
  takes at most `max_queue` jobs (default 8) waiting or running. When every worker is full the
  call answers at once `{:error, {:busy, retry_after}}`: the HTTP routes turn it into 429 with a
  `retry-after` header (seconds, from the jobs queued and the last hash's duration), so a burst
  of logins never queues without end.

  A job runs under the caller's deadline (`timeout`, default 30 s): a caller that gave up
  gets `{:error, :timeout}` and the worker drops the job if it has not started it.

  The pool is part of the `:overworld` application; `configure/1` sets the queue bound.
  """
  use Supervisor

  alias Overworld.Accounts.Password

  @key {__MODULE__, :pool}
  @default_max_queue 8

  @doc false
  def start_link(_opts), do: Supervisor.start_link(__MODULE__, :ok, name: __MODULE__)

  @impl true
  def init(:ok) do
    n = System.schedulers_online()
    # [next worker, last duration µs, (queued jobs of worker i at 2 + i)]
    counters = :atomics.new(2 + n, signed: true)
    :atomics.put(counters, 2, 100_000)

    :persistent_term.put(@key, %{
      n: n,
      counters: counters,
      max_queue: @default_max_queue
    })

    children =
      for i <- 0..(n - 1) do
        %{id: {:worker, i}, start: {__MODULE__, :start_worker, [i, counters]}}
      end

    Supervisor.init(children, strategy: :one_for_one)
  end

  @doc """
  Sets the most jobs a worker takes at once (waiting or running), for every caller of the node.
  """
  @spec configure(max_queue: pos_integer) :: :ok
  def configure(max_queue: q) when is_integer(q) and q > 0 do
    :persistent_term.put(@key, %{pool() | max_queue: q})
  end

  @doc "Hashes a new password (`Password.hash/2`) in the pool."
  @spec hash(binary, pos_integer, timeout) ::
          {:ok, Password.hash()} | {:error, {:busy, pos_integer} | :timeout}
  def hash(password, iterations, timeout \\ 30_000),
    do: run({:hash, password, iterations}, timeout)

  @doc "Checks a password against a stored hash (`Password.verify/2`) in the pool."
  @spec verify(binary, Password.hash(), timeout) ::
          {:ok, boolean} | {:error, {:busy, pos_integer} | :timeout}
  def verify(password, hash, timeout \\ 30_000), do: run({:verify, password, hash}, timeout)

  @doc "Queued jobs per worker, and the last hash's duration in µs."
  @spec stats() :: %{queued: [non_neg_integer], last_us: non_neg_integer, max_queue: pos_integer}
  def stats do
    %{n: n, counters: c, max_queue: q} = pool()

    %{
      queued: for(i <- 0..(n - 1), do: :atomics.get(c, 3 + i)),
      last_us: :atomics.get(c, 2),
      max_queue: q
    }
  end

  defp pool, do: :persistent_term.get(@key)

  defp run(job, timeout) do
    %{n: n, counters: c, max_queue: q} = pool()
    first = rem(:atomics.add_get(c, 1, 1), n)

    case claim(c, n, q, first, n) do
      {:ok, i} ->
        call(i, c, job, timeout)

      :full ->
        queued = Enum.sum(for i <- 0..(n - 1), do: :atomics.get(c, 3 + i))
        {:error, {:busy, max(1, ceil(queued * :atomics.get(c, 2) / n / 1_000_000))}}
    end
  end

  # A place in worker i's queue, trying each worker once from `first`.
  defp claim(_c, _n, _q, _i, 0), do: :full

  defp claim(c, n, q, i, left) do
    if :atomics.add_get(c, 3 + i, 1) <= q do
      {:ok, i}
    else
      :atomics.sub(c, 3 + i, 1)
      claim(c, n, q, rem(i + 1, n), left - 1)
    end
  end

  defp call(i, c, job, timeout) do
    case Process.whereis(:"#{__MODULE__}.#{i}") do
      nil ->
        :atomics.sub(c, 3 + i, 1)
        {:error, :timeout}

      pid ->
        ref = :erlang.monitor(:process, pid, alias: :reply_demonitor)
        deadline = System.monotonic_time(:millisecond) + timeout
        send(pid, {:job, ref, deadline, job})

        receive do
          {^ref, answer} ->
            {:ok, answer}

          {:DOWN, ^ref, _, _, _} ->
            {:error, :timeout}
        after
          timeout ->
            Process.demonitor(ref, [:flush])
            {:error, :timeout}
        end
    end
  end

  @doc false
  def start_worker(i, counters) do
    # (A worker that died took its queue with it: its callers saw it go.)
    :atomics.put(counters, 3 + i, 0)

    pid =
      spawn_link(fn ->
        Process.flag(:priority, :low)
        work_loop(i, counters)
      end)

    Process.register(pid, :"#{__MODULE__}.#{i}")
    {:ok, pid}
  end

  defp work_loop(i, c) do
    receive do
      {:job, ref, deadline, job} ->
        if System.monotonic_time(:millisecond) < deadline do
          t0 = System.monotonic_time(:microsecond)
          answer = work(job)
          :atomics.put(c, 2, System.monotonic_time(:microsecond) - t0)
          send(ref, {ref, answer})
        end

        :atomics.sub(c, 3 + i, 1)
        work_loop(i, c)
    end
  end

  defp work({:hash, password, iterations}), do: Password.hash(password, iterations)
  defp work({:verify, password, hash}), do: Password.verify(password, hash)
end

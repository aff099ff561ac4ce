defmodule Overworld.RateLimit do
  @moduledoc """
  Fixed-window rate limits of a node, for the routes a stranger could abuse (password logins
  and registrations, per client address and per account).

  A limit is `{count, seconds}`: at most `count` hits per key in each window of `seconds`.
  Counters live in one public ETS table (`:ets.update_counter/4`, write concurrency: callers
  never pass through a process); the owner only sweeps windows that have ended, once a
  minute. A key is any term, for example `{:login_address, ip}`.

      iex> Overworld.RateLimit.hit({:doc, make_ref()}, {2, 60})
      :ok
  """
  use GenServer

  @table __MODULE__
  @sweep_ms 60_000

  @typedoc "At most `count` hits in each window of `seconds`."
  @type limit :: {pos_integer, pos_integer}

  @doc false
  def start_link(_opts), do: GenServer.start_link(__MODULE__, :ok, name: __MODULE__)

  @doc """
  Counts a hit of `key`: `:ok` while within the limit, else `{:error, {:rate_limited,
  retry_after_seconds}}` (the hit is counted all the same).
  """
  @spec hit(term, limit) :: :ok | {:error, {:rate_limited, pos_integer}}
  def hit(key, {count, seconds} = limit) do
    {window, left} = window(seconds)

    case :ets.update_counter(@table, {key, seconds, window}, {2, 1}, {{key, seconds, window}, 0}) do
      n when n <= count -> :ok
      _ -> limited(limit, left)
    end
  end

  @doc """
  Checks `key` without counting: `:ok` if a hit now would be within the limit.
  """
  @spec check(term, limit) :: :ok | {:error, {:rate_limited, pos_integer}}
  def check(key, {count, seconds} = limit) do
    {window, left} = window(seconds)

    case :ets.lookup(@table, {key, seconds, window}) do
      [{_, n}] when n >= count -> limited(limit, left)
      _ -> :ok
    end
  end

  @doc "Forgets the hits of `key` for a limit's window length (after a successful login)."
  @spec reset(term, pos_integer) :: :ok
  def reset(key, seconds) do
    {window, _} = window(seconds)
    :ets.delete(@table, {key, seconds, window})
    :ok
  end

  defp limited(_limit, left), do: {:error, {:rate_limited, max(1, left)}}

  defp window(seconds) do
    now = System.system_time(:second)
    {div(now, seconds), seconds - rem(now, seconds)}
  end

  @impl true
  def init(:ok) do
    :ets.new(@table, [
      :named_table,
      :public,
      :set,
      write_concurrency: true,
      read_concurrency: true
    ])

    Process.send_after(self(), :sweep, @sweep_ms)
    {:ok, nil}
  end

  @impl true
  def handle_info(:sweep, state) do
    now = System.system_time(:second)

    # Every {key, seconds, window} whose window ended: (window + 1) * seconds <= now.
    :ets.select_delete(@table, [
      {{{:_, :"$1", :"$2"}, :_}, [{:"=<", {:*, {:+, :"$2", 1}, :"$1"}, now}], [true]}
    ])

    Process.send_after(self(), :sweep, @sweep_ms)
    {:noreply, state}
  end
end

defmodule Overworld.Postgres.Pool do
  @moduledoc false
  # The checkout of a pool: a process, registered under the pool's name, that hands out
  # connections and takes them back. It never touches a connection's socket nor waits on one:
  # a checkout is a message in and a message out, a checkin a message in, each O(1) (a
  # connection is a pid the caller then calls directly). What it keeps:
  #
  #   * `idle` — the connections free, last returned first (a warm one, and the others may
  #     time out on the server's side without anyone noticing).
  #   * `conns` — every connection ready or lent, pid => its owner and our monitor of it. A
  #     connection that dies leaves it at once; a lease of a dead connection is forgotten on
  #     its checkin. Its owner (Overworld.Postgres.Connection) opens a new one and sends
  #     `{:ready, owner, pid}`.
  #   * `leases` — tag => {connection, monitor of the caller}: a caller that dies holding a
  #     connection gives it back, through its owner, which rolls back what it left open.
  #   * `waiting` — callers waiting for a connection, in order, at most `:queue` of them; one
  #     more is answered `{:error, :pool_busy}` at once. Each waits `:timeout` ms at most,
  #     then is answered `{:error, :timeout}`.
  #
  # The tag of a checkout is the caller's monitor of this process, made an alias
  # (`:erlang.monitor/3` with `alias: :demonitor`): the reply is sent to it, a caller always
  # gets one (a connection, an error, or this process's DOWN), and a reply that would come
  # after the caller stopped waiting is dropped by the runtime.

  use GenServer

  @typedoc "A lease: the connection, the time a query may take, and the tag to give it back."
  @type lease :: {pid, timeout, reference}

  @spec start_link(map) :: GenServer.on_start()
  def start_link(o), do: GenServer.start_link(__MODULE__, o, name: o.name)

  @doc """
  Checks a connection out of `pool` (a name or pid), waiting at most its `:timeout`. A
  connection found dead (this process has not heard of it yet) is given back for another.
  """
  @spec checkout(GenServer.server(), pos_integer) :: {:ok, lease} | {:error, term}
  def checkout(pool, tries \\ 3) do
    case GenServer.whereis(pool) do
      pid when is_pid(pid) ->
        tag = :erlang.monitor(:process, pid, alias: :demonitor)
        send(pid, {:checkout, self(), tag})

        receive do
          {^tag, reply} ->
            Process.demonitor(tag, [:flush])

            case reply do
              {:ok, {pg, _, _}} when tries > 1 ->
                if Process.alive?(pg) do
                  reply
                else
                  checkin(pid, tag)
                  checkout(pid, tries - 1)
                end

              _ ->
                reply
            end

          {:DOWN, ^tag, _, _, reason} ->
            {:error, {:pool_down, reason}}
        end

      _ ->
        {:error, :noproc}
    end
  end

  @doc "Gives a connection back (`:reset` when its state is unknown: it is rolled back first)."
  @spec checkin(GenServer.server(), reference, :ok | :reset) :: :ok
  def checkin(pool, tag, status \\ :ok) do
    case GenServer.whereis(pool) do
      pid when is_pid(pid) -> send(pid, {:checkin, tag, status})
      _ -> :ok
    end

    :ok
  end

  @doc "Called by a connection's owner: the connection `pg` is ready for a caller."
  @spec ready(atom, pid) :: :ok
  def ready(name, pg) do
    case GenServer.whereis(name) do
      pid when is_pid(pid) -> send(pid, {:ready, self(), pg})
      _ -> :ok
    end

    :ok
  end

  @doc "Counts of the pool's connections and waiting callers."
  @spec info(GenServer.server()) :: map
  def info(pool), do: GenServer.call(pool, :info)

  @impl true
  def init(o) do
    {:ok,
     %{
       size: o.size,
       timeout: o.timeout,
       max_waiting: o.queue,
       idle: [],
       conns: %{},
       leases: %{},
       callers: %{},
       waiting: :queue.new(),
       waiters: %{}
     }}
  end

  @impl true
  def handle_call(:info, _from, s) do
    info = %{
      size: s.size,
      connected: map_size(s.conns),
      idle: length(s.idle),
      busy: map_size(s.leases),
      waiting: map_size(s.waiters)
    }

    {:reply, info, s}
  end

  @impl true
  def handle_info({:checkout, caller, tag}, s) do
    case s.idle do
      [pg | idle] ->
        {:noreply, lend(%{s | idle: idle}, pg, tag, Process.monitor(caller))}

      [] when map_size(s.waiters) < s.max_waiting ->
        mon = Process.monitor(caller)
        timer = Process.send_after(self(), {:wait_timeout, tag}, s.timeout)

        {:noreply,
         %{
           s
           | waiting: :queue.in(tag, s.waiting),
             waiters: Map.put(s.waiters, tag, {mon, timer}),
             callers: Map.put(s.callers, mon, tag)
         }}

      [] ->
        send(tag, {tag, {:error, :pool_busy}})
        {:noreply, s}
    end
  end

  def handle_info({:checkin, tag, status}, s) do
    case Map.pop(s.leases, tag) do
      {{pg, mon}, leases} ->
        Process.demonitor(mon, [:flush])
        s = %{s | leases: leases, callers: Map.delete(s.callers, mon)}
        {:noreply, release(s, pg, status)}

      {nil, _} ->
        {:noreply, s}
    end
  end

  def handle_info({:ready, owner, pg}, s) do
    s = %{s | conns: Map.put(s.conns, pg, {owner, Process.monitor(pg)})}
    {:noreply, give(s, pg)}
  end

  def handle_info({:wait_timeout, tag}, s) do
    case Map.pop(s.waiters, tag) do
      {{mon, _timer}, waiters} ->
        Process.demonitor(mon, [:flush])
        send(tag, {tag, {:error, :timeout}})

        {:noreply,
         %{
           s
           | waiters: waiters,
             waiting: :queue.delete(tag, s.waiting),
             callers: Map.delete(s.callers, mon)
         }}

      {nil, _} ->
        {:noreply, s}
    end
  end

  def handle_info({:DOWN, mon, :process, pid, _reason}, s) do
    case Map.pop(s.callers, mon) do
      {nil, _} -> {:noreply, connection_down(s, pid)}
      {tag, callers} -> {:noreply, caller_down(%{s | callers: callers}, tag)}
    end
  end

  # A caller died holding a connection, or waiting for one.
  defp caller_down(s, tag) do
    case Map.pop(s.leases, tag) do
      {{pg, _mon}, leases} ->
        release(%{s | leases: leases}, pg, :reset)

      {nil, _} ->
        {{_mon, timer}, waiters} = Map.pop(s.waiters, tag)
        Process.cancel_timer(timer)
        %{s | waiters: waiters, waiting: :queue.delete(tag, s.waiting)}
    end
  end

  defp connection_down(s, pg) do
    case Map.pop(s.conns, pg) do
      {{_owner, _mon}, conns} -> %{s | conns: conns, idle: List.delete(s.idle, pg)}
      {nil, _} -> s
    end
  end

  # A connection comes back from a lease: to the next caller, or to its owner for a reset. (A
  # connection no longer in `conns` died meanwhile: its owner is opening another.)
  defp release(s, pg, status) do
    case {Map.fetch(s.conns, pg), status} do
      {:error, _} ->
        s

      {{:ok, _}, :ok} ->
        give(s, pg)

      {{:ok, {owner, mon}}, :reset} ->
        Process.demonitor(mon, [:flush])
        send(owner, {:reset, pg})
        %{s | conns: Map.delete(s.conns, pg)}
    end
  end

  # A free connection: to the first caller still waiting, or to the idle list.
  defp give(s, pg) do
    case :queue.out(s.waiting) do
      {{:value, tag}, waiting} ->
        {{mon, timer}, waiters} = Map.pop(s.waiters, tag)
        Process.cancel_timer(timer)
        lend(%{s | waiting: waiting, waiters: waiters}, pg, tag, mon)

      {:empty, _} ->
        %{s | idle: [pg | s.idle]}
    end
  end

  defp lend(s, pg, tag, mon) do
    send(tag, {tag, {:ok, {pg, s.timeout, tag}}})
    %{s | leases: Map.put(s.leases, tag, {pg, mon}), callers: Map.put(s.callers, mon, tag)}
  end
end

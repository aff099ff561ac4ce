defmodule Overworld.Bench.CCUClient do
  @moduledoc false
  # The client side of `mix overworld.bench.ccu`, run inside client OS processes (peer nodes)
  # separate from the server: authenticates devices, then opens idle WebSocket sessions from
  # one local address and holds them, each pinging every `heartbeat` ms.

  alias Overworld.Client

  @doc """
  A client OS process: a peer node without distribution (driven over its standard I/O, so it
  is no member of any cluster), with this node's code paths; it stops with the caller.
  """
  @spec start_peer() :: pid
  def start_peer do
    args = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])
    {:ok, peer, _node} = :peer.start_link(%{connection: :standard_io, args: args})
    {:ok, _} = :peer.call(peer, :application, :ensure_all_started, [:crypto])
    peer
  end

  @doc """
  `count` split into `k` shares as even as can be, the larger first.

      iex> Overworld.Bench.CCUClient.shares(10, 3)
      [4, 3, 3]
  """
  @spec shares(non_neg_integer, pos_integer) :: [non_neg_integer]
  def shares(count, k), do: for(i <- 0..(k - 1), do: div(count + k - 1 - i, k))

  @doc """
  Runs `fun` (`:auth` or `:open`) on every client peer with its options, side by side, and
  sums their answers: `{ok, failed, first errors, ms of the slowest}`.
  """
  @spec on_peers([{pid, map}], :auth | :open) ::
          {non_neg_integer, non_neg_integer, [term], non_neg_integer}
  def on_peers(client_opts, fun) do
    client_opts
    |> Enum.map(fn {peer, o} ->
      Task.async(fn -> :peer.call(peer, __MODULE__, fun, [o], :infinity) end)
    end)
    |> Enum.map(&Task.await(&1, :infinity))
    |> Enum.reduce({0, 0, [], 0}, fn {ok, failed, errors, ms}, {a, b, c, d} ->
      {a + ok, b + failed, Enum.take(c ++ errors, 5), max(d, ms)}
    end)
  end

  @doc """
  This node's memory (`:erlang.memory/0`) after a garbage collection of every process (run
  on a server node: its sessions' cost).
  """
  @spec memory() :: keyword
  def memory do
    Enum.each(Process.list(), &:erlang.garbage_collect/1)
    Process.sleep(500)
    :erlang.memory()
  end

  @doc false
  # Authenticates `count` devices (ids `prefix-i`), `concurrency` at a time, and keeps their
  # tokens in this node; answers {ok, failed, first errors, ms}.
  @spec auth(map) :: {non_neg_integer, non_neg_integer, [term], non_neg_integer}
  def auth(o) do
    {results, ms} =
      timed(o, fn i ->
        case Client.authenticate_device(o.host, o.port, "#{o.prefix}-#{i}", ip: o.ip) do
          {:ok, %{"token" => token}} -> {:ok, {i, token}}
          error -> error
        end
      end)

    tokens = for {:ok, {i, t}} <- results, into: %{}, do: {i, t}
    :persistent_term.put({__MODULE__, :tokens}, tokens)
    summary(results, ms)
  end

  @doc false
  # Opens an idle session for every authenticated device (`zone=`: joins nothing) and holds
  # it in a process of this node; answers {opened, failed, first errors, ms}.
  @spec open(map) :: {non_neg_integer, non_neg_integer, [term], non_neg_integer}
  def open(o) do
    tokens = :persistent_term.get({__MODULE__, :tokens}, %{})

    {results, ms} =
      timed(%{o | count: map_size(tokens)}, fn i ->
        ref = make_ref()
        me = self()
        spawn(fn -> session(o, Map.get(tokens, i), me, ref) end)

        receive do
          {^ref, result} -> result
        after
          60_000 -> {:error, :timeout}
        end
      end)

    summary(results, ms)
  end

  defp timed(o, fun) do
    t0 = System.monotonic_time(:millisecond)

    results =
      1..o.count//1
      |> Task.async_stream(fun, max_concurrency: o.concurrency, timeout: :infinity, ordered: false)
      |> Enum.map(fn {:ok, r} -> r end)

    {results, System.monotonic_time(:millisecond) - t0}
  end

  defp summary(results, ms) do
    failed = Enum.reject(results, &match?({:ok, _}, &1))
    errors = failed |> Enum.uniq() |> Enum.take(5)
    {length(results) - length(failed), length(failed), errors, ms}
  end

  defp session(_o, nil, parent, ref), do: send(parent, {ref, {:error, :no_token}})

  defp session(o, token, parent, ref) do
    copts = [ip: o.ip, timeout: 30_000]

    result =
      with {:ok, c} <- Client.connect(o.host, o.port, "/ws?zone=", copts),
           :ok <-
             Client.send_msg(c, %{
               type: :hello,
               version: Overworld.Protocol.version(),
               token: token
             }),
           {:ok, {:binary, <<1, _::binary>>}, c} <- Client.recv(c, 30_000) do
        {:ok, c}
      end

    case result do
      {:ok, c} ->
        send(parent, {ref, {:ok, :open}})
        :ok = :inet.setopts(c.sock, active: true)
        Process.send_after(self(), :ping, :rand.uniform(o.heartbeat))
        hold(c, o.heartbeat)

      error ->
        send(parent, {ref, error})
    end
  end

  defp hold(%{sock: sock} = c, heartbeat) do
    receive do
      :ping ->
        Client.send_msg(c, %{type: :ping, client_time: System.system_time(:millisecond)})
        Process.send_after(self(), :ping, heartbeat)
        hold(c, heartbeat)

      {:tcp, ^sock, _data} ->
        hold(c, heartbeat)

      {:tcp_closed, ^sock} ->
        :closed

      :stop ->
        Client.close(c)
    end
  end

  @doc false
  # How many of this node's sessions are still open.
  @spec alive() :: non_neg_integer
  def alive do
    Enum.count(Process.list(), fn p ->
      match?({:current_function, {__MODULE__, :hold, 2}}, Process.info(p, :current_function))
    end)
  end
end

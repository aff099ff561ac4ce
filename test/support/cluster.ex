defmodule Overworld.Test.Cluster do
  @moduledoc false
  # Peer nodes for multi-node tests (`:peer`): each a BEAM of its own on this machine, with
  # this node's code paths and cookie, the :overworld application started.

  @doc """
  Starts `n` peers; answers `[{pid, node}]` (they stop with the test process). `extra`: more
  emulator arguments.
  """
  def start_peers(n, extra \\ []) do
    for _ <- 1..n, do: start_peer(:"peer#{System.unique_integer([:positive])}", extra)
  end

  @doc "Starts a peer named `name` (on 127.0.0.1): `{pid, node}` (`Overworld.Bench.Peer`)."
  def start_peer(name, extra \\ []), do: Overworld.Bench.Peer.start(name, extra)

  @doc "Waits until `fun` answers true (every 50 ms, at most 10 s), else fails the test."
  def eventually(fun, tries \\ 200) do
    cond do
      fun.() -> :ok
      tries == 0 -> ExUnit.Assertions.flunk("not within 10 s")
      true -> Process.sleep(50) && eventually(fun, tries - 1)
    end
  end

  @doc """
  An observer of `zone` (`Overworld.Interest` with `opts`) in a process of its own on this
  node (call it through `:erpc` to place it on a peer): it answers `{:frame, n, pos, from}`
  with `{:frame, n, bytes}`. It stops with `owner`.
  """
  def observer(zone, opts, owner) do
    spawn(fn ->
      Process.monitor(owner)
      {:ok, obs} = Overworld.Interest.new(zone, opts)
      observe(obs)
    end)
  end

  defp observe(obs) do
    receive do
      {:frame, n, pos, from} ->
        {frame, _info, obs} = Overworld.Interest.frame(obs, n, pos)
        send(from, {:frame, n, IO.iodata_to_binary(frame)})
        observe(obs)

      {:DOWN, _, :process, _, _} ->
        :ok
    end
  end

  @doc """
  Starts an `Overworld.Server` with `opts` on this node (call it through `:erpc` to place it
  on a peer), held by a process of its own (the server outlives the call). Answers its port.
  """
  def start_server(opts) do
    me = self()

    spawn(fn ->
      {:ok, _} = Overworld.Server.start_link(opts)
      send(me, {:port, Overworld.Server.port(Keyword.fetch!(opts, :name))})
      Process.sleep(:infinity)
    end)

    receive do
      {:port, port} -> port
    after
      15_000 -> raise "the server did not start"
    end
  end
end

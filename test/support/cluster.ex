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
  A process of this node registered under `keys` (`Overworld.Names`), as a zone's server is
  (call it through `:erpc` to place it on a peer); it stops on `:stop`. Answers its pid.
  """
  def hold_names(keys) do
    parent = self()

    pid =
      spawn(fn ->
        for k <- keys, do: {:ok, _} = Overworld.Names.register(k)
        send(parent, :held)

        receive do
          :stop -> :ok
        end
      end)

    receive do
      :held -> pid
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
end

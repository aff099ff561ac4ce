defmodule Overworld.Bench.Peer do
  @moduledoc false
  # Nodes for the tools and tests that need more than one (`:peer`): each a BEAM of its own on
  # this machine (127.0.0.1, long names) with this node's code paths and cookie, driven over
  # its standard input and output, the :overworld application started; and this node made a
  # distributed one when it is not.

  @doc """
  Starts a peer named `name` (`extra`: more emulator arguments); answers `{peer, node}`. With
  `link?` the peer stops with the caller; without, it outlives it (a tool that kills it).
  """
  @spec start(atom, [charlist], boolean) :: {pid, node}
  def start(name, extra \\ [], link? \\ true) do
    paths = Enum.flat_map(:code.get_path(), &[~c"-pa", &1])

    spec = %{
      name: name,
      host: ~c"127.0.0.1",
      longnames: true,
      args:
        [~c"-setcookie", Atom.to_charlist(Node.get_cookie())] ++
          Enum.map(String.split(Overworld.Cluster.vm_flags()), &String.to_charlist/1) ++
          extra ++ paths,
      connection: :standard_io
    }

    {:ok, peer, node} = if link?, do: :peer.start_link(spec), else: :peer.start(spec)
    {:ok, _} = :erpc.call(node, Application, :ensure_all_started, [:overworld])
    {peer, node}
  end

  @doc """
  Makes this node a distributed one named `prefix<unique>@host` (epmd started if need be),
  unless it is one already; a one-line `Mix.Error` when it cannot.
  """
  @spec distributed!(String.t(), String.t()) :: :ok
  def distributed!(prefix, host) do
    unless Node.alive?() do
      System.cmd("epmd", ["-daemon"])
      :ok = Overworld.Cluster.prepare_distribution()

      case Node.start(:"#{prefix}#{System.unique_integer([:positive])}@#{host}", :longnames) do
        {:ok, _} -> :ok
        {:error, reason} -> Mix.raise("cannot start distribution: #{inspect(reason)}")
      end
    end

    :ok
  end

  @doc """
  Starts an `Overworld.Server` with `opts` on this node (call it through `:erpc` to place it
  on another), held by a process of its own: the server outlives the call. Answers its port;
  raises when it does not start within 15 s.
  """
  @spec serve(keyword) :: :inet.port_number()
  def serve(opts) do
    case hold({Overworld.Server, opts}) do
      {:ok, _} -> Overworld.Server.port(Keyword.fetch!(opts, :name))
      {:error, reason} -> raise "the server did not start: #{inspect(reason)}"
    end
  end

  @doc """
  Starts a child spec on this node (call it through `:erpc` to place it on another) under a
  process of its own, so that it outlives the call: `{:ok, pid}` or `{:error, reason}`.
  """
  @spec hold(Supervisor.child_spec() | {module, term}) :: {:ok, pid} | {:error, term}
  def hold(spec) do
    me = self()

    spawn(fn ->
      # (A failed start's exit signal must not kill the holder before it answers.)
      Process.flag(:trap_exit, true)
      started = Supervisor.start_link([spec], strategy: :one_for_one)
      send(me, {:held, started})
      # (Held for good once started; a start that failed leaves nothing to hold.)
      if match?({:ok, _}, started), do: Process.sleep(:infinity)
    end)

    receive do
      {:held, {:ok, _} = ok} -> ok
      {:held, {:error, reason}} -> {:error, reason}
    after
      15_000 -> {:error, :timeout}
    end
  end
end

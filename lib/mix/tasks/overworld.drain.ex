defmodule Mix.Tasks.Overworld.Drain do
  @shortdoc "Drains a running cluster node: its zones move to the others"
  @moduledoc """
  Drains a node of a running Overworld cluster before it is stopped (`Overworld.Cluster.drain/0`
  on that node): it stays a member (it counts for the majority) but no zone is placed on it
  any more, so its zones move to their new homes with their state, players staying
  connected. Waits until no zone runs there any more and says so.

      mix overworld.drain --node NAME@HOST [--wait 60]

  The task runs as a node of its own (a random name on the node's host) and uses the
  cluster's cookie from `OVERWORLD_COOKIE` or `OVERWORLD_COOKIE_FILE`, as the nodes do (else
  the Erlang cookie of this user). `--wait` is how many seconds to wait for the zones to move
  (default 60); exit status 1 when some still run then, or when the node cannot be reached.
  """
  use Mix.Task

  alias Overworld.Bench.Args

  @switches [node: :string, wait: :integer]

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, @switches, "overworld.drain")
    o = Args.positive!(opts, wait: 60)
    target = opts[:node] || Mix.raise("--node is required: the node to drain (NAME@HOST)")

    unless target =~ ~r/\A[^@\s]+@[^@\s]+\z/,
      do: Mix.raise("--node must be a node name NAME@HOST, got: #{inspect(target)}")

    target = String.to_atom(target)
    start_distribution!(target)
    drain!(target, o.wait)
  end

  defp drain!(target, wait) do
    :ok = :erpc.call(target, Overworld.Cluster, :drain, [], 15_000)
    IO.puts("#{target} drains: no zone is placed on it any more")
    deadline = System.monotonic_time(:millisecond) + wait * 1000

    case wait_empty(target, deadline) do
      0 ->
        IO.puts("#{target} drained: no zone runs there; it can be stopped")

      n ->
        Mix.raise("#{target} still runs #{n} zones after #{wait} s")
    end
  catch
    :error, {:erpc, reason} -> Mix.raise("#{target} cannot be reached (#{inspect(reason)})")
  end

  # This task as a node of its own, on the target's host, with the cluster's cookie.
  defp start_distribution!(target) do
    [_, host] = String.split(Atom.to_string(target), "@")
    Overworld.Bench.Peer.distributed!("drain", host)

    case Overworld.Cluster.Config.from_env() do
      {:ok, %{cookie: nil}} -> :ok
      {:ok, %{cookie: cookie}} -> Node.set_cookie(cookie)
      {:error, message} -> Mix.raise(message)
    end

    unless Node.connect(target) == true,
      do: Mix.raise("#{target} cannot be reached (not running, or another cookie)")
  end

  defp wait_empty(target, deadline) do
    n = length(:erpc.call(target, Overworld.Names, :zones, [], 15_000))

    if n == 0 or System.monotonic_time(:millisecond) > deadline do
      n
    else
      Process.sleep(200)
      wait_empty(target, deadline)
    end
  end
end

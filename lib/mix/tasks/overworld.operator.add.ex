defmodule Mix.Tasks.Overworld.Operator.Add do
  @shortdoc "Adds an operator (or changes its password or role) in a server's data directory"
  @moduledoc """
  Adds an operator to the operators table of a data directory (`Overworld.Operators`), or
  changes the password or the role of one it has:

      mix overworld.operator.add NAME [--data-dir ./data] [--role operator|viewer]
                                      [--iterations N] [--hash TEXT]

  The password is read from standard input as `mix overworld.operator.hash` reads it, unless
  `--hash` gives the text of a hash made by that task. The operator's earlier tokens are
  refused from then on.

  **Stop the server first**: the task opens the data directory's Mnesia database itself, and
  one directory must be opened by one node at a time. On a running node, call the function
  instead (the change is replicated to every node of its cluster), for example from a
  release:

      bin/my_game rpc 'Overworld.Operators.put_hash("alice", "pbkdf2-sha256$600000$...")'
  """
  use Mix.Task

  alias Overworld.Accounts.Password
  alias Overworld.Bench.Args
  alias Mix.Tasks.Overworld.Operator.Hash

  @switches [data_dir: :string, role: :string, iterations: :integer, hash: :string]

  @impl true
  def run(argv) do
    {opts, args, invalid} = OptionParser.parse(argv, strict: @switches)

    name =
      case {args, invalid} do
        {[name], []} -> name
        _ -> Mix.raise("usage: mix overworld.operator.add NAME [--data-dir DIR] [--role R]")
      end

    unless Overworld.Operators.Settings.valid_name?(name),
      do: Mix.raise("the name must be #{Overworld.Operators.Settings.describe_name()}")

    role = Keyword.get(opts, :role, "operator")

    unless match?({:ok, _}, Overworld.Operators.Settings.role(role)),
      do: Mix.raise("--role must be operator or viewer, got: #{inspect(role)}")

    o = Args.positive!(opts, iterations: Password.default_iterations())

    hash =
      case opts[:hash] do
        nil ->
          Password.hash(Hash.read_password!(), o.iterations)

        text ->
          case Password.decode(text) do
            {:ok, hash} -> hash
            :error -> Mix.raise("--hash is not the text of a hash (mix overworld.operator.hash)")
          end
      end

    dir = Keyword.get(opts, :data_dir, "./data")
    Mix.Task.run("app.start")
    # (Mnesia already running here is this node's: a caller's, e.g. a test's; left running.)
    ours? = :mnesia.system_info(:is_running) != :yes

    with :ok <- Overworld.Accounts.start(dir),
         :ok <- Overworld.Operators.start(),
         :ok <- Overworld.Operators.put_hash(name, hash, role: role) do
      # (The log dumped to the tables' files: the next start reads them at once.)
      if ours?, do: :stopped = :mnesia.stop()
      Mix.shell().info("operator #{name} (#{role}) saved in #{Path.expand(dir)}")
    else
      {:error, reason} -> Mix.raise("cannot save the operator in #{dir}: #{inspect(reason)}")
    end
  end
end

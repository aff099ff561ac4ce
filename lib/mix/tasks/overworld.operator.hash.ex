defmodule Mix.Tasks.Overworld.Operator.Hash do
  @shortdoc "Prints the hash of an operator's password (read from stdin) for a server's config"
  @moduledoc """
  Reads an operator's password from standard input (one line) and prints its PBKDF2 hash, the
  text an `Overworld.Server`'s `operators:` option takes (`Overworld.Operators`):

      $ mix overworld.operator.hash
      password: ••••••••
      pbkdf2-sha256$600000$<salt>$<key>

      # in the server's configuration
      operators: [%{name: "alice", password_hash: "pbkdf2-sha256$600000$..."}]

  The password never appears on a command line (where other users of the machine could read
  it) nor in a file; piped in, it is read the same way (`read -s PW; printf '%s\\n' "$PW" |
  mix overworld.operator.hash`). Typed at a terminal, the line is blanked as it is typed.
  It must be 8 to 256 bytes (the line's end is not part of it).

  `--iterations N` (default #{Overworld.Accounts.Password.default_iterations()}): PBKDF2
  iterations; make them the server's `accounts: [password_iterations: N]` (see
  `Overworld.Operators`, "an unknown name answers as a wrong password").
  """
  use Mix.Task

  alias Overworld.Accounts.Password
  alias Overworld.Bench.Args

  @impl true
  def run(argv) do
    opts = Args.parse!(argv, [iterations: :integer], "overworld.operator.hash")
    o = Args.positive!(opts, iterations: Password.default_iterations())
    password = read_password!()
    IO.puts(Password.encode(Password.hash(password, o.iterations)))
  end

  @doc false
  # A password of 8 to 256 bytes from one line of stdin (the prompt on stderr; at a terminal
  # the line is blanked while typed). Raises `Mix.Error` otherwise.
  @spec read_password!() :: binary
  def read_password! do
    IO.write(:stderr, "password: ")
    line = if IO.ANSI.enabled?(), do: hidden_line(), else: IO.gets("")

    case line do
      line when is_binary(line) ->
        password = String.replace_suffix(String.replace_suffix(line, "\n", ""), "\r", "")

        if byte_size(password) in 8..256,
          do: password,
          else: Mix.raise("the password must be 8 to 256 bytes, got #{byte_size(password)}")

      _ ->
        Mix.raise("no password on standard input")
    end
  end

  # While the line is read, another process keeps clearing the terminal's line, so what is
  # typed does not stay on screen.
  defp hidden_line do
    clearer = spawn_link(fn -> clear_loop() end)
    line = IO.gets("")
    send(clearer, :stop)
    IO.write(:stderr, "\e[2K\r")
    line
  end

  defp clear_loop do
    receive do
      :stop -> :ok
    after
      1 ->
        IO.write(:stderr, "\e[2K\rpassword: ")
        clear_loop()
    end
  end
end

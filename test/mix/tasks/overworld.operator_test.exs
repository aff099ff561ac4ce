defmodule Mix.Tasks.Overworld.OperatorTest do
  # `mix overworld.operator.hash` and `mix overworld.operator.add`: the password from stdin,
  # never from the command line.
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO

  alias Mix.Tasks.Overworld.Operator.{Add, Hash}
  alias Overworld.Accounts.Password

  # (The prompt goes to stderr.)
  defp quiet(fun), do: capture_io(:stderr, fun)

  test "hash: the text of a hash of the password read from stdin" do
    quiet(fn -> hash_task() end)
  end

  defp hash_task do
    out = capture_io("a good password\n", fn -> Hash.run(["--iterations", "1000"]) end)
    assert [text] = String.split(out, ["\n", "password: "], trim: true)
    assert {:ok, {:pbkdf2_sha256, 1000, _, _} = hash} = Password.decode(text)
    assert Password.verify("a good password", hash)
    refute Password.verify("a good password\n", hash)

    assert_raise Mix.Error, ~r/8 to 256 bytes/, fn ->
      capture_io("short\n", fn -> Hash.run([]) end)
    end

    assert_raise Mix.Error, ~r/no password/, fn -> capture_io("", fn -> Hash.run([]) end) end
    assert_raise Mix.Error, ~r/invalid arguments/, fn -> Hash.run(["--nope"]) end
  end

  test "add: an operator in the data directory's table" do
    quiet(fn -> add_task() end)
  end

  defp add_task do
    # (The test node's Mnesia runs in the test data directory: the task uses it.)
    dir = Overworld.Test.DataDir.path()
    :ok = Overworld.Accounts.start(dir)
    :ok = Overworld.Operators.start()
    name = "cli-#{System.unique_integer([:positive])}"

    capture_io("the cli password\n", fn ->
      Add.run([name, "--data-dir", dir, "--role", "viewer", "--iterations", "1000"])
    end)

    assert %{name: ^name, role: :viewer} =
             Enum.find(Overworld.Operators.list(), &(&1.name == name))

    settings = %{static: %{}}
    assert {:ok, %{hash: hash}} = Overworld.Operators.get(settings, name)
    assert Password.verify("the cli password", hash)

    text = Password.encode(Password.hash("another password", 1000))
    capture_io(fn -> Add.run([name, "--data-dir", dir, "--hash", text]) end)
    assert {:ok, %{role: :operator, hash: hash}} = Overworld.Operators.get(settings, name)
    assert Password.verify("another password", hash)

    assert_raise Mix.Error, ~r/the name/, fn -> Add.run(["bad name", "--hash", text]) end

    assert_raise Mix.Error, ~r/--role/, fn ->
      Add.run([name, "--role", "root", "--hash", text])
    end

    assert_raise Mix.Error, ~r/--hash/, fn -> Add.run([name, "--hash", "nope"]) end
    assert_raise Mix.Error, ~r/usage/, fn -> Add.run([]) end
    :ok = Overworld.Operators.delete(name)
  end
end

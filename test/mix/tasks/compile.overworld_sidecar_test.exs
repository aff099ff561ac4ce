defmodule Mix.Tasks.Compile.OverworldSidecarTest do
  # The sidecar's Mix compiler: off unless configured; on, it builds the sidecar with cargo
  # (quick: `make` built it already) and installs it in priv/native/, where
  # Overworld.Sidecar.executable/0 finds it.
  use ExUnit.Case, async: false

  alias Mix.Tasks.Compile.OverworldNative, as: Native
  alias Mix.Tasks.Compile.OverworldSidecar, as: Compiler

  @moduletag timeout: 300_000

  setup do
    on_exit(fn -> Application.delete_env(:overworld, :build_sidecar) end)
  end

  test "off unless the project's configuration says build_sidecar: true" do
    Application.delete_env(:overworld, :build_sidecar)
    assert Compiler.run([]) == {:noop, []}
    Application.put_env(:overworld, :build_sidecar, false)
    assert Compiler.run([]) == {:noop, []}
  end

  test "up to date: the target exists and is not older than any source" do
    dir =
      Path.join(System.tmp_dir!(), "ow-sidecar-compiler-#{System.unique_integer([:positive])}")

    File.mkdir_p!(dir)
    on_exit(fn -> File.rm_rf!(dir) end)
    [target, a, b] = for f <- ~w(target a.rs b.rs), do: Path.join(dir, f)
    refute Native.up_to_date?(target, [a])
    for {f, t} <- [{a, 1_000}, {b, 2_000}, {target, 1_500}], do: File.touch!(f, t)
    assert Native.up_to_date?(target, [a])
    refute Native.up_to_date?(target, [a, b])
    File.touch!(target, 2_000)

    assert Native.up_to_date?(target, [
             a,
             b,
             Path.join(dir, "missing.rs")
           ])
  end

  test "on: the sidecar built and installed in priv/native/, then nothing to do" do
    Application.put_env(:overworld, :build_sidecar, true)
    target = "priv/native/overworld-sidecar"
    File.rm(target)
    Mix.shell(Mix.Shell.Process)
    on_exit(fn -> Mix.shell(Mix.Shell.IO) end)

    assert Compiler.run([]) == {:ok, []}
    assert File.read!(target) == File.read!("sidecar/target/release/overworld-sidecar")
    assert {"overworld-sidecar ready 1\n", 0} = ready(target)
    assert Compiler.run([]) == {:noop, []}

    assert Overworld.Sidecar.executable() in [
             Path.expand(target),
             Application.app_dir(:overworld, target)
           ]
  end

  # The executable starts, says it is ready and exits at the end of its standard input (kept
  # open a moment: at once, it may end before the ready line).
  defp ready(exe) do
    sock = Path.join(System.tmp_dir!(), "ow-cc-#{System.unique_integer([:positive])}.sock")
    on_exit(fn -> File.rm(sock) end)
    System.cmd("sh", ["-c", "sleep 0.5 | #{exe} serve --socket #{sock} --stripes 1"])
  end
end

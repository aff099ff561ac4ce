defmodule Mix.Tasks.Compile.OverworldSidecar do
  @shortdoc "Builds the native sidecar into priv/native/ (opt-in: config :overworld, build_sidecar: true)"
  @moduledoc """
  A Mix compiler (Overworld's mix.exs lists it: `compilers: Mix.compilers() ++
  [:overworld_native, :overworld_sidecar]`) that builds the native sidecar
  (docs/sidecar.md) for a game that depends on Overworld, so that `mix compile` is the one step:

      # the game's config/config.exs
      config :overworld, build_sidecar: true

  It is off unless the configuration of the project being compiled (the game's, when Overworld
  is its dependency) sets `build_sidecar: true`: a cargo build of the sidecar takes minutes the
  first time, and a game without `physics: :sidecar` does not need it. When on, it runs in
  Overworld's directory (Mix compiles a dependency there) and:

    1. does nothing when `priv/native/overworld-sidecar` is newer than every file of the
       sidecar's source (`sidecar/Cargo.toml`, `sidecar/Cargo.lock`, `sidecar/src/**`);
    2. else builds it with `sidecar/cargo.sh build --release` (which picks a Rust toolchain new
       enough, and says to run `make deps-rust` when there is none) and copies
       `sidecar/target/release/overworld-sidecar` into `priv/native/` (through a temporary
       file renamed over the old one, so a sidecar running from it is not disturbed).

  A failed build is a compile error with cargo's output. `Overworld.Sidecar.executable/0`
  prefers `priv/native/overworld-sidecar`, so a release (which carries `priv/`) finds it.
  """
  use Mix.Task.Compiler

  alias Mix.Tasks.Compile.OverworldNative, as: Native

  @target "priv/native/overworld-sidecar"
  @built "sidecar/target/release/overworld-sidecar"
  @recursive true

  @impl true
  def run(_args) do
    cond do
      not Application.get_env(:overworld, :build_sidecar, false) -> {:noop, []}
      not File.exists?("sidecar/cargo.sh") -> {:noop, []}
      Native.up_to_date?(@target, sources()) -> {:noop, []}
      true -> build()
    end
  end

  @impl true
  def clean do
    File.rm(@target)
    :ok
  end

  defp sources do
    ["sidecar/Cargo.toml", "sidecar/Cargo.lock" | Path.wildcard("sidecar/src/**/*.rs")]
  end

  defp build do
    Mix.shell().info("Building the sidecar (sidecar/cargo.sh build --release)")

    case System.cmd(Path.expand("sidecar/cargo.sh"), ["build", "--release"],
           stderr_to_stdout: true
         ) do
      {_output, 0} ->
        Native.install!(@built, @target, 0o755)
        Native.sync_build_priv(@target)
        {:ok, []}

      {output, status} ->
        Native.failure(
          "overworld_sidecar",
          "sidecar/Cargo.toml",
          "building the sidecar failed (sidecar/cargo.sh, status #{status}):\n" <> output
        )
    end
  end
end

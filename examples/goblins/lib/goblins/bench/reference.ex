defmodule Goblins.Bench.Reference do
  @moduledoc false
  # The native reference of the goblin benchmark (reference/ in this project, plain Rust): built
  # on first use with the cargo that reference/cargo.sh picks (the same toolchain as `make
  # deps-rust` and `make test`: the first one on this machine new enough for the crate), run as
  # a separate OS process, its one-line JSON parsed.

  @dir Path.expand("../../../reference", __DIR__)
  @binary "target/release/overworld-reference"

  @doc "The path of the built binary (building it if needed)."
  @spec binary!() :: Path.t()
  def binary! do
    dir = @dir
    bin = Path.join(dir, @binary)
    cargo_sh = Path.join(dir, "cargo.sh")

    case System.cmd("bash", [cargo_sh, "build", "--release", "--quiet"], stderr_to_stdout: true) do
      {_, 0} -> bin
      {out, 3} -> Mix.raise(String.trim(out))
      {out, code} -> Mix.raise("cargo build of #{dir} failed (#{code}):\n#{out}")
    end
  end

  @doc "Runs the reference; returns its decoded JSON output."
  @spec run_raw(keyword) :: map
  def run_raw(args) do
    argv = Enum.flat_map(args, fn {k, v} -> ["--#{k}", to_string(v)] end)

    case System.cmd(binary!(), argv, stderr_to_stdout: true) do
      {out, 0} ->
        out |> String.trim() |> String.split("\n") |> List.last() |> :jiffy.decode([:return_maps])

      {out, code} ->
        Mix.raise("the native reference failed (#{code}): #{out}")
    end
  end

  @doc "Single-threaded and `threads`-threaded runs of `ticks` ticks, as benchmark fields."
  @spec run(pos_integer, pos_integer, pos_integer, pos_integer) :: map
  def run(n, rate, threads, ticks) do
    single = run_raw(entities: n, ticks: ticks, warmup: 30, threads: 1, rate: rate)
    multi = run_raw(entities: n, ticks: ticks, warmup: 30, threads: threads, rate: rate)

    %{
      reference_ticks: ticks,
      reference_threads: threads,
      reference_single_avg_us: single["avg_us"],
      reference_single_p99_us: single["p99_us"],
      reference_avg_us: multi["avg_us"],
      reference_p99_us: multi["p99_us"]
    }
  end
end

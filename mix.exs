defmodule Overworld.MixProject do
  use Mix.Project

  @version "0.1.0"

  def project do
    [
      app: :overworld,
      version: @version,
      elixir: "~> 1.14",
      elixirc_paths: elixirc_paths(Mix.env()),
      # The shared-segment NIF of the sidecar (Mix.Tasks.Compile.OverworldNative).
      compilers: Mix.compilers() ++ [:overworld_native, :overworld_sidecar],
      start_permanent: Mix.env() == :prod,
      deps: deps(),
      aliases: aliases(),
      test_coverage: [summary: [threshold: 0]],
      # PropEr (Debian's erlang-proper) is used by the tests only. p1_pgsql (Overworld.Postgres)
      # and luerl (Overworld.Lua) are libraries, not applications to start: they are not in
      # extra_applications.
      xref: [
        exclude:
          [:proper, :proper_types, :eprof, :pgsql] ++
            [:luerl_new, :luerl_emul, :luerl_heap, :luerl_lib, :luerl_lib_table] ++
            [:luerl_scan, :luerl_parse, :luerl_comp]
      ],
      docs: [main: "readme", extras: ["README.md"]]
    ]
  end

  def application do
    [
      extra_applications: [:logger, :runtime_tools, :crypto, :jiffy, :cowlib],
      # Mnesia starts when a server starts, in its data directory (`Overworld.Accounts`).
      included_applications: [:mnesia],
      mod: {Overworld.Application, []}
    ]
  end

  # The library is lib/. The protocol's test-vector generator and the fuzz task (dev/) are
  # tools of the framework's own development: compiled in dev and test, never shipped. Games
  # (the goblin world in examples/goblins included) are Mix projects of their own that depend
  # on this one.
  defp elixirc_paths(:test), do: ["lib", "dev", "test/support"]
  defp elixirc_paths(:dev), do: ["lib", "dev"]
  defp elixirc_paths(_), do: ["lib"]

  # hex.pm is unreachable on our machines: libraries come from Debian's erlang-* packages, which put
  # them on the code path. A library is declared as a hex dependency only where it is not already
  # there, so the project still builds on a machine that has hex instead.
  defp deps do
    [
      system_dep(:jiffy, "~> 1.1", []),
      system_dep(:cowlib, "~> 2.12", []),
      # PostgreSQL client (Overworld.Postgres); Debian's erlang-p1-pgsql.
      system_dep(:p1_pgsql, "~> 1.1", []),
      # Lua interpreter (Overworld.Lua); Debian's erlang-luerl.
      system_dep(:luerl, "~> 1.0", []),
      system_dep(:proper, "~> 1.4", only: :test, runtime: false)
    ]
    |> Enum.reject(&is_nil/1)
  end

  defp system_dep(app, requirement, opts) do
    case :code.lib_dir(app) do
      {:error, :bad_name} -> {app, requirement, opts}
      _path -> nil
    end
  end

  defp aliases do
    []
  end
end

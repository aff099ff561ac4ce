defmodule Goblins.MixProject do
  use Mix.Project

  # The goblin world: a game of its own that depends on Overworld, as a game studio's project
  # would. Its zone and templates are in lib/; its tasks (`mix goblins.server`, the
  # benchmarks) in lib/mix/tasks; the native Rust reference of its rules in reference/.
  def project do
    [
      app: :goblins,
      version: "0.1.0",
      elixir: "~> 1.14",
      start_permanent: Mix.env() == :prod,
      deps: [{:overworld, path: "../.."}],
      docs: [main: "readme", extras: ["README.md"]],
      # `MIX_ENV=prod mix release`: the goblin world served as the environment configures
      # it (rel/env.sh.eex; Overworld.Release; docs/cluster.md, "Releases").
      releases: [goblins: [include_executables_for: [:unix]]]
    ]
  end

  def application do
    [extra_applications: [:logger], mod: {Goblins.Application, []}]
  end
end

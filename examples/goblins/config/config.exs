import Config

config :logger, :console, format: "$time [$level] $message $metadata\n", metadata: [:zone, :tick]

if config_env() == :test do
  config :logger, level: :warning
end

# Build Overworld's native sidecar into its priv/native/ when the framework compiles
# (`--physics sidecar`; Mix.Tasks.Compile.OverworldSidecar).
config :overworld, build_sidecar: true

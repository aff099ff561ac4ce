import Config

# Library settings are options passed at start, never application env (DESIGN.md §9.3).
# Only the logger is configured here.
config :logger, :console, format: "$time [$level] $message $metadata\n", metadata: [:zone, :tick]

if config_env() == :test do
  config :logger, level: :warning
end

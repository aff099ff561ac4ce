import Config

config :logger, :console, format: "$time [$level] $message $metadata\n", metadata: [:zone, :tick]

if config_env() == :test do
  config :logger, level: :warning
end

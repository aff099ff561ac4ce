defmodule Mix.Tasks.Overworld.Vectors do
  @shortdoc "Writes the shared protocol test vectors (protocol/vectors/*.json)"
  @moduledoc """
  Writes the byte-exact protocol test vectors shared by the Elixir and TypeScript tests:

      mix overworld.vectors [--check]

  `--check` writes nothing and fails if a file differs from what the encoder produces now.
  """
  use Mix.Task

  @impl true
  def run(argv) do
    opts = Overworld.Bench.Args.parse!(argv, [check: :boolean], "overworld.vectors")
    # The frame vectors come from a real zone.
    Mix.Task.run("app.start")

    for {name, map} <- Overworld.Protocol.Vectors.files() do
      path = Path.join("protocol/vectors", name)
      json = [:jiffy.encode(map, [:pretty]), "\n"] |> IO.iodata_to_binary()

      if opts[:check] do
        unless File.read(path) == {:ok, json},
          do: Mix.raise("#{path} is out of date: run mix overworld.vectors")
      else
        File.mkdir_p!("protocol/vectors")
        File.write!(path, json)
        Mix.shell().info("wrote #{path}")
      end
    end
  end
end

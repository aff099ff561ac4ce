defmodule Overworld.Metrics.Counters do
  @moduledoc false
  # Named counters in one `:counters` array (write_concurrency), for modules that count many
  # things from many processes (a server's connections and bytes, a bot swarm's snapshots).
  #
  #     use Overworld.Metrics.Counters, [:sent, :dropped]
  #
  # defines `counter/1` (a name's index, one function clause per name: no lookup on hot
  # paths), `new_counters/0` and `read_counters/1` (every name => its value).

  defmacro __using__(names) do
    quote bind_quoted: [names: names] do
      for {name, i} <- Enum.with_index(names, 1) do
        @doc false
        def counter(unquote(name)), do: unquote(i)
      end

      @doc false
      def new_counters, do: :counters.new(unquote(length(names)), [:write_concurrency])

      @doc false
      def read_counters(ref) do
        Map.new(unquote(Enum.with_index(names, 1)), fn {k, i} -> {k, :counters.get(ref, i)} end)
      end
    end
  end
end

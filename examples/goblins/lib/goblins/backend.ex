defmodule Goblins.Backend do
  @moduledoc """
  The goblin server's backend services besides the world (`mix goblins.server`):

    * match handlers clients may create by name: `"echo"` (`Overworld.Bench.EchoMatch`: op 1
      echoed to its sender, op 2 broadcast to every player);
    * RPC functions: `"goblin_count"` (the goblins of the zone) and `"echo"` (answers its
      payload);
    * the matchmaker: matched players get a relayed match.
  """

  @doc "The `Overworld.Server` options of the goblin server's backend."
  @spec server_options() :: keyword
  def server_options do
    [
      matches: [handlers: %{"echo" => Overworld.Bench.EchoMatch}],
      rpc: %{
        "echo" => fn _ctx, payload -> {:ok, payload} end,
        "goblin_count" => &goblin_count/2
      }
    ]
  end

  defp goblin_count(_ctx, _payload) do
    case Overworld.Zone.metrics(:goblins) do
      %{entities: n} -> {:ok, %{"goblins" => n}}
      _ -> {:error, :unavailable, "the goblin zone is not running here"}
    end
  end
end

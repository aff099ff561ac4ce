defmodule Overworld.ReleaseTest do
  use ExUnit.Case, async: false
  import ExUnit.CaptureIO
  doctest Overworld.Release

  alias Overworld.Release

  test "starts the world and the server the environment describes, and says where it listens" do
    # (The suite's data directory: Mnesia, which holds the accounts, has one per node.)
    tmp = Overworld.Test.DataDir.path()

    env = %{
      "OVERWORLD_PORT" => "0",
      "OVERWORLD_DATA_DIR" => tmp,
      "OVERWORLD_WORLD" => "released",
      "OVERWORLD_ZONES" => "2x1",
      "OVERWORLD_ENTITIES_PER_ZONE" => "100"
    }

    out =
      capture_io(fn ->
        {:ok, sup} =
          Release.start_link([zone: Overworld.Test.Game, wire: Overworld.Test.Game.Wire], env)

        Overworld.Test.Cluster.eventually(fn -> Overworld.World.zones("released") != [] end)
        # (The announcement comes from a task once the server listens.)
        Process.sleep(200)
        assert length(Overworld.World.zones("released")) == 2
        port = Overworld.Server.port()

        assert {:ok, 200, _, body} =
                 Overworld.Client.request("127.0.0.1", port, "GET", "/api/v1/status")

        assert body =~ "released/0,0"
        Supervisor.stop(sup)
      end)

    assert out =~ ~r/listening on http:\/\/127.0.0.1:\d+/
    assert File.dir?(Path.join([tmp, "worlds", "released"]))
  end

  test "a bad setting is a one-line error naming the variable" do
    for {var, value, message} <- [
          {"OVERWORLD_ZONES", "2by2", "OVERWORLD_ZONES: expected CxR"},
          {"OVERWORLD_ENTITIES_PER_ZONE", "0",
           "OVERWORLD_ENTITIES_PER_ZONE: expected a positive integer"},
          {"OVERWORLD_PORT", "70000", "OVERWORLD_PORT: expected a port number"}
        ] do
      error =
        assert_raise ArgumentError, fn ->
          Release.config!(%{var => value}, Overworld.Test.Game)
        end

      assert error.message =~ message
    end
  end
end

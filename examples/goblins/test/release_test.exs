defmodule Goblins.ReleaseTest do
  # The goblin world's release (`MIX_ENV=prod mix release`), configured by the environment
  # only (Overworld.Release): three nodes of it on this machine form a cluster and spread the
  # world over themselves; each serves HTTP. Real OS processes, the release's own scripts.
  use ExUnit.Case, async: false
  @moduletag timeout: 300_000

  alias Overworld.Bench.OsServer

  @tag :tmp_dir
  test "three nodes started from the release join one cluster and spread the world", %{
    tmp_dir: tmp
  } do
    rel = Path.join(tmp, "rel")

    {out, status} =
      System.cmd("mix", ["release", "--overwrite", "--path", rel],
        env: [{"MIX_ENV", "prod"}],
        stderr_to_stdout: true
      )

    assert status == 0, out
    bin = Path.join([rel, "bin", "goblins"])
    cookie = Path.join(tmp, "cookie")
    File.write!(cookie, Base.encode32(:crypto.strong_rand_bytes(20)))
    File.chmod!(cookie, 0o600)
    tag = System.unique_integer([:positive])
    names = for i <- 1..3, do: "goblinsrel#{tag}x#{i}@127.0.0.1"

    env = fn i ->
      [
        {~c"OVERWORLD_PORT", ~c"0"},
        {~c"OVERWORLD_DATA_DIR", String.to_charlist(Path.join(tmp, "data#{i}"))},
        {~c"OVERWORLD_ZONES", ~c"2x2"},
        {~c"OVERWORLD_ENTITIES_PER_ZONE", ~c"300"},
        {~c"OVERWORLD_NODE_NAME", String.to_charlist(Enum.at(names, i - 1))},
        {~c"OVERWORLD_NODES", String.to_charlist(Enum.join(names, ","))},
        {~c"OVERWORLD_COOKIE_FILE", String.to_charlist(cookie)}
      ]
    end

    servers =
      for i <- 1..3 do
        {:ok, s} = OsServer.start(bin, ["start"], env: env.(i), timeout: 60_000)
        s
      end

    try do
      for s <- servers do
        assert {:ok, 200, _, _} =
                 Overworld.Client.request("127.0.0.1", s.http_port, "GET", "/api/v1/status")
      end

      # Every node sees the three, and the world's four zones run, each on one node.
      rpc = fn i, code ->
        {out, 0} =
          System.cmd(bin, ["rpc", code],
            env: [
              {"OVERWORLD_NODE_NAME", Enum.at(names, i - 1)},
              {"OVERWORLD_COOKIE_FILE", cookie}
            ]
          )

        String.trim(out)
      end

      wait(fn ->
        Enum.all?(1..3, &(rpc.(&1, "IO.puts(length(Overworld.Cluster.nodes()))") == "3")) and
          Enum.sum(
            for i <- 1..3,
                do: String.to_integer(rpc.(i, "IO.puts(length(Overworld.Names.zones()))"))
          ) == 4
      end)
    after
      Enum.each(servers, &OsServer.stop/1)
    end
  end

  defp wait(fun, tries \\ 60) do
    cond do
      fun.() -> :ok
      tries == 0 -> flunk("the cluster of releases did not settle within 30 s")
      true -> Process.sleep(500) && wait(fun, tries - 1)
    end
  end
end

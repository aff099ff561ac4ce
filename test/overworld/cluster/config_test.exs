defmodule Overworld.Cluster.ConfigTest do
  use ExUnit.Case, async: true
  doctest Overworld.Cluster.Config

  alias Overworld.Cluster.Config

  @moduletag :tmp_dir

  test "a cookie file readable by its owner only is read; one others can read is refused", %{
    tmp_dir: dir
  } do
    path = Path.join(dir, "cookie")
    File.write!(path, "s3cret\n")
    File.chmod!(path, 0o600)
    assert {:ok, %Config{cookie: :s3cret}} = Config.from_env(%{"OVERWORLD_COOKIE_FILE" => path})

    File.chmod!(path, 0o644)
    assert {:error, message} = Config.from_env(%{"OVERWORLD_COOKIE_FILE" => path})
    assert message =~ "readable by others (mode 644)"

    assert {:error, "OVERWORLD_COOKIE_FILE: cannot read " <> _} =
             Config.from_env(%{"OVERWORLD_COOKIE_FILE" => Path.join(dir, "none")})

    File.write!(path, "")
    File.chmod!(path, 0o600)
    assert {:error, message} = Config.from_env(%{"OVERWORLD_COOKIE_FILE" => path})
    assert message =~ "the cookie is empty"
  end

  test "contradictory or malformed settings are errors that name the variable" do
    assert {:error, "OVERWORLD_DNS and OVERWORLD_NODES are both set" <> _} =
             Config.from_env(%{"OVERWORLD_NODES" => "a@h", "OVERWORLD_DNS" => "svc.local"})

    assert {:error, "OVERWORLD_COOKIE and OVERWORLD_COOKIE_FILE are both set" <> _} =
             Config.from_env(%{"OVERWORLD_COOKIE" => "x", "OVERWORLD_COOKIE_FILE" => "/tmp/x"})

    assert {:error, "OVERWORLD_NODES: expected at least one" <> _} =
             Config.from_env(%{"OVERWORLD_NODES" => " , "})

    assert {:error, "OVERWORLD_DNS: expected a DNS name" <> _} =
             Config.from_env(%{"OVERWORLD_DNS" => "not a name"})

    assert {:error, "OVERWORLD_NODE_BASENAME: " <> _} =
             Config.from_env(%{"OVERWORLD_DNS" => "svc", "OVERWORLD_NODE_BASENAME" => "a@b"})
  end

  test "a DNS name: its records, looked up each time the nodes are wanted" do
    {:ok, c} = Config.from_env(%{"OVERWORLD_DNS" => "overworld.default.svc"})
    assert c.nodes == [] and c.basename == "overworld"
    {:ok, agent} = Agent.start_link(fn -> [{10, 0, 0, 1}] end)
    resolve = fn "overworld.default.svc" -> Agent.get(agent, & &1) end
    assert Config.nodes(c, resolve) == [:"overworld@10.0.0.1"]
    Agent.update(agent, &[{10, 0, 0, 3} | &1])
    assert Config.nodes(c, resolve) == [:"overworld@10.0.0.1", :"overworld@10.0.0.3"]
    # The real resolver, on a name that cannot exist: no nodes, no crash.
    {:ok, c} = Config.from_env(%{"OVERWORLD_DNS" => "nothing.invalid"})
    assert Config.nodes(c) == []
  end
end

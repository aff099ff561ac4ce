defmodule Overworld.GuideTest do
  # docs/guide.md, run as a game maker would: its commands and code blocks, extracted from the
  # file (a copy of them anywhere else would not count), make a project with `mix new` that
  # depends on this checkout by path; it compiles; its `mix overworld.server` command serves
  # it (a separate OS process); a player connects over a real socket and its hero walks with
  # its inputs. If the guide rots, this fails.
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase, only: [join: 2, snapshots: 2]

  alias Overworld.Client
  alias Overworld.Bench.OsServer
  alias Overworld.Protocol.Snapshot.View

  @moduletag timeout: 300_000
  @guide "docs/guide.md"

  # The guide's code blocks: `{info string, code}`, in order.
  defp blocks do
    Regex.scan(~r/^```([^\n]*)\n(.*?)^```$/ms, File.read!(@guide), capture: :all_but_first)
    |> Enum.map(fn [info, code] -> {String.trim(info), code} end)
  end

  defp block!(info) do
    case for {^info, code} <- blocks(), do: code do
      [code] -> code
      found -> flunk("expected one ```#{info} block in #{@guide}, found #{length(found)}")
    end
  end

  # A `sh` block's command starting with `prefix` (its words).
  defp command!(prefix) do
    blocks()
    |> Enum.filter(fn {info, _} -> info == "sh" end)
    |> Enum.flat_map(fn {_, code} -> String.split(code, "\n", trim: true) end)
    |> Enum.find(&String.starts_with?(&1, prefix))
    |> Kernel.||(flunk("no `#{prefix} ...` command in #{@guide}"))
    |> String.split()
  end

  defp mix!(args, dir, env \\ []) do
    {out, status} =
      System.cmd("mix", args, cd: dir, stderr_to_stdout: true, env: [{"MIX_ENV", "dev"} | env])

    assert status == 0, "mix #{Enum.join(args, " ")} failed (#{status}):\n#{out}"
    out
  end

  test "the guide's game: made with mix new, compiled, served, and a player's hero walks" do
    root = File.cwd!()
    tmp = Path.join(System.tmp_dir!(), "overworld-guide-#{System.unique_integer([:positive])}")
    File.mkdir_p!(tmp)
    on_exit(fn -> File.rm_rf(tmp) end)

    # 1. `mix new my_game`, as the guide says.
    ["mix", "new", name] = command!("mix new")
    mix!(["new", name], tmp)
    dir = Path.join(tmp, name)

    # Its deps: the guide's block in place of the generated one, the path to this checkout.
    deps = block!("elixir mix.exs deps") |> String.replace(~s("../overworld"), inspect(root))
    mix_exs = Path.join(dir, "mix.exs")
    generated = File.read!(mix_exs)
    assert generated =~ ~r/  defp deps do\n.*?\n  end\n/s
    File.write!(mix_exs, Regex.replace(~r/  defp deps do\n.*?\n  end\n/s, generated, deps))

    # 2. The game's code.
    File.write!(Path.join(dir, "lib/my_game.ex"), block!("elixir lib/my_game.ex"))
    mix!(["compile"], dir)

    # 3. The guide's server command (on a free port, files in a temporary directory).
    ["mix" | args] = command!("mix overworld.server")
    data = Path.join(tmp, "data")
    server = serve(dir, args ++ ~w(--port 0 --interval 3600 --data-dir #{data}))

    try do
      # 4. A player: its hero appears, then walks east with its inputs.
      p = join(%{port: server.http_port}, path: "/ws?zone=my_game")
      assert [%{name: "hero"}] = p.templates
      # The guide's input layout, as the HANDSHAKE tells every client.
      assert %{name: "walk", fields: [%{name: "dx"}, %{name: "dy"}]} = layout = p.handshake.input
      east = Overworld.Template.encode_input(layout, %{"dx" => 10, "dy" => 0})
      p = snapshots(p, 3)
      {x0, y0} = hero(p)

      p =
        Enum.reduce(1..20, p, fn seq, p ->
          :ok = Client.send_msg(p.conn, %{type: :input, seq: seq, ack: 0, payload: east})
          snapshots(p, 1)
        end)
        |> snapshots(10)

      {x1, y1} = hero(p)
      # 10 * 8 units a tick = 80/1024 m, quantized at 1/64 m: 5 steps a tick, for 20+ ticks.
      assert x1 - x0 >= 5 * 15, "the hero did not walk east: #{x0} -> #{x1}"
      assert y1 == y0
      Client.close(p.conn)
    after
      OsServer.stop(server, "KILL")
    end
  end

  # The hero's quantized position in the player's view.
  defp hero(p) do
    assert {0, {x, y}} = Map.fetch!(View.entities(p.view), p.entity)
    {x, y}
  end

  defp serve(dir, args) do
    case OsServer.start(System.find_executable("mix"), args,
           cd: dir,
           env: [{~c"MIX_ENV", ~c"dev"}],
           timeout: 120_000
         ) do
      {:ok, server} -> server
      {:error, {:exited, s, out}} -> flunk("the guide's server exited with #{s}:\n" <> out)
      {:error, {:timeout, out}} -> flunk("the guide's server did not start:\n" <> out)
    end
  end
end

defmodule Overworld.Lua.RuntimeTest do
  use ExUnit.Case, async: true
  alias Overworld.Lua
  alias Overworld.Lua.Runtime

  @moduletag capture_log: true

  @fixtures "test/fixtures/lua"
  @game Path.join(@fixtures, "game.lua")

  defp start(context, opts \\ []) do
    opts =
      Keyword.merge(
        [
          name: context.test,
          files: [@game],
          workers: 2,
          timeout: 300,
          max_heap_bytes: 8_000_000,
          functions: %{"game" => %{"user" => fn [] -> Lua.context()[:user] end}}
        ],
        opts
      )

    start_supervised!({Runtime, opts})
    context.test
  end

  test "calls the registered functions, with the context", context do
    rt = start(context)
    assert "add" in Runtime.functions(rt)
    assert Runtime.functions(rt) == Enum.sort(Runtime.functions(rt))
    refute "match_tick" in Runtime.functions(rt)
    assert Runtime.call(rt, "add", [1, 2]) == {:ok, [3]}

    assert Runtime.call(rt, "echo", [[1, 2], %{"a" => "b"}, nil, true]) ==
             {:ok, [[1, 2], %{"a" => "b"}, nil, true]}

    assert Runtime.call(rt, "whoami", [], %{user: 7}) ==
             {:ok, [%{"from_lua" => 7, "from_elixir" => 7}]}

    assert Runtime.call(rt, "whoami", []) == {:ok, [[]]}
    # Globals are not RPCs.
    assert Runtime.call(rt, "match_tick", [[]]) == {:error, :not_found}
    assert Runtime.call(rt, "print", []) == {:error, :not_found}
    assert Runtime.call(:no_such_runtime, "add", [1, 2]) == {:error, :noproc}
    assert Runtime.functions(:no_such_runtime) == []

    # The loaded state, for a process that keeps one of its own.
    assert {:ok, base, %{timeout: 300, max_heap_bytes: 8_000_000}} = Runtime.base(rt)
    assert {:ok, [1], _} = Lua.call_limited(base, "match_tick", [[]])
    assert Runtime.base(:no_such_runtime) == {:error, :noproc}
    assert_raise ArgumentError, fn -> Runtime.call(rt, "add", [self()]) end
  end

  test "calls never see each other's changes", context do
    rt = start(context)

    for i <- 1..20 do
      assert Runtime.call(rt, "set_global", [i]) == {:ok, [i]}
      assert Runtime.call(rt, "get_global", []) == {:ok, [nil]}
    end

    # Nor each other's random seeds.
    rand = Module.concat(context.test, Rand)
    start_supervised!({Runtime, name: rand, files: [seeded_script(context)], workers: 1})
    assert {:ok, [a]} = Runtime.call(rand, "seeded", [])
    assert Runtime.call(rand, "seeded", []) == {:ok, [a]}
    # What the next draw would be if the seed had stayed.
    {:ok, [_, leaked], _} =
      Lua.eval(
        Lua.new(),
        "math.randomseed(42) return math.random(1, 1000000), math.random(1, 1000000)"
      )

    assert {:ok, [b]} = Runtime.call(rand, "draw", [])
    assert b != leaked
  end

  defp seeded_script(context) do
    path = Path.join(System.tmp_dir!(), "overworld_lua_#{:erlang.phash2(context.test)}.lua")

    File.write!(path, """
    overworld.register_rpc("seeded", function() math.randomseed(42) return math.random(1, 1000000) end)
    overworld.register_rpc("draw", function() return math.random(1, 1000000) end)
    """)

    on_exit(fn -> File.rm(path) end)
    path
  end

  test "a Lua error is the caller's, and the worker carries on", context do
    rt = start(context)
    workers = worker_pids(rt)

    assert Runtime.call(rt, "fail", ["boom"]) == {:error, {:lua_error, "fail: #{@game}:70: boom"}}

    assert Runtime.call(rt, "divide", [1, 0]) ==
             {:error,
              {:lua_error, "divide: arithmetic error (division by zero, or a number too large)"}}

    assert Runtime.call(rt, "add", [1, 1]) == {:ok, [2]}
    assert worker_pids(rt) == workers
  end

  defp worker_pids(rt) do
    for {_, pid, _, _} <- Supervisor.which_children(rt), do: pid
  end

  test "a runaway loop is stopped at the timeout, and the pool keeps serving", context do
    rt = start(context)
    workers = worker_pids(rt)

    loop = Task.async(fn -> :timer.tc(fn -> Runtime.call(rt, "loop", []) end) end)
    # Meanwhile, the other worker serves.
    Process.sleep(20)
    for _ <- 1..20, do: assert(Runtime.call(rt, "add", [1, 1]) == {:ok, [2]})

    {micros, answer} = Task.await(loop)
    assert answer == {:error, :timeout}
    assert micros >= 300_000 and micros < 600_000

    # The worker was replaced; every call is served again.
    assert length(worker_pids(rt)) == 2
    assert worker_pids(rt) != workers
    for _ <- 1..10, do: assert(Runtime.call(rt, "add", [2, 2]) == {:ok, [4]})
  end

  test "calls waiting behind a runaway on its worker go to another", context do
    rt = start(context, workers: 2, timeout: 500)
    # Both workers busy: one with a loop, one with a long spin; the calls after them wait.
    loop = Task.async(fn -> Runtime.call(rt, "loop", []) end)
    Process.sleep(10)
    spin = Task.async(fn -> Runtime.call(rt, "spin", [150]) end)
    Process.sleep(100)
    waiting = for _ <- 1..4, do: Task.async(fn -> Runtime.call(rt, "add", [1, 2]) end)
    assert Enum.map(waiting, &Task.await/1) == List.duplicate({:ok, [3]}, 4)
    assert Task.await(spin) == {:ok, [150]}
    assert Task.await(loop) == {:error, :timeout}
  end

  test "memory bombs are stopped", context do
    rt = start(context)

    assert Runtime.call(rt, "recurse", []) == {:error, :memory_limit}
    assert Runtime.call(rt, "grow_table", []) == {:error, :memory_limit}

    # The string doubling stops at the longest string (1 MiB by default).
    assert {:error, {:lua_error, "grow_string: " <> message}} =
             Runtime.call(rt, "grow_string", [])

    assert message =~ "..: string too long"

    # Many strings, each within bounds, stopped by the guard.
    path =
      Path.join(System.tmp_dir!(), "overworld_lua_strings_#{:erlang.phash2(context.test)}.lua")

    File.write!(path, """
    overworld.register_rpc("strings", function()
      local s = string.rep("x", 500000)
      local t = {}
      while true do t[#t + 1] = s .. #t end
    end)
    """)

    on_exit(fn -> File.rm(path) end)
    strings = Module.concat(context.test, Strings)

    start_supervised!(
      {Runtime, name: strings, files: [path], workers: 1, max_heap_bytes: 8_000_000}
    )

    assert Runtime.call(strings, "strings", []) == {:error, :memory_limit}

    assert Runtime.call(rt, "add", [1, 1]) == {:ok, [2]}
  end

  test "a full worker answers busy at once", context do
    rt = start(context, workers: 1, max_queue: 2, timeout: 1000)
    first = Task.async(fn -> Runtime.call(rt, "spin", [200]) end)
    Process.sleep(20)
    second = Task.async(fn -> Runtime.call(rt, "spin", [10]) end)
    Process.sleep(20)
    {micros, answer} = :timer.tc(fn -> Runtime.call(rt, "add", [1, 1]) end)
    assert answer == {:error, :busy}
    assert micros < 10_000
    assert Task.await(first) == {:ok, [200]}
    assert Task.await(second) == {:ok, [10]}
    assert Runtime.call(rt, "add", [1, 1]) == {:ok, [2]}
  end

  test "concurrent callers", context do
    rt = start(context, workers: 2)

    results =
      1..50
      |> Enum.map(fn i ->
        Task.async(fn -> for j <- 1..20, do: Runtime.call(rt, "add", [i, j]) end)
      end)
      |> Enum.map(&Task.await/1)

    assert results == for(i <- 1..50, do: for(j <- 1..20, do: {:ok, [i + j]}))
  end

  test "scripts that cannot load stop the start with a clear error", context do
    name = context.test
    syntax = Path.join(@fixtures, "syntax_error.lua")
    load = Path.join(@fixtures, "load_error.lua")
    loop = Path.join(@fixtures, "load_loop.lua")

    assert Runtime.start_link(name: name, files: [@game, syntax]) ==
             {:error, {:lua_load, syntax, "#{syntax}:2: syntax error before: '='"}}

    assert Runtime.start_link(name: name, files: [load]) ==
             {:error, {:lua_load, load, "#{load}:2: cannot start"}}

    assert Runtime.start_link(name: name, files: [loop], load_timeout: 100) ==
             {:error, {:lua_load, loop, "loading took too long (option :load_timeout)"}}

    assert Runtime.start_link(name: name, files: ["nope.lua"]) ==
             {:error, {:lua_load, "nope.lua", "cannot read the file: no such file or directory"}}

    assert Process.whereis(name) == nil
    assert :ets.whereis(name) == :undefined
  end

  @tag :tmp_dir
  test "dir: loads every .lua file of a directory, in name order", %{tmp_dir: dir} = context do
    File.write!(
      Path.join(dir, "b.lua"),
      ~S|overworld.register_rpc("b", function() return base end)|
    )

    File.write!(
      Path.join(dir, "a.lua"),
      ~S|base = 1; overworld.register_rpc("a", function() return base end)|
    )

    File.write!(Path.join(dir, "notes.txt"), "not lua")
    rt = start(context, files: [], dir: dir)
    assert Runtime.functions(rt) == ["a", "b"]
    assert Runtime.call(rt, "b", []) == {:ok, [1]}
  end

  test "options are checked", context do
    assert_raise ArgumentError, ~r/expected :files or :dir/, fn ->
      Runtime.start_link(name: context.test)
    end

    assert_raise ArgumentError, ~r/expected :workers to be a positive integer/, fn ->
      Runtime.start_link(name: context.test, files: [@game], workers: 0)
    end

    assert_raise ArgumentError, ~r/unknown option :timout/, fn ->
      Runtime.start_link(name: context.test, files: [@game], timout: 5)
    end
  end
end

defmodule Overworld.LuaTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  require Logger
  alias Overworld.Lua
  alias Overworld.Test.Prop

  doctest Overworld.Lua

  @game "test/fixtures/lua/game.lua"

  defp eval!(lua \\ Lua.new(), code) do
    {:ok, values, _} = Lua.eval(lua, code)
    values
  end

  defp eval_error(lua \\ Lua.new(), code) do
    {:error, {:lua_error, message}} = Lua.eval(lua, code)
    message
  end

  describe "the sandbox" do
    test "what reaches outside the state is gone" do
      lua = Lua.new()

      for name <-
            ~w(io file require package load loadstring loadfile dofile debug collectgarbage eprint) do
        assert eval!(lua, "return #{name}") == [nil], name
        assert eval!(lua, "return rawget(_G, '#{name}')") == [nil], name
      end

      assert eval!(lua, "return string.dump, getmetatable('').__index.dump") == [nil, nil]

      for name <- ~w(execute exit getenv remove rename tmpname setlocale) do
        assert eval!(lua, "return os.#{name}") == [nil], name
      end
    end

    test "using it fails with a Lua error" do
      lua = Lua.new()

      for code <- [
            ~S|io.open("/etc/passwd")|,
            ~S|io.write("x")|,
            ~S|os.execute("touch /tmp/overworld_lua_escape")|,
            ~S|os.exit(1)|,
            ~S|os.getenv("HOME")|,
            ~S|os.remove("/tmp/x")|,
            ~S|require "os"|,
            ~S|load("return 1")()|,
            ~S|loadstring("return 1")()|,
            ~S|dofile("/etc/passwd")|,
            ~S|loadfile("/etc/passwd")()|,
            ~S|debug.getinfo(1)|,
            ~S|string.dump(print)|,
            ~S|collectgarbage("count")|,
            ~S|package.loaded.io.open("/etc/passwd")|
          ] do
        assert {:error, {:lua_error, message}} = Lua.eval(lua, code), code
        assert message =~ "attempt to", code
      end

      refute File.exists?("/tmp/overworld_lua_escape")
    end

    test "the safe libraries are there" do
      assert eval!("""
             local t = {3, 1, 2}
             table.sort(t)
             return table.concat(t, ","), string.upper("ab"), math.floor(2.5), math.max(1, 5),
               utf8.char(72, 105), bit32.band(6, 3), select("#", 1, 2, 3), type(pairs),
               tonumber("12"), tostring(12), os.time() > 0, type(os.clock()), type(os.date())
             """) == [
               "1,2,3",
               "AB",
               2,
               5,
               "Hi",
               2,
               3,
               "function",
               12,
               "12",
               true,
               "number",
               "string"
             ]

      assert [ok, message] = eval!(~S|return pcall(error, "x")|)
      assert {ok, message} == {false, "x"}
      assert [n] = eval!("return math.random(1, 6)")
      assert n in 1..6
      assert [f] = eval!("return math.random()")
      assert f >= 0 and f < 1
      assert eval_error("return math.random(5, 1)") =~ "math.random: interval is empty"
    end

    test "print discards, or logs with print: :log" do
      assert eval!("print('hello')") == []

      # (The tests run with the logger at :warning.)
      Logger.put_module_level(Overworld.Lua.Sandbox, :info)
      on_exit(fn -> Logger.delete_module_level(Overworld.Lua.Sandbox) end)

      log =
        capture_log([level: :info], fn ->
          assert eval!(Lua.new(print: :log), "print('hello', 1, nil)") == []
        end)

      assert log =~ "lua: hello\t1\tnil"
    end
  end

  describe "values" do
    setup do
      {:ok, lua} = Lua.load_string(Lua.new(), "function echo(...) return ... end")
      %{lua: lua}
    end

    test "round trips", %{lua: lua} do
      values = [
        nil,
        true,
        false,
        0,
        -12,
        1.5,
        4_611_686_018_427_387_904,
        "",
        <<0, 255, 10>>,
        "héllo",
        [1, "a", [2, [3]]],
        %{"a" => %{"b" => [true]}, "1" => "string key"},
        []
      ]

      assert {:ok, ^values, _} = Lua.call(lua, "echo", values)
    end

    test "what changes on the way", %{lua: lua} do
      assert {:ok, ["atom", 3, %{"1" => 1, "3" => 3}, [], %{"x" => 2}, %{"1.5" => "a"}], _} =
               Lua.call(lua, "echo", [:atom, 3.0, [1, nil, 3], %{}, %{x: 2.0}, %{1.5 => "a"}])

      assert {:ok, [["a", "b"]], _} = Lua.call(lua, "echo", [%{1 => "a", 2 => "b"}])

      assert eval!(lua, "return 2^53, 2^60, -0.0") == [
               9_007_199_254_740_992,
               1.152921504606847e18,
               0
             ]

      assert eval!(lua, "return 'héllo', #'é'") == ["héllo", 2]

      assert eval!(lua, "return {[true] = 1, [2.5] = 2, [-1] = 3}") == [
               %{"true" => 1, "2.5" => 2, "-1" => 3}
             ]
    end

    test "what cannot cross", %{lua: lua} do
      for bad <- [self(), make_ref(), {1, 2}, fn -> 1 end, [1 | 2], %{{1} => 2}, %{nil => 1}] do
        assert_raise ArgumentError, fn -> Lua.call(lua, "echo", [bad]) end
      end

      assert Lua.eval(lua, "return print") ==
               {:error, {:lua_error, "eval: cannot return a value: cannot convert a function"}}

      assert {:error,
              {:lua_error,
               "eval: cannot return a value: cannot convert a table that contains itself"}} =
               Lua.eval(lua, "local t = {} t.t = t return t")

      assert {:error,
              {:lua_error,
               "eval: cannot return a value: cannot convert a table with a table or function as a key"}} =
               Lua.eval(lua, "return {[{}] = 1}")
    end

    test "round trips (property)", %{lua: lua} do
      Prop.check(
        :proper.forall(value(3), fn v ->
          {:ok, [back], _} = Lua.call(lua, "echo", [v])
          back == canonical(v)
        end),
        300
      )
    end
  end

  # Values that come back as they went, but for canonical/1: integral floats are integers,
  # atoms strings, empty maps empty lists (nil inside tables would leave holes: not made).
  defp value(0), do: scalar()

  defp value(depth) do
    :proper_types.frequency([
      {4, scalar()},
      {1, :proper_types.list(:proper_types.lazy(fn -> value(depth - 1) end))},
      {1,
       :proper_types.bind(
         :proper_types.list(
           :proper_types.tuple([
             :proper_types.binary(),
             :proper_types.lazy(fn -> value(depth - 1) end)
           ])
         ),
         &Map.new/1,
         false
       )}
    ])
  end

  defp scalar do
    :proper_types.oneof([
      :proper_types.integer(),
      :proper_types.float(),
      :proper_types.binary(),
      :proper_types.boolean(),
      :proper_types.elements([:ok, :error])
    ])
  end

  defp canonical(f) when is_float(f) and f == trunc(f), do: trunc(f)
  defp canonical(a) when is_atom(a) and not is_boolean(a), do: Atom.to_string(a)
  defp canonical(m) when m == %{}, do: []
  defp canonical(l) when is_list(l), do: Enum.map(l, &canonical/1)
  defp canonical(m) when is_map(m), do: Map.new(m, fn {k, v} -> {k, canonical(v)} end)
  defp canonical(v), do: v

  describe "loading and calling" do
    test "a file's functions, global and nested" do
      {:ok, lua} = Lua.load_file(Lua.new(), @game)
      assert {:ok, [1], lua} = Lua.call(lua, "match_tick", [[%{player: "a", points: 2}]])
      assert {:ok, [2], lua} = Lua.call(lua, "match_tick", [[%{"player" => "a", "points" => 3}]])
      assert {:ok, [%{"scores" => %{"a" => 5}, "tick" => 2}], _} = Lua.eval(lua, "return match")
      assert Lua.rpc_names(lua) |> Enum.take(3) == ["add", "buy", "divide"]
      assert {:ok, [5], _} = Lua.call_rpc(lua, "add", [2, 3])

      assert {:ok, [%{"ok" => false, "missing" => 20, "reason" => "not enough gold"}], _} =
               Lua.call_rpc(lua, "buy", [%{gold: 100}, "sword"])
    end

    test "errors are readable" do
      {:ok, lua} = Lua.load_file(Lua.new(), @game)

      assert Lua.call_rpc(lua, "fail", ["boom"]) ==
               {:error, {:lua_error, "fail: #{@game}:70: boom"}}

      assert Lua.call_rpc(lua, "buy", [%{gold: 1}, "axe"]) ==
               {:error, {:lua_error, "buy: #{@game}:18: unknown item: axe"}}

      assert Lua.call_rpc(lua, "divide", [1, 0]) ==
               {:error,
                {:lua_error, "divide: arithmetic error (division by zero, or a number too large)"}}

      assert Lua.call_rpc(lua, "add", [1, "x"]) ==
               {:error, {:lua_error, ~s|add: #{@game}:67: bad argument to '+' (1, "x")|}}

      assert Lua.call(lua, "nothing", []) == {:error, {:lua_error, "nothing: undefined function"}}

      assert Lua.call(lua, ["match", "tick"], []) ==
               {:error, {:lua_error, "match.tick: attempt to call 0"}}

      assert eval_error("error({code = 1})") == ~s|eval:1: %{"code" => 1}|
      assert eval_error("local x = nil; x()") == "eval:1: attempt to call a nil value"
      assert eval_error("return nil .. 'x'") == "eval:1: attempt to concatenate a nil value"
      assert eval_error("return #nil") =~ "eval:1: bad argument to '#'"
    end

    test "load errors" do
      lua = Lua.new()

      assert Lua.load_string(lua, "x = = 1", "bad.lua") ==
               {:error, {:syntax, "bad.lua", "bad.lua:1: syntax error before: '='"}}

      assert {:error, {:syntax, "s.lua", "s.lua:1: " <> _}} =
               Lua.load_string(lua, "x = 'open", "s.lua")

      assert {:error, {:syntax, "g.lua", "g.lua: luerl cannot compile" <> _}} =
               Lua.load_string(lua, "goto x", "g.lua")

      assert Lua.load_string(lua, "\n\nerror('no')", "e.lua") ==
               {:error, {:lua_error, "e.lua:3: no"}}

      assert Lua.load_file(lua, "test/fixtures/lua/nope.lua") ==
               {:error, {:file, "test/fixtures/lua/nope.lua", :enoent}}
    end

    test "arguments are checked" do
      lua = Lua.new()
      assert_raise ArgumentError, ~r/expected a function name/, fn -> Lua.call(lua, :f, []) end

      assert_raise ArgumentError, ~r/expected a function name/, fn ->
        Lua.call(lua, ["a", 1], [])
      end

      assert_raise ArgumentError, ~r/unknown option :timout/, fn ->
        Lua.call_limited(lua, "f", [], timout: 1)
      end

      assert_raise ArgumentError, ~r/expected :print to be one of/, fn ->
        Lua.new(print: :stdout)
      end
    end
  end

  describe "strings are bounded" do
    test "concatenation, rep, format, table.concat and gsub refuse strings over max_string_bytes" do
      lua = Lua.new(max_string_bytes: 1000)
      assert eval!(lua, "return #(string.rep('x', 600) .. string.rep('y', 400))") == [1000]

      assert eval_error(lua, "local s = 'x' while true do s = s .. s end") =~
               "..: string too long (1024 bytes; at most 1000)"

      assert eval_error(lua, "return string.rep('ab', 501)") =~ "string.rep: string too long"
      assert eval_error(lua, "return string.rep('a', 500, ',,')") =~ "string.rep: string too long"

      assert eval_error(lua, "local s = string.rep('x', 600) return string.format('%s%s', s, s)") =~
               "string.format: string too long"

      assert eval_error(lua, "local s = string.rep('x', 600) return table.concat({s, s})") =~
               "table.concat: string too long"

      assert eval_error(lua, "return string.gsub(string.rep('x', 100), '.', '0123456789')") =~
               "string.gsub: string too long"

      assert eval_error(
               lua,
               "local s = string.rep('x', 100) return string.gsub(s, '.', function() return s end)"
             ) =~ "string.gsub: string too long"

      assert eval_error(lua, "local s = string.rep('x', 100) return string.gsub(s, '.', {x = s})") =~
               "string.gsub: string too long"
    end

    test "and keep their Lua meaning below it" do
      assert eval!("return 'a' .. 1 .. 2.5, string.rep('ab', 3, '-'), string.rep('x', 0)") == [
               "a12.5",
               "ab-ab-ab",
               ""
             ]

      assert eval!("return string.gsub('hello world', '(%w+)', '<%1>')") == ["<hello> <world>", 2]

      assert eval!(
               "return string.gsub('hello', 'l', {l = 'L'}), (string.gsub('ab', '%w', string.upper))"
             ) == ["heLLo", "AB"]

      assert eval!("return table.concat({1, 'b', 3}, ', ', 2), string.format('%d-%s', 3, 'x')") ==
               ["b, 3", "3-x"]

      assert eval!("""
             local mt = {__concat = function(a, b) return 'meta' end}
             local t = setmetatable({}, mt)
             return t .. 'x', 'x' .. t
             """) == ["meta", "meta"]
    end
  end

  describe "Elixir functions" do
    test "get the arguments, answer values, raise Lua errors, read the context" do
      lua =
        Lua.new(
          functions: %{
            "game" => %{
              "sum" => fn args -> Enum.sum(args) end,
              "split" => fn [s] -> {:multi, String.split(s, ",")} end,
              "deny" => fn [why] -> {:error, why} end,
              "crash" => fn _ -> raise "kaboom" end,
              "pid" => fn _ -> self() end,
              "user" => fn [] -> Lua.context()[:user] end,
              "table" => fn [t] -> Map.put(t, "seen", true) end
            }
          }
        )

      assert eval!(lua, "return game.sum(1, 2, 3.5), game.split('a,b')") == [6.5, "a", "b"]
      assert eval!(lua, "return game.table({x = 1})") == [%{"x" => 1, "seen" => true}]
      assert eval!(lua, "return pcall(game.deny, 'nope')") == [false, "game.deny: nope"]
      assert eval!(lua, "return pcall(game.crash)") == [false, "game.crash: kaboom"]
      assert eval_error(lua, "return game.crash()") == "eval:1: game.crash: kaboom"

      assert eval_error(lua, "return game.pid()") =~
               "game.pid: returned a value Lua cannot hold: cannot convert #PID"

      assert eval_error(lua, "return game.sum(print)") =~
               "game.sum: bad argument (cannot convert a function)"

      {:ok, lua} =
        Lua.load_string(lua, "function who() return game.user(), overworld.context().user end")

      assert {:ok, [7, 7], _} = Lua.call(lua, "who", [], %{user: 7})
      assert {:ok, [nil, nil], _} = Lua.call(lua, "who", [])
      assert Lua.context() == %{}
    end

    test "set_functions adds to a table, and checks what it gets" do
      lua =
        Lua.set_functions(Lua.new(), "string", %{"shout" => fn [s] -> String.upcase(s) <> "!" end})

      assert eval!(lua, "return string.shout('hi'), ('x'):shout(), string.upper('a')") == [
               "HI!",
               "X!",
               "A"
             ]

      assert_raise ArgumentError, ~r/fun\/1/, fn ->
        Lua.set_functions(lua, "t", %{"f" => fn -> 1 end})
      end

      {:ok, [], lua} = Lua.eval(Lua.new(), "x = 1")
      assert_raise ArgumentError, ~r/it is a number/, fn -> Lua.set_functions(lua, "x", %{}) end
    end
  end

  describe "call_limited/4" do
    setup do
      {:ok, lua} = Lua.load_file(Lua.new(), @game)
      %{lua: lua}
    end

    test "answers the results and the state after the call", %{lua: lua} do
      assert {:ok, [1], lua} = Lua.call_limited(lua, "match_tick", [[%{player: "p", points: 5}]])
      assert {:ok, [2], lua} = Lua.call_limited(lua, "match_tick", [[%{player: "p", points: 1}]])
      assert {:ok, [%{"p" => 6}], _} = Lua.eval(lua, "return match.scores")

      assert {:error, {:lua_error, "__overworld_rpc.fail: " <> _}} =
               Lua.call_limited(lua, ["__overworld_rpc", "fail"], ["x"])
    end

    test "stops a runaway loop at its timeout", %{lua: lua} do
      {micros, answer} =
        :timer.tc(fn -> Lua.call_limited(lua, ["__overworld_rpc", "loop"], [], timeout: 100) end)

      assert answer == {:error, :timeout}
      assert micros in 100_000..400_000
    end

    test "stops a call over its memory", %{lua: lua} do
      for rpc <- ~w(recurse grow_table) do
        assert Lua.call_limited(lua, ["__overworld_rpc", rpc], [], max_heap_bytes: 4_000_000) ==
                 {:error, :memory_limit}
      end

      {:ok, lua} =
        Lua.load_string(lua, """
        function strings()
          local s = string.rep('x', 500000)
          local t = {}
          while true do t[#t + 1] = s .. #t end
        end
        """)

      assert Lua.call_limited(lua, "strings", [], max_heap_bytes: 4_000_000) ==
               {:error, :memory_limit}

      # The caller lives on, and its trap_exit flag is as it was.
      assert Process.info(self(), :trap_exit) == {:trap_exit, false}
      refute_received {:EXIT, _, _}
    end

    test "the call dies with its caller, and an exit signal to the caller during a call stops it",
         %{lua: lua} do
      test = self()

      me = fn [] ->
        send(test, {:runner, self()})
        nil
      end

      lua = Lua.set_functions(lua, "t", %{"me" => me})
      {:ok, lua} = Lua.load_string(lua, "function forever() t.me() while true do end end")

      caller = spawn(fn -> Lua.call_limited(lua, "forever", [], timeout: 10_000) end)
      assert_receive {:runner, runner}
      ref = Process.monitor(runner)
      Process.exit(caller, :kill)
      assert_receive {:DOWN, ^ref, :process, ^runner, _}, 1000

      caller =
        spawn(fn ->
          me = self()

          spawn_link(fn -> receive(do: (:go -> exit(:boom))) end)
          |> then(&Process.put(:friend, &1))

          send(test, {:caller_ready, me})
          Lua.call_limited(lua, "forever", [], timeout: 10_000)
        end)

      ref = Process.monitor(caller)
      assert_receive {:caller_ready, ^caller}
      assert_receive {:runner, _runner}
      {:dictionary, dict} = Process.info(caller, :dictionary)
      send(dict[:friend], :go)
      assert_receive {:DOWN, ^ref, :process, ^caller, :boom}, 1000
    end
  end

  test "gc/1 and size/1" do
    lua = Lua.new()
    {:ok, [], lua} = Lua.eval(lua, "for i = 1, 1000 do local t = {i} end")
    assert Lua.size(Lua.gc(lua)) < Lua.size(lua)
  end
end

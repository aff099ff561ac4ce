defmodule Overworld.RPCTest do
  # RPC over HTTP and the WebSocket is tested with matches (test/overworld/match_test.exs,
  # Elixir) and the Lua runtime (test/overworld/match/lua_test.exs); here its pure part.
  use ExUnit.Case, async: true
  doctest Overworld.RPC
end

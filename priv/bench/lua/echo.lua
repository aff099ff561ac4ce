-- The Lua side of Nakama's workloads (mix overworld.bench.backend): an RPC answering its
-- payload, and the match handler "echo_lua": op 1 is an echo (back to its sender), op 2 a
-- broadcast (to every player, the sender named). The same as Overworld.Bench.EchoMatch.

overworld.register_rpc("echo_lua", function(payload)
  return payload
end)

matches = matches or {}

matches.echo_lua = {
  match_init = function(params)
    local rate = 10
    if params and params.rate then rate = params.rate end
    return { players = 0 }, rate, { mode = "echo_lua" }
  end,

  match_join_attempt = function(state, presence, metadata)
    return state, true
  end,

  match_join = function(state, presences)
    state.players = state.players + #presences
    return state
  end,

  match_leave = function(state, presences)
    state.players = state.players - #presences
    return state
  end,

  match_loop = function(state, tick, messages)
    for _, m in ipairs(messages) do
      if m.op == 1 then
        dispatcher.broadcast(1, m.data, { m.sender }, nil)
      elseif m.op == 2 then
        dispatcher.broadcast(2, m.data, nil, m.sender)
      end
    end
    return state
  end,

  match_terminate = function(state, grace)
    return state
  end,

  match_signal = function(state, data)
    return state, state.players
  end,
}

defmodule Overworld.Match.Lua do
  @moduledoc """
  Match handlers written in Lua: the handler `name` is the table `matches[name]` of the
  server's Lua scripts (`Overworld.Server`'s `lua:` option), with Nakama's functions:

      matches.echo = {
        match_init = function(params) return state, tick_rate, label end,
        match_join_attempt = function(state, presence, metadata) return state, true end,  -- or state, false, "reason"
        match_join = function(state, presences) return state end,
        match_leave = function(state, presences) return state end,
        match_loop = function(state, tick, messages) return state end,      -- nil: the match ends
        match_terminate = function(state, grace) return state end,
        match_signal = function(state, data) return state, reply end,
      }

  A presence is `{user_id = ...}`; a message `{sender = user_id, op = n, data = bytes}`. The
  `dispatcher` table acts on the match: `dispatcher.broadcast(op, data, user_ids, sender)`
  (`user_ids` nil: every player; `sender` nil: the server), `dispatcher.label(label)`,
  `dispatcher.kick(user_ids)`; and the server API of `Overworld.Lua.Server` is there too.

  Each match has a Lua state of its own, a copy of the runtime's loaded scripts, kept in the
  match's process: the handler's `state` stays a Lua value between ticks (never converted to
  Elixir and back); only presences, messages, params and what the dispatcher is given cross
  over. Every call runs under the runtime's time limit (`Overworld.Match.Lua.Guard` kills a
  match whose call runs past it: its players get `match_error`) and the match process's heap
  is bounded (the runtime's `:max_heap_bytes` beyond the state it started with).
  """
  @behaviour Overworld.Match

  alias Overworld.Lua
  alias Overworld.Match.Lua.Guard

  # The handler's state lives in the Lua global __ow_state; calls go through __ow_call.
  @wrapper """
  function __ow_call(name, fname, ...)
    local h = matches and matches[name]
    if h == nil then error("no match handler " .. tostring(name)) end
    local f = h[fname]
    if f == nil then
      if fname == "match_join_attempt" then return true end
      if fname == "match_signal" then return nil end
      return
    end
    local r = {f(__ow_state, ...)}
    __ow_state = r[1]
    if fname == "match_loop" and r[1] == nil then return "stop" end
    return select(2, table.unpack(r))
  end
  function __ow_init(name, params)
    local h = matches and matches[name]
    if h == nil or h.match_init == nil then error("no match handler " .. tostring(name)) end
    local state, rate, label = h.match_init(params)
    __ow_state = state
    return rate, label
  end
  """

  @doc "The names of the Lua match handlers of a runtime's scripts (`matches[name]`), sorted."
  @spec handlers(atom | nil) :: [binary]
  def handlers(nil), do: []

  def handlers(runtime) do
    # Read once from the loaded scripts, then kept in the runtime's own table (made again
    # with the runtime, which loads the scripts again).
    case :ets.lookup(runtime, :match_handlers) do
      [{_, names}] ->
        names

      [] ->
        names = read_handlers(runtime)
        :ets.insert(runtime, {:match_handlers, names})
        names
    end
  rescue
    ArgumentError -> []
  end

  defp read_handlers(runtime) do
    with {:ok, base, _} <- Lua.Runtime.base(runtime),
         {:ok, [names | _], _} <-
           Lua.eval(
             base,
             "local t = {} for k in pairs(matches or {}) do t[#t + 1] = k end return t"
           ) do
      names |> List.wrap() |> Enum.filter(&is_binary/1) |> Enum.sort()
    else
      _ -> []
    end
  end

  @impl true
  def init({{runtime, name}, params}) do
    with {:ok, base, limits} <- Lua.Runtime.base(runtime),
         {:ok, lua} <- Lua.load_string(dispatcher(base), @wrapper, "overworld_match") do
      Process.put(:overworld_match_lua, %{name: name, timeout: limits.timeout})
      # (A match's garbage is mostly short-lived tables of a tick: old generations are swept
      # often, so the process does not hold megabytes of them.)
      Process.flag(:fullsweep_after, 10)
      words = :erlang.system_info(:wordsize)

      Process.flag(:max_heap_size, %{
        size: div(limits.max_heap_bytes, words) + :erts_debug.size(lua) * 2,
        kill: true
      })

      case guarded(lua, "__ow_init", [name, params]) do
        {:ok, [rate, label | _], lua} when is_integer(rate) ->
          {:ok, %{lua: lua, name: name}, rate, label_map(label)}

        {:ok, [rate], lua} when is_integer(rate) ->
          {:ok, %{lua: lua, name: name}, rate, %{}}

        {:ok, other, _lua} ->
          {:error,
           "match_init of #{name} answered #{inspect(other, limit: 5)}: expected state, tick rate, label"}

        {:error, why} ->
          {:error, message(why)}
      end
    else
      {:error, why} -> {:error, message(why)}
    end
  end

  defp label_map(label) when is_map(label), do: label
  defp label_map(_), do: %{}

  defp dispatcher(base) do
    Lua.set_functions(base, "dispatcher", %{
      "broadcast" => fn args ->
        [op, data, to, from] = Enum.take(args ++ [nil, nil, nil, nil], 4)
        push({:broadcast, op, data, if(to in [nil, []], do: nil, else: to), from})
      end,
      "label" => fn [label | _] -> push({:label, if(label == [], do: %{}, else: label)}) end,
      "kick" => fn [users | _] -> push({:kick, users}) end
    })
  end

  defp push(action) do
    Process.put(:overworld_match_actions, [action | Process.get(:overworld_match_actions, [])])
    nil
  end

  @doc false
  # Between ticks the match hibernates: its heap compacted to the state's live part (the
  # loaded scripts are shared: `Overworld.Lua.Runtime.base/1`).
  def hibernate?, do: true

  @impl true
  def join_attempt(p, metadata, s) do
    case call(s, "match_join_attempt", [presence(p), metadata]) do
      {:ok, [false, reason | _], s, _} -> {:reject, to_string(reason), s}
      {:ok, [false], s, _} -> {:reject, "rejected", s}
      {:ok, _, s, _} -> {:accept, s}
    end
  end

  @impl true
  def join(ps, s), do: plain(call(s, "match_join", [Enum.map(ps, &presence/1)]))

  @impl true
  def leave(ps, s), do: plain(call(s, "match_leave", [Enum.map(ps, &presence/1)]))

  @impl true
  def loop(tick, messages, s) do
    msgs = for m <- messages, do: %{"sender" => m.sender, "op" => m.op, "data" => m.data}

    case call(s, "match_loop", [tick, msgs]) do
      {:ok, ["stop" | _], s, actions} -> {:stop, s, actions}
      {:ok, _, s, actions} -> {:ok, collect(s, tick), actions}
    end
  end

  @impl true
  def terminate(grace, s), do: plain(call(s, "match_terminate", [grace]))

  @impl true
  def signal(data, s) do
    {:ok, values, s, actions} = call(s, "match_signal", [data])
    {:reply, List.first(values), s, actions}
  end

  defp plain({:ok, _values, s, actions}), do: {:ok, s, actions}

  # luerl keeps what a script dropped until its state is collected: every 100 ticks (a state
  # left alone grows by megabytes in minutes, and its calls slow down with it).
  defp collect(s, tick) when rem(tick, 100) == 0, do: %{s | lua: Lua.gc(s.lua)}
  defp collect(s, _tick), do: s

  defp presence(p), do: %{"user_id" => p.user_id}

  # A handler call: raises on a Lua error (the match fails, logged by Overworld.Match.Server).
  defp call(s, fname, args) do
    Process.put(:overworld_match_actions, [])

    case guarded(s.lua, "__ow_call", [s.name, fname | args]) do
      {:ok, values, lua} ->
        actions = Enum.reverse(Process.get(:overworld_match_actions, []))
        {:ok, values, %{s | lua: lua}, actions}

      {:error, why} ->
        raise "#{s.name}.#{fname}: #{message(why)}"
    end
  end

  defp guarded(lua, fun, args) do
    %{timeout: timeout} = Process.get(:overworld_match_lua)
    Guard.run(timeout, fn -> Lua.call(lua, fun, args) end)
  end

  defp message({:lua_error, m}), do: m
  defp message({:syntax, _, m}), do: m
  defp message(m) when is_binary(m), do: m
  defp message(other), do: inspect(other, limit: 5)
end

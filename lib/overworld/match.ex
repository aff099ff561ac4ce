defmodule Overworld.Match do
  @moduledoc """
  Authoritative matches: a handler module with the lifecycle Nakama's users know, run by a
  process of its own at the match's tick rate.

  A handler (`@behaviour Overworld.Match`, or a Lua module: `Overworld.Match.Lua`):

    * `c:init/1` — the match's state, tick rate (1..60 per second) and label (a flat JSON
      object, at most 2 KiB, listed and queried: `list/1`);
    * `c:join_attempt/3` — accept a player, or reject it with a reason the client sees;
    * `c:join/2` and `c:leave/2` — players that joined, or left (or whose connection was lost
      for longer than the rejoin grace);
    * `c:loop/3` — every tick, with the messages received since the last one (oldest first);
      `{:stop, state, actions}` ends the match;
    * `c:terminate/2` — the match is shutting down in `grace` seconds (`shutdown/2`, or 0 when
      the node stops);
    * `c:signal/2` — a call from server code (`signal/3`), answered.

  Callbacks answer the new state and a list of actions:

    * `{:broadcast, op, data}` — to every player; `{:broadcast, op, data, user_ids}` to some
      (nil: every player); `{:broadcast, op, data, user_ids, sender}` naming a sender user id
      ("" or nil: the server). `op` is 0..2^32, `data` a binary;
    * `{:label, label}` — a new label;
    * `{:kick, user_ids}` — players removed (they get a `match_kicked` notification; `c:leave/2`
      is called).

  Each tick's messages for a player go in **one** MATCH_DATA frame (docs/protocol.md,
  "Matches"), in the order of the actions, reliable and in order on the player's connection.
  Presences (joins, leaves) reach the players as `match_presence` notifications.

  **Matches are cheap and isolated.** Each is a process under `Overworld.Matches` (temporary:
  never restarted); one that raises is logged and its players get a `match_error`
  notification, other matches carry on. A player whose connection is lost stays a presence
  for the rejoin grace (`:grace` ms, default 15,000): joining again meanwhile takes its place
  back without `c:join_attempt/3` nor `c:join/2`. Messages from players are at most
  `:max_data_bytes` each (default 4,096; more: the sender gets an error) and
  `:max_messages` per tick (default 1,024; beyond, dropped and counted).

  **Found anywhere in a cluster**: a match joins the `:pg` group `{:match, id}` of
  `Overworld.Cluster`'s scope, and lists itself in its node's table (`list/1` asks every node).
  """

  alias Overworld.Match.Query

  @typedoc "A match id: 32 hex characters."
  @type id :: binary

  @typedoc "A player in a match."
  @type presence :: %{user_id: binary, session: pid, node: node}

  @typedoc "A message from a player, received since the last tick."
  @type message :: %{sender: binary, op: non_neg_integer, data: binary}

  @type action ::
          {:broadcast, non_neg_integer, binary}
          | {:broadcast, non_neg_integer, binary, [binary] | nil}
          | {:broadcast, non_neg_integer, binary, [binary] | nil, binary | nil}
          | {:label, map}
          | {:kick, [binary]}

  @type state :: term
  @type result :: {:ok, state} | {:ok, state, [action]}

  @callback init(params :: map) ::
              {:ok, state, tick_rate :: pos_integer, label :: map} | {:error, binary}
  @callback join_attempt(presence, metadata :: map, state) ::
              {:accept, state} | {:reject, binary, state}
  @callback join([presence], state) :: result
  @callback leave([presence], state) :: result
  @callback loop(tick :: non_neg_integer, [message], state) ::
              result | {:stop, state} | {:stop, state, [action]}
  @callback terminate(grace_seconds :: non_neg_integer, state) :: result
  @callback signal(data :: term, state) :: {:reply, term, state} | {:reply, term, state, [action]}

  @table :overworld_matches

  @doc """
  Starts a match of `handler` (a module of this behaviour, or `{Overworld.Match.Lua, name}`)
  on this node, with `params` for its `c:init/1`. Options: `:grace`, `:max_data_bytes`,
  `:max_messages` (see above). Answers its id.
  """
  @spec create(module | {module, term}, map, keyword) :: {:ok, id} | {:error, term}
  def create(handler, params \\ %{}, opts \\ []) do
    id = Base.encode16(:crypto.strong_rand_bytes(16), case: :lower)
    spec = {Overworld.Match.Server, {id, handler, params, opts}}

    case DynamicSupervisor.start_child(
           {:via, PartitionSupervisor, {Overworld.Matches, id}},
           spec
         ) do
      {:ok, _pid} -> {:ok, id}
      {:error, {:init, reason}} -> {:error, reason}
      {:error, reason} -> {:error, reason}
    end
  end

  @doc false
  # The handler a server's clients, scripts and matchmaker name: one the server registered
  # (`matches: [handlers: ...]`), else a Lua handler of its scripts (`Overworld.Match.Lua`).
  @spec handler(Overworld.Server.Config.t(), binary) :: {:ok, module | {module, term}} | :error
  def handler(cfg, name) do
    cond do
      Map.has_key?(cfg.matches.handlers, name) ->
        {:ok, cfg.matches.handlers[name]}

      name in Overworld.Match.Lua.handlers(cfg.lua) ->
        {:ok, {Overworld.Match.Lua, {cfg.lua, name}}}

      true ->
        :error
    end
  end

  @doc false
  # The `create/3` options of the matches of a server.
  @spec options(Overworld.Server.Config.t()) :: keyword
  def options(cfg),
    do: cfg.matches |> Map.take([:grace, :max_messages, :empty_timeout]) |> Map.to_list()

  @doc "The process of a match, on any node of the cluster; nil when there is none."
  @spec whereis(term) :: pid | nil
  def whereis(id) when is_binary(id) do
    case :pg.get_members(Overworld.Cluster.scope(), {:match, id}) do
      [pid | _] -> pid
      [] -> nil
    end
  end

  def whereis(_id), do: nil

  @doc """
  Joins a player (the calling session, or `session`) to a match: `{:ok, %{match_id, label,
  presences, tick_rate, rejoined}}`, `{:error, :not_found}`, or `{:error, {:rejected,
  reason}}`.
  """
  @spec join(id, binary, map, pid) :: {:ok, map} | {:error, :not_found | {:rejected, binary}}
  def join(id, user_id, metadata \\ %{}, session \\ self()) do
    call(id, {:join, %{user_id: user_id, session: session, node: node(session)}, metadata})
  end

  @doc "Leaves a match (its `c:leave/2` is called at once)."
  @spec leave(id, binary) :: :ok | {:error, :not_found}
  def leave(id, user_id) do
    case call(id, {:leave, user_id}) do
      {:ok, :ok} -> :ok
      other -> other
    end
  end

  @doc "Calls the match's `c:signal/2` (from server code): its reply."
  @spec signal(id, term, timeout) :: {:ok, term} | {:error, :not_found}
  def signal(id, data, timeout \\ 5_000), do: call(id, {:signal, data}, timeout)

  @doc """
  Ends a match in `grace` seconds: `c:terminate/2` is called now, the match ticks on for the
  grace, then stops (its players get a `match_end` notification).
  """
  @spec shutdown(id, non_neg_integer) :: :ok | {:error, :not_found}
  def shutdown(id, grace) when is_integer(grace) and grace >= 0 do
    case whereis(id) do
      nil -> {:error, :not_found}
      pid -> send(pid, {:overworld_match_shutdown, grace})
    end

    :ok
  end

  defp call(id, msg, timeout \\ 5_000) do
    case whereis(id) do
      nil ->
        {:error, :not_found}

      pid ->
        try do
          GenServer.call(pid, msg, timeout)
        catch
          :exit, _ -> {:error, :not_found}
        end
    end
  end

  @doc """
  Lists matches of the whole cluster whose label matches `query` (`Overworld.Match.Query`):
  `[%{match_id, label, size, tick_rate, handler}]`, at most `limit` (default 10, at most
  100). Options: `:query` (a map, default `%{}`), `:min_size`, `:max_size`, `:limit`.
  Each node reads its own table (no process of the matches is asked).
  """
  @spec list(keyword) :: {:ok, [map]} | {:error, binary}
  def list(opts \\ []) do
    with {:ok, q} <- Query.parse(Keyword.get(opts, :query, %{})),
         {:ok, limit} <- bounded(Keyword.get(opts, :limit, 10), 1, 100, "limit"),
         {:ok, min} <- bounded(Keyword.get(opts, :min_size, 0), 0, 1_000_000, "min_size"),
         {:ok, max} <- bounded(Keyword.get(opts, :max_size, 1_000_000), 0, 1_000_000, "max_size") do
      others = Overworld.Cluster.live() -- [node()]

      remote =
        others
        |> :erpc.multicall(__MODULE__, :list_local, [q, min, max, limit], 2_000)
        |> Enum.flat_map(fn
          {:ok, list} -> list
          _ -> []
        end)

      {:ok, Enum.take(list_local(q, min, max, limit) ++ remote, limit)}
    end
  end

  defp bounded(n, lo, hi, _name) when is_integer(n) and n >= lo and n <= hi, do: {:ok, n}
  defp bounded(_n, lo, hi, name), do: {:error, "#{name}: expected an integer in #{lo}..#{hi}"}

  @doc false
  # This node's matches matching a parsed query.
  @spec list_local(Query.t(), non_neg_integer, non_neg_integer, pos_integer) :: [map]
  def list_local(q, min, max, limit) do
    :ets.foldl(
      fn {id, pid, handler, label, size, rate}, acc ->
        cond do
          # (A match killed, without its own clean-up: its row goes now.)
          not Process.alive?(pid) ->
            :ets.delete(@table, id)
            acc

          length(acc) >= limit or size < min or size > max or not Query.match?(q, label) ->
            acc

          true ->
            [%{match_id: id, label: label, size: size, tick_rate: rate, handler: handler} | acc]
        end
      end,
      [],
      @table
    )
  end

  @doc false
  def table, do: @table
end

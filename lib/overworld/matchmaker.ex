defmodule Overworld.Matchmaker do
  @moduledoc """
  The matchmaker: players add tickets, and tickets that suit each other become a match.

  A ticket (REQUEST `matchmaker_add`) has:

    * `properties` — a flat JSON object of strings and numbers about the player
      (`{"region": "eu", "rank": 12}`);
    * `query` — what the player wants of the others' properties (`Overworld.Match.Query`:
      `{"region": "eu", "rank": {"gte": 5, "lte": 20}}`; `{}`: anyone);
    * `min_count`, `max_count` (2..64) and `count_multiple` (1 by default): the match's size.

  Tickets match when each one's query holds for every other one's properties, and their
  counts agree. A group that reaches the smallest `max_count` among its tickets is matched
  at once; every `:interval` (default 1,000 ms) the tickets that waited at least one interval
  are matched with fewer, down to the largest `min_count` (in multiples of
  `count_multiple`). The oldest tickets go first.

  A match made is created by the server's `matchmaker: [matched: ...]`: the name of a match
  handler (registered or Lua) whose `init` gets `%{"matched" => entries}` (each entry
  `%{"user_id", "ticket", "properties"}`); nil (the default) makes a relayed match
  (`Overworld.Match.Relay`) for them. Each player gets a NOTIFY `matchmaker_matched`
  `{"ticket", "match_id", "users": [...]}` and joins the match with `match_join`.

  **Sharded, not one process.** Tickets go to one of the server's shards (`:shards`, default
  the schedulers) by a hash of their query's exact terms (`Overworld.Match.Query.fixed/1`);
  in a cluster the shard's node is chosen by the same hash (rendezvous over the live nodes),
  so tickets that can meet always land together. The price: tickets only meet those whose
  query has the same exact terms (a player asking `{"region": "eu"}` and one asking `{}`
  never meet). A ticket goes with its player's connection; a player has at most 3.
  """

  alias Overworld.Match.Query
  alias Overworld.Matchmaker.Shard

  @max_tickets 3

  @doc false
  @spec schema() :: Overworld.Options.schema()
  def schema do
    [
      shards: {:pos_integer, System.schedulers_online()},
      interval: {:pos_integer, 1_000},
      matched: {{:custom, &(is_nil(&1) or is_binary(&1)), "nil or a match handler's name"}, nil}
    ]
  end

  @doc false
  # The shards' children of a server.
  @spec children(atom, map) :: [Supervisor.child_spec()]
  def children(server, o) do
    for i <- 0..(o.shards - 1), do: Supervisor.child_spec({Shard, {server, i, o}}, id: {Shard, i})
  end

  @doc false
  # A ticket of `user` (its session `session`) from a REQUEST's arguments: its id, or the
  # status, code and message of the refusal.
  @spec add(map, binary, Overworld.Server.Config.t(), pid) ::
          {:ok, binary} | {:error, pos_integer, binary, binary}
  def add(args, user, cfg, session) do
    with {:ok, ticket} <- ticket(args, user, session) do
      {node, i} = shard_of(cfg, ticket.fixed)
      id = "#{Base.encode16(:crypto.strong_rand_bytes(8), case: :lower)}.#{i}.#{node}"

      case call(node, cfg.name, i, {:add, %{ticket | id: id}}) do
        :ok ->
          {:ok, id}

        {:error, _} ->
          {:error, 503, "unavailable", "the matchmaker is full or unavailable: retry"}
      end
    else
      {:error, message} -> {:error, 400, "invalid_ticket", message}
    end
  end

  @doc false
  # Removes a ticket of `user`.
  @spec remove(term, binary, Overworld.Server.Config.t()) ::
          :ok | {:error, pos_integer, binary, binary}
  def remove(id, user, cfg) do
    with true <- is_binary(id),
         [_, i, node_name] <- String.split(id, ".", parts: 3),
         {i, ""} when i >= 0 <- Integer.parse(i),
         # (A shard's name is an atom: made only for the server's own shards.)
         true <- i < cfg.matchmaker.shards,
         node when node != nil <-
           Enum.find(Overworld.Cluster.live(), &(Atom.to_string(&1) == node_name)),
         :ok <- call(node, cfg.name, i, {:remove, id, user}) do
      :ok
    else
      _ -> {:error, 404, "ticket_not_found", "no such ticket of yours"}
    end
  end

  defp call(node, server, i, msg) do
    GenServer.call({Shard.name(server, i), node}, msg, 5_000)
  catch
    :exit, _ -> {:error, :unavailable}
  end

  # The node and shard of tickets whose queries have these exact terms: among the cluster's
  # members that run this server's matchmaker (a member without this server, or not started
  # yet, gets none).
  defp shard_of(cfg, fixed) do
    with_shards =
      Overworld.Cluster.scope()
      |> :pg.get_members({:matchmaker, cfg.name})
      |> MapSet.new(&node/1)

    node =
      Overworld.Cluster.nodes()
      |> Enum.filter(&MapSet.member?(with_shards, &1))
      |> Enum.max_by(&:erlang.phash2({&1, fixed}), fn -> node() end)

    {node, rem(:erlang.phash2(fixed), cfg.matchmaker.shards)}
  end

  defp ticket(args, user, session) do
    with {:ok, props} <- properties(Map.get(args, "properties", %{})),
         {:ok, q} <- Query.parse(Map.get(args, "query", %{})),
         {:ok, min} <- count(args, "min_count", 2),
         {:ok, max} <- count(args, "max_count", min),
         {:ok, multiple} <- count(args, "count_multiple", 1, 1),
         :ok <- if(min <= max, do: :ok, else: {:error, "min_count above max_count"}) do
      {:ok,
       %{
         id: nil,
         user: user,
         session: session,
         properties: props,
         query: q,
         fixed: Query.fixed(q),
         min: min,
         max: max,
         multiple: multiple,
         at: System.monotonic_time(:millisecond)
       }}
    end
  end

  defp properties(p) when is_map(p) and map_size(p) <= 32 do
    if Enum.all?(p, fn {k, v} ->
         is_binary(k) and byte_size(k) <= 64 and
           ((is_binary(v) and byte_size(v) <= 256) or is_number(v))
       end),
       do: {:ok, p},
       else:
         {:error,
          "properties: strings (at most 256 bytes) and numbers, by names of at most 64 bytes"}
  end

  defp properties(_p), do: {:error, "properties: a JSON object of at most 32 strings and numbers"}

  defp count(args, key, default, lo \\ 2) do
    case Map.get(args, key, default) do
      n when is_integer(n) and n >= lo and n <= 64 -> {:ok, n}
      _ -> {:error, "#{key}: expected an integer in #{lo}..64"}
    end
  end

  @doc false
  def max_tickets, do: @max_tickets
end

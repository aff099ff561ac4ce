defmodule Overworld.Test.Walker do
  @moduledoc false
  # A player of a loot world (`Overworld.Test.Game`, or any world with the same input and
  # loot EVENTs) over a real socket, in its own process: it sends an input every 100 ms
  # (walking toward the nearest NPC it sees, or at random), reads its socket and applies every
  # snapshot, and keeps the loot pickups acknowledged to it (EVENT messages). `report/1` tells
  # what it saw; a closed socket is reported to the starting process.

  import ExUnit.Assertions
  alias Overworld.Client
  alias Overworld.Protocol.Snapshot
  alias Overworld.Test.ServerCase

  @doc "Starts a walker for a player of `ServerCase.join/2`. Options: `hunt: true`."
  def start(player, opts \\ []) do
    test = self()
    hunt = Keyword.get(opts, :hunt, false)

    pid =
      spawn_link(fn ->
        receive do
          :go ->
            walk(player, test, %{
              snapshots: 0,
              snapshot_at: nil,
              events: [],
              closed: nil,
              seq: 0,
              dir: {0, 0},
              hunt: hunt
            })
        end
      end)

    :ok = :gen_tcp.controlling_process(player.conn.sock, pid)
    send(pid, :go)
    pid
  end

  @doc """
  What the walker saw: `{view, %{snapshots, snapshot_at, events: [{npc, amount, total}], ...}}`
  (`snapshot_at`: the monotonic time of the last snapshot it applied).
  """
  def report(walker, allow_closed \\ false) do
    send(walker, {:report, self()})

    receive do
      {:walker, ^walker, view, acc} ->
        {view, acc}

      {:walker_closed, ^walker, why} when not allow_closed ->
        flunk("a player was disconnected: #{inspect(why)}")

      {:walker_closed, ^walker, _why} ->
        report(walker, true)
    after
      5_000 -> flunk("no report from a walker")
    end
  end

  @doc "`report/1` of several walkers at once (each answers within its 100 ms loop)."
  def report_all(walkers) do
    for w <- walkers, do: send(w, {:report, self()})

    for w <- walkers do
      receive do
        {:walker, ^w, view, acc} -> {view, acc}
        {:walker_closed, ^w, why} -> flunk("a player was disconnected: #{inspect(why)}")
      after
        5_000 -> flunk("no report from a walker")
      end
    end
  end

  defp walk(p, test, acc) do
    acc = %{acc | dir: direction(p, acc)}
    {mx, my} = acc.dir
    payload = <<clamp(mx)::signed-8, clamp(my)::signed-8>>
    Client.send_msg(p.conn, %{type: :input, seq: acc.seq + 1, ack: 0, payload: payload})
    {p, acc} = read(p, %{acc | seq: acc.seq + 1}, System.monotonic_time(:millisecond) + 100)

    receive do
      {:report, from} -> send(from, {:walker, self(), p.view, acc})
    after
      0 -> :ok
    end

    if acc.closed do
      send(test, {:walker_closed, self(), acc.closed})
      # Still answers reports (with what it saw) until told to stop.
      receive do
        {:report, from} -> send(from, {:walker, self(), p.view, acc})
      end
    else
      walk(p, test, acc)
    end
  end

  defp clamp(v), do: v |> max(-127) |> min(127)

  # Toward the nearest NPC in view (an entity of any template but "player") it has not looted
  # yet, hunting; else a new random direction every 2 s.
  defp direction(p, %{hunt: true} = acc) do
    entities = for {_k, l} <- p.view.cells, {id, t, v} <- l, do: {id, t, v}
    player = Enum.find_index(p.templates, &(&1.name == "player"))
    looted = MapSet.new(acc.events, &elem(&1, 0))

    with {_, _, {x, y, _}} <- List.keyfind(entities, p.entity, 0),
         [_ | _] = npcs <-
           for(
             {id, t, v} <- entities,
             t != player and not MapSet.member?(looted, id),
             do: {id, elem(v, 0), elem(v, 1)}
           ) do
      {_id, gx, gy} = Enum.min_by(npcs, fn {_, gx, gy} -> (gx - x) ** 2 + (gy - y) ** 2 end)
      d = max(:math.sqrt((gx - x) ** 2 + (gy - y) ** 2), 1)
      {round((gx - x) * 127 / d), round((gy - y) * 127 / d)}
    else
      _ -> direction(p, %{acc | hunt: false})
    end
  end

  defp direction(_p, acc) do
    if rem(acc.seq, 20) == 0,
      do: {:rand.uniform(255) - 128, :rand.uniform(255) - 128},
      else: acc.dir
  end

  defp read(p, acc, until) do
    left = until - System.monotonic_time(:millisecond)

    if left <= 0 do
      {p, acc}
    else
      case ServerCase.recv(p.conn, left) do
        {{:snapshot, snap}, conn} ->
          {:ok, view} = Snapshot.apply(p.view, snap, p.templates)
          acc = %{acc | snapshots: acc.snapshots + 1, snapshot_at: System.monotonic_time()}
          read(%{p | conn: conn, view: view}, acc, until)

        {%{type: :event, payload: <<"L", gid::32, amount::16, total::32>>}, conn} ->
          read(%{p | conn: conn}, %{acc | events: [{gid, amount, total} | acc.events]}, until)

        {{:close, code, _}, _conn} ->
          {p, %{acc | closed: {:close, code}}}

        {{:error, :timeout}, conn} ->
          {%{p | conn: conn}, acc}

        {{:error, reason}, _conn} ->
          {p, %{acc | closed: {:error, reason}}}

        {_other, conn} ->
          read(%{p | conn: conn}, acc, until)
      end
    end
  end
end

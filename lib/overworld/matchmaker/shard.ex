defmodule Overworld.Matchmaker.Shard do
  @moduledoc false
  # One shard of a server's matchmaker (`Overworld.Matchmaker`): its tickets, oldest first,
  # the players' sessions monitored (a ticket goes with its player's connection).
  use GenServer
  require Logger

  alias Overworld.Match.Query

  # Tickets a shard holds at most (a bounded queue: one more is answered "unavailable"). A
  # shard's work grows with the square of its tickets: the bound keeps an interval's look
  # within tens of milliseconds.
  @max_tickets 5_000

  def name(server, i), do: :"#{server}.Matchmaker.#{i}"

  def start_link({server, i, o}),
    do: GenServer.start_link(__MODULE__, {server, o}, name: name(server, i))

  @impl true
  def init({server, o}) do
    # (The nodes whose servers of this name have a matchmaker: where tickets may go.)
    :ok = :pg.join(Overworld.Cluster.scope(), {:matchmaker, server}, self())
    :erlang.send_after(o.interval, self(), :interval)
    {:ok, %{server: server, o: o, tickets: [], sessions: %{}}}
  end

  @impl true
  def handle_call({:add, _t}, _from, %{tickets: ts} = st) when length(ts) >= @max_tickets,
    do: {:reply, {:error, :full}, st}

  def handle_call({:add, t}, _from, st) do
    st = watch(st, t.session)
    st = %{st | tickets: st.tickets ++ [t]}
    {:reply, :ok, form(st, t, :full)}
  end

  def handle_call({:remove, id, user}, _from, st) do
    case Enum.split_with(st.tickets, &(&1.id == id and &1.user == user)) do
      {[], _} -> {:reply, {:error, :not_found}, st}
      {_, rest} -> {:reply, :ok, %{st | tickets: rest}}
    end
  end

  @impl true
  def handle_info(:interval, st) do
    :erlang.send_after(st.o.interval, self(), :interval)
    old = System.monotonic_time(:millisecond) - st.o.interval

    st =
      Enum.reduce(st.tickets, st, fn t, st ->
        if t.at <= old and Enum.any?(st.tickets, &(&1.id == t.id)),
          do: form(st, t, :any),
          else: st
      end)

    {:noreply, st}
  end

  # A player's connection ended: its tickets go.
  def handle_info({:DOWN, _, :process, session, _}, st) do
    {:noreply,
     %{
       st
       | tickets: Enum.reject(st.tickets, &(&1.session == session)),
         sessions: Map.delete(st.sessions, session)
     }}
  end

  def handle_info(_other, st), do: {:noreply, st}

  defp watch(st, session) do
    if Map.has_key?(st.sessions, session),
      do: st,
      else: %{st | sessions: Map.put(st.sessions, session, Process.monitor(session))}
  end

  # The group of `t` and the oldest tickets that suit it and each other; matched when full
  # (`:full`) or, after an interval, when big enough (`:any`).
  defp form(st, t, mode) do
    group =
      Enum.reduce(st.tickets, [t], fn c, group ->
        cond do
          c.id == t.id or c.user in Enum.map(group, & &1.user) -> group
          length(group) >= Enum.min(Enum.map([c | group], & &1.max)) -> group
          Enum.all?(group, &suits?(&1, c)) -> group ++ [c]
          true -> group
        end
      end)

    max = group |> Enum.map(& &1.max) |> Enum.min()
    min = group |> Enum.map(& &1.min) |> Enum.max()
    multiple = group |> Enum.map(& &1.multiple) |> Enum.max()
    size = length(group)
    take = if mode == :full, do: (size >= max && max) || 0, else: size - rem(size, multiple)

    if take >= min and take >= 2 and rem(take, multiple) == 0 and min <= max do
      matched(st, Enum.take(group, take))
    else
      st
    end
  end

  defp suits?(a, b) do
    Query.match?(a.query, b.properties) and Query.match?(b.query, a.properties) and
      a.multiple == b.multiple
  end

  defp matched(st, group) do
    ids = Enum.map(group, & &1.id)

    entries =
      for t <- group, do: %{"user_id" => t.user, "ticket" => t.id, "properties" => t.properties}

    case create(st, entries, length(group)) do
      {:ok, match_id} ->
        users = Enum.map(group, & &1.user)

        for t <- group do
          body = %{ticket: t.id, match_id: match_id, users: users}
          send(t.session, {:overworld_match_notify, match_id, "matchmaker_matched", body})
        end

      {:error, why} ->
        Logger.error("matchmaker #{st.server}: cannot create the match: #{inspect(why)}")

        for t <- group do
          body = %{ticket: t.id, message: "the match could not be created"}
          send(t.session, {:overworld_match_notify, nil, "matchmaker_failed", body})
        end
    end

    %{st | tickets: Enum.reject(st.tickets, &(&1.id in ids))}
  end

  defp create(st, entries, size) do
    cfg = Overworld.Server.config(st.server)

    case st.o.matched do
      nil ->
        Overworld.Match.create(
          Overworld.Match.Relay,
          %{"max_size" => size},
          Overworld.Match.options(cfg)
        )

      name ->
        case Overworld.Match.handler(cfg, name) do
          {:ok, handler} ->
            Overworld.Match.create(handler, %{"matched" => entries}, Overworld.Match.options(cfg))

          :error ->
            {:error, {:no_match_handler, name}}
        end
    end
  end
end

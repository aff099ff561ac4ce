defmodule Overworld.MatchmakerTest do
  use ExUnit.Case, async: false
  import Overworld.Test.ServerCase
  import Overworld.Test.MatchCase

  @name Overworld.MatchmakerTest.Server

  setup do
    world =
      start_world(@name, {__MODULE__, :critters},
        critters: 5,
        matches: [handlers: %{"echo" => Overworld.Bench.EchoMatch}],
        matchmaker: [interval: 200, shards: 2, matched: "echo"]
      )

    {:ok, world: world}
  end

  defp add(p, ticket) do
    {p, 200, %{"ticket" => t}} = request(p, "matchmaker_add", ticket)
    {p, t}
  end

  defp matched(p) do
    {p, %{body: body}} = notify(p, "matchmaker_matched")
    {p, :jiffy.decode(body, [:return_maps])}
  end

  test "tickets that suit each other become a match of the handler; the players join it", %{
    world: w
  } do
    mode = "m#{System.unique_integer([:positive])}"

    ticket = %{
      query: %{"mode" => mode, "rank" => %{"gte" => 5}},
      properties: %{"mode" => mode, "rank" => 10},
      min_count: 3,
      max_count: 3
    }

    [a, b, c] = for _ <- 1..3, do: player(w)
    {a, ta} = add(a, ticket)
    {b, _} = add(b, ticket)
    # Rank 1 is below what the others ask: not matched with them.
    {lone, _} = add(player(w), %{ticket | properties: %{"mode" => mode, "rank" => 1}})
    {c, _} = add(c, ticket)

    {a, %{"ticket" => ^ta, "match_id" => id, "users" => users}} = matched(a)
    {b, %{"match_id" => ^id}} = matched(b)
    {c, %{"match_id" => ^id}} = matched(c)
    assert Enum.sort(users) == Enum.sort([a.user, b.user, c.user])
    {_a, 200, %{"match_id" => ^id}} = request(a, "match_join", %{match_id: id})
    refute_receive_notify(lone)
  end

  defp refute_receive_notify(p) do
    assert {{:error, :timeout}, _} = recv_msg(p.conn, 300)
  end

  test "after an interval, fewer than max_count (down to min_count, in multiples)", %{world: w} do
    mode = "m#{System.unique_integer([:positive])}"

    ticket = %{
      query: %{"mode" => mode},
      properties: %{"mode" => mode},
      min_count: 2,
      max_count: 8,
      count_multiple: 2
    }

    [a, b, c] = for _ <- 1..3, do: player(w)
    {a, _} = add(a, ticket)
    {b, _} = add(b, ticket)
    {c, tc} = add(c, ticket)
    # Three wait; after the interval two of them (a multiple of 2) are matched, the third waits.
    {_a, %{"users" => users}} = matched(a)
    assert length(users) == 2
    assert c.user not in users
    {_c, 200, _} = request(c, "matchmaker_remove", %{ticket: tc})
    {_b, _} = matched(b)
  end

  test "a disconnected player's tickets are removed; bad tickets are refused", %{world: w} do
    mode = "m#{System.unique_integer([:positive])}"

    ticket = %{
      query: %{"mode" => mode},
      properties: %{"mode" => mode},
      min_count: 2,
      max_count: 2
    }

    a = player(w)
    {a, _} = add(a, ticket)
    :gen_tcp.close(a.conn.sock)
    Process.sleep(200)
    b = player(w)
    {b, _} = add(b, ticket)
    refute_receive_notify(b)

    {b, 400, %{"error" => "invalid_ticket"}} =
      request(b, "matchmaker_add", %{query: %{"x" => %{"near" => 1}}})

    {b, 400, %{"error" => "invalid_ticket"}} =
      request(b, "matchmaker_add", %{min_count: 5, max_count: 3})

    {b, 400, %{"error" => "invalid_ticket"}} =
      request(b, "matchmaker_add", %{properties: %{"x" => [1]}})

    {b, 404, %{"error" => "ticket_not_found"}} =
      request(b, "matchmaker_remove", %{ticket: "nope"})

    {b, _} = add(b, %{ticket | query: %{"mode" => "other"}})
    {b, _} = add(b, %{ticket | query: %{"mode" => "other2"}})
    {_b, 409, %{"error" => "too_many_tickets"}} = request(b, "matchmaker_add", ticket)
  end

  test "a ticket id naming a shard the server lacks is refused without making an atom", %{
    world: w
  } do
    p = player(w)
    atoms = :erlang.system_info(:atom_count)

    p =
      Enum.reduce(1..50, p, fn i, p ->
        ticket = "x.#{1_000_000 + i}.#{node()}"

        {p, 404, %{"error" => "ticket_not_found"}} =
          request(p, "matchmaker_remove", %{ticket: ticket})

        p
      end)

    assert :erlang.system_info(:atom_count) - atoms < 20
    _ = p
  end
end

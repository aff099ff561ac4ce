defmodule Overworld.Zone.DurableTest do
  # Durable events are acknowledged (c:handle_durable/2) only once their journal record is
  # fsynced, and exactly once, also when the zone server dies while the fsync is pending.
  use ExUnit.Case, async: true

  alias Overworld.Persistence.Journal
  alias Overworld.Test.Restart
  alias Overworld.Zone

  defmodule Awards do
    @moduledoc false
    # A player is awarded points on request (a durable event); the award is acknowledged to
    # the player's session once journaled.
    use Overworld.Zone

    @impl true
    def init(_args), do: {:ok, %{}}

    @impl true
    def handle_join(_player, _meta, state), do: {:ok, [kind: :hero, x: 10, y: 10], state}

    @impl true
    def handle_entity(e, _view, _ctx), do: {:ok, e}

    @impl true
    def handle_info({:award, player, n}, state),
      do: {:ok, state, [{:durable, {:award, player, n}}]}

    @impl true
    def handle_durable({:award, player, n}, state), do: {:ok, state, [{:send, player, <<n::32>>}]}
    def handle_durable(_other, state), do: {:ok, state}

    @impl true
    def replay_durable(_event, entities), do: entities
  end

  # A slow group commit: an award's fsync is still pending for a while after it is made.
  @commit_ms 600

  setup do
    dir =
      Path.join(Overworld.Test.DataDir.path(), "durable-#{System.unique_integer([:positive])}")

    id = {__MODULE__, make_ref()}

    {:ok, _} =
      Overworld.start_zone(Awards,
        id: id,
        data_dir: dir,
        clock: :manual,
        commit_ms: @commit_ms,
        size: {100, 100}
      )

    {:ok, _} = Zone.join(id, "ann", %{session: self()})
    {:ok, _} = Zone.tick_now(id)
    # The join's record synced: the commit timer starts again with the first award.
    :ok = Journal.sync(Overworld.Zone.Store.journal(Overworld.Zone.Store.whereis(id)))

    on_exit(fn ->
      Overworld.stop_zone(id)
      File.rm_rf(dir)
    end)

    %{id: id, dir: dir}
  end

  # Every durable event journaled so far, from the zone's segments.
  defp journaled(dir) do
    dir
    |> Path.join("**/journal.*")
    |> Path.wildcard()
    |> Enum.sort()
    |> Enum.flat_map(fn seg -> elem(Journal.read(seg), 1) end)
    |> Enum.flat_map(fn
      {:events, _n, events} -> events
      _ -> []
    end)
  end

  test "an award is acknowledged after its fsync, not before", %{id: id, dir: dir} do
    send(Zone.whereis(id), {:award, "ann", 7})
    refute_receive {:overworld_send, _}, div(@commit_ms, 2)
    assert_receive {:overworld_send, <<7::32>>}, 2 * @commit_ms
    assert {:award, "ann", 7} in journaled(dir)
  end

  test "the server killed while the fsync is pending: its successor acknowledges, once",
       %{id: id, dir: dir} do
    server = Zone.whereis(id)
    send(server, {:award, "ann", 1})
    send(server, {:award, "ann", 2})
    # Both handled (a call answers after them), neither synced yet.
    Zone.info(id)
    refute_received {:overworld_send, _}

    Restart.kill_server(id)

    assert_receive {:overworld_send, <<1::32>>}, 2 * @commit_ms
    assert_receive {:overworld_send, <<2::32>>}, 100
    assert [{:award, "ann", 1}, {:award, "ann", 2}] = journaled(dir)
    # The rows of the batches are gone once acknowledged.
    assert Overworld.Zone.Memory.unsynced(Overworld.Zone.metrics_ref(id).memory) == []

    # Killed again once acknowledged: nothing is acknowledged twice.
    Restart.kill_server(id)
    send(Zone.whereis(id), {:award, "ann", 3})
    assert_receive {:overworld_send, <<3::32>>}, 2 * @commit_ms
    refute_receive {:overworld_send, _}, 200
  end

  test "killed twice before the fsync: still acknowledged once", %{id: id} do
    send(Zone.whereis(id), {:award, "ann", 5})
    Zone.info(id)
    Restart.kill_server(id)
    Restart.kill_server(id)
    # (Both kills came before the fsync: the case this test is about.)
    refute_received {:overworld_send, _}
    assert_receive {:overworld_send, <<5::32>>}, 2 * @commit_ms
    refute_receive {:overworld_send, _}, @commit_ms
  end
end

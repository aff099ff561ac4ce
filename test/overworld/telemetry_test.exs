defmodule Overworld.TelemetryTest do
  use ExUnit.Case, async: true
  import ExUnit.CaptureLog
  alias Overworld.Telemetry

  test "handlers receive events; ids are unique per event; detach removes them" do
    me = self()
    id = {__MODULE__, make_ref()}
    event = [:overworld, :zone, :overrun]
    :ok = Telemetry.attach(id, event, fn e, m, meta, cfg -> send(me, {e, m, meta, cfg}) end, :cfg)
    assert {:error, :already_exists} = Telemetry.attach(id, event, fn _, _, _, _ -> :ok end)

    # (A zone of its own: the real zones of the async tests emit overruns too.)
    z = make_ref()
    Telemetry.execute(event, %{skipped: 1}, %{zone: z})
    assert_received {^event, %{skipped: 1}, %{zone: ^z}, :cfg}

    :ok = Telemetry.detach(id)
    Telemetry.execute(event, %{skipped: 2}, %{zone: z})
    refute_received {^event, %{skipped: 2}, %{zone: ^z}, _}
  end

  test "a failing handler is detached and logged, the caller goes on" do
    id = {__MODULE__, make_ref()}
    event = [:overworld, :zone, :start]
    :ok = Telemetry.attach(id, event, fn _, _, _, _ -> raise "boom" end)

    log = capture_log(fn -> assert :ok = Telemetry.execute(event, %{}, %{}) end)
    assert log =~ "boom"
    assert log =~ "detached"
    refute Enum.any?(:persistent_term.get({Telemetry, event}, []), &(elem(&1, 0) == id))
  end

  test "unknown events are refused" do
    assert_raise ArgumentError, ~r/unknown event/, fn ->
      Telemetry.attach(:x, [:nope], fn _, _, _, _ -> :ok end)
    end
  end

  test "a zone emits start, tick and callback events" do
    me = self()
    zone = {__MODULE__, make_ref()}
    id = {__MODULE__, zone}

    for event <- Telemetry.events() do
      :ok =
        Telemetry.attach({id, event}, event, fn e, m, meta, _ ->
          if meta[:zone] == zone, do: send(me, {e, m, meta})
        end)
    end

    on_exit(fn -> for event <- Telemetry.events(), do: Telemetry.detach({id, event}) end)

    {:ok, _} =
      Overworld.start_zone(Overworld.Test.ProbeZone, id: zone, clock: :manual, args: [raise_at: 1])

    assert_received {[:overworld, :zone, :start], %{system_time: _}, %{workers: _, tick_rate: 30}}
    capture_log(fn -> {:ok, 1} = Overworld.Zone.tick_now(zone) end)

    assert_received {[:overworld, :zone, :callback, :exception], %{count: 1},
                     %{tick: 1, callback: :handle_tick, kind: :error}}

    assert_received {[:overworld, :zone, :tick, :stop], m, %{tick: 1}}
    assert m.duration >= m.systems and is_integer(m.entities)
    Overworld.stop_zone(zone)
  end
end

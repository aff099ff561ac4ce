defmodule Overworld.Web.MetricsTest do
  # GET /metrics over real sockets: the exposition checked by promtool, counters that move
  # when things happen, histograms that are real cumulative buckets, names that follow
  # Prometheus's conventions, the options (token, disabled), and a scrape that sends no
  # message (zones never hear of it).
  use ExUnit.Case, async: true
  import Overworld.Test.ServerCase

  alias Overworld.{Client, Names, Zone}
  alias Overworld.Test.{DataDir, Game, PromText}

  @name Overworld.Web.MetricsTest.Server
  @zone {__MODULE__, :critters}
  @label inspect(@zone)

  setup do
    {:ok, world: start_world(@name, @zone, critters: 300)}
  end

  defp scrape(w, opts \\ []) do
    assert {:ok, 200, headers, body} = Client.request(host(), w.port, "GET", "/metrics", "", opts)
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    body
  end

  defp zone(labels \\ %{}), do: Map.put(labels, "zone", @label)
  defp server, do: %{"server" => inspect(@name)}

  test "promtool check metrics passes on a real scrape", %{world: w} do
    _ = w |> join() |> snapshots(2)
    path = Path.join(DataDir.path(), "scrape-#{System.unique_integer([:positive])}.txt")
    File.write!(path, scrape(w))

    {out, status} =
      System.cmd("sh", ["-c", "promtool check metrics < \"$0\"", path], stderr_to_stdout: true)

    File.rm(path)
    assert {status, out} == {0, ""}
  end

  test "counters move when a zone ticks, a session connects and bytes go out", %{world: w} do
    before = PromText.parse(scrape(w))
    assert PromText.value(before, "overworld_zone_entities", zone()) == 300
    assert PromText.value(before, "overworld_zone_players", zone()) == 0

    p = w |> join() |> snapshots(5)
    # The zone counts its players at its next tick.
    eventually(fn ->
      PromText.value(PromText.parse(scrape(w)), "overworld_zone_players", zone()) == 1
    end)

    now = PromText.parse(scrape(w))

    up = fn name, labels ->
      PromText.value(now, name, labels) - PromText.value(before, name, labels)
    end

    assert up.("overworld_zone_ticks_total", zone()) > 0
    assert up.("overworld_zone_tick_duration_seconds_count", zone()) > 0
    assert up.("overworld_zone_tick_duration_seconds_sum", zone()) > 0
    assert up.("overworld_zone_tick_phase_seconds_total", zone(%{"phase" => "systems"})) > 0
    assert up.("overworld_server_sessions", server()) == 1
    assert up.("overworld_server_sent_frames_total", server()) >= 5
    assert up.("overworld_server_sent_bytes_total", server()) > 0
    # The player's websocket, and the scrapes' own connections.
    assert up.("overworld_server_connections_accepted_total", server()) >= 2
    assert PromText.value(now, "overworld_beam_processes") > 0
    assert PromText.value(now, "overworld_beam_memory_bytes", %{"kind" => "total"}) > 0
    assert [_ | _] = PromText.samples(now, "overworld_beam_scheduler_active_seconds_total")
    assert [_ | _] = PromText.samples(now, "overworld_beam_run_queue_length")

    Client.close(p.conn)

    eventually(fn ->
      PromText.value(PromText.parse(scrape(w)), "overworld_server_sessions", server()) == 0
    end)
  end

  test "histograms: cumulative buckets at most 20, ending with +Inf equal to _count", %{world: w} do
    count = &PromText.value(&1, "overworld_zone_tick_duration_seconds_count", zone())
    eventually(fn -> count.(PromText.parse(scrape(w))) > 0 end)
    parsed = PromText.parse(scrape(w))
    histograms = for {name, %{type: "histogram"}} <- parsed.families, do: name
    assert "overworld_zone_tick_duration_seconds" in histograms

    for name <- histograms do
      buckets = PromText.samples(parsed, name <> "_bucket")
      assert buckets != [], "#{name} has no buckets"

      buckets
      |> Enum.group_by(fn {l, _} -> Map.delete(l, "le") end)
      |> Enum.each(fn {labels, series} ->
        les = Enum.map(series, fn {l, _} -> l["le"] end)
        counts = Enum.map(series, &elem(&1, 1))
        assert length(series) <= 20
        assert List.last(les) == "+Inf"
        bounds = les |> Enum.drop(-1) |> Enum.map(&String.to_float(normalize(&1)))
        assert bounds == Enum.sort(Enum.uniq(bounds)), "#{name}: bounds not ascending"
        assert counts == Enum.sort(counts), "#{name} #{inspect(labels)}: not cumulative"
        assert List.last(counts) == PromText.value(parsed, name <> "_count", labels)
        assert PromText.value(parsed, name <> "_sum", labels) >= 0
      end)
    end
  end

  defp normalize(le), do: if(String.contains?(le, "."), do: le, else: le <> ".0")

  test "names and labels follow Prometheus's conventions", %{world: w} do
    parsed = PromText.parse(scrape(w))

    for {name, family} <- parsed.families do
      assert name =~ ~r/^overworld_[a-z0-9_]+$/
      assert family.help != ""

      case family.type do
        "counter" -> assert String.ends_with?(name, "_total"), name
        "histogram" -> assert String.ends_with?(name, "_seconds"), name
        "gauge" -> refute String.ends_with?(name, "_total"), name
      end

      # Base units only.
      refute name =~ ~r/_(milliseconds|microseconds|us|ms|kilobytes|megabytes)(_|$)/, name
    end

    # Every sample belongs to a declared family, and no label is per player or per session.
    for {name, labels, _} <- parsed.samples do
      family = String.replace(name, ~r/_(bucket|sum|count)$/, "")
      assert Map.has_key?(parsed.families, name) or parsed.families[family][:type] == "histogram"

      for k <- Map.keys(labels),
          do: assert(k in ~w(zone world server le phase direction from kind queue scheduler type))
    end
  end

  test "a token is required when configured; disabled answers 404", %{world: w} do
    token = "metrics-token-0123456789"

    start_supervised!(
      {Overworld.Server,
       name: :"#{__MODULE__}.Token", port: 0, data_dir: DataDir.path(), metrics: [token: token]},
      id: :token
    )

    start_supervised!(
      {Overworld.Server,
       name: :"#{__MODULE__}.Off", port: 0, data_dir: DataDir.path(), metrics: [enabled: false]},
      id: :off
    )

    tport = Overworld.Server.port(:"#{__MODULE__}.Token")

    get = fn port, headers ->
      Client.request(host(), port, "GET", "/metrics", "", headers: headers)
    end

    assert {:ok, 401, headers, _} = get.(tport, [])
    assert headers["www-authenticate"] == "Bearer"
    assert {:ok, 401, _, _} = get.(tport, [{"authorization", "Bearer nope"}])
    assert {:ok, 401, _, _} = get.(tport, [{"authorization", "Basic " <> token}])
    assert {:ok, 200, _, body} = get.(tport, [{"authorization", "Bearer " <> token}])
    assert body =~ ~s(overworld_server_sessions{server="#{inspect(:"#{__MODULE__}.Token")}"} 0)

    assert {:ok, 404, _, _} = get.(Overworld.Server.port(:"#{__MODULE__}.Off"), [])
    # The server without options serves anybody.
    assert scrape(w) =~ "overworld_zone_ticks_total"
  end

  test "the options are validated" do
    for {opts, message} <- [
          {[token: "short"], ~r/expected :token to be nil or a string of at least 16 bytes/},
          {[enabled: "yes"], ~r/expected :enabled to be a boolean/},
          {[enabeld: true], ~r/did you mean :enabled/}
        ] do
      assert_raise ArgumentError, message, fn ->
        Overworld.Server.start_link(name: :never, port: 0, metrics: opts)
      end
    end
  end

  test "a scrape sends no message, and the zones receive none", %{world: w} do
    # A zone on the manual clock receives nothing unless somebody sends it something.
    id = {__MODULE__, :quiet}

    start_supervised!({Zone, {Game, Game.zone_options(200, id: id, clock: :manual, workers: 2)}},
      id: :quiet
    )

    {:ok, _} = Zone.tick_now(id)

    zone_pids = [
      Names.whereis(Names.zone(id)) | for(i <- 0..1, do: Names.whereis(Names.bucket(id, i)))
    ]

    assert Enum.all?(zone_pids, &is_pid/1)
    cfg = Overworld.Server.config(w.name)
    # (Once first: the test VM loads the modules on first use, asking its code server.)
    _ = Overworld.Web.Metrics.scrape(cfg)
    me = self()

    scraper =
      spawn_link(fn ->
        receive do
          :go ->
            send(me, {:scraped, IO.iodata_to_binary(elem(Overworld.Web.Metrics.scrape(cfg), 2))})
        end
      end)

    for pid <- [scraper | zone_pids], do: :erlang.trace(pid, true, [:send, :receive])
    send(scraper, :go)
    assert_receive {:scraped, body}, 5_000
    for pid <- zone_pids, do: :erlang.trace(pid, false, [:send, :receive])
    assert body =~ ~s(overworld_zone_ticks_total{zone="#{inspect(id)}"} 1\n)

    traces = flush_traces([])
    # The scraper sent its answer and nothing else (what it received besides :go are the
    # runtime's answers to :erlang.memory/0 and :erlang.statistics/1); the zone's processes
    # received and sent nothing.
    assert [{:trace, ^scraper, :send, {:scraped, _}, ^me}] =
             Enum.filter(traces, &match?({:trace, ^scraper, :send, _, _}, &1))

    assert Enum.reject(traces, &(elem(&1, 1) == scraper)) == []
  end

  defp flush_traces(acc) do
    receive do
      {:trace, _, _, _} = t -> flush_traces([t | acc])
      {:trace, _, _, _, _} = t -> flush_traces([t | acc])
    after
      100 -> Enum.reverse(acc)
    end
  end
end

defmodule Overworld.Bench.Tsung do
  @moduledoc false
  # The Tsung scenarios of `bench/tsung/` against the one-core server of
  # `mix overworld.bench.backend` (`Overworld.Bench.Backend`): the scenario's port made the
  # server's, its matches made first (matches.xml), tsung pinned to a CPU, its log summed up.

  alias Overworld.Bench.Backend

  @doc """
  Runs a Tsung scenario (its port 4000 made the server's) pinned to CPU `cpu`; sums up its
  log: requests, their mean response time, HTTP statuses, errors, and both sides' CPU.
  """
  @spec run(map, Path.t(), non_neg_integer, String.t()) :: map
  def run(s, file, cpu, handler \\ "echo_lua") do
    tmp =
      Path.join(
        System.tmp_dir!(),
        "overworld-tsung-#{Base.encode16(:crypto.strong_rand_bytes(6), case: :lower)}"
      )

    File.mkdir_p!(tmp)
    xml = file |> File.read!() |> String.replace(~s(port="4000"), ~s(port="#{s.port}"))
    xml = if xml =~ "MATCHES_CSV", do: tsung_matches(s, xml, handler, tmp), else: xml
    scenario = Path.join(tmp, Path.basename(file))
    File.write!(scenario, xml)
    cpu0 = Backend.cpu_seconds(s.os_pid)
    t0 = System.monotonic_time(:millisecond)

    cmd =
      "taskset -c #{cpu} tsung -f #{scenario} -l #{tmp}/log start > #{tmp}/out 2>&1; cat /proc/$$/stat"

    # (The players in the server's matches, sampled every second while tsung runs: the most.)
    sampler = Task.async(fn -> most_in_matches(s, 0) end)
    {out, _} = System.cmd("sh", ["-c", cmd], stderr_to_stdout: true)
    send(sampler.pid, :stop)
    in_matches = Task.await(sampler)
    wall = (System.monotonic_time(:millisecond) - t0) / 1000
    server_cpu = Backend.cpu_seconds(s.os_pid) - cpu0
    log = Path.wildcard(Path.join([tmp, "log", "**", "tsung.log"])) |> List.first()

    # The scenario's length: its <load duration="N" unit="second">.
    seconds =
      case Regex.run(~r/<load duration="(\d+)" unit="second"/, xml) do
        [_, n] -> String.to_integer(n)
        _ -> wall
      end

    stats =
      if log,
        do: Map.put(tsung_stats(File.read!(log)), :seconds, seconds),
        else: %{
          requests: 0,
          mean_ms: nil,
          statuses: %{},
          errors: 0,
          seconds: seconds,
          websocket: %{}
        }

    File.rm_rf(tmp)

    Map.merge(stats, %{
      most_in_matches: in_matches,
      requests_per_s: stats.requests / max(stats.seconds, 1),
      server_cpu: server_cpu / wall,
      generator_cpu: Backend.wrk_cpu(out) / wall
    })
  end

  defp most_in_matches(s, most) do
    receive do
      :stop -> most
    after
      1_000 ->
        sizes = :erpc.call(s.node, Overworld.Match, :list_local, [[], 0, 1_000_000, 100_000])
        most_in_matches(s, max(most, sizes |> Enum.map(& &1.size) |> Enum.sum()))
    end
  end

  # A match scenario: its users' matches (ten users each) made on the server, their ids in a
  # file (each id on ten lines, a user takes the next), named where the scenario says
  # MATCHES_CSV.
  defp tsung_matches(s, xml, handler, tmp) do
    users =
      case Regex.run(~r/<users maxnumber="(\d+)"/, xml) do
        [_, n] -> String.to_integer(n)
        _ -> raise "the scenario has no <users maxnumber=...>"
      end

    ids = Backend.create_matches(s, handler, div(users + 9, 10))
    csv = Path.join(tmp, "matches.csv")
    File.write!(csv, Enum.map(ids, &String.duplicate(&1 <> "\n", 10)))
    String.replace(xml, "MATCHES_CSV", csv)
  end

  # tsung.log: a dump every 10 s of "stats: request <count> <mean ms> ..." (the dump's), HTTP
  # status counts ("stats: 200 <count> <total>") and errors ("stats: error_... <count>").
  defp tsung_stats(text) do
    dumps = Regex.scan(~r/^# stats: dump at (\d+)/m, text, capture: :all_but_first)
    times = Enum.map(dumps, fn [t] -> String.to_integer(t) end)

    requests =
      for [count, mean] <-
            Regex.scan(~r/^stats: request (\d+) ([\d.]+)/m, text, capture: :all_but_first),
          do: {String.to_integer(count), elem(Float.parse(mean), 0)}

    total = requests |> Enum.map(&elem(&1, 0)) |> Enum.sum()
    mean = if total > 0, do: Float.round(Enum.sum(for {n, m} <- requests, do: n * m) / total, 2)

    statuses =
      Regex.scan(~r/^stats: (\d{3}) (\d+)/m, text, capture: :all_but_first)
      |> Enum.reduce(%{}, fn [code, n], acc ->
        Map.update(acc, code, String.to_integer(n), &(&1 + String.to_integer(n)))
      end)

    errors =
      Regex.scan(~r/^stats: error_\S+ (\d+)/m, text, capture: :all_but_first)
      |> Enum.map(fn [n] -> String.to_integer(n) end)
      |> Enum.sum()

    # WebSocket counts (cumulative, the last dump's): messages sent without waiting for an
    # answer, receives of server data (a read of one or more frames), connections upgraded,
    # bytes received.
    websocket =
      for {key, name} <- [
            messages_sent: "request_noack",
            receives: "async_unknown_data_rcv",
            websockets: "websocket_succ",
            bytes_received: "size_rcv"
          ],
          into: %{} do
        last =
          Regex.scan(~r/^stats: #{name} \d+ (\d+)/m, text, capture: :all_but_first)
          |> Enum.map(fn [n] -> String.to_integer(n) end)
          |> Enum.max(fn -> 0 end)

        {key, last}
      end

    %{
      requests: total,
      mean_ms: mean,
      statuses: statuses,
      errors: errors,
      dumps: length(times),
      websocket: websocket
    }
  end
end

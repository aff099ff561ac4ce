defmodule Overworld.Metrics.Exporter do
  @moduledoc false
  # What `GET /metrics` answers (docs/metrics.md lists every family): the server's families
  # (its counters, `Overworld.Server.stats/1`, and its pace), the zones running on this node
  # (`Overworld.Metrics.Zones`) and the node's (`Overworld.Metrics.Beam`), as one iodata.
  # Everything is read from counters, atomics and the registry: a scrape sends no message.
  #
  # The server's families carry a `server` label (its name, `inspect/1`ed): several servers
  # may run on one node. The zones and the node are the node's, the same on every server's
  # `/metrics`.

  alias Overworld.Metrics.Prometheus, as: P

  # {counter of Overworld.Server, family}, as Overworld.Metrics.Zones's.
  @server for {field, name, type, help} <- [
                {:connections, "overworld_server_connections", :gauge,
                 "Open connections (HTTP and WebSocket)."},
                {:sessions, "overworld_server_sessions", :gauge,
                 "Open WebSocket sessions of players."},
                {:accepted, "overworld_server_connections_accepted_total", :counter,
                 "Connections accepted."},
                {:refused, "overworld_server_connections_refused_total", :counter,
                 "Connections refused with 503 (max_connections reached, or out of file descriptors)."},
                {:bytes_out, "overworld_server_sent_bytes_total", :counter,
                 "Bytes of snapshot frames sent to players."},
                {:frames_out, "overworld_server_sent_frames_total", :counter,
                 "Snapshot frames sent to players."},
                {:frames_skipped, "overworld_server_skipped_frames_total", :counter,
                 "Snapshots skipped (coalesced) for clients whose socket was full."},
                {:frames_late, "overworld_server_late_frames_total", :counter,
                 "Frames built after the next tick had come."},
                {:inputs, "overworld_server_inputs_total", :counter,
                 "Inputs received from players."},
                {:inputs_dropped, "overworld_server_inputs_dropped_total", :counter,
                 "Inputs (and match messages) dropped: over the input rate, or undecodable."},
                {:refused_joins, "overworld_server_refused_joins_total", :counter,
                 "Players refused at the door (saturated server or full zone: close code 4008)."},
                {:closed_slow, "overworld_server_slow_client_closes_total", :counter,
                 "Clients closed as too slow (close code 4005)."}
              ],
              do: {field, P.spec(name, type, help)}

  @interval P.spec(
              "overworld_server_send_interval_ticks",
              :gauge,
              "Ticks between two snapshots of each session now (1: every tick; raised " <>
                "when the sessions cannot keep up)."
            )
  @saturated P.spec(
               "overworld_server_saturated",
               :gauge,
               "1 while the server refuses new players (at the largest send interval, late " <>
                 "or busy), else 0."
             )

  @doc false
  # The whole exposition of the server `cfg` (an `Overworld.Server.Config`).
  @spec scrape(Overworld.Server.Config.t()) :: iodata
  def scrape(cfg),
    do: [server(cfg), Overworld.Metrics.Zones.families(), Overworld.Metrics.Beam.families()]

  defp server(cfg) do
    labels = P.labels(server: inspect(cfg.name))
    c = cfg.counters
    pace = Overworld.Server.Pace.stats(cfg)

    [
      for {field, family} <- @server do
        P.family(family, labels, :counters.get(c, Overworld.Server.counter(field)))
      end,
      P.family(@interval, labels, pace.interval),
      P.family(@saturated, labels, if(pace.saturated, do: 1, else: 0))
    ]
  end
end

defmodule Overworld.Web.StatusPage do
  @moduledoc false
  # The page of `GET /`: plain HTML and a little JS that polls /api/v1/status every second and
  # shows zones (players, entities, tick p50/p99 since the start, and p50/max over the last
  # 150-300 ticks: "now") and the server's sessions and bytes out per
  # second (from the difference of two polls).

  @html """
  <!doctype html>
  <html lang="en">
  <head>
  <meta charset="utf-8">
  <title>Overworld</title>
  <style>
    body { font: 15px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
    table { border-collapse: collapse; margin: 1em 0; }
    th, td { padding: .3em .9em; border-bottom: 1px solid #ddd; text-align: right; }
    th:first-child, td:first-child { text-align: left; }
    #error { color: #b00; }
    .dim { color: #777; }
  </style>
  </head>
  <body>
  <h1>Overworld</h1>
  <p id="server" class="dim">loading…</p>
  <p id="error"></p>
  <table>
    <thead><tr><th>zone</th><th>players</th><th>entities</th><th>tick</th><th>ticks measured</th><th>tick p50 (ms)</th><th>tick p99 (ms)</th><th>tick max (ms)</th><th>overruns</th><th>now: ticks</th><th>now p50 (ms)</th><th>now max (ms)</th><th>crossings/s</th></tr></thead>
    <tbody id="zones"></tbody>
  </table>
  <p class="dim">"now": the last 150 to 300 ticks (5 to 10 s at 30 Hz); the other tick
  figures are over the zone's whole life. The zones of a world are listed one by one
  (<code>world/column,row</code>); crossings/s: entities that came into the zone from a
  neighbour per second (between the last two polls).</p>
  <p id="crossings" class="dim"></p>
  <p class="dim">Players connect with WebSocket to <code>/ws</code> after
  <code>POST /api/v1/auth/device</code>; see docs/protocol.md.</p>
  <script>
  let last = null;
  const ms = (us) => (us == null ? "–" : (us / 1000).toFixed(2));
  // A p99 rests on the ticks above it: fewer than 100 of them (10,000 ticks measured, some 6
  // minutes at 30 Hz) and it is little more than the maximum, so it is not shown until then.
  const p99 = (z) => (z.tick_samples >= 10000 ? ms(z.tick_p99_us) : "needs 10,000 ticks");
  const cell = (text) => { const td = document.createElement("td"); td.textContent = text; return td; };
  async function poll() {
    try {
      const res = await fetch("/api/v1/status", { cache: "no-store" });
      const s = await res.json();
      let rate = "–";
      // (The previous poll, kept: last moves on before the rows below are built.)
      const prev = last;
      const per_s = (now, was) => {
        const v = prev && s.now_ms > prev.now_ms ? ((now - was) * 1000) / (s.now_ms - prev.now_ms) : NaN;
        return Number.isFinite(v) ? v.toFixed(1) : "–";
      };
      if (last && s.now_ms > last.now_ms) {
        rate = Math.round((s.bytes_out - last.bytes_out) * 1000 / (s.now_ms - last.now_ms)).toLocaleString();
      }
      const before = new Map(prev ? prev.zones.map((z) => [z.name, z]) : []);
      const crossings = (z) => (before.has(z.name) ? per_s(z.crossings_in, before.get(z.name).crossings_in) : "–");
      const worlds = [...new Set(s.zones.filter((z) => z.world).map((z) => z.world))];
      document.getElementById("crossings").textContent = worlds.map((w) => {
        const zs = s.zones.filter((z) => z.world === w);
        const total = zs.reduce((a, z) => a + (z.crossings_in || 0), 0);
        const was = zs.reduce((a, z) => a + (before.has(z.name) ? before.get(z.name).crossings_in || 0 : NaN), 0);
        return `world ${w}: ${zs.length} zones, ${zs.reduce((a, z) => a + z.entities, 0).toLocaleString()} entities, ${per_s(total, was)} crossings/s`;
      }).join("; ");
      last = s;
      document.getElementById("server").textContent =
        `${s.sessions} sessions, ${s.connections} connections, ${rate} bytes out/s, ` +
        `${s.inputs_dropped} inputs dropped, ${s.frames_skipped} snapshots coalesced, ` +
        `a snapshot every ${s.send_interval} tick${s.send_interval === 1 ? "" : "s"} (${s.send_interval_changes} changes), ` +
        `${s.refused} connections refused, ` +
        `${s.refused_joins} players refused${s.saturated ? " (saturated)" : ""}, ` +
        `${(s.memory_bytes / 1048576).toFixed(1)} MiB, up ${Math.round(s.uptime_ms / 1000)} s`;
      const body = document.getElementById("zones");
      body.replaceChildren(...s.zones.map((z) => {
        const tr = document.createElement("tr");
        for (const v of [z.name, z.players, z.entities, z.tick, z.tick_samples, ms(z.tick_p50_us), p99(z), ms(z.tick_max_us), z.overruns, z.recent_tick_samples, ms(z.recent_tick_p50_us), ms(z.recent_tick_max_us), z.world ? crossings(z) : ""]) tr.appendChild(cell(v));
        return tr;
      }));
      document.getElementById("error").textContent = "";
    } catch (e) {
      document.getElementById("error").textContent = "status unavailable: " + e;
    }
  }
  poll();
  setInterval(poll, 1000);
  </script>
  </body>
  </html>
  """

  @spec html() :: binary
  def html, do: @html
end

// The players' figures between two polls of the operator API's sessions (every 2 s while the
// map is open): bandwidth and budget deferrals per second from the differences of their totals,
// and each player's last minutes of bandwidth, RTT, frame interval and jitter (ring buffers,
// for the selected player's charts). No DOM here (test/players.test.ts).
import type { SessionInfo } from "./api.js";
import { Series, rate } from "./ring.js";

/** One row of the players' table. */
export interface PlayerRow {
  session: SessionInfo;
  /** Bytes per second since the previous poll (NaN: no earlier poll, or the counter went back). */
  bandwidth: number;
  /** Budget deferrals per second since the previous poll (NaN as above). */
  deferredPerS: number;
}

/** A player's last minutes. */
export interface PlayerSeries {
  bandwidth: Series;
  rtt: Series;
  interval: Series;
  jitter: Series;
}

interface Totals {
  at: number;
  bytes: number | null;
  deferred: number | null;
}

export class PlayerStats {
  readonly windowMs: number;
  private readonly capacity: number;
  private readonly previous = new Map<string, Totals>();
  private readonly kept = new Map<string, PlayerSeries>();

  /** `windowMs` of points kept per player, at most `capacity` of them (a poll every 2 s: 150 for 5 minutes). */
  constructor(windowMs = 5 * 60_000, capacity = 200) {
    this.windowMs = windowMs;
    this.capacity = capacity;
  }

  /** A poll's sessions, taken at local time `now` (ms): the table's rows, in the same order. */
  update(sessions: readonly SessionInfo[], now: number): PlayerRow[] {
    const seen = new Set<string>();
    const rows = sessions.map((s) => {
      seen.add(s.userId);
      const prev = this.previous.get(s.userId);
      const dt = prev === undefined ? 0 : now - prev.at;
      const bandwidth = rate(prev?.bytes ?? undefined, s.bytesOut ?? undefined, dt);
      const deferredPerS = rate(prev?.deferred ?? undefined, s.deferred ?? undefined, dt);
      this.previous.set(s.userId, { at: now, bytes: s.bytesOut, deferred: s.deferred });
      const k = this.series(s.userId);
      k.bandwidth.push(now, bandwidth);
      k.rtt.push(now, s.rttMs ?? NaN);
      k.interval.push(now, s.frameIntervalMs ?? NaN);
      k.jitter.push(now, s.frameJitterMs ?? NaN);
      for (const x of Object.values(k)) (x as Series).dropBefore(now - this.windowMs);
      return { session: s, bandwidth, deferredPerS };
    });
    // Players gone: forgotten (one who comes back starts again).
    for (const u of [...this.previous.keys()]) if (!seen.has(u)) this.previous.delete(u);
    for (const u of [...this.kept.keys()]) if (!seen.has(u)) this.kept.delete(u);
    return rows;
  }

  /** A player's last minutes (undefined: not in the last poll). */
  get(userId: string): PlayerSeries | undefined {
    return this.kept.get(userId);
  }

  clear(): void {
    this.previous.clear();
    this.kept.clear();
  }

  private series(userId: string): PlayerSeries {
    let k = this.kept.get(userId);
    if (k === undefined) {
      const make = () => new Series(this.capacity);
      k = { bandwidth: make(), rtt: make(), interval: make(), jitter: make() };
      this.kept.set(userId, k);
    }
    return k;
  }
}

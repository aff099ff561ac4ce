import type { Entry } from "./snapshot.js";
import { decodeValue, type AngleUnit, type TemplateSchema, type Value } from "./template.js";

/** An entity with its field values decoded (metres, turns or radians, enum values). */
export interface Entity {
  id: number;
  template: TemplateSchema;
  /** Field name → value. */
  values: Record<string, Value>;
}

/** One buffered state of an entity: the server time (seconds) and the decoded values in field order. */
export interface Sample {
  time: number;
  template: TemplateSchema;
  values: Value[];
}

export interface EntityViewOptions {
  /** How far behind the server time rendering runs, in milliseconds (default 100). */
  interpolationDelay?: number;
  /** Angles in turns [0, 1) or radians [0, 2π) (default radians). */
  angleUnit?: AngleUnit;
  /** At most this many samples per entity (default 32). */
  maxSamples?: number;
}

interface Track {
  samples: Sample[];
  /** Server time of the first push that no longer held the entity. */
  leftAt: number | undefined;
  /** The push that last held the entity. */
  stamp: number;
}

/** Decodes an entity the world view holds (`Entry`) with the handshake's templates. */
export function decodeEntity(e: Entry, templates: readonly TemplateSchema[], unit: AngleUnit = "radians"): Entity | undefined {
  const t = templates[e.template];
  if (t === undefined) return undefined;
  return { id: e.id, template: t, values: record(t, decodeFields(t, e.q, unit)) };
}

function decodeFields(t: TemplateSchema, q: readonly number[], unit: AngleUnit): Value[] {
  return t.fields.map((f, i) => decodeValue(f, q[i] ?? 0, unit));
}

function record(t: TemplateSchema, values: readonly Value[]): Record<string, Value> {
  const out: Record<string, Value> = {};
  t.fields.forEach((f, i) => (out[f.name] = values[i]!));
  return out;
}

/**
 * Interpolated entities for rendering. Every snapshot is pushed with its server time (tick /
 * tick rate); `sample(renderTime)` answers each entity's state at that time, where rendering
 * runs `interpolationDelay` behind the server time (`renderTime(serverTime)`):
 *
 * - between two samples: numbers (`uint`, `int`, `fixed`) linearly, angles along the shorter
 *   arc, enums and bools stepping at the later sample's time; no blending across a template
 *   change (the values step);
 * - past the newest sample: extrapolated from the last two samples, at most one tick;
 * - an entity is present from its first sample's time until the time of the first push that
 *   no longer held it (so it enters and leaves the render `interpolationDelay` late, like
 *   everything else). An entity that comes back after it left starts a new buffer.
 *
 * Buffers are bounded: samples older than rendering needs (interpolation delay plus a margin
 * behind the newest push) are dropped, and so are entities that left before that.
 */
export class EntityView {
  /**
   * Milliseconds: the delay asked for (option `interpolationDelay`), or, when the server sends
   * snapshots further apart than that allows (an overloaded server lowers the send interval),
   * `(sendInterval + 1)` ticks, so that two samples are always there to interpolate between.
   */
  get interpolationDelay(): number {
    return Math.max(this.baseDelay, ((this.interval + 1) * 1000) / this.tickRate);
  }
  private readonly baseDelay: number;
  private interval = 1;
  readonly angleUnit: AngleUnit;
  readonly maxSamples: number;
  private templates: readonly TemplateSchema[] = [];
  private tickRate = 30;
  private readonly tracks = new Map<number, Track>();
  private newest = -Infinity;
  private stamp = 0;

  constructor(options: EntityViewOptions = {}) {
    this.baseDelay = options.interpolationDelay ?? 100;
    this.angleUnit = options.angleUnit ?? "radians";
    this.maxSamples = Math.max(2, options.maxSamples ?? 32);
  }

  /** The templates entries refer to (by index) and the tick rate (the handshake's). */
  configure(templates: readonly TemplateSchema[], tickRate: number): void {
    this.templates = templates;
    if (tickRate > 0) this.tickRate = tickRate;
  }

  /** The server's send interval (ticks between two snapshots, SNAPSHOT extension 1). */
  get sendInterval(): number {
    return this.interval;
  }

  /** Sets the send interval the server announced (the interpolation delay follows it). */
  setSendInterval(ticks: number): void {
    if (Number.isInteger(ticks) && ticks >= 1) this.interval = ticks;
  }

  /** The time to render at for a server time: `serverTime - interpolationDelay`. Seconds. */
  renderTime(serverTime: number): number {
    return serverTime - this.interpolationDelay / 1000;
  }

  /** Entities tracked (including those that left but may still be rendered). */
  get size(): number {
    return this.tracks.size;
  }

  /** The server time of the newest push (-Infinity before any). */
  get newestTime(): number {
    return this.newest;
  }

  /** The samples held for an entity, oldest first (empty when unknown). */
  samples(id: number): readonly Sample[] {
    return this.tracks.get(id)?.samples ?? [];
  }

  /** Forgets everything. */
  clear(): void {
    this.tracks.clear();
    this.newest = -Infinity;
  }

  /**
   * Records the state of every entity held at server time `time` (seconds). Entities not in
   * `entries` left at `time`. A time before the newest push means another time base (another
   * zone, a restarted server): everything is forgotten first. The same time again replaces
   * that push. Ids in `hold` are neither updated nor taken as gone (entities whose state is not
   * known at this time, e.g. while a view is being sent again after a reconnection).
   */
  push(time: number, entries: Iterable<Entry>, hold?: ReadonlySet<number>): void {
    if (time < this.newest) this.clear();
    const again = time === this.newest;
    this.newest = time;
    const stamp = ++this.stamp;
    const cutoff = time - this.keep();
    for (const e of entries) {
      const t = this.templates[e.template];
      if (t === undefined) continue;
      const sample: Sample = { time, template: t, values: decodeFields(t, e.q, this.angleUnit) };
      let track = this.tracks.get(e.id);
      if (track === undefined) {
        track = { samples: [], leftAt: undefined, stamp };
        this.tracks.set(e.id, track);
      } else if (track.leftAt !== undefined) {
        // Marked as gone by a push of this same time: still there. Otherwise a new life.
        if (!(again && track.leftAt === time)) track.samples = [];
        track.leftAt = undefined;
      }
      track.stamp = stamp;
      const s = track.samples;
      const last = s[s.length - 1];
      if (last !== undefined && last.time >= time) s[s.length - 1] = sample;
      else s.push(sample);
      // Keep one sample at or before the cutoff (the left end of the oldest interval needed).
      let drop = 0;
      while (drop < s.length - 1 && s[drop + 1]!.time <= cutoff) drop++;
      drop = Math.max(drop, s.length - this.maxSamples);
      if (drop > 0) s.splice(0, drop);
    }
    for (const [id, track] of this.tracks) {
      if (track.stamp === stamp) continue;
      if (track.leftAt === undefined && hold?.has(id)) continue;
      if (track.leftAt === undefined) track.leftAt = time;
      if (track.leftAt <= cutoff) this.tracks.delete(id);
    }
  }

  /** How far behind the newest push samples are kept, in seconds. */
  private keep(): number {
    return this.interpolationDelay / 1000 + Math.max(0.25, 4 / this.tickRate);
  }

  /** Each entity's state at `renderTime` (seconds of server time). */
  sample(renderTime: number): Map<number, Entity> {
    const out = new Map<number, Entity>();
    for (const [id, track] of this.tracks) {
      const values = this.at(track, renderTime);
      if (values === undefined) continue;
      out.set(id, { id, template: values.template, values: record(values.template, values.values) });
    }
    return out;
  }

  /** One entity's state at `renderTime`, or undefined when it is not there at that time. */
  sampleOne(id: number, renderTime: number): Entity | undefined {
    const track = this.tracks.get(id);
    const values = track && this.at(track, renderTime);
    return values && { id, template: values.template, values: record(values.template, values.values) };
  }

  private at(track: Track, rt: number): { template: TemplateSchema; values: Value[] } | undefined {
    const s = track.samples;
    const n = s.length;
    if (n === 0 || rt < s[0]!.time) return undefined;
    if (track.leftAt !== undefined && rt >= track.leftAt) return undefined;
    let i = n - 1;
    while (i > 0 && s[i]!.time > rt) i--;
    const a = s[i]!;
    if (i < n - 1) {
      const b = s[i + 1]!;
      return this.mix(a, b, (rt - a.time) / (b.time - a.time));
    }
    const p = s[n - 2];
    if (p === undefined || rt <= a.time) return a;
    // Extrapolate: at most one tick past the newest sample.
    const ahead = Math.min(rt - a.time, 1 / this.tickRate);
    return this.mix(p, a, (a.time + ahead - p.time) / (a.time - p.time));
  }

  /** Values between `a` (alpha 0) and `b` (alpha 1); alpha > 1 extrapolates. */
  private mix(a: Sample, b: Sample, alpha: number): Sample {
    if (a.template.id !== b.template.id || a.template.name !== b.template.name) return alpha < 1 ? a : b;
    const period = this.angleUnit === "turns" ? 1 : 2 * Math.PI;
    const values = b.template.fields.map((f, i): Value => {
      const x = a.values[i]!;
      const y = b.values[i]!;
      if (typeof x !== "number" || typeof y !== "number" || f.type === "enum" || f.type === "bool") return alpha < 1 ? x : y;
      if (f.type !== "angle") return x + (y - x) * alpha;
      const d = y - x - period * Math.round((y - x) / period);
      const v = (x + d * alpha) % period;
      const wrapped = v < 0 ? v + period : v;
      // -tiny + period rounds to period: that is 0.
      return wrapped >= period ? 0 : wrapped;
    });
    return { time: a.time + (b.time - a.time) * alpha, template: b.template, values };
  }
}

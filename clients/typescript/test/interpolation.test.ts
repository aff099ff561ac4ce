import { describe, expect, it } from "vitest";
import { EntityView, ServerClock, backoffDelay, decodeEntity, type Entry } from "../src/index.js";
import { decodeValue } from "../src/protocol.js";
import { GOBLIN, PLAYER, TEMPLATES, qm } from "./helpers.js";

const RATE = 30;
const at = (tick: number) => tick / RATE;
/** A goblin at (x, y) metres, heading in turns (multiple of 1/256), state index. */
const goblin = (id: number, x: number, y = 0, heading = 0, state = 0): Entry => ({
  id,
  template: 0,
  q: [qm(x), qm(y), Math.round(heading * 256) % 256, state, 0],
});
const player = (id: number, x: number, y = 0): Entry => ({ id, template: 1, q: [qm(x), qm(y), 0] });

function view(options: ConstructorParameters<typeof EntityView>[0] = {}): EntityView {
  const v = new EntityView(options);
  v.configure(TEMPLATES, RATE);
  return v;
}

describe("decodeValue", () => {
  it("decodes fixed to metres, angles to turns or radians, enums and bools to their values", () => {
    const [x, , heading, state, kind] = GOBLIN.fields;
    expect(decodeValue(x!, 64)).toBe(1);
    expect(decodeValue(x!, 1)).toBe(1 / 64);
    expect(decodeValue(x!, 2 ** 20 - 1)).toBe(16384 - 1 / 64);
    expect(decodeValue(heading!, 64, "turns")).toBe(0.25);
    expect(decodeValue(heading!, 64)).toBe(Math.PI / 2);
    expect(decodeValue(heading!, 255, "turns")).toBe(255 / 256);
    expect(decodeValue(state!, 3)).toBe("chase");
    expect(decodeValue(kind!, 1)).toBe("warlord");
    expect(decodeValue({ ...kind!, values: ["a", "b"] }, 7)).toBe(7);
    expect(decodeValue({ name: "b", type: "bool", bits: 1, min: 0, step: 1, diff_bits: 0, values: [false, true] }, 1)).toBe(true);
    expect(decodeValue({ name: "i", type: "int", bits: 11, min: -1000, step: 1, diff_bits: 3, values: null }, 3)).toBe(-997);
    expect(decodeValue({ name: "u", type: "uint", bits: 5, min: 0, step: 1, diff_bits: 3, values: null }, 17)).toBe(17);
    // Fixed with a negative minimum (vx: -16 m/s in 1/1024 m, step 8).
    expect(decodeValue({ name: "vx", type: "fixed", bits: 12, min: -16384, step: 8, diff_bits: 6, values: null }, 2048)).toBe(0);
  });

  it("decodes an entry to named values", () => {
    expect(decodeEntity(goblin(5, 10.5, 2, 0.5, 1), TEMPLATES, "turns")).toEqual({
      id: 5,
      template: GOBLIN,
      values: { x: 10.5, y: 2, heading: 0.5, state: "wander", kind: "goblin" },
    });
    expect(decodeEntity({ id: 1, template: 9, q: [] }, TEMPLATES)).toBeUndefined();
  });
});

describe("EntityView", () => {
  it("interpolates numbers linearly between known positions at known ticks", () => {
    const v = view();
    v.push(at(30), [goblin(1, 10, 100), player(2, 0, 0)]);
    v.push(at(31), [goblin(1, 13, 100), player(2, 1, -0 + 2)]);
    v.push(at(32), [goblin(1, 13, 103), player(2, 2, 4)]);
    const s = (tick: number) => v.sample(at(tick));
    expect(s(30).get(1)!.values.x).toBe(10);
    expect(s(31).get(1)!.values.x).toBe(13);
    expect(s(30.5).get(1)!.values.x).toBeCloseTo(11.5, 9);
    expect(s(30 + 1 / 3).get(1)!.values.x).toBeCloseTo(11, 9);
    expect(s(31.25).get(1)!.values.y).toBeCloseTo(100.75, 9);
    expect(s(31.5).get(2)!.values).toEqual({ x: expect.closeTo(1.5, 9), y: expect.closeTo(3, 9), heading: 0 });
    expect(s(31.5).get(2)!.template).toBe(PLAYER);
  });

  it("takes the shorter arc for angles, across zero both ways, in turns and radians", () => {
    const turns = view({ angleUnit: "turns" });
    turns.push(at(0), [goblin(1, 0, 0, 0.875)]);
    turns.push(at(1), [goblin(1, 0, 0, 0.125)]);
    turns.push(at(2), [goblin(1, 0, 0, 0.875)]);
    turns.push(at(3), [goblin(1, 0, 0, 0.25)]);
    expect(turns.sample(at(0.5)).get(1)!.values.heading).toBe(0);
    expect(turns.sample(at(0.25)).get(1)!.values.heading).toBeCloseTo(0.9375, 12);
    expect(turns.sample(at(0.75)).get(1)!.values.heading).toBeCloseTo(0.0625, 12);
    expect(turns.sample(at(1.5)).get(1)!.values.heading).toBeCloseTo(0, 12);
    // 0.875 → 0.25 is 3/8 of a turn forwards (through 0), not 5/8 backwards.
    expect(turns.sample(at(2.5)).get(1)!.values.heading).toBeCloseTo(0.0625, 12);
    // An ordinary arc.
    const rad = view();
    rad.push(at(0), [goblin(1, 0, 0, 0.25)]);
    rad.push(at(1), [goblin(1, 0, 0, 0.5)]);
    expect(rad.sample(at(0.5)).get(1)!.values.heading).toBeCloseTo((3 / 8) * 2 * Math.PI, 12);
    rad.push(at(2), [goblin(1, 0, 0, 0.9375)]);
    rad.push(at(3), [goblin(1, 0, 0, 0.0625)]);
    const h = rad.sample(at(2.5)).get(1)!.values.heading as number;
    expect(Math.min(h, 2 * Math.PI - h)).toBeCloseTo(0, 12);
    expect(h).toBeGreaterThanOrEqual(0);
    expect(h).toBeLessThan(2 * Math.PI);
  });

  it("steps enums and bools at the later sample's time", () => {
    const v = view();
    v.push(at(10), [goblin(1, 0, 0, 0, 0)]);
    v.push(at(11), [goblin(1, 3, 0, 0, 3)]);
    expect(v.sample(at(10.99)).get(1)!.values.state).toBe("idle");
    expect(v.sample(at(10.99)).get(1)!.values.x).toBeCloseTo(2.97, 9);
    expect(v.sample(at(11)).get(1)!.values.state).toBe("chase");
  });

  it("extrapolates at most one tick beyond the newest sample", () => {
    const v = view({ angleUnit: "turns" });
    v.push(at(0), [goblin(1, 5, 0, 0.9375)]);
    v.push(at(1), [goblin(1, 6, 0, 0)]);
    expect(v.sample(at(1.5)).get(1)!.values.x).toBeCloseTo(6.5, 9);
    expect(v.sample(at(1.5)).get(1)!.values.heading).toBeCloseTo(0.03125, 12);
    expect(v.sample(at(2)).get(1)!.values.x).toBeCloseTo(7, 9);
    expect(v.sample(at(10)).get(1)!.values.x).toBeCloseTo(7, 9);
    expect(v.sample(at(10)).get(1)!.values.heading).toBeCloseTo(0.0625, 12);
    // A single sample: held as is.
    const one = view();
    one.push(at(0), [goblin(1, 5)]);
    expect(one.sample(at(3)).get(1)!.values.x).toBe(5);
  });

  it("shows an entity from its first sample until the push that no longer held it", () => {
    const v = view();
    v.push(at(0), [goblin(1, 0)]);
    v.push(at(1), [goblin(1, 1), goblin(2, 50)]);
    v.push(at(2), [goblin(2, 51)]);
    expect([...v.sample(at(0.5)).keys()]).toEqual([1]);
    expect([...v.sample(at(1)).keys()].sort()).toEqual([1, 2]);
    // No sample after: extrapolated (at most a tick) until the time it was gone.
    expect(v.sample(at(1.5)).get(1)!.values.x).toBeCloseTo(1.5, 9);
    expect([...v.sample(at(2)).keys()]).toEqual([2]);
    expect(v.sampleOne(1, at(1.999))).toBeDefined();
    expect(v.sampleOne(1, at(2))).toBeUndefined();
    expect(v.sampleOne(2, at(0.999))).toBeUndefined();
  });

  it("starts a new history when an entity comes back, and does not blend across a template change", () => {
    const v = view();
    v.push(at(0), [goblin(1, 0)]);
    v.push(at(1), []);
    v.push(at(2), [goblin(1, 100)]);
    expect(v.samples(1).map((s) => s.time)).toEqual([at(2)]);
    expect(v.sampleOne(1, at(1.5))).toBeUndefined();
    expect(v.sampleOne(1, at(2))!.values.x).toBe(100);
    v.push(at(3), [player(1, 200)]);
    expect(v.sampleOne(1, at(2.5))!.values.x).toBe(100);
    expect(v.sampleOne(1, at(2.5))!.template).toBe(GOBLIN);
    expect(v.sampleOne(1, at(3))!.template).toBe(PLAYER);
    // The same time pushed again replaces that push (and does not end the entity).
    v.push(at(3), [player(1, 201)]);
    expect(v.samples(1).length).toBe(2);
    expect(v.sampleOne(1, at(3))!.values.x).toBeCloseTo(201, 9);
  });

  it("keeps bounded buffers: old samples and long-gone entities are dropped", () => {
    const v = view({ interpolationDelay: 100 });
    for (let t = 0; t <= 3000; t++) v.push(at(t), t < 1000 ? [goblin(1, t / 64), goblin(2, 0)] : [goblin(2, t / 64)]);
    // 100 ms + max(250 ms, 4 ticks) at 30 Hz: 10.5 ticks behind the newest, plus the bracket.
    expect(v.samples(2).length).toBeLessThanOrEqual(12);
    expect(v.samples(2).length).toBeGreaterThanOrEqual(11);
    expect(v.samples(1).length).toBe(0);
    expect(v.size).toBe(1);
    // What rendering needs is still there.
    expect(v.sample(v.renderTime(at(3000))).get(2)!.values.x).toBeCloseTo(2997 / 64, 9);
    const capped = view({ maxSamples: 4, interpolationDelay: 10_000 });
    for (let t = 0; t < 100; t++) capped.push(at(t), [goblin(1, t)]);
    expect(capped.samples(1).map((s) => Math.round(s.time * RATE))).toEqual([96, 97, 98, 99]);
  });

  it("forgets everything when time goes backwards (another time base)", () => {
    const v = view();
    v.push(at(100), [goblin(1, 0)]);
    v.push(at(5), [goblin(2, 0)]);
    expect(v.size).toBe(1);
    expect(v.newestTime).toBe(at(5));
    expect(v.sampleOne(1, at(5))).toBeUndefined();
  });

  it("the interpolation delay follows the server's send interval: at least interval + 1 ticks", () => {
    const v = view();
    expect(v.sendInterval).toBe(1);
    expect(v.interpolationDelay).toBe(100); // 2 ticks at 30 Hz (66.7 ms) < the 100 asked
    v.setSendInterval(3);
    expect(v.interpolationDelay).toBeCloseTo(4000 / RATE, 9); // 4 ticks: 133.3 ms
    expect(v.renderTime(10)).toBeCloseTo(10 - 4 / RATE, 12);
    // Samples three ticks apart: rendering between the two newest is interpolation, not extrapolation.
    v.push(at(30), [goblin(1, 0)]);
    v.push(at(33), [goblin(1, 3)]);
    expect(v.sampleOne(1, v.renderTime(at(36)))!.values.x).toBeCloseTo(2, 9);
    v.setSendInterval(0); // ignored
    expect(v.sendInterval).toBe(3);
    v.setSendInterval(1);
    expect(v.interpolationDelay).toBe(100);
  });

  it("renders interpolationDelay behind the server time", () => {
    expect(view().renderTime(10)).toBeCloseTo(9.9, 12);
    expect(view({ interpolationDelay: 250 }).renderTime(10)).toBeCloseTo(9.75, 12);
    const v = view();
    v.push(at(27), [goblin(1, 0)]);
    v.push(at(30), [goblin(1, 3)]);
    // Server time at tick 30, rendering at tick 27: the older sample.
    expect(v.sample(v.renderTime(at(30))).get(1)!.values.x).toBeCloseTo(0, 9);
    expect(v.sample(v.renderTime(at(31.5))).get(1)!.values.x).toBeCloseTo(1.5, 9);
  });
});

describe("backoffDelay", () => {
  it("is exponential with full jitter, capped", () => {
    const half = () => 0.5;
    expect([0, 1, 2, 3, 4, 5, 6, 7, 8].map((a) => backoffDelay(a, {}, half))).toEqual([125, 250, 500, 1000, 2000, 4000, 5000, 5000, 5000]);
    expect(backoffDelay(0, {}, () => 0)).toBe(0);
    expect(backoffDelay(3, {}, () => 0.999)).toBeCloseTo(1998, 9);
    expect(backoffDelay(50, {}, () => 0.999)).toBeLessThan(10_000);
    expect([0, 1, 2, 3].map((a) => backoffDelay(a, { base: 100, factor: 3, cap: 1000 }, () => 1))).toEqual([100, 300, 900, 1000]);
    for (let a = 0; a < 20; a++) {
      const d = backoffDelay(a);
      expect(d).toBeGreaterThanOrEqual(0);
      expect(d).toBeLessThan(Math.min(10_000, 250 * 2 ** a));
    }
  });
});

describe("ServerClock", () => {
  it("runs on the local clock from the snapshots' ticks, smoothing the jitter", () => {
    const c = new ServerClock(0.1, 1);
    expect(c.now(5000)).toBe(0);
    c.observe(10, 1000); // tick time 10 s seen at local 1 s
    expect(c.now(1000)).toBe(10);
    expect(c.now(1500)).toBeCloseTo(10.5, 12);
    // A late snapshot (20 ms later than expected) moves the estimate by a tenth of that.
    c.observe(11, 2020);
    expect(c.now(2020)).toBeCloseTo(11.018, 12);
  });

  it("never goes backwards for small corrections, jumps for big ones", () => {
    const c = new ServerClock(1, 1);
    c.observe(10, 0);
    expect(c.now(500)).toBeCloseTo(10.5, 12);
    c.observe(10.4, 500); // 100 ms behind: held still instead of going back
    expect(c.now(500)).toBeCloseTo(10.5, 12);
    expect(c.now(600)).toBeCloseTo(10.5, 12);
    expect(c.now(700)).toBeCloseTo(10.6, 12);
    c.observe(100, 800); // another time base
    expect(c.now(800)).toBeCloseTo(100, 12);
    c.observe(3, 900);
    expect(c.now(900)).toBeCloseTo(3, 12);
    c.reset();
    expect(c.synced).toBe(false);
  });
});

//! Native reference implementation of the goblin scenario.
//!
//! Every rule mirrors `docs/goblins-scenario.md` exactly (same integer arithmetic, same IEEE-754
//! double operations in the same order), so the checksum of a run must match the Elixir
//! implementation bit for bit.
//!
//! Layout: struct-of-arrays. Every tick the live state is counting-sorted by 12 m grid cell
//! (row-major cell index) into a read-only *snapshot* (the previous-tick buffer); each goblin is
//! then updated from the snapshot and written back into the live arrays at its sorted slot, so
//! the live arrays stay physically ordered by cell. Ids travel with the goblins, and the
//! checksum is computed in id order.
//!
//! Neighbour query: the goblins of the 3x3 cells around a cell form three contiguous slot
//! ranges (one per cell row); they are copied once per cell into a padded candidate block that
//! every goblin of that cell scans with a branch-free loop (exact `i32` squared distances, the
//! threat/prey search as an integer minimum). Only neighbours that can actually contribute to
//! separation or overlap resolution (see `near_radius`) are then visited individually; the
//! result is identical to visiting the whole neighbour set.
//!
//! Threads (`ThreadedSim`): persistent workers, each owning a contiguous range of slots; per tick
//! they count their own chunk's cells, scatter it into the shared snapshot (per-thread cursors
//! from the driver's prefix sum), then update their range. Results do not depend on the thread
//! count.

use std::f64::consts::PI;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering,
};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// 1 m in fixed-point units.
pub const U: i64 = 1024;
/// Neighbour query radius (12 m).
pub const R_VIEW: i64 = 12 * U;
/// Separation radius (1.5 m).
pub const R_SEP: i64 = 1536;
/// Two bodies of radius 0.5 m touch.
pub const CONTACT: i64 = U;
/// 3 m/s.
pub const SPEED: i64 = 3 * U;
/// Grid cell side (12 m = R_VIEW, so a 3x3 block of cells covers the query disc).
pub const CELL: i64 = R_VIEW;

const R_VIEW2: i64 = R_VIEW * R_VIEW;
const R_SEP2: i64 = R_SEP * R_SEP;
const CONTACT2: i64 = CONTACT * CONTACT;
const SPEED2: i64 = SPEED * SPEED;

pub const IDLE: u8 = 0;
pub const WANDER: u8 = 1;
pub const FLEE: u8 = 2;
pub const CHASE: u8 = 3;

/// 32-bit xorshift; the returned (new) state is the draw.
#[inline]
pub fn next(mut x: u32) -> u32 {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    x
}

/// lowbias32 of `seed * 0x9E3779B1 + id * 0x85EBCA77 (mod 2^32)`, never 0.
pub fn seed_for(seed: u64, id: u64) -> u32 {
    // (a mod 2^64) mod 2^32 == a mod 2^32, so wrapping u64 arithmetic is exact here.
    let mut h = seed
        .wrapping_mul(0x9E37_79B1)
        .wrapping_add(id.wrapping_mul(0x85EB_CA77)) as u32;
    h ^= h >> 16;
    h = h.wrapping_mul(0x7FEB_352D);
    h ^= h >> 15;
    h = h.wrapping_mul(0x846C_A68B);
    h ^= h >> 16;
    if h == 0 {
        0x6D2B_79F5
    } else {
        h
    }
}

/// World side `S = trunc(sqrt(N * 50.0) * 1024.0)`.
pub fn world_side(n: usize) -> i64 {
    ((n as f64 * 50.0).sqrt() * 1024.0) as i64
}

#[inline]
#[allow(clippy::manual_is_multiple_of)] // spelled as in the spec: mod(id, 20) == 0
fn is_aggressive(id: u32) -> bool {
    id % 20 == 0
}

#[inline]
fn clamp(v: i64, s: i64) -> i64 {
    v.max(0).min(s)
}

/// `toward(dx, dy)`: `(trunc(dx * 3072 / d), trunc(dy * 3072 / d))`, integer product, double
/// division.
#[inline]
fn toward(dx: i64, dy: i64) -> (i64, i64) {
    if dx == 0 && dy == 0 {
        return (0, 0);
    }
    let d = ((dx * dx + dy * dy) as f64).sqrt();
    (
        ((dx * SPEED) as f64 / d) as i64,
        ((dy * SPEED) as f64 / d) as i64,
    )
}

/// Run parameters.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub entities: usize,
    pub rate: i64,
    pub seed: u64,
    /// World side S.
    pub side: i64,
    /// Neighbours whose previous distance is below this radius are the only ones that can
    /// contribute to separation or overlap resolution (see `near_radius`).
    near2: i64,
    /// Grid width (= height) in cells.
    grid_w: usize,
}

impl Params {
    pub fn new(entities: usize, rate: i64, seed: u64) -> Params {
        assert!(entities >= 1, "at least one goblin");
        assert!(entities < u32::MAX as usize, "too many goblins");
        assert!(rate >= 1, "rate must be >= 1");
        let side = world_side(entities);
        let near = near_radius(rate);
        Params {
            entities,
            rate,
            seed,
            side,
            near2: near * near,
            grid_w: (side / CELL) as usize + 1,
        }
    }
}

/// A pure filter radius: a neighbour `n` only matters for separation if `|p - n.p| < R_SEP`, and
/// for overlap resolution if `|p' - n.p| < CONTACT`, where `|p' - p| <= |v| / rate` (clamping
/// into `[0, S]` only shortens the move) and `|v| <= 3072` up to double rounding. So every
/// contributing neighbour is strictly closer than `max(R_SEP, CONTACT + 3072 / rate + 4)`
/// (the +4 covers the integer division and the rounding with a wide margin). This is always
/// well inside `R_VIEW`, so the filtered set is a subset of the spec's neighbour set `N`.
fn near_radius(rate: i64) -> i64 {
    R_SEP.max(CONTACT + SPEED / rate + 4)
}

/// Struct-of-arrays goblin storage.
#[derive(Clone, Default, Debug)]
pub struct Goblins {
    pub id: Vec<u32>,
    pub x: Vec<i64>,
    pub y: Vec<i64>,
    pub vx: Vec<i64>,
    pub vy: Vec<i64>,
    pub heading: Vec<i64>,
    pub state: Vec<u8>,
    pub timer: Vec<i64>,
    pub qx: Vec<i64>,
    pub qy: Vec<i64>,
    pub r: Vec<u32>,
}

impl Goblins {
    fn zeroed(n: usize) -> Goblins {
        Goblins {
            id: vec![0; n],
            x: vec![0; n],
            y: vec![0; n],
            vx: vec![0; n],
            vy: vec![0; n],
            heading: vec![0; n],
            state: vec![0; n],
            timer: vec![0; n],
            qx: vec![0; n],
            qy: vec![0; n],
            r: vec![0; n],
        }
    }

    pub fn len(&self) -> usize {
        self.id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.id.is_empty()
    }

    /// Tick-0 placement of goblins with ids `first_id .. first_id + n`.
    fn placed(p: &Params, first_id: usize, n: usize) -> Goblins {
        let mut g = Goblins::zeroed(n);
        let s = p.side;
        for j in 0..n {
            let id = (first_id + j) as u32;
            let mut r = seed_for(p.seed, id as u64);
            r = next(r);
            let x = r as i64 % s;
            r = next(r);
            let y = r as i64 % s;
            r = next(r);
            let timer = p.rate + r as i64 % (2 * p.rate);
            g.id[j] = id;
            g.x[j] = x;
            g.y[j] = y;
            g.state[j] = IDLE;
            g.timer[j] = timer;
            g.qx[j] = x;
            g.qy[j] = y;
            g.r[j] = r;
        }
        g
    }

    /// Goblins from checksum records (`[id, x, y, vx, vy, heading, state, timer, qx, qy, r]`).
    pub fn from_records(records: &[Record]) -> Goblins {
        let mut g = Goblins::zeroed(records.len());
        for (j, rec) in records.iter().enumerate() {
            g.id[j] = rec[0] as u32;
            g.x[j] = rec[1];
            g.y[j] = rec[2];
            g.vx[j] = rec[3];
            g.vy[j] = rec[4];
            g.heading[j] = rec[5];
            g.state[j] = rec[6] as u8;
            g.timer[j] = rec[7];
            g.qx[j] = rec[8];
            g.qy[j] = rec[9];
            g.r[j] = rec[10] as u32;
        }
        g
    }

    /// Panics unless the ids are exactly `1..=N` and every position is within `[0, S]`.
    fn validate(&self, p: &Params) {
        assert_eq!(self.len(), p.entities, "wrong number of goblins");
        let mut seen = vec![false; self.len()];
        for j in 0..self.len() {
            let id = self.id[j] as usize;
            assert!(
                id >= 1 && id <= self.len() && !seen[id - 1],
                "ids must be exactly 1..=N"
            );
            seen[id - 1] = true;
            assert!((0..=p.side).contains(&self.x[j]), "x out of [0, S]");
            assert!((0..=p.side).contains(&self.y[j]), "y out of [0, S]");
        }
    }

    /// A copy of slots `a..b`.
    fn range(&self, a: usize, b: usize) -> Goblins {
        Goblins {
            id: self.id[a..b].to_vec(),
            x: self.x[a..b].to_vec(),
            y: self.y[a..b].to_vec(),
            vx: self.vx[a..b].to_vec(),
            vy: self.vy[a..b].to_vec(),
            heading: self.heading[a..b].to_vec(),
            state: self.state[a..b].to_vec(),
            timer: self.timer[a..b].to_vec(),
            qx: self.qx[a..b].to_vec(),
            qy: self.qy[a..b].to_vec(),
            r: self.r[a..b].to_vec(),
        }
    }

    /// The 11 checksum values of slot `j`.
    #[inline]
    fn record(&self, j: usize) -> Record {
        [
            self.id[j] as i64,
            self.x[j],
            self.y[j],
            self.vx[j],
            self.vy[j],
            self.heading[j],
            self.state[j] as i64,
            self.timer[j],
            self.qx[j],
            self.qy[j],
            self.r[j] as i64,
        ]
    }
}

/// `[id, x, y, vx, vy, heading, state, timer, qx, qy, r]`.
pub type Record = [i64; 11];

/// FNV-1a over 64-bit words, records already in id order.
pub fn checksum_records(records: &[Record]) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for rec in records {
        for &v in rec {
            h = (h ^ v as u64).wrapping_mul(0x0000_0100_0000_01B3);
        }
    }
    h
}

/// Records of all chunks, in id order.
fn records_of<'a>(n: usize, chunks: impl Iterator<Item = &'a Goblins>) -> Vec<Record> {
    let mut out = vec![[0i64; 11]; n];
    let mut seen = vec![false; n];
    for c in chunks {
        for j in 0..c.len() {
            let id = c.id[j] as usize;
            assert!(id >= 1 && id <= n && !seen[id - 1], "goblin ids corrupted");
            seen[id - 1] = true;
            out[id - 1] = c.record(j);
        }
    }
    assert!(seen.iter().all(|&b| b), "goblins lost");
    out
}

/// Relaxed atomic access: the snapshot is shared by all threads, written in the scatter phase
/// and read in the update phase, with the phases ordered by the engine's release/acquire
/// hand-offs. On x86-64 these are plain loads and stores.
const RLX: Ordering = Ordering::Relaxed;

fn atomics<T: Default>(n: usize) -> Vec<T> {
    (0..n).map(|_| T::default()).collect()
}

/// Previous-tick buffer: all goblins sorted by cell (slot order), plus the grid.
struct Snapshot {
    w: usize,
    /// `cell_start[c] .. cell_start[c + 1]` are the slots of cell `c` (row-major).
    cell_start: Vec<AtomicU32>,
    id: Vec<AtomicU32>,
    x: Vec<AtomicI64>,
    y: Vec<AtomicI64>,
    /// Position as `i32` (exact: `S < 2^31`) and the threat-search penalty (`0` for aggressive
    /// goblins, `PEN` otherwise), for the candidate blocks.
    ix: Vec<AtomicI32>,
    iy: Vec<AtomicI32>,
    pen: Vec<AtomicI32>,
    vx: Vec<AtomicI64>,
    vy: Vec<AtomicI64>,
    heading: Vec<AtomicI64>,
    state: Vec<AtomicU8>,
    timer: Vec<AtomicI64>,
    qx: Vec<AtomicI64>,
    qy: Vec<AtomicI64>,
    r: Vec<AtomicU32>,
}

impl Snapshot {
    fn new(p: &Params) -> Snapshot {
        let n = p.entities;
        Snapshot {
            w: p.grid_w,
            cell_start: atomics(p.grid_w * p.grid_w + 1),
            id: atomics(n),
            x: atomics(n),
            y: atomics(n),
            ix: atomics(n),
            iy: atomics(n),
            pen: atomics(n),
            vx: atomics(n),
            vy: atomics(n),
            heading: atomics(n),
            state: atomics(n),
            timer: atomics(n),
            qx: atomics(n),
            qy: atomics(n),
            r: atomics(n),
        }
    }

    fn cells(&self) -> usize {
        self.w * self.w
    }
}

/// Counting sort, pass 1, over one live chunk: the cell of every goblin and the chunk's
/// histogram of cells.
fn count_chunk(w: usize, live: &Goblins, keys: &mut Vec<u32>, hist: &mut [u32]) {
    hist.fill(0);
    keys.clear();
    keys.extend(
        live.x
            .iter()
            .zip(&live.y)
            .map(|(&x, &y)| ((y / CELL) as usize * w + (x / CELL) as usize) as u32),
    );
    for &c in keys.iter() {
        hist[c as usize] += 1;
    }
}

/// Counting sort, pass 2 (serial): `total` holds the summed histograms; publishes the cell
/// starts and leaves them in `running` as the cursor base for `to_cursors`.
fn publish_starts(snap: &Snapshot, total: &[u32], running: &mut [u32]) {
    let mut acc = 0u32;
    for ((cur, &n), start) in running.iter_mut().zip(total).zip(&snap.cell_start) {
        start.store(acc, RLX);
        *cur = acc;
        acc += n;
    }
    snap.cell_start[total.len()].store(acc, RLX);
}

/// Turns one chunk's histogram into its scatter cursors (chunks in slot order, so the sort is
/// stable), advancing `running` past the chunk's goblins.
fn to_cursors(hist: &mut [u32], running: &mut [u32]) {
    for (h, cur) in hist.iter_mut().zip(running.iter_mut()) {
        let n = *h;
        *h = *cur;
        *cur += n;
    }
}

/// Counting sort, pass 3, over one live chunk: writes its goblins into their snapshot slots.
fn scatter_chunk(snap: &Snapshot, live: &Goblins, keys: &[u32], cursors: &mut [u32]) {
    for (j, &key) in keys.iter().enumerate() {
        let k = cursors[key as usize] as usize;
        cursors[key as usize] += 1;
        let id = live.id[j];
        let (x, y) = (live.x[j], live.y[j]);
        snap.id[k].store(id, RLX);
        snap.x[k].store(x, RLX);
        snap.y[k].store(y, RLX);
        snap.ix[k].store(x as i32, RLX);
        snap.iy[k].store(y as i32, RLX);
        snap.pen[k].store(if is_aggressive(id) { 0 } else { PEN }, RLX);
        snap.vx[k].store(live.vx[j], RLX);
        snap.vy[k].store(live.vy[j], RLX);
        snap.heading[k].store(live.heading[j], RLX);
        snap.state[k].store(live.state[j], RLX);
        snap.timer[k].store(live.timer[j], RLX);
        snap.qx[k].store(live.qx[j], RLX);
        snap.qy[k].store(live.qy[j], RLX);
        snap.r[k].store(live.r[j], RLX);
    }
}

/// Snapshot slots of the neighbours closer than `near_radius` (the only ones that can matter for
/// separation and overlap resolution).
type Near = u32;

/// Penalty that makes a candidate ineligible as threat / prey: `d2 | PEN == i32::MAX`, above
/// every real `d2` (< 2^31, see `Scratch`).
const PEN: i32 = i32::MAX;
/// Candidate blocks are padded to a multiple of this many entries.
const LANES: usize = 8;

/// Per-thread scratch buffers, reused across ticks.
///
/// The candidate block holds the goblins of the 3x3 cells around one cell, copied contiguously
/// from the snapshot (three slot ranges, one per cell row). Between goblins of adjacent cells
/// `|dx|, |dy| < 2 * CELL = 24576`, so `d2 = dx^2 + dy^2 < 1.21e9` is computed exactly in `i32`
/// (which vectorises well). Padding entries sit 20000 units left of and below the centre cell,
/// so their `d2` is between `2 * 20000^2` (far beyond any near radius) and `2 * 32288^2 < 2^31`,
/// and they carry the penalty, so they never win.
struct Scratch {
    near: Vec<Near>,
    /// Cell whose neighbourhood is currently loaded (`usize::MAX`: none).
    cell: usize,
    /// The three cell-row segments of the block: (block index, first slot, length).
    segs: [(usize, usize, usize); 3],
    nsegs: usize,
    /// Block index and slot of the first goblin of the middle cell row.
    mid_at: usize,
    mid_slot: usize,
    /// Coordinates of the padding entries.
    pad: (i32, i32),
    bx: Vec<i32>,
    by: Vec<i32>,
    /// OR-ed into `d2` in the threat search: `0` for aggressive goblins, `PEN` otherwise.
    threat_pen: Vec<i32>,
    /// `d2 | penalty` (threat search) or `d2` (prey search), and `d2`, of every entry from the
    /// last scan.
    key: Vec<i32>,
    d2: Vec<i32>,
}

impl Scratch {
    fn new() -> Scratch {
        Scratch {
            near: Vec::with_capacity(64),
            cell: usize::MAX,
            segs: [(0, 0, 0); 3],
            nsegs: 0,
            mid_at: 0,
            mid_slot: 0,
            pad: (0, 0),
            bx: Vec::with_capacity(256),
            by: Vec::with_capacity(256),
            threat_pen: Vec::with_capacity(256),
            key: Vec::with_capacity(256),
            d2: Vec::with_capacity(256),
        }
    }

    /// Loads the goblins of the 3x3 cells around `(cx, cy)` and pads them to a multiple of
    /// `LANES`.
    fn load(&mut self, snap: &Snapshot, cx: usize, cy: usize) {
        let w = snap.w;
        self.cell = cy * w + cx;
        self.nsegs = 0;
        let x0 = cx.saturating_sub(1);
        let x1 = (cx + 1).min(w - 1);
        let mut real = 0;
        for row in cy.saturating_sub(1)..=(cy + 1).min(w - 1) {
            let lo = snap.cell_start[row * w + x0].load(RLX) as usize;
            let hi = snap.cell_start[row * w + x1 + 1].load(RLX) as usize;
            if row == cy {
                self.mid_at = real;
                self.mid_slot = lo;
            }
            self.segs[self.nsegs] = (real, lo, hi - lo);
            self.nsegs += 1;
            real += hi - lo;
        }
        let len = real.div_ceil(LANES) * LANES;
        for v in [
            &mut self.bx,
            &mut self.by,
            &mut self.threat_pen,
            &mut self.key,
            &mut self.d2,
        ] {
            v.resize(len, 0);
        }
        // One fused copy loop per segment.
        for &(at, lo, n) in &self.segs[..self.nsegs] {
            let src = snap.ix[lo..lo + n]
                .iter()
                .zip(&snap.iy[lo..lo + n])
                .zip(&snap.pen[lo..lo + n]);
            for (((bx, by), tp), ((x, y), pen)) in self.bx[at..at + n]
                .iter_mut()
                .zip(&mut self.by[at..at + n])
                .zip(&mut self.threat_pen[at..at + n])
                .zip(src)
            {
                *bx = x.load(RLX);
                *by = y.load(RLX);
                *tp = pen.load(RLX);
            }
        }
        self.pad = (
            (cx as i64 * CELL - 20000) as i32,
            (cy as i64 * CELL - 20000) as i32,
        );
        for i in real..len {
            self.bx[i] = self.pad.0;
            self.by[i] = self.pad.1;
            self.threat_pen[i] = PEN;
        }
    }
}

/// Snapshot slot of real block entry `i`, given the block's row segments.
#[inline]
fn seg_slot(segs: &[(usize, usize, usize)], i: usize) -> usize {
    for &(at, lo, n) in segs {
        if i < at + n {
            return lo + (i - at);
        }
    }
    unreachable!("padding entry has no slot")
}

/// One pass over a padded candidate block for a goblin at `(x, y)` (in its centre cell): stores
/// `d2` and `key` (`d2 | pen` with `PENALTY`, else `d2`) of every entry, and returns the smallest
/// key and how many entries have `d2 < near2`. Branch-free.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn scan_block<const PENALTY: bool>(
    bx: &[i32],
    by: &[i32],
    pen: &[i32],
    key: &mut [i32],
    d2s: &mut [i32],
    x: i32,
    y: i32,
    near2: i32,
) -> (i32, u32) {
    let n = bx.len();
    let (by, pen, key, d2s) = (&by[..n], &pen[..n], &mut key[..n], &mut d2s[..n]);
    let mut best = i32::MAX;
    let mut near = 0u32;
    for i in 0..n {
        let dx = x - bx[i];
        let dy = y - by[i];
        let d2 = dx * dx + dy * dy;
        let k = if PENALTY { d2 | pen[i] } else { d2 };
        d2s[i] = d2;
        key[i] = k;
        best = best.min(k);
        near += (d2 < near2) as u32;
    }
    (best, near)
}

/// The first block index whose key is `best`, and how many keys equal `best`. Branch-free.
#[inline(always)]
fn find_key(key: &[i32], best: i32) -> (usize, u32) {
    let mut first = u32::MAX;
    let mut ties = 0u32;
    for (i, &k) in key.iter().enumerate() {
        let hit = k == best;
        first = first.min(if hit { i as u32 } else { u32::MAX });
        ties += hit as u32;
    }
    (first as usize, ties)
}

/// Updates snapshot slots `base .. base + out.len()` into `out` (one tick).
fn update_chunk(
    p: &Params,
    snap: &Snapshot,
    out: &mut Goblins,
    base: usize,
    scratch: &mut Scratch,
) {
    scratch.cell = usize::MAX;
    let w = snap.w;
    let rate = p.rate;
    let s = p.side;
    let near2i = p.near2 as i32;
    for j in 0..out.len() {
        let k = base + j;
        let id = snap.id[k].load(RLX);
        let x = snap.x[k].load(RLX);
        let y = snap.y[k].load(RLX);
        let aggressive = is_aggressive(id);

        // 1. Scan the neighbours: the 3x3 cells around the goblin's cell, loaded once per cell
        //    into a contiguous block shared by all goblins of that cell (slots are cell-sorted).
        let cell = (y / CELL) as usize * w + (x / CELL) as usize;
        if scratch.cell != cell {
            scratch.load(snap, (x / CELL) as usize, (y / CELL) as usize);
        }
        let sc = &mut *scratch;
        let (xi, yi) = (x as i32, y as i32);
        // The threat (non-aggressive g: aggressive neighbours only) or prey (aggressive g: any
        // neighbour other than itself) is the eligible candidate with the smallest (d2, id):
        // smallest `d2 + penalty` first (exact), then the smallest id among the ties.
        // Non-aggressive goblins search with the threat penalty (their own entry is penalised
        // too). Aggressive goblins search every entry, with their own moved to the padding
        // position for the scan. `self_near` is 1 when the goblin itself counts in `cnt`.
        let (best, cnt, self_near) = if aggressive {
            let me = sc.mid_at + (k - sc.mid_slot);
            let saved = (sc.bx[me], sc.by[me]);
            (sc.bx[me], sc.by[me]) = sc.pad;
            let (b, c) = scan_block::<false>(
                &sc.bx,
                &sc.by,
                &sc.threat_pen,
                &mut sc.key,
                &mut sc.d2,
                xi,
                yi,
                near2i,
            );
            (sc.bx[me], sc.by[me]) = saved;
            (b, c, 0)
        } else {
            let (b, c) = scan_block::<true>(
                &sc.bx,
                &sc.by,
                &sc.threat_pen,
                &mut sc.key,
                &mut sc.d2,
                xi,
                yi,
                near2i,
            );
            (b, c, 1)
        };
        // Padding entries have `d2 > R_VIEW2`, so they are never found.
        let found = best as i64 <= R_VIEW2;
        let segs = &sc.segs[..sc.nsegs];
        let (t_x, t_y) = if found {
            // The smallest id among the entries with the smallest key (ties are rare).
            let (first, ties) = find_key(&sc.key, best);
            let mut t = seg_slot(segs, first);
            if ties > 1 {
                for (i, &kk) in sc.key.iter().enumerate().skip(first + 1) {
                    if kk == best {
                        let m = seg_slot(segs, i);
                        if snap.id[m].load(RLX) < snap.id[t].load(RLX) {
                            t = m;
                        }
                    }
                }
            }
            (snap.x[t].load(RLX), snap.y[t].load(RLX))
        } else {
            (0, 0)
        };
        let near = &mut sc.near;
        near.clear();
        if cnt > self_near {
            for (i, &d2) in sc.d2.iter().enumerate() {
                if d2 < near2i {
                    let m = seg_slot(segs, i);
                    if m != k {
                        near.push(m as Near);
                    }
                }
            }
        }

        // Separation.
        let mut sep_x = 0i64;
        let mut sep_y = 0i64;
        for &m in near.iter() {
            let m = m as usize;
            let dx = x - snap.x[m].load(RLX);
            let dy = y - snap.y[m].load(RLX);
            let d2 = dx * dx + dy * dy;
            if d2 == 0 {
                sep_x += if id < snap.id[m].load(RLX) {
                    -SPEED
                } else {
                    SPEED
                };
            } else if d2 < R_SEP2 {
                let d = (d2 as f64).sqrt();
                let f = 3072.0 * (1536.0 - d) / 1536.0;
                sep_x += (dx as f64 * f / d) as i64;
                sep_y += (dy as f64 * f / d) as i64;
            }
        }

        // 2. State machine.
        let mut st = snap.state[k].load(RLX);
        let mut timer = snap.timer[k].load(RLX);
        let mut qx = snap.qx[k].load(RLX);
        let mut qy = snap.qy[k].load(RLX);
        let mut r = snap.r[k].load(RLX);
        let (want_x, want_y) = if found && !aggressive {
            st = FLEE;
            let (dx, dy) = (x - t_x, y - t_y);
            if dx == 0 && dy == 0 {
                (SPEED, 0)
            } else {
                toward(dx, dy)
            }
        } else if found {
            st = CHASE;
            toward(t_x - x, t_y - y)
        } else if st == FLEE || st == CHASE {
            st = IDLE;
            r = next(r);
            timer = rate / 2 + r as i64 % rate;
            (0, 0)
        } else {
            timer -= 1;
            if st == WANDER {
                let (dx, dy) = (qx - x, qy - y);
                if dx * dx + dy * dy <= 512 * 512 {
                    timer = 0;
                }
            }
            if timer <= 0 {
                if st == IDLE {
                    st = WANDER;
                    r = next(r);
                    qx = clamp(x + r as i64 % 40960 - 20480, s);
                    r = next(r);
                    qy = clamp(y + r as i64 % 40960 - 20480, s);
                    r = next(r);
                    timer = 2 * rate + r as i64 % (4 * rate);
                } else {
                    st = IDLE;
                    r = next(r);
                    timer = rate + r as i64 % (2 * rate);
                }
            }
            if st == WANDER {
                toward(qx - x, qy - y)
            } else {
                (0, 0)
            }
        };

        // 3. Steer.
        let mut vx = want_x + sep_x;
        let mut vy = want_y + sep_y;
        let v2 = vx * vx + vy * vy;
        if v2 > SPEED2 {
            let d = (v2 as f64).sqrt();
            vx = ((vx * SPEED) as f64 / d) as i64;
            vy = ((vy * SPEED) as f64 / d) as i64;
        }

        // 4. Move and clamp.
        let px = clamp(x + vx / rate, s);
        let py = clamp(y + vy / rate, s);

        // 5. Resolve overlaps against the neighbours' previous positions.
        let mut ox = 0i64;
        let mut oy = 0i64;
        for &m in near.iter() {
            let m = m as usize;
            let dx = px - snap.x[m].load(RLX);
            let dy = py - snap.y[m].load(RLX);
            let d2 = dx * dx + dy * dy;
            if d2 == 0 {
                ox += if id < snap.id[m].load(RLX) { -512 } else { 512 };
            } else if d2 < CONTACT2 {
                let d = (d2 as f64).sqrt();
                let kk = (1024.0 - d) / 2.0 / d;
                ox += (dx as f64 * kk) as i64;
                oy += (dy as f64 * kk) as i64;
            }
        }

        // 6. Heading.
        let mut heading = snap.heading[k].load(RLX);
        if (vx != snap.vx[k].load(RLX) || vy != snap.vy[k].load(RLX)) && (vx != 0 || vy != 0) {
            let a = (vy as f64).atan2(vx as f64) * 32768.0 / PI;
            heading = (a as i64).rem_euclid(65536);
        }

        out.id[j] = id;
        out.x[j] = clamp(px + ox, s);
        out.y[j] = clamp(py + oy, s);
        out.vx[j] = vx;
        out.vy[j] = vy;
        out.heading[j] = heading;
        out.state[j] = st;
        out.timer[j] = timer;
        out.qx[j] = qx;
        out.qy[j] = qy;
        out.r[j] = r;
    }
}

/// Contiguous slot ranges `[start, end)` for `k` chunks of `n` goblins.
fn chunk_ranges(n: usize, k: usize) -> Vec<(usize, usize)> {
    let size = n.div_ceil(k);
    (0..k)
        .map(|t| ((t * size).min(n), ((t + 1) * size).min(n)))
        .collect()
}

/// Single-threaded simulation.
pub struct Sim {
    p: Params,
    snap: Snapshot,
    live: Goblins,
    keys: Vec<u32>,
    hist: Vec<u32>,
    running: Vec<u32>,
    scratch: Scratch,
}

impl Sim {
    pub fn new(p: Params) -> Sim {
        Sim::with_state(p, Goblins::placed(&p, 1, p.entities))
    }

    /// Starts from a given state (any slot order; ids must be exactly `1..=N`, positions in
    /// `[0, S]`).
    pub fn with_state(p: Params, live: Goblins) -> Sim {
        live.validate(&p);
        let snap = Snapshot::new(&p);
        let cells = snap.cells();
        Sim {
            p,
            snap,
            live,
            keys: Vec::with_capacity(p.entities),
            hist: vec![0; cells],
            running: vec![0; cells],
            scratch: Scratch::new(),
        }
    }

    pub fn tick(&mut self) {
        // Grid rebuild: counting sort of the live state into the snapshot.
        count_chunk(self.snap.w, &self.live, &mut self.keys, &mut self.hist);
        publish_starts(&self.snap, &self.hist, &mut self.running);
        to_cursors(&mut self.hist, &mut self.running);
        scatter_chunk(&self.snap, &self.live, &self.keys, &mut self.hist);
        // Update every slot from the snapshot.
        update_chunk(&self.p, &self.snap, &mut self.live, 0, &mut self.scratch);
    }

    /// `[id, x, y, vx, vy, heading, state, timer, qx, qy, r]` of every goblin, in id order.
    pub fn records(&self) -> Vec<Record> {
        records_of(self.p.entities, std::iter::once(&self.live))
    }

    pub fn checksum(&self) -> u64 {
        checksum_records(&self.records())
    }
}

/// Work of one fork/join phase of a threaded tick.
const PHASE_COUNT: u8 = 0;
const PHASE_SCATTER: u8 = 1;
const PHASE_UPDATE: u8 = 2;

struct Shared {
    p: Params,
    snap: Snapshot,
    /// Per thread `t`: its live chunk (slots `ranges[t]`) and its cell histogram / scatter
    /// cursors. Each is only touched by its thread, except by the driver between phases.
    lives: Vec<Mutex<Goblins>>,
    hists: Vec<Mutex<Vec<u32>>>,
    ranges: Vec<(usize, usize)>,
    /// Bumped by the driver to start a phase (`phase`) on every thread.
    epoch: Padded<AtomicU64>,
    phase: AtomicU8,
    /// Workers that finished the current phase.
    done: Padded<AtomicUsize>,
    stop: AtomicBool,
    /// The thread that drives the ticks (woken by the last worker to finish a phase).
    driver: std::thread::Thread,
}

/// A thread's private buffers.
struct Local {
    keys: Vec<u32>,
    scratch: Scratch,
}

impl Local {
    fn new(n: usize) -> Local {
        Local {
            keys: Vec::with_capacity(n),
            scratch: Scratch::new(),
        }
    }
}

impl Shared {
    /// Thread `t`'s part of a phase.
    fn run(&self, phase: u8, t: usize, local: &mut Local) {
        let mut live = self.lives[t].lock().unwrap();
        match phase {
            PHASE_COUNT => {
                let mut hist = self.hists[t].lock().unwrap();
                count_chunk(self.snap.w, &live, &mut local.keys, &mut hist);
            }
            PHASE_SCATTER => {
                let mut cursors = self.hists[t].lock().unwrap();
                scatter_chunk(&self.snap, &live, &local.keys, &mut cursors);
            }
            _ => {
                let base = self.ranges[t].0;
                update_chunk(&self.p, &self.snap, &mut live, base, &mut local.scratch);
            }
        }
    }
}

/// Busy-wait iterations before a waiting thread parks (tens of microseconds).
const SPINS: u32 = 2000;

/// Waits until `ready()`: spins for a while, then parks (woken by `unpark` or, as a safety net,
/// after `timeout`).
#[inline]
fn wait_until(ready: impl Fn() -> bool, timeout: std::time::Duration) {
    let mut spins = 0;
    while !ready() {
        if spins < SPINS {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::park_timeout(timeout);
        }
    }
}

/// Keeps a hot atomic on its own cache lines.
#[repr(align(128))]
struct Padded<T>(T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Multi-threaded simulation: `threads - 1` persistent workers plus the driving thread, each
/// owning a contiguous range of slots. A tick is three fork/join phases on all threads (count
/// the own chunk's cells; scatter the own chunk into the shared snapshot; update the own range
/// from the snapshot), with the driver turning the per-thread histograms into cell starts and
/// scatter cursors between the first two. Workers spin briefly, then park, between phases.
pub struct ThreadedSim {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    local: Local,
    total: Vec<u32>,
    running: Vec<u32>,
}

impl ThreadedSim {
    pub fn new(p: Params, threads: usize) -> ThreadedSim {
        ThreadedSim::with_state(p, threads, Goblins::placed(&p, 1, p.entities))
    }

    /// Starts from a given state (see `Sim::with_state`).
    pub fn with_state(p: Params, threads: usize, live: Goblins) -> ThreadedSim {
        assert!(threads >= 1);
        live.validate(&p);
        let snap = Snapshot::new(&p);
        let cells = snap.cells();
        let ranges = chunk_ranges(p.entities, threads);
        let shared = Arc::new(Shared {
            p,
            snap,
            lives: ranges
                .iter()
                .map(|&(a, b)| Mutex::new(live.range(a, b)))
                .collect(),
            hists: (0..threads).map(|_| Mutex::new(vec![0; cells])).collect(),
            ranges,
            epoch: Padded(AtomicU64::new(0)),
            phase: AtomicU8::new(PHASE_COUNT),
            done: Padded(AtomicUsize::new(0)),
            stop: AtomicBool::new(false),
            driver: std::thread::current(),
        });
        let others = threads - 1;
        let workers = (1..threads)
            .map(|t| {
                let sh = Arc::clone(&shared);
                let n = sh.ranges[t].1 - sh.ranges[t].0;
                std::thread::spawn(move || {
                    let mut local = Local::new(n);
                    let mut seen = 0u64;
                    let idle = std::time::Duration::from_millis(1);
                    loop {
                        wait_until(|| sh.epoch.load(Ordering::Acquire) != seen, idle);
                        seen = sh.epoch.load(Ordering::Acquire);
                        if sh.stop.load(Ordering::Acquire) {
                            break;
                        }
                        sh.run(sh.phase.load(Ordering::Acquire), t, &mut local);
                        if sh.done.fetch_add(1, Ordering::AcqRel) + 1 == others {
                            sh.driver.unpark();
                        }
                    }
                })
            })
            .collect();
        let n0 = shared.ranges[0].1 - shared.ranges[0].0;
        ThreadedSim {
            shared,
            workers,
            local: Local::new(n0),
            total: vec![0; cells],
            running: vec![0; cells],
        }
    }

    /// Runs `phase` on every thread (the driver does chunk 0) and waits for all of them.
    fn fork_join(&mut self, phase: u8) {
        let sh = &*self.shared;
        sh.phase.store(phase, Ordering::Release);
        sh.epoch.fetch_add(1, Ordering::AcqRel);
        for w in &self.workers {
            w.thread().unpark();
        }
        sh.run(phase, 0, &mut self.local);
        let others = self.workers.len();
        let poll = std::time::Duration::from_micros(200);
        wait_until(
            || {
                let ready = sh.done.load(Ordering::Acquire) == others;
                if !ready && self.workers.iter().any(|w| w.is_finished()) {
                    panic!("a worker thread died");
                }
                ready
            },
            poll,
        );
        sh.done.store(0, Ordering::Release);
    }

    pub fn tick(&mut self) {
        // Grid rebuild: parallel counting sort of the live chunks into the snapshot.
        self.fork_join(PHASE_COUNT);
        {
            let sh = &*self.shared;
            self.total.fill(0);
            for h in &sh.hists {
                for (t, &c) in self.total.iter_mut().zip(h.lock().unwrap().iter()) {
                    *t += c;
                }
            }
            publish_starts(&sh.snap, &self.total, &mut self.running);
            for h in &sh.hists {
                to_cursors(&mut h.lock().unwrap(), &mut self.running);
            }
        }
        self.fork_join(PHASE_SCATTER);
        // Update every range from the snapshot.
        self.fork_join(PHASE_UPDATE);
    }

    pub fn records(&self) -> Vec<Record> {
        let guards: Vec<_> = self
            .shared
            .lives
            .iter()
            .map(|c| c.lock().unwrap())
            .collect();
        records_of(self.shared.p.entities, guards.iter().map(|g| &**g))
    }

    pub fn checksum(&self) -> u64 {
        checksum_records(&self.records())
    }
}

impl Drop for ThreadedSim {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        for w in &self.workers {
            w.thread().unpark();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// Either engine behind one interface.
#[allow(clippy::large_enum_variant)] // one per process
pub enum Engine {
    Single(Sim),
    Threaded(ThreadedSim),
}

impl Engine {
    pub fn new(p: Params, threads: usize) -> Engine {
        Engine::with_state(p, threads, Goblins::placed(&p, 1, p.entities))
    }

    /// Starts from a given state (see `Sim::with_state`).
    pub fn with_state(p: Params, threads: usize, live: Goblins) -> Engine {
        if threads <= 1 {
            Engine::Single(Sim::with_state(p, live))
        } else {
            Engine::Threaded(ThreadedSim::with_state(p, threads, live))
        }
    }

    #[inline]
    pub fn tick(&mut self) {
        match self {
            Engine::Single(s) => s.tick(),
            Engine::Threaded(s) => s.tick(),
        }
    }

    pub fn records(&self) -> Vec<Record> {
        match self {
            Engine::Single(s) => s.records(),
            Engine::Threaded(s) => s.records(),
        }
    }

    pub fn checksum(&self) -> u64 {
        checksum_records(&self.records())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xorshift_known_values() {
        // x = 1: x ^= x << 13 -> 0x2001; x ^= x >> 17 -> 0x2001; x ^= x << 5 -> 0x42021.
        assert_eq!(next(1), 270_369);
        assert_eq!(next(270_369), 67_634_689);
        assert_eq!(next(67_634_689), 2_647_435_461);
        assert_eq!(next(0xFFFF_FFFF), 253_983);
        // A chain of draws from 1.
        let mut x = 1u32;
        for _ in 0..5 {
            x = next(x);
        }
        assert_eq!(x, 2_398_689_233);
    }

    #[test]
    fn seed_for_known_values() {
        assert_eq!(seed_for(0, 1), 3_298_878_556);
        assert_eq!(seed_for(0, 2), 3_127_061_551);
        assert_eq!(seed_for(1, 1), 39_170_614);
        assert_eq!(seed_for(42, 7), 2_369_363_417);
        // h == 0 after mixing only for a zero input word, i.e. (seed, id) = (0, 0).
        assert_eq!(seed_for(0, 0), 0x6D2B_79F5);
    }

    #[test]
    fn world_side_matches_doc() {
        // 10,000 goblins give a side of 707 m.
        assert_eq!(world_side(10_000) / 1024, 707);
        assert_eq!(world_side(10_000), 724_077);
    }

    #[test]
    fn single_and_threaded_agree() {
        let p = Params::new(1000, 30, 0);
        let mut a = Engine::new(p, 1);
        let mut b = Engine::new(p, 3);
        for _ in 0..50 {
            a.tick();
            b.tick();
        }
        assert_eq!(a.records(), b.records());
        assert_eq!(a.checksum(), b.checksum());
    }

    #[test]
    fn threaded_with_more_threads_than_goblins() {
        let p = Params::new(3, 30, 5);
        let mut a = Engine::new(p, 1);
        let mut b = Engine::new(p, 5);
        for _ in 0..20 {
            a.tick();
            b.tick();
        }
        assert_eq!(a.checksum(), b.checksum());
    }

    #[test]
    fn positions_in_bounds_and_count_preserved() {
        for (n, rate, threads) in [(1000, 30, 1), (400, 1, 2), (50, 10, 1)] {
            let p = Params::new(n, rate, 3);
            let mut e = Engine::new(p, threads);
            for _ in 0..60 {
                e.tick();
                let recs = e.records(); // asserts ids are exactly 1..=n
                assert_eq!(recs.len(), n);
                for (i, rec) in recs.iter().enumerate() {
                    assert_eq!(rec[0], i as i64 + 1);
                    assert!((0..=p.side).contains(&rec[1]), "x out of bounds: {rec:?}");
                    assert!((0..=p.side).contains(&rec[2]), "y out of bounds: {rec:?}");
                    assert!((0..=3).contains(&rec[6]));
                    assert!((0..65536).contains(&rec[5]));
                }
            }
        }
    }

    #[test]
    fn placement_matches_definition() {
        let p = Params::new(10, 30, 0);
        let e = Engine::new(p, 1);
        let recs = e.records();
        let mut r = seed_for(0, 4);
        r = next(r);
        let x = r as i64 % p.side;
        r = next(r);
        let y = r as i64 % p.side;
        r = next(r);
        let timer = 30 + r as i64 % 60;
        assert_eq!(recs[3], [4, x, y, 0, 0, 0, 0, timer, x, y, r as i64]);
    }

    /// A literal, all-pairs transcription of one tick of docs/goblins-scenario.md, used to
    /// check the grid implementation.
    fn naive_tick(recs: &[Record], s: i64, rate: i64) -> Vec<Record> {
        let cl = |v: i64| v.max(0).min(s);
        let toward = |dx: i64, dy: i64| -> (i64, i64) {
            if dx == 0 && dy == 0 {
                (0, 0)
            } else {
                let d = ((dx * dx + dy * dy) as f64).sqrt();
                (
                    ((dx * 3072) as f64 / d) as i64,
                    ((dy * 3072) as f64 / d) as i64,
                )
            }
        };
        let mut out = Vec::with_capacity(recs.len());
        for g in recs {
            let [id, x, y, pvx, pvy, mut heading, st0, mut timer, mut qx, mut qy, r0] = *g;
            let mut st = st0 as u8;
            let mut r = r0 as u32;
            let aggressive = id % 20 == 0;
            let mut nbrs = Vec::new();
            let mut target: Option<(i64, i64, i64, i64)> = None; // (d2, id, x, y)
            let (mut sep_x, mut sep_y) = (0i64, 0i64);
            for n in recs {
                if n[0] == id {
                    continue;
                }
                let (dx, dy) = (x - n[1], y - n[2]);
                let d2 = dx * dx + dy * dy;
                if d2 > 12288 * 12288 {
                    continue;
                }
                nbrs.push(*n);
                if (aggressive || n[0] % 20 == 0) && target.is_none_or(|t| (d2, n[0]) < (t.0, t.1))
                {
                    target = Some((d2, n[0], n[1], n[2]));
                }
                if d2 == 0 {
                    sep_x += if id < n[0] { -3072 } else { 3072 };
                } else if d2 < 1536 * 1536 {
                    let d = (d2 as f64).sqrt();
                    let f = 3072.0 * (1536.0 - d) / 1536.0;
                    sep_x += ((x - n[1]) as f64 * f / d) as i64;
                    sep_y += ((y - n[2]) as f64 * f / d) as i64;
                }
            }
            let want = match target {
                Some((_, _, tx, ty)) if !aggressive => {
                    st = FLEE;
                    if x == tx && y == ty {
                        (3072, 0)
                    } else {
                        toward(x - tx, y - ty)
                    }
                }
                Some((_, _, tx, ty)) => {
                    st = CHASE;
                    toward(tx - x, ty - y)
                }
                None if st == FLEE || st == CHASE => {
                    st = IDLE;
                    r = next(r);
                    timer = rate / 2 + r as i64 % rate;
                    (0, 0)
                }
                None => {
                    timer -= 1;
                    if st == WANDER && (qx - x).pow(2) + (qy - y).pow(2) <= 512 * 512 {
                        timer = 0;
                    }
                    if timer <= 0 {
                        if st == IDLE {
                            st = WANDER;
                            r = next(r);
                            qx = cl(x + r as i64 % 40960 - 20480);
                            r = next(r);
                            qy = cl(y + r as i64 % 40960 - 20480);
                            r = next(r);
                            timer = 2 * rate + r as i64 % (4 * rate);
                        } else {
                            st = IDLE;
                            r = next(r);
                            timer = rate + r as i64 % (2 * rate);
                        }
                    }
                    if st == WANDER {
                        toward(qx - x, qy - y)
                    } else {
                        (0, 0)
                    }
                }
            };
            let (mut vx, mut vy) = (want.0 + sep_x, want.1 + sep_y);
            if vx * vx + vy * vy > 3072 * 3072 {
                let d = ((vx * vx + vy * vy) as f64).sqrt();
                vx = ((vx * 3072) as f64 / d) as i64;
                vy = ((vy * 3072) as f64 / d) as i64;
            }
            let (px, py) = (cl(x + vx / rate), cl(y + vy / rate));
            let (mut ox, mut oy) = (0i64, 0i64);
            for n in &nbrs {
                let (dx, dy) = (px - n[1], py - n[2]);
                let d2 = dx * dx + dy * dy;
                if d2 == 0 {
                    ox += if id < n[0] { -512 } else { 512 };
                } else if d2 < 1024 * 1024 {
                    let d = (d2 as f64).sqrt();
                    let k = (1024.0 - d) / 2.0 / d;
                    ox += (dx as f64 * k) as i64;
                    oy += (dy as f64 * k) as i64;
                }
            }
            if (vx, vy) != (pvx, pvy) && (vx, vy) != (0, 0) {
                heading = (((vy as f64).atan2(vx as f64) * 32768.0 / PI) as i64).rem_euclid(65536);
            }
            out.push([
                id,
                cl(px + ox),
                cl(py + oy),
                vx,
                vy,
                heading,
                st as i64,
                timer,
                qx,
                qy,
                r as i64,
            ]);
        }
        out
    }

    fn check_against_naive(p: Params, start: Vec<Record>, ticks: usize) {
        let mut want = start.clone();
        let mut single = Engine::with_state(p, 1, Goblins::from_records(&start));
        let mut threaded = Engine::with_state(p, 3, Goblins::from_records(&start));
        for t in 0..ticks {
            want = naive_tick(&want, p.side, p.rate);
            single.tick();
            threaded.tick();
            assert_eq!(
                single.records(),
                want,
                "single-threaded diverged at tick {}",
                t + 1
            );
            assert_eq!(
                threaded.records(),
                want,
                "threaded diverged at tick {}",
                t + 1
            );
        }
    }

    #[test]
    fn matches_naive_reference_from_placement() {
        for (n, rate, seed) in [(400, 30, 2), (150, 1, 9)] {
            let p = Params::new(n, rate, seed);
            let start = Engine::new(p, 1).records();
            check_against_naive(p, start, 60);
        }
    }

    #[test]
    fn matches_naive_reference_when_crowded() {
        // Everyone packed into a 6 m square in a corner on a 0.25 m lattice: many exact overlaps,
        // equal distances, clamping at the walls, all states present.
        for rate in [1, 7, 30] {
            let n = 200;
            let p = Params::new(n, rate, 0);
            let mut r = 12345u32;
            let mut draw = |m: u32| {
                r = next(r);
                r % m
            };
            let start: Vec<Record> = (1..=n as i64)
                .map(|id| {
                    let x = draw(25) as i64 * 256;
                    let y = draw(25) as i64 * 256;
                    let st = draw(4) as i64;
                    let timer = 1 + draw(60) as i64;
                    let (qx, qy) = (draw(p.side as u32) as i64, draw(p.side as u32) as i64);
                    let (vx, vy) = (draw(6145) as i64 - 3072, draw(6145) as i64 - 3072);
                    [
                        id,
                        x,
                        y,
                        vx,
                        vy,
                        draw(65536) as i64,
                        st,
                        timer,
                        qx,
                        qy,
                        1 + draw(u32::MAX) as i64,
                    ]
                })
                .collect();
            check_against_naive(p, start, 40);
        }
    }

    #[test]
    fn threat_tie_broken_by_smallest_id() {
        // Goblin 1 sits exactly between aggressive goblins 20 and 40 (equal d2): the threat is
        // goblin 20 (smaller id), so goblin 1 flees in -x. Separation from the two cancels out.
        let p = Params::new(40, 30, 0);
        let mut start: Vec<Record> = (1..=40)
            .map(|id| [id, id * 1000, 44_000, 0, 0, 0, 0, 50, id * 1000, 44_000, 1])
            .collect();
        start[0] = [
            1,
            20_000,
            20_000,
            0,
            0,
            0,
            IDLE as i64,
            50,
            20_000,
            20_000,
            7,
        ];
        start[19] = [
            20,
            20_100,
            20_000,
            0,
            0,
            0,
            IDLE as i64,
            50,
            20_100,
            20_000,
            7,
        ];
        start[39] = [
            40,
            19_900,
            20_000,
            0,
            0,
            0,
            IDLE as i64,
            50,
            19_900,
            20_000,
            7,
        ];
        let mut e = Engine::with_state(p, 1, Goblins::from_records(&start));
        e.tick();
        let g1 = e.records()[0];
        assert_eq!(g1[6], FLEE as i64);
        assert_eq!((g1[3], g1[4]), (-3072, 0));
        assert_eq!(g1[5], 32768); // heading of -x
        assert_eq!(naive_tick(&start, p.side, p.rate), e.records());
    }

    #[test]
    fn near_radius_is_inside_view() {
        for rate in 1..200 {
            assert!(near_radius(rate) < R_VIEW);
            assert!(near_radius(rate) >= R_SEP);
        }
    }
}

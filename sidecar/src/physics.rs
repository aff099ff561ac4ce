//! The physics step of docs/sidecar.md ("A physics step"), in `i64` fixed-point integers.
//!
//! Every operation is the specification's: integer products, division truncating toward zero
//! (Rust's `/` on `i64`, Elixir's `div/2`) and [`isqrt`], the exact floor of a square root. The
//! ranges of [`check`] and [`World::new`] keep every product below 2^63 (the largest is
//! `2^21 · 2^21 · 2^16 = 2^58`), so no operation here can overflow on checked input.
//!
//! The contacts are one Jacobi step: each body sums its own terms, computed from the integrated
//! positions only, so the bodies are processed in parallel (rayon, in the current thread pool)
//! and the result does not depend on the number of threads.

use rayon::prelude::*;

/// The largest coordinate (and world size): 2^40 units.
pub const MAX_COORD: i64 = 1 << 40;
/// The largest radius (bodies and circle obstacles): 2^20 units.
pub const MAX_RADIUS: i64 = 1 << 20;
/// The largest mass.
pub const MAX_MASS: i64 = 65_535;
/// The largest tick rate.
pub const MAX_TICK_RATE: i64 = 1_000;

/// A body: a circle with a mass, moving at `(vx, vy)` units per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Body {
    pub id: i64,
    pub x: i64,
    pub y: i64,
    pub vx: i64,
    pub vy: i64,
    pub r: i64,
    pub m: i64,
}

/// An axis-aligned box obstacle, `x0 ≤ x1`, `y0 ≤ y1` (closed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Rect {
    pub x0: i64,
    pub y0: i64,
    pub x1: i64,
    pub y1: i64,
}

/// A circle obstacle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Circle {
    pub cx: i64,
    pub cy: i64,
    pub r: i64,
}

/// The floor of the square root of `n ≥ 0`, exact for every `i64` (a floating-point estimate,
/// then corrected in 128-bit integers).
///
/// # Panics
///
/// When `n < 0`.
pub fn isqrt(n: i64) -> i64 {
    assert!(n >= 0, "isqrt of a negative number: {n}");
    let n = n as u128;
    let mut s = (n as f64).sqrt() as u128;
    while s * s > n {
        s -= 1;
    }
    while (s + 1) * (s + 1) <= n {
        s += 1;
    }
    s as i64
}

fn coord_ok(v: i64) -> bool {
    (0..=MAX_COORD).contains(&v)
}

fn radius_ok(r: i64) -> bool {
    (1..=MAX_RADIUS).contains(&r)
}

/// Checks bodies and a tick rate against the ranges of docs/sidecar.md (ids distinct and
/// positive), with the messages of `Overworld.Physics.check/2`.
pub fn check(bodies: &[Body], tick_rate: i64) -> Result<(), String> {
    if !(1..=MAX_TICK_RATE).contains(&tick_rate) {
        return Err(format!("tick rate {tick_rate} outside 1..{MAX_TICK_RATE}"));
    }
    for b in bodies {
        let id = b.id;
        if id <= 0 {
            return Err(format!("body {id}: the id must be a positive integer"));
        }
        if !(coord_ok(b.x) && coord_ok(b.y)) {
            return Err(format!("body {id}: position outside 0..2^40"));
        }
        if !((-MAX_COORD..=MAX_COORD).contains(&b.vx) && (-MAX_COORD..=MAX_COORD).contains(&b.vy)) {
            return Err(format!("body {id}: velocity outside -2^40..2^40"));
        }
        if !radius_ok(b.r) {
            return Err(format!("body {id}: radius {} outside 1..{MAX_RADIUS}", b.r));
        }
        if !(1..=MAX_MASS).contains(&b.m) {
            return Err(format!("body {id}: mass {} outside 1..{MAX_MASS}", b.m));
        }
    }
    let mut ids: Vec<i64> = bodies.iter().map(|b| b.id).collect();
    ids.sort_unstable();
    if ids.windows(2).any(|w| w[0] == w[1]) {
        return Err("two bodies have the same id".to_string());
    }
    Ok(())
}

/// The world: its size and static obstacles, with an index of the obstacles.
#[derive(Clone, Debug)]
pub struct World {
    pub width: i64,
    pub height: i64,
    pub boxes: Vec<Rect>,
    pub circles: Vec<Circle>,
    index: ObstacleIndex,
}

impl World {
    /// A world of `width` × `height` units (each in 1..2^40) with its obstacles, checked against
    /// the ranges of docs/sidecar.md (as `Overworld.Physics.world/3`).
    pub fn new(
        width: i64,
        height: i64,
        boxes: Vec<Rect>,
        circles: Vec<Circle>,
    ) -> Result<World, String> {
        World::check(width, height, &boxes, &circles)?;
        let index = ObstacleIndex::new(&boxes, &circles);
        Ok(World {
            width,
            height,
            boxes,
            circles,
            index,
        })
    }

    /// Checks a world's size and obstacles against the ranges of docs/sidecar.md.
    pub fn check(
        width: i64,
        height: i64,
        boxes: &[Rect],
        circles: &[Circle],
    ) -> Result<(), String> {
        if !(1..=MAX_COORD).contains(&width) || !(1..=MAX_COORD).contains(&height) {
            return Err("the world's size must be in 1..2^40 units".to_string());
        }
        for b in boxes {
            if !(coord_ok(b.x0) && coord_ok(b.y0) && coord_ok(b.x1) && coord_ok(b.y1))
                || b.x0 > b.x1
                || b.y0 > b.y1
            {
                return Err(format!(
                    "invalid box ({}, {}, {}, {}): coordinates in 0..2^40, x0 <= x1, y0 <= y1",
                    b.x0, b.y0, b.x1, b.y1
                ));
            }
        }
        for c in circles {
            if !(coord_ok(c.cx) && coord_ok(c.cy) && radius_ok(c.r)) {
                return Err(format!(
                    "invalid circle ({}, {}, {}): centre in 0..2^40, radius in 1..2^20",
                    c.cx, c.cy, c.r
                ));
            }
        }
        Ok(())
    }

    /// The obstacles (indices, boxes first) whose bounding box meets the closed square `q`, in
    /// the order of the list: exactly the set of step 4, the index only finds them sooner.
    pub fn near(&self, q: Rect) -> Vec<usize> {
        let ix = &self.index;
        let total = ix.bounds.len();
        let meets = |i: usize| {
            let b = ix.bounds[i];
            b.x0 <= q.x1 && b.x1 >= q.x0 && b.y0 <= q.y1 && b.y1 >= q.y0
        };
        let gx0 = q.x0.div_euclid(ix.cell);
        let gx1 = q.x1.div_euclid(ix.cell);
        // A square wider than the obstacles are many: the list itself is shorter.
        if gx1 - gx0 >= total as i64 {
            return (0..total).filter(|&i| meets(i)).collect();
        }
        let gy0 = q.y0.div_euclid(ix.cell);
        let gy1 = q.y1.div_euclid(ix.cell);
        let mut found: Vec<usize> = ix.large.clone();
        for gx in gx0..=gx1 {
            let lo = ix.entries.partition_point(|e| (e.0, e.1) < (gx, gy0));
            let hi = ix.entries.partition_point(|e| (e.0, e.1) <= (gx, gy1));
            found.extend(ix.entries[lo..hi].iter().map(|e| e.2 as usize));
        }
        found.sort_unstable();
        found.dedup();
        found.retain(|&i| meets(i));
        found
    }
}

/// The obstacles on a grid by their bounding boxes: `(gx, gy, obstacle)` sorted, so a column of
/// cells is one contiguous run. An obstacle over more than `MAX_CELLS` cells is in `large`,
/// looked at by every query.
#[derive(Clone, Debug)]
struct ObstacleIndex {
    /// The bounding box of each obstacle (the boxes first, then the circles).
    bounds: Vec<Rect>,
    cell: i64,
    entries: Vec<(i64, i64, u32)>,
    large: Vec<usize>,
}

impl ObstacleIndex {
    const MAX_CELLS: i64 = 64;

    fn new(boxes: &[Rect], circles: &[Circle]) -> ObstacleIndex {
        let bounds: Vec<Rect> = boxes
            .iter()
            .copied()
            .chain(circles.iter().map(|c| Rect {
                x0: c.cx - c.r,
                y0: c.cy - c.r,
                x1: c.cx + c.r,
                y1: c.cy + c.r,
            }))
            .collect();
        // About the obstacles' size (at least 4 m), so each sits in a few cells.
        let cell = if bounds.is_empty() {
            4096
        } else {
            let sum: i64 = bounds.iter().map(|b| (b.x1 - b.x0).max(b.y1 - b.y0)).sum();
            (sum / bounds.len() as i64 + 1).max(4096)
        };
        let mut entries = Vec::new();
        let mut large = Vec::new();
        for (i, b) in bounds.iter().enumerate() {
            let (gx0, gx1) = (b.x0.div_euclid(cell), b.x1.div_euclid(cell));
            let (gy0, gy1) = (b.y0.div_euclid(cell), b.y1.div_euclid(cell));
            if (gx1 - gx0 + 1) * (gy1 - gy0 + 1) > Self::MAX_CELLS {
                large.push(i);
                continue;
            }
            for gx in gx0..=gx1 {
                for gy in gy0..=gy1 {
                    entries.push((gx, gy, i as u32));
                }
            }
        }
        entries.sort_unstable();
        ObstacleIndex {
            bounds,
            cell,
            entries,
            large,
        }
    }
}

/// A body after step 1, where the contacts look at it.
#[derive(Clone, Copy, Debug)]
struct Moved {
    id: i64,
    px: i64,
    py: i64,
    r: i64,
    m: i64,
}

/// One step (docs/sidecar.md, "A physics step"): each body's new `(id, x, y)`, in the order of
/// `bodies`. The input must be within the ranges of [`check`] (not checked here). Runs in the
/// current rayon thread pool; the result does not depend on its size.
pub fn step(bodies: &[Body], world: &World, tick_rate: i64) -> Vec<(i64, i64, i64)> {
    if bodies.is_empty() {
        return Vec::new();
    }
    // 1. Integrate.
    let moved: Vec<Moved> = bodies
        .iter()
        .map(|b| Moved {
            id: b.id,
            px: b.x + b.vx / tick_rate,
            py: b.y + b.vy / tick_rate,
            r: b.r,
            m: b.m,
        })
        .collect();
    // Cells twice the largest radius: two bodies that touch (|dx| < r_i + r_j) are in the same
    // or adjacent cells. Sorted by (gx, gy), a column of three cells is one run.
    let cell = 2 * moved.iter().map(|b| b.r).max().unwrap_or(1).max(1);
    let mut grid: Vec<(i64, i64, u32)> = moved
        .iter()
        .enumerate()
        .map(|(i, b)| (b.px.div_euclid(cell), b.py.div_euclid(cell), i as u32))
        .collect();
    grid.par_sort_unstable();

    moved
        .par_iter()
        .map(|b| {
            // 2. Contacts: the sum of this body's terms.
            let gx = b.px.div_euclid(cell);
            let gy = b.py.div_euclid(cell);
            let (mut cx, mut cy) = (0i64, 0i64);
            for ox in gx - 1..=gx + 1 {
                let lo = grid.partition_point(|e| (e.0, e.1) < (ox, gy - 1));
                let hi = grid.partition_point(|e| (e.0, e.1) <= (ox, gy + 1));
                for e in &grid[lo..hi] {
                    let (tx, ty) = term(b, &moved[e.2 as usize]);
                    cx += tx;
                    cy += ty;
                }
            }
            // 3. Apply; 4. obstacles; 5. the world's edges.
            let (qx, qy) = obstacles(b.px + cx, b.py + cy, b.r, world);
            (
                b.id,
                edge(qx, b.r, world.width),
                edge(qy, b.r, world.height),
            )
        })
        .collect()
}

/// Body `i`'s contact term with body `j` (step 2): `(0, 0)` for no contact or `i` itself.
#[inline]
fn term(i: &Moved, j: &Moved) -> (i64, i64) {
    if i.id == j.id {
        return (0, 0);
    }
    let dx = i.px - j.px;
    let dy = i.py - j.py;
    let s = i.r + j.r;
    if dx.abs() >= s || dy.abs() >= s {
        return (0, 0);
    }
    let d2 = dx * dx + dy * dy;
    if d2 >= s * s {
        return (0, 0);
    }
    let d = isqrt(d2);
    let overlap = s - d;
    if d > 0 {
        let den = d * (i.m + j.m);
        ((dx * overlap * j.m) / den, (dy * overlap * j.m) / den)
    } else {
        let push = (overlap * j.m) / (i.m + j.m);
        (if i.id < j.id { push } else { -push }, 0)
    }
}

/// Step 4: the obstacles near the body, in the order of the list (boxes first), `q` updated
/// after each.
fn obstacles(qx: i64, qy: i64, r: i64, world: &World) -> (i64, i64) {
    if world.boxes.is_empty() && world.circles.is_empty() {
        return (qx, qy);
    }
    let square = Rect {
        x0: qx - 2 * r,
        y0: qy - 2 * r,
        x1: qx + 2 * r,
        y1: qy + 2 * r,
    };
    let nb = world.boxes.len();
    let mut q = (qx, qy);
    for i in world.near(square) {
        q = if i < nb {
            push_box(q, r, &world.boxes[i])
        } else {
            push_circle(q, r, &world.circles[i - nb])
        };
    }
    q
}

/// A body of radius `r` at `q` pushed out of a box (step 4). `q` must be within `2r` of the
/// box (its bounding box meets the body's square), which keeps `dx²` small.
pub fn push_box((qx, qy): (i64, i64), r: i64, b: &Rect) -> (i64, i64) {
    let nx = qx.clamp(b.x0, b.x1);
    let ny = qy.clamp(b.y0, b.y1);
    let dx = qx - nx;
    let dy = qy - ny;
    let d2 = dx * dx + dy * dy;
    if d2 >= r * r {
        (qx, qy)
    } else if d2 == 0 {
        // The centre inside: out through the nearest side (ties: left, right, bottom, top).
        let sides = [qx - b.x0, b.x1 - qx, qy - b.y0, b.y1 - qy];
        let mut side = 0;
        for k in 1..4 {
            if sides[k] < sides[side] {
                side = k;
            }
        }
        match side {
            0 => (b.x0 - r, qy),
            1 => (b.x1 + r, qy),
            2 => (qx, b.y0 - r),
            _ => (qx, b.y1 + r),
        }
    } else {
        let d = isqrt(d2);
        let push = r - d;
        (qx + (dx * push) / d, qy + (dy * push) / d)
    }
}

/// A body of radius `r` at `q` pushed out of a circle obstacle (step 4).
pub fn push_circle((qx, qy): (i64, i64), r: i64, c: &Circle) -> (i64, i64) {
    let dx = qx - c.cx;
    let dy = qy - c.cy;
    let s = r + c.r;
    if dx.abs() >= s || dy.abs() >= s {
        return (qx, qy);
    }
    let d2 = dx * dx + dy * dy;
    if d2 >= s * s {
        (qx, qy)
    } else if d2 == 0 {
        (c.cx + s, qy)
    } else {
        let d = isqrt(d2);
        let push = s - d;
        (qx + (dx * push) / d, qy + (dy * push) / d)
    }
}

/// Step 5: a coordinate kept inside `0..size` by the radius.
#[inline]
fn edge(q: i64, r: i64, size: i64) -> i64 {
    if 2 * r > size {
        size / 2
    } else {
        q.clamp(r, size - r)
    }
}

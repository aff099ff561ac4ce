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

/// Whether a coordinate is in 0..2^40.
pub(crate) fn coord_ok(v: i64) -> bool {
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
    /// the order of the list, into `found` (cleared first; it keeps its allocation between
    /// calls): exactly the set of step 4, the index only finds them sooner.
    pub fn near(&self, q: Rect, found: &mut Vec<usize>) {
        let ix = &self.index;
        found.clear();
        let meets = |i: usize| {
            let b = ix.bounds[i];
            b.x0 <= q.x1 && b.x1 >= q.x0 && b.y0 <= q.y1 && b.y1 >= q.y0
        };
        let (kx0, kx1) = ix.grid.cols_of(q.x0, q.x1);
        let (ky0, ky1) = ix.grid.rows_of(q.y0, q.y1);
        let cells = (kx1 - kx0 + 1).max(0) * (ky1 - ky0 + 1).max(0);
        // A square over more cells than there are obstacles: the list itself is shorter.
        if cells >= ix.bounds.len() as i64 {
            found.extend((0..ix.bounds.len()).filter(|&i| meets(i)));
            return;
        }
        found.extend_from_slice(&ix.large);
        for kx in kx0..=kx1 {
            for ky in ky0..=ky1 {
                let k = ix.grid.index(kx, ky);
                let run = ix.starts[k] as usize..ix.starts[k + 1] as usize;
                found.extend(ix.items[run].iter().map(|&i| i as usize));
            }
        }
        // One cell's list is in order already; from several, an obstacle can come twice.
        if cells > 1 || !ix.large.is_empty() {
            found.sort_unstable();
            found.dedup();
        }
        found.retain(|&i| meets(i));
    }
}

/// The obstacles on a [`Grid`] over their bounding boxes (its cell about their size, doubled
/// until there are at most `16 · obstacles + 4096` cells): cell `k` lists the obstacles whose
/// bounding box meets it in `items[starts[k] .. starts[k + 1]]`, in the order of the
/// obstacles. An obstacle over more than `MAX_CELLS` cells is in `large`, looked at by every
/// query.
#[derive(Clone, Debug)]
struct ObstacleIndex {
    /// The bounding box of each obstacle (the boxes first, then the circles).
    bounds: Vec<Rect>,
    grid: Grid,
    starts: Vec<u32>,
    items: Vec<u32>,
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
        let grid = Grid::new(
            cell,
            extent(bounds.iter().copied()),
            16 * bounds.len() as i64 + 4096,
        );
        // Each obstacle's columns and rows, and whether it is large.
        let spans = |b: &Rect| (grid.cols_of(b.x0, b.x1), grid.rows_of(b.y0, b.y1));
        let large_spans = |((kx0, kx1), (ky0, ky1)): ((i64, i64), (i64, i64))| {
            (kx1 - kx0 + 1) * (ky1 - ky0 + 1) > Self::MAX_CELLS
        };
        let large: Vec<usize> = (0..bounds.len())
            .filter(|&i| large_spans(spans(&bounds[i])))
            .collect();
        // In the order of the obstacles, so each cell's list is in that order.
        let entries = bounds
            .iter()
            .map(spans)
            .enumerate()
            .filter(|&(_, s)| !large_spans(s))
            .flat_map(|(i, ((kx0, kx1), (ky0, ky1)))| {
                (kx0..=kx1)
                    .flat_map(move |kx| (ky0..=ky1).map(move |ky| (grid.index(kx, ky), i as u32)))
            });
        let (starts, items) = group(grid.cells(), entries);
        ObstacleIndex {
            bounds,
            grid,
            starts,
            items,
            large,
        }
    }
}

/// A dense grid of square cells over a rectangle: cell `(kx, ky)`, counted from the
/// rectangle's first cell, is number `kx · rows + ky`, so a column of cells is a run of numbers.
#[derive(Clone, Copy, Debug)]
struct Grid {
    cell: i64,
    gx0: i64,
    gy0: i64,
    cols: i64,
    rows: i64,
}

impl Grid {
    /// A grid over `area` with at most `limit` cells: cells of `cell` units, doubled until they
    /// fit.
    fn new(mut cell: i64, area: Rect, limit: i64) -> Grid {
        loop {
            let (gx0, gy0) = (area.x0.div_euclid(cell), area.y0.div_euclid(cell));
            let cols = area.x1.div_euclid(cell) - gx0 + 1;
            let rows = area.y1.div_euclid(cell) - gy0 + 1;
            if (cols as i128) * (rows as i128) <= limit as i128 {
                return Grid {
                    cell,
                    gx0,
                    gy0,
                    cols,
                    rows,
                };
            }
            cell *= 2;
        }
    }

    fn cells(&self) -> usize {
        (self.cols * self.rows) as usize
    }

    /// The column of `x` (outside `0..cols` when `x` is outside the area).
    #[inline]
    fn col(&self, x: i64) -> i64 {
        x.div_euclid(self.cell) - self.gx0
    }

    #[inline]
    fn row(&self, y: i64) -> i64 {
        y.div_euclid(self.cell) - self.gy0
    }

    #[inline]
    fn index(&self, kx: i64, ky: i64) -> usize {
        (kx * self.rows + ky) as usize
    }

    /// The columns `k0..=k1` that `[a, b]` meets, clipped to the grid: empty (`k0 > k1`) when
    /// it meets none.
    fn cols_of(&self, a: i64, b: i64) -> (i64, i64) {
        (self.col(a).max(0), self.col(b).min(self.cols - 1))
    }

    /// The rows that `[a, b]` meets, as [`Grid::cols_of`].
    fn rows_of(&self, a: i64, b: i64) -> (i64, i64) {
        (self.row(a).max(0), self.row(b).min(self.rows - 1))
    }
}

/// The smallest rectangle holding `rects` (a point at 0 for none).
fn extent(rects: impl Iterator<Item = Rect>) -> Rect {
    rects
        .reduce(|a, b| Rect {
            x0: a.x0.min(b.x0),
            y0: a.y0.min(b.y0),
            x1: a.x1.max(b.x1),
            y1: a.y1.max(b.y1),
        })
        .unwrap_or(Rect {
            x0: 0,
            y0: 0,
            x1: 0,
            y1: 0,
        })
}

/// A counting sort of `entries` (a cell number below `cells`, an item): `starts` (cell `k`'s
/// items are `items[starts[k] .. starts[k + 1]]`) and the items, each cell's in the order of
/// `entries`.
fn group<T: Copy + Default>(
    cells: usize,
    entries: impl Iterator<Item = (usize, T)> + Clone,
) -> (Vec<u32>, Vec<T>) {
    let mut starts = vec![0u32; cells + 1];
    for (k, _) in entries.clone() {
        starts[k + 1] += 1;
    }
    for k in 1..starts.len() {
        starts[k] += starts[k - 1];
    }
    let mut next = starts.clone();
    let mut items = vec![T::default(); starts[cells] as usize];
    for (k, item) in entries {
        items[next[k] as usize] = item;
        next[k] += 1;
    }
    (starts, items)
}

/// A body after step 1, where the contacts look at it.
#[derive(Clone, Copy, Debug, Default)]
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
    // Cells at least twice the largest radius: two bodies that touch (|dx| < r_i + r_j) are in
    // the same or adjacent cells, and a column of three cells is one run of `sorted`.
    let grid = Grid::new(
        2 * moved.iter().map(|b| b.r).max().unwrap_or(1).max(1),
        extent(moved.iter().map(|b| Rect {
            x0: b.px,
            y0: b.py,
            x1: b.px,
            y1: b.py,
        })),
        4 * moved.len() as i64 + 64,
    );
    let keys: Vec<usize> = moved
        .iter()
        .map(|b| grid.index(grid.col(b.px), grid.row(b.py)))
        .collect();
    let (starts, sorted) = group(
        grid.cells(),
        keys.iter().copied().zip(moved.iter().copied()),
    );

    moved
        .par_iter()
        .map_init(Vec::new, |near, b| {
            // 2. Contacts: the sum of this body's terms (exact integers: in any order).
            let (kx, ky) = (grid.col(b.px), grid.row(b.py));
            let (ky0, ky1) = ((ky - 1).max(0), (ky + 1).min(grid.rows - 1));
            let (mut cx, mut cy) = (0i64, 0i64);
            for ox in (kx - 1).max(0)..=(kx + 1).min(grid.cols - 1) {
                let lo = starts[grid.index(ox, ky0)] as usize;
                let hi = starts[grid.index(ox, ky1) + 1] as usize;
                for other in &sorted[lo..hi] {
                    let (tx, ty) = term(b, other);
                    cx += tx;
                    cy += ty;
                }
            }
            // 3. Apply; 4. obstacles; 5. the world's edges.
            let (qx, qy) = obstacles(b.px + cx, b.py + cy, b.r, world, near);
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
fn obstacles(qx: i64, qy: i64, r: i64, world: &World, near: &mut Vec<usize>) -> (i64, i64) {
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
    world.near(square, near);
    for &i in near.iter() {
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

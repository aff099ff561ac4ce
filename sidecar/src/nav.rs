//! Pathfinding on a navigation grid (docs/sidecar.md, "Pathfinding"): A* over 8-connected
//! cells, integer costs (10 straight, 14 diagonal, no corner cutting), the octile heuristic and
//! the total order `(f, h, key)` on the open set, so that this implementation and
//! `Overworld.Physics.Nav` find the same path, cell for cell.

use crate::physics::{self, World};
use rayon::prelude::*;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// The largest navigation cell (and agent radius): 2^20 units.
pub const MAX_CELL: i64 = 1 << 20;
/// The most cells a grid may have (`cols · rows`): 2^26, a bit each.
pub const MAX_GRID_CELLS: i64 = 1 << 26;

/// Why there is no path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PathError {
    /// The start or the goal cell is blocked or outside the grid.
    Blocked,
    /// The open set ran empty.
    Unreachable,
    /// `max_nodes` cells were expanded without reaching the goal.
    TooFar,
}

/// A path: the waypoints after the start (the last one the goal point itself).
pub type Path = Result<Vec<(i64, i64)>, PathError>;

/// A query: from a point to another.
pub type Query = ((i64, i64), (i64, i64));

/// Checks a query's points against the ranges of docs/sidecar.md (coordinates: 0..2^40); the
/// error names them, for the caller to say which query it is.
pub fn check_query(&((fx, fy), (tx, ty)): &Query) -> Result<(), String> {
    if [fx, fy, tx, ty].into_iter().all(physics::coord_ok) {
        Ok(())
    } else {
        Err(format!(
            "({fx}, {fy}) -> ({tx}, {ty}): a point outside 0..2^40"
        ))
    }
}

/// A navigation grid: the world cut into square cells, the blocked ones as a bitmap.
#[derive(Clone, Debug)]
pub struct Nav {
    pub cell: i64,
    pub cols: i64,
    pub rows: i64,
    pub max_nodes: i64,
    blocked: Vec<u64>,
}

// E, W, S, N, SE, SW, NE, NW.
const DIRS: [(i64, i64); 8] = [
    (1, 0),
    (-1, 0),
    (0, 1),
    (0, -1),
    (1, 1),
    (-1, 1),
    (1, -1),
    (-1, -1),
];

/// FxHash (rustc's): the keys are small integers, SipHash's protection is not needed.
#[derive(Default, Clone, Copy)]
struct FxHasher(u64);

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

impl Nav {
    /// The navigation grid of `world`: cells of `cell` units (1..2^20), obstacles grown by the
    /// agents' radius `agent` (0..2^20), at most `max_nodes` (≥ 1) cells expanded by a search.
    /// A grid of more than [`MAX_GRID_CELLS`] cells is refused.
    pub fn new(world: &World, cell: i64, agent: i64, max_nodes: i64) -> Result<Nav, String> {
        let (cols, rows) = Nav::check(world.width, world.height, cell, agent, max_nodes)?;
        let c = cell;
        let mut nav = Nav {
            cell: c,
            cols,
            rows,
            max_nodes,
            blocked: vec![0; ((cols * rows + 63) / 64) as usize],
        };
        let a = agent;
        for b in &world.boxes {
            let grown = (b.x0 - a, b.y0 - a, b.x1 + a, b.y1 + a);
            nav.block_cells(grown, |_, _| true);
        }
        for o in &world.circles {
            let reach = o.r + a;
            let grown = (o.cx - reach, o.cy - reach, o.cx + reach, o.cy + reach);
            nav.block_cells(grown, |col, row| {
                // The square's nearest point to the centre.
                let nx = o.cx.clamp(col * c, (col + 1) * c);
                let ny = o.cy.clamp(row * c, (row + 1) * c);
                (o.cx - nx) * (o.cx - nx) + (o.cy - ny) * (o.cy - ny) <= reach * reach
            });
        }
        Ok(nav)
    }

    /// Checks the options of a grid over a world of `width` × `height` units: its `(cols,
    /// rows)`, or why they are refused.
    pub fn check(
        width: i64,
        height: i64,
        cell: i64,
        agent: i64,
        max_nodes: i64,
    ) -> Result<(i64, i64), String> {
        if !(1..=MAX_CELL).contains(&cell) {
            return Err(format!(
                "the navigation cell must be 1..2^20 units, got: {cell}"
            ));
        }
        if !(0..=MAX_CELL).contains(&agent) {
            return Err(format!(
                "the agent radius must be 0..2^20 units, got: {agent}"
            ));
        }
        if max_nodes < 1 {
            return Err(format!(
                "max_nodes must be a positive integer, got: {max_nodes}"
            ));
        }
        let cols = (width + cell - 1) / cell;
        let rows = (height + cell - 1) / cell;
        if cols as i128 * rows as i128 > MAX_GRID_CELLS as i128 {
            return Err(format!(
                "a navigation grid of {cols} x {rows} cells is more than 2^26 cells"
            ));
        }
        Ok((cols, rows))
    }

    /// Blocks the cells whose closed square meets the closed box `(x0, y0, x1, y1)` and `keep`.
    fn block_cells(
        &mut self,
        (x0, y0, x1, y1): (i64, i64, i64, i64),
        keep: impl Fn(i64, i64) -> bool,
    ) {
        let c = self.cell;
        let c0 = (x0.div_euclid(c) - 1).max(0);
        let c1 = x1.div_euclid(c).min(self.cols - 1);
        let r0 = (y0.div_euclid(c) - 1).max(0);
        let r1 = y1.div_euclid(c).min(self.rows - 1);
        for row in r0..=r1 {
            for col in c0..=c1 {
                if col * c <= x1
                    && (col + 1) * c >= x0
                    && row * c <= y1
                    && (row + 1) * c >= y0
                    && keep(col, row)
                {
                    let k = (row * self.cols + col) as usize;
                    self.blocked[k / 64] |= 1 << (k % 64);
                }
            }
        }
    }

    /// The cell `(col, row)` of a point (in units; outside the grid for a point outside the
    /// world).
    pub fn cell_of(&self, (x, y): (i64, i64)) -> (i64, i64) {
        (x.div_euclid(self.cell), y.div_euclid(self.cell))
    }

    /// Whether the cell `(col, row)` is blocked (or outside the grid).
    pub fn blocked(&self, col: i64, row: i64) -> bool {
        if col < 0 || row < 0 || col >= self.cols || row >= self.rows {
            return true;
        }
        let k = (row * self.cols + col) as usize;
        self.blocked[k / 64] >> (k % 64) & 1 == 1
    }

    /// A path from `from` to `to` (points in units): the centres of the cells after the
    /// start's, the last one `to` itself; `[to]` when both are in the same cell.
    pub fn path(&self, from: (i64, i64), to: (i64, i64)) -> Path {
        let (start, goal) = (self.cell_of(from), self.cell_of(to));
        if self.blocked(start.0, start.1) || self.blocked(goal.0, goal.1) {
            return Err(PathError::Blocked);
        }
        if start == goal {
            return Ok(vec![to]);
        }
        let cols = self.cols;
        let key = |(col, row): (i64, i64)| row * cols + col;
        let h = |(col, row): (i64, i64)| {
            let dx = (col - goal.0).abs();
            let dy = (row - goal.1).abs();
            10 * (dx + dy) - 6 * dx.min(dy)
        };
        // The best known g of each reached cell, and its parent (-1 for the start).
        let mut best: FxMap<i64, (i64, i64)> = FxMap::default();
        let mut open: BinaryHeap<Reverse<(i64, i64, i64)>> = BinaryHeap::new();
        let k0 = key(start);
        best.insert(k0, (0, -1));
        open.push(Reverse((h(start), h(start), k0)));
        let goal_key = key(goal);
        let mut pops = 0;
        loop {
            if open.is_empty() {
                return Err(PathError::Unreachable);
            }
            if pops >= self.max_nodes {
                return Err(PathError::TooFar);
            }
            let Reverse((f, hk, k)) = open.pop().unwrap();
            let g = best[&k].0;
            // A stale entry: this cell was reached more cheaply since it was pushed.
            if f - hk > g {
                continue;
            }
            if k == goal_key {
                break;
            }
            pops += 1;
            let (col, row) = (k % cols, k / cols);
            for (dx, dy) in DIRS {
                let (ncol, nrow) = (col + dx, row + dy);
                if self.blocked(ncol, nrow) {
                    continue;
                }
                let diagonal = dx != 0 && dy != 0;
                if diagonal && (self.blocked(col + dx, row) || self.blocked(col, row + dy)) {
                    continue;
                }
                let ng = g + if diagonal { 14 } else { 10 };
                let nk = key((ncol, nrow));
                if matches!(best.get(&nk), Some(&(old, _)) if old <= ng) {
                    continue;
                }
                let nh = h((ncol, nrow));
                best.insert(nk, (ng, k));
                open.push(Reverse((ng + nh, nh, nk)));
            }
        }
        // The cells from the goal back to the start (left out), then in order.
        let mut keys = Vec::new();
        let mut k = goal_key;
        while k != k0 {
            keys.push(k);
            k = best[&k].1;
        }
        keys.reverse();
        let c = self.cell;
        let mut waypoints: Vec<(i64, i64)> = keys
            .iter()
            .map(|&k| ((k % cols) * c + c / 2, (k / cols) * c + c / 2))
            .collect();
        *waypoints.last_mut().unwrap() = to;
        Ok(waypoints)
    }

    /// The paths of many queries `(from, to)`, in parallel (the current rayon thread pool),
    /// in the order of the queries.
    pub fn paths(&self, queries: &[Query]) -> Vec<Path> {
        let mut paths = Vec::new();
        self.paths_into(queries, &mut paths);
        paths
    }

    /// [`Nav::paths`] into `paths` (replaced; its allocation reused from call to call).
    pub fn paths_into(&self, queries: &[Query], paths: &mut Vec<Path>) {
        queries
            .par_iter()
            .map(|&(from, to)| self.path(from, to))
            .collect_into_vec(paths);
    }
}

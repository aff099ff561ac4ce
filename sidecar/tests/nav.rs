//! Pathfinding: hand-made grids, and many random queries checked (valid steps, the optimal cost
//! by Dijkstra) and the same with 1, 2 and 4 threads.

mod common;

use common::{rect, with_threads, Rng};
use overworld_sidecar::nav::{Nav, PathError};
use overworld_sidecar::physics::{Circle, Rect, World};
use std::collections::BinaryHeap;

const M: i64 = 1024;

fn centre(col: i64, row: i64) -> (i64, i64) {
    (col * M + M / 2, row * M + M / 2)
}

/// A grid of 1 m cells, agents of radius 0.
fn nav(w: i64, h: i64, boxes: Vec<Rect>, circles: Vec<Circle>, max_nodes: i64) -> Nav {
    Nav::new(
        &World::new(w * M, h * M, boxes, circles).unwrap(),
        M,
        0,
        max_nodes,
    )
    .unwrap()
}

/// The cells of a path's waypoints (the goal point's cell last).
fn cells(nav: &Nav, path: &[(i64, i64)]) -> Vec<(i64, i64)> {
    path.iter().map(|&p| nav.cell_of(p)).collect()
}

/// Checks a path from `from`: steps to adjacent free cells, no corner cut; its cost.
fn cost(nav: &Nav, from: (i64, i64), path: &[(i64, i64)]) -> i64 {
    let mut here = nav.cell_of(from);
    let mut total = 0;
    for (i, &(col, row)) in cells(nav, path).iter().enumerate() {
        let (dx, dy) = (col - here.0, row - here.1);
        assert!(
            dx.abs() <= 1 && dy.abs() <= 1 && (dx, dy) != (0, 0),
            "step {i}: {dx}, {dy}"
        );
        assert!(!nav.blocked(col, row), "step {i} into a blocked cell");
        if dx != 0 && dy != 0 {
            assert!(!nav.blocked(here.0 + dx, here.1) && !nav.blocked(here.0, here.1 + dy));
            total += 14;
        } else {
            total += 10;
        }
        if i + 1 < path.len() {
            assert_eq!(
                path[i],
                (col * nav.cell + nav.cell / 2, row * nav.cell + nav.cell / 2)
            );
        }
        here = (col, row);
    }
    total
}

/// The cost of the cheapest path by Dijkstra (no limit), or None.
fn dijkstra(nav: &Nav, from: (i64, i64), to: (i64, i64)) -> Option<i64> {
    let (start, goal) = (nav.cell_of(from), nav.cell_of(to));
    let mut dist = vec![i64::MAX; (nav.cols * nav.rows) as usize];
    let key = |(c, r): (i64, i64)| (r * nav.cols + c) as usize;
    let mut heap = BinaryHeap::new();
    dist[key(start)] = 0;
    heap.push(std::cmp::Reverse((0, start)));
    while let Some(std::cmp::Reverse((d, (c, r)))) = heap.pop() {
        if (c, r) == goal {
            return Some(d);
        }
        if d > dist[key((c, r))] {
            continue;
        }
        for (dx, dy) in [
            (1, 0),
            (-1, 0),
            (0, 1),
            (0, -1),
            (1, 1),
            (-1, 1),
            (1, -1),
            (-1, -1),
        ] {
            let n = (c + dx, r + dy);
            if nav.blocked(n.0, n.1) {
                continue;
            }
            let diagonal = dx != 0 && dy != 0;
            if diagonal && (nav.blocked(c + dx, r) || nav.blocked(c, r + dy)) {
                continue;
            }
            let nd = d + if diagonal { 14 } else { 10 };
            if nd < dist[key(n)] {
                dist[key(n)] = nd;
                heap.push(std::cmp::Reverse((nd, n)));
            }
        }
    }
    None
}

#[test]
fn a_straight_corridor() {
    let n = nav(10, 1, vec![], vec![], 20_000);
    let to = (9 * M + 700, 300);
    let path = n.path(centre(0, 0), to).unwrap();
    let mut expected: Vec<(i64, i64)> = (1..9).map(|c| centre(c, 0)).collect();
    expected.push(to);
    assert_eq!(path, expected);
    // And back.
    let back = n.path(to, (5, 5)).unwrap();
    let mut expected: Vec<(i64, i64)> = (0..9).rev().map(|c| centre(c, 0)).collect();
    *expected.last_mut().unwrap() = (5, 5);
    assert_eq!(back, expected);
}

#[test]
fn a_diagonal_in_the_open() {
    let n = nav(5, 5, vec![], vec![], 20_000);
    let path = n.path(centre(0, 0), centre(3, 3)).unwrap();
    assert_eq!(path, vec![centre(1, 1), centre(2, 2), centre(3, 3)]);
    // Two diagonals and a straight step, in some order.
    let path = n.path(centre(0, 0), centre(3, 2)).unwrap();
    assert_eq!(cost(&n, centre(0, 0), &path), 38);
}

#[test]
fn the_same_cell() {
    let n = nav(5, 5, vec![], vec![], 20_000);
    assert_eq!(n.path((10, 10), (1000, 20)), Ok(vec![(1000, 20)]));
}

#[test]
fn a_wall_with_a_gap() {
    // A wall in column 3, rows 0..5; the gap is rows 6 and 7.
    let n = nav(8, 8, vec![rect(3100, 0, 4000, 6000)], vec![], 20_000);
    for row in 0..8 {
        assert_eq!(n.blocked(3, row), row <= 5, "row {row}");
        assert!(!n.blocked(2, row) && !n.blocked(4, row));
    }
    let (from, to) = (centre(0, 0), (7 * M + 100, 200));
    let path = n.path(from, to).unwrap();
    assert_eq!(*path.last().unwrap(), to);
    assert!(cells(&n, &path).contains(&(3, 6)));
    assert_eq!(Some(cost(&n, from, &path)), dijkstra(&n, from, to));
    // Through the gap: around the wall's corner, no corner cut: (2, 5) → (3, 6) passes by
    // (3, 5), blocked, so the path goes through (2, 6).
    assert!(cells(&n, &path).contains(&(2, 6)));
    assert!(cells(&n, &path).contains(&(4, 6)));
}

#[test]
fn obstacles_grown_by_the_agent() {
    // A box strictly inside a cell blocks it; grown by the agent to the cell's edges, it touches
    // (closed squares) the 8 cells around too.
    let world = World::new(
        8 * M,
        8 * M,
        vec![rect(3 * M + 1, 3 * M + 1, 4 * M - 1, 4 * M - 1)],
        vec![],
    )
    .unwrap();
    let n = Nav::new(&world, M, 0, 100).unwrap();
    let blocked: Vec<(i64, i64)> = (0..8)
        .flat_map(|r| (0..8).map(move |c| (c, r)))
        .filter(|&(c, r)| n.blocked(c, r))
        .collect();
    assert_eq!(blocked, vec![(3, 3)]);
    let n = Nav::new(&world, M, 1, 100).unwrap();
    let count = (0..64).filter(|k| n.blocked(k % 8, k / 8)).count();
    assert_eq!(count, 9);
    // A circle: the cells whose square is within r + a of the centre.
    let world = World::new(
        8 * M,
        8 * M,
        vec![],
        vec![Circle {
            cx: 4 * M,
            cy: 4 * M,
            r: 512,
        }],
    )
    .unwrap();
    let n = Nav::new(&world, M, 0, 100).unwrap();
    let count = (0..64).filter(|k| n.blocked(k % 8, k / 8)).count();
    assert_eq!(count, 4);
    let n = Nav::new(&world, M, 512, 100).unwrap();
    // Reach 1024: the 4 cells around the centre, the 8 beside them (distance 0..1024 on an
    // axis); the diagonal ones are at 1024·√2.
    let count = (0..64).filter(|k| n.blocked(k % 8, k / 8)).count();
    assert_eq!(count, 4 + 8);
}

#[test]
fn an_unreachable_goal() {
    // A wall over the whole height.
    let n = nav(8, 8, vec![rect(3100, 0, 4000, 8 * M)], vec![], 20_000);
    assert_eq!(
        n.path(centre(0, 0), centre(7, 7)),
        Err(PathError::Unreachable)
    );
    // A goal walled in.
    let walls = vec![
        rect(5 * M + 10, 5 * M + 10, 5 * M + 20, 8 * M),
        rect(5 * M + 10, 5 * M + 10, 8 * M, 5 * M + 20),
    ];
    let n = nav(8, 8, walls, vec![], 20_000);
    assert_eq!(
        n.path(centre(0, 0), centre(7, 7)),
        Err(PathError::Unreachable)
    );
    // Diagonal gaps are no gaps (no corner cutting).
    let n = nav(
        8,
        8,
        vec![rect(3100, 0, 3200, 3000), rect(2100, 3100, 2200, 8 * M)],
        vec![],
        20_000,
    );
    assert!(n.blocked(3, 2) && n.blocked(2, 3) && !n.blocked(3, 3) && !n.blocked(2, 2));
    assert_eq!(
        n.path(centre(0, 0), centre(7, 0)),
        Err(PathError::Unreachable)
    );
}

#[test]
fn a_blocked_start_or_goal() {
    let n = nav(8, 8, vec![rect(3100, 0, 4000, 6000)], vec![], 20_000);
    assert_eq!(n.path((3500, 100), centre(7, 7)), Err(PathError::Blocked));
    assert_eq!(n.path(centre(7, 7), (3500, 100)), Err(PathError::Blocked));
    // Outside the grid.
    assert_eq!(n.path(centre(0, 0), (8 * M, 0)), Err(PathError::Blocked));
    assert_eq!(n.path((-1, 0), centre(0, 0)), Err(PathError::Blocked));
    // Blocked comes first, even for the same cell.
    assert_eq!(n.path((3500, 100), (3600, 100)), Err(PathError::Blocked));
}

#[test]
fn too_far() {
    let n = nav(100, 100, vec![], vec![], 10);
    assert_eq!(n.path(centre(0, 0), centre(99, 99)), Err(PathError::TooFar));
    // A straight path of 10 steps expands 10 cells (the start and the 9 after it), the goal is
    // the 11th pop: max_nodes 11 is enough, 10 is not.
    let n = nav(100, 100, vec![], vec![], 11);
    assert!(n.path(centre(0, 0), centre(10, 0)).is_ok());
    let n = nav(100, 100, vec![], vec![], 10);
    assert_eq!(n.path(centre(0, 0), centre(10, 0)), Err(PathError::TooFar));
    // An empty open set is unreachable even after max_nodes pops.
    let n = nav(3, 1, vec![rect(1100, 0, 1200, 1024)], vec![], 1);
    assert_eq!(
        n.path(centre(0, 0), centre(2, 0)),
        Err(PathError::Unreachable)
    );
}

#[test]
fn options_are_checked() {
    let world = World::new(8 * M, 8 * M, vec![], vec![]).unwrap();
    assert!(Nav::new(&world, 0, 0, 1).is_err());
    assert!(Nav::new(&world, (1 << 20) + 1, 0, 1).is_err());
    assert!(Nav::new(&world, 1 << 20, 1 << 20, 1).is_ok());
    assert!(Nav::new(&world, M, -1, 1).is_err());
    assert!(Nav::new(&world, M, (1 << 20) + 1, 1).is_err());
    assert!(Nav::new(&world, M, 0, 0).is_err());
    let big = World::new(1 << 40, 1 << 40, vec![], vec![]).unwrap();
    assert!(Nav::new(&big, 1 << 20, 0, 1).is_err());
    assert!(Nav::check(1 << 33, 1 << 33, 1 << 20, 0, 1).is_ok());
}

/// A random grid of boxes and circles (cells of 1 m, agents of 0.25 m).
fn random_nav(rng: &mut Rng, size: i64, obstacles: usize, max_nodes: i64) -> Nav {
    let boxes = (0..obstacles)
        .map(|_| {
            let (x, y) = (rng.range(0, size * M), rng.range(0, size * M));
            let (w, h) = if rng.chance(50) {
                (rng.range(0, 8 * M), 300)
            } else {
                (300, rng.range(0, 8 * M))
            };
            rect(x, y, (x + w).min(size * M), (y + h).min(size * M))
        })
        .collect();
    let circles = (0..obstacles / 2)
        .map(|_| Circle {
            cx: rng.range(0, size * M),
            cy: rng.range(0, size * M),
            r: rng.range(1, 2 * M),
        })
        .collect();
    let world = World::new(size * M, size * M - rng.range(0, M - 1), boxes, circles).unwrap();
    Nav::new(&world, M, 256, max_nodes).unwrap()
}

#[test]
fn random_queries_are_optimal_and_the_same_with_any_thread_count() {
    let mut rng = Rng::new(11);
    let mut outcomes = [0usize; 4];
    for (size, obstacles, max_nodes) in [(40, 30, 20_000), (120, 300, 20_000), (120, 300, 300)] {
        let n = random_nav(&mut rng, size, obstacles, max_nodes);
        let queries: Vec<((i64, i64), (i64, i64))> = (0..400)
            .map(|_| {
                let mut p = || (rng.range(0, size * M), rng.range(0, size * M));
                (p(), p())
            })
            .collect();
        let one = with_threads(1, || n.paths(&queries));
        for threads in [2, 4] {
            assert_eq!(
                with_threads(threads, || n.paths(&queries)),
                one,
                "{threads} threads"
            );
        }
        for (q, p) in queries.iter().zip(&one) {
            assert_eq!(*p, n.path(q.0, q.1));
            match p {
                Ok(path) => {
                    outcomes[0] += 1;
                    assert_eq!(*path.last().unwrap(), q.1);
                    assert_eq!(Some(cost(&n, q.0, path)), dijkstra(&n, q.0, q.1), "{q:?}");
                }
                Err(PathError::Blocked) => outcomes[1] += 1,
                Err(PathError::Unreachable) => {
                    outcomes[2] += 1;
                    assert_eq!(dijkstra(&n, q.0, q.1), None, "{q:?}");
                }
                Err(PathError::TooFar) => outcomes[3] += 1,
            }
        }
    }
    eprintln!("ok, blocked, unreachable, too far: {outcomes:?}");
    assert!(outcomes.iter().all(|&n| n > 0), "{outcomes:?}");
}

//! The physics step: isqrt, hand-computed scenes, and random scenes against a literal
//! transcription of docs/sidecar.md (all pairs, all obstacles), with 1, 2 and 4 threads.

mod common;

use common::{circle, rect, with_threads, Rng};
use overworld_sidecar::isqrt;
use overworld_sidecar::physics::{
    self, Body, Circle, Rect, World, MAX_COORD, MAX_MASS, MAX_RADIUS,
};

// ---------------------------------------------------------------------------------------------
// isqrt

fn check_square(k: i64) {
    let n = k * k;
    assert_eq!(isqrt(n), k, "isqrt({n})");
    if k > 0 {
        assert_eq!(isqrt(n - 1), k - 1, "isqrt({} - 1)", n);
    }
    // (k + 1)² − 1, when it fits.
    if let Some(m) = (k + 1).checked_mul(k + 1) {
        assert_eq!(isqrt(m - 1), k, "isqrt({m} - 1)");
    }
}

#[test]
fn isqrt_small_numbers_one_by_one() {
    let mut root = 0i64;
    for n in 0..2_000_000i64 {
        if (root + 1) * (root + 1) <= n {
            root += 1;
        }
        assert_eq!(isqrt(n), root, "isqrt({n})");
    }
}

#[test]
fn isqrt_perfect_squares_and_their_neighbours() {
    for k in 0..200_000 {
        check_square(k);
    }
    // Around every power of two up to 2^31 (k² up to 2^62), and near the largest i64 roots.
    for j in 0..=31 {
        let p = 1i64 << j;
        for k in (p - 64).max(0)..=p + 64 {
            check_square(k);
        }
    }
    for k in 3_037_000_000i64..=3_037_000_499 {
        check_square(k);
    }
    assert_eq!(isqrt(1 << 62), 1 << 31);
    assert_eq!(isqrt((1 << 62) - 1), (1 << 31) - 1);
    assert_eq!(isqrt(i64::MAX), 3_037_000_499);
    let mut rng = Rng::new(7);
    for _ in 0..1_000_000 {
        check_square(rng.range(0, 1 << 31));
    }
    for _ in 0..1_000_000 {
        // Any n: s² ≤ n < (s + 1)².
        let n = rng.range(0, i64::MAX);
        let s = isqrt(n) as i128;
        assert!(
            s * s <= n as i128 && (s + 1) * (s + 1) > n as i128,
            "isqrt({n})"
        );
    }
}

#[test]
#[should_panic]
fn isqrt_of_a_negative_number_panics() {
    isqrt(-1);
}

// ---------------------------------------------------------------------------------------------
// Hand-computed scenes

fn body(id: i64, x: i64, y: i64, vx: i64, vy: i64, r: i64, m: i64) -> Body {
    Body {
        id,
        x,
        y,
        vx,
        vy,
        r,
        m,
    }
}

fn world(boxes: Vec<Rect>, circles: Vec<Circle>) -> World {
    World::new(10_240, 10_240, boxes, circles).unwrap()
}

#[test]
fn two_overlapping_bodies() {
    let bodies = [
        body(1, 5000, 5000, 0, 0, 512, 1),
        body(2, 5600, 5000, 0, 0, 512, 1),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(1, 4788, 5000), (2, 5812, 5000)]
    );
}

#[test]
fn masses_share_the_overlap() {
    // dx = −600, d = 600, overlap = 424: body 1 gets −600·424·3 div (600·4) = −318, body 2
    // gets 600·424·1 div (600·4) = 106.
    let bodies = [
        body(1, 5000, 5000, 0, 0, 512, 1),
        body(2, 5600, 5000, 0, 0, 512, 3),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(1, 4682, 5000), (2, 5706, 5000)]
    );
}

#[test]
fn a_diagonal_contact_truncates_toward_zero() {
    // dx = dy = −300, d2 = 180000, d = 424, overlap = 600: terms (−300·600) div 848 = −212
    // (not −213) for body 1, +212 for body 2.
    let bodies = [
        body(1, 5000, 5000, 0, 0, 512, 1),
        body(2, 5300, 5300, 0, 0, 512, 1),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(1, 4788, 4788), (2, 5512, 5512)]
    );
}

#[test]
fn bodies_at_the_same_point() {
    // overlap = 1024: body 2 (the larger id, m = 1) gets −(1024·3 div 4) = −768, body 1
    // (m = 3) +(1024·1 div 4) = +256.
    let bodies = [
        body(2, 5000, 5000, 0, 0, 512, 1),
        body(1, 5000, 5000, 0, 0, 512, 3),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(2, 4232, 5000), (1, 5256, 5000)]
    );
    // Three at one point: each sums its two terms.
    let bodies = [
        body(1, 5000, 5000, 0, 0, 100, 1),
        body(2, 5000, 5000, 0, 0, 100, 1),
        body(3, 5000, 5000, 0, 0, 100, 1),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(1, 5200, 5000), (2, 5000, 5000), (3, 4800, 5000)]
    );
}

#[test]
fn velocities_divide_toward_zero() {
    let bodies = [
        body(1, 5000, 5000, -31, 59, 10, 1),
        body(2, 8000, 8000, 29, -61, 10, 1),
    ];
    assert_eq!(
        physics::step(&bodies, &world(vec![], vec![]), 30),
        vec![(1, 4999, 5001), (2, 8000, 7998)]
    );
}

#[test]
fn a_body_inside_a_box_leaves_by_the_nearest_side() {
    let w = world(vec![rect(4900, 4000, 6000, 7000)], vec![]);
    let at = |x, y| physics::step(&[body(1, x, y, 0, 0, 100, 1)], &w, 30)[0];
    // Left 100, right 1000, bottom 1000, top 2000.
    assert_eq!(at(5000, 5000), (1, 4800, 5000));
    assert_eq!(at(5900, 5000), (1, 6100, 5000));
    assert_eq!(at(5500, 4100), (1, 5500, 3900));
    assert_eq!(at(5500, 6950), (1, 5500, 7100));
    // Ties in the order left, right, bottom, top.
    let w = world(vec![rect(4000, 4000, 6000, 6000)], vec![]);
    let at = |x, y| physics::step(&[body(1, x, y, 0, 0, 100, 1)], &w, 30)[0];
    assert_eq!(at(5000, 5000), (1, 3900, 5000));
    assert_eq!(at(5500, 5500), (1, 6100, 5500));
    assert_eq!(at(5000, 4500), (1, 5000, 3900));
    // On the box's edge (still d2 = 0).
    assert_eq!(at(6000, 5000), (1, 6100, 5000));
}

#[test]
fn a_body_near_a_box_is_pushed_away() {
    let w = world(vec![rect(5050, 0, 6000, 10_000)], vec![]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 4950, 5000)
    );
    // A corner: dx = dy = −30, d = 42, push = 58, (−30·58) div 42 = −41.
    let w = world(vec![rect(5030, 5030, 6000, 6000)], vec![]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 4959, 4959)
    );
    // Touching (d = r) is no contact.
    let w = world(vec![rect(5100, 0, 6000, 10_000)], vec![]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 5000, 5000)
    );
}

#[test]
fn a_circle_obstacle() {
    let w = world(vec![], vec![circle(5150, 5000, 100)]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 4950, 5000)
    );
    // dx = dy = −100, d = 141, push = 59, (−100·59) div 141 = −41.
    let w = world(vec![], vec![circle(5100, 5100, 100)]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 4959, 4959)
    );
    // The centre on the circle's: out along +x.
    let w = world(vec![], vec![circle(5000, 5000, 100)]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 5200, 5000)
    );
    // d = s: nothing.
    let w = world(vec![], vec![circle(5200, 5000, 100)]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 5000, 5000)
    );
}

#[test]
fn obstacles_in_list_order_each_from_the_last_position() {
    // The box pushes the body left out of it, into the circle, which pushes it right again.
    let w = world(
        vec![rect(5000, 4000, 6000, 6000)],
        vec![circle(4870, 5000, 100)],
    );
    // Box: d2 = 0, left by 50 → qx = 4900; circle: dx = 30, s = 200, push 170 → 5070 (the
    // circle first would give 5070, then the box 4900).
    assert_eq!(
        physics::step(&[body(1, 5050, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 5070, 5000)
    );
}

#[test]
fn the_obstacles_met_are_chosen_from_the_position_before_them() {
    // The square [4850, 5250] of q = 5050 misses the circle's bounding box [4640, 4840]: the box
    // pushes the body to 4900, in contact with the circle (dx = 160 < 200), which stays unmet.
    let w = world(
        vec![rect(5000, 4000, 9000, 6000)],
        vec![circle(4740, 5000, 100)],
    );
    assert_eq!(
        physics::step(&[body(1, 5050, 5000, 0, 0, 100, 1)], &w, 30)[0],
        (1, 4900, 5000)
    );
}

#[test]
fn far_obstacles_are_not_met() {
    // The circle's bounding box misses the body's square [qx − 2r, qx + 2r]: no effect at all,
    // however the index groups them.
    let boxes: Vec<Rect> = (0..50)
        .map(|i| rect(i * 200, 9000, i * 200 + 100, 9100))
        .collect();
    let w = world(boxes, vec![circle(5000, 5401, 100)]);
    assert_eq!(
        physics::step(&[body(1, 5000, 5000, 0, 0, 150, 1)], &w, 30)[0],
        (1, 5000, 5000)
    );
}

#[test]
fn the_world_edges() {
    let w = world(vec![], vec![]);
    let one = |b: Body| physics::step(&[b], &w, 30)[0];
    assert_eq!(one(body(1, 10, 10, 0, 0, 100, 1)), (1, 100, 100));
    assert_eq!(
        one(body(1, 10_200, 10_239, 0, 0, 100, 1)),
        (1, 10_140, 10_140)
    );
    assert_eq!(
        one(body(1, 10_000, 5000, 9000, -300_000, 100, 1)),
        (1, 10_140, 100)
    );
    // A body wider than the world sits in its middle.
    let narrow = World::new(150, 10_240, vec![], vec![]).unwrap();
    assert_eq!(
        physics::step(&[body(1, 10, 500, 0, 0, 100, 1)], &narrow, 30)[0],
        (1, 75, 500)
    );
    let exact = World::new(200, 201, vec![], vec![]).unwrap();
    assert_eq!(
        physics::step(&[body(1, 10, 500, 0, 0, 100, 1)], &exact, 30)[0],
        (1, 100, 101)
    );
}

#[test]
fn no_bodies() {
    assert!(physics::step(&[], &world(vec![], vec![]), 30).is_empty());
}

#[test]
fn ranges_are_checked() {
    let ok = body(1, 0, MAX_COORD, -MAX_COORD, MAX_COORD, MAX_RADIUS, MAX_MASS);
    assert_eq!(physics::check(&[ok], 1), Ok(()));
    assert_eq!(physics::check(&[ok], 1000), Ok(()));
    assert!(physics::check(&[ok], 0).is_err());
    assert!(physics::check(&[ok], 1001).is_err());
    for bad in [
        Body { id: 0, ..ok },
        Body { x: -1, ..ok },
        Body {
            y: MAX_COORD + 1,
            ..ok
        },
        Body {
            vx: -MAX_COORD - 1,
            ..ok
        },
        Body {
            vy: MAX_COORD + 1,
            ..ok
        },
        Body { r: 0, ..ok },
        Body {
            r: MAX_RADIUS + 1,
            ..ok
        },
        Body { m: 0, ..ok },
        Body {
            m: MAX_MASS + 1,
            ..ok
        },
    ] {
        assert!(physics::check(&[bad], 30).is_err(), "{bad:?}");
    }
    assert_eq!(
        physics::check(&[ok, Body { x: 5, ..ok }], 30),
        Err("two bodies have the same id".to_string())
    );
    assert_eq!(
        physics::check(&[Body { r: 0, ..ok }], 30),
        Err("body 1: radius 0 outside 1..1048576".to_string())
    );
    assert!(World::new(0, 10, vec![], vec![]).is_err());
    assert!(World::new(MAX_COORD + 1, 10, vec![], vec![]).is_err());
    assert!(World::new(MAX_COORD, MAX_COORD, vec![], vec![]).is_ok());
    assert!(World::new(10, 10, vec![rect(5, 0, 4, 3)], vec![]).is_err());
    assert!(World::new(10, 10, vec![rect(0, -1, 4, 3)], vec![]).is_err());
    assert!(World::new(10, 10, vec![], vec![circle(0, 0, 0)]).is_err());
    assert!(World::new(10, 10, vec![], vec![circle(0, 0, MAX_RADIUS + 1)]).is_err());
}

// ---------------------------------------------------------------------------------------------
// The spec, literally: every pair, every obstacle (with the bounding-box filter).

fn reference_step(bodies: &[Body], world: &World, rate: i64) -> Vec<(i64, i64, i64)> {
    let p: Vec<(i64, i64)> = bodies
        .iter()
        .map(|b| (b.x + b.vx / rate, b.y + b.vy / rate))
        .collect();
    let mut c = vec![(0i64, 0i64); bodies.len()];
    for i in 0..bodies.len() {
        for j in i + 1..bodies.len() {
            let (bi, bj) = (&bodies[i], &bodies[j]);
            let dx = p[i].0 - p[j].0;
            let dy = p[i].1 - p[j].1;
            let s = bi.r + bj.r;
            if !(dx.abs() < s && dy.abs() < s && dx * dx + dy * dy < s * s) {
                continue;
            }
            let d = isqrt(dx * dx + dy * dy);
            let overlap = s - d;
            if d > 0 {
                let den = d * (bi.m + bj.m);
                c[i].0 += dx * overlap * bj.m / den;
                c[i].1 += dy * overlap * bj.m / den;
                c[j].0 += -dx * overlap * bi.m / den;
                c[j].1 += -dy * overlap * bi.m / den;
            } else {
                let sign = if bi.id < bj.id { 1 } else { -1 };
                c[i].0 += sign * (overlap * bj.m / (bi.m + bj.m));
                c[j].0 += -sign * (overlap * bi.m / (bi.m + bj.m));
            }
        }
    }
    bodies
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let r = b.r;
            let mut q = (p[i].0 + c[i].0, p[i].1 + c[i].1);
            let (x0, y0, x1, y1) = (q.0 - 2 * r, q.1 - 2 * r, q.0 + 2 * r, q.1 + 2 * r);
            let meets = |b: Rect| b.x0 <= x1 && b.x1 >= x0 && b.y0 <= y1 && b.y1 >= y0;
            for o in &world.boxes {
                if meets(*o) {
                    q = physics::push_box(q, r, o);
                }
            }
            for o in &world.circles {
                if meets(rect(o.cx - o.r, o.cy - o.r, o.cx + o.r, o.cy + o.r)) {
                    q = physics::push_circle(q, r, o);
                }
            }
            let edge = |v: i64, size: i64| {
                if 2 * r > size {
                    size / 2
                } else {
                    v.clamp(r, size - r)
                }
            };
            (b.id, edge(q.0, world.width), edge(q.1, world.height))
        })
        .collect()
}

/// A random scene: `n` bodies in the square `[x0, x0 + span]²` of a `size` world, radii in
/// `radii`, masses 1..=65535 or extreme, velocities up to `speed`, obstacles of up to
/// `obstacle` units.
struct Scene {
    size: i64,
    origin: i64,
    span: i64,
    n: usize,
    radii: (i64, i64),
    speed: i64,
    boxes: usize,
    circles: usize,
    obstacle: i64,
}

fn generate(rng: &mut Rng, s: &Scene) -> (Vec<Body>, World, i64) {
    let coord = |rng: &mut Rng| (s.origin + rng.range(0, s.span)).clamp(0, s.size);
    let mut ids: Vec<i64> = (1..=s.n as i64).map(|i| i * 3 + rng.range(0, 2)).collect();
    // Shuffled ids, so the id order is not the list order.
    rng.shuffle(&mut ids);
    let bodies: Vec<Body> = ids
        .iter()
        .map(|&id| Body {
            id,
            x: coord(rng),
            y: coord(rng),
            // Speeds of every magnitude up to `speed`: most far slower.
            vx: rng.range(-s.speed, s.speed) >> rng.range(0, 40),
            vy: rng.range(-s.speed, s.speed) >> rng.range(0, 40),
            r: rng.range(s.radii.0, s.radii.1),
            m: match rng.range(0, 3) {
                0 => 1,
                1 => MAX_MASS,
                _ => rng.range(1, MAX_MASS),
            },
        })
        .collect();
    let boxes = (0..s.boxes)
        .map(|_| {
            let (x0, y0) = (coord(rng), coord(rng));
            rect(
                x0,
                y0,
                (x0 + rng.range(0, s.obstacle)).min(MAX_COORD),
                (y0 + rng.range(0, s.obstacle)).min(MAX_COORD),
            )
        })
        .collect();
    let circles = (0..s.circles)
        .map(|_| {
            circle(
                coord(rng),
                coord(rng),
                rng.range(1, s.obstacle.min(MAX_RADIUS)),
            )
        })
        .collect();
    let world = World::new(s.size, s.size, boxes, circles).unwrap();
    let rate = [1, 10, 30, 60, 1000][rng.range(0, 4) as usize];
    physics::check(&bodies, rate).unwrap();
    (bodies, world, rate)
}

/// Compares `rounds` scenes with the reference, and says how many bodies met something (a
/// body, an obstacle) and how many an obstacle: a test of nothing would be a test of nothing.
fn compare(seed: u64, scene: &Scene, rounds: usize) {
    let mut rng = Rng::new(seed);
    let (mut met, mut hit) = (0, 0);
    for round in 0..rounds {
        let (bodies, world, rate) = generate(&mut rng, scene);
        let expected = reference_step(&bodies, &world, rate);
        let alone = World::new(world.width, world.height, vec![], vec![]).unwrap();
        met += bodies
            .iter()
            .zip(&expected)
            .filter(|(b, e)| reference_step(&[**b], &alone, rate)[0] != **e)
            .count();
        let bare = reference_step(&bodies, &alone, rate);
        hit += expected.iter().zip(&bare).filter(|(e, b)| e != b).count();
        for threads in [1, 2, 4] {
            let got = with_threads(threads, || physics::step(&bodies, &world, rate));
            assert_eq!(
                got, expected,
                "seed {seed}, round {round}, {threads} threads"
            );
        }
    }
    eprintln!("seed {seed}: {met} bodies met something, {hit} an obstacle");
    assert!(met > 0 && hit > 0, "seed {seed}: no body met anything");
}

#[test]
fn random_scenes_match_the_spec_with_any_thread_count() {
    // A 200 m world, bodies of 0.25..1 m, obstacles up to 8 m.
    let scene = Scene {
        size: 200 * 1024,
        origin: 0,
        span: 200 * 1024,
        n: 1500,
        radii: (256, 1024),
        speed: 10_000,
        boxes: 60,
        circles: 60,
        obstacle: 8 * 1024,
    };
    compare(1, &scene, 4);
    // Small crowded scenes.
    let scene = Scene {
        n: 40,
        span: 8 * 1024,
        boxes: 3,
        circles: 3,
        ..scene
    };
    compare(2, &scene, 50);
}

#[test]
fn dense_piles() {
    // Hundreds of bodies in a few metres, around obstacles.
    let scene = Scene {
        size: 100 * 1024,
        origin: 48 * 1024,
        span: 4 * 1024,
        n: 400,
        radii: (200, 600),
        speed: 3000,
        boxes: 4,
        circles: 4,
        obstacle: 2048,
    };
    compare(3, &scene, 5);
    // All of them on a handful of points.
    let mut rng = Rng::new(4);
    let bodies: Vec<Body> = (1..=300)
        .map(|id| {
            let k = rng.range(0, 3);
            body(
                id,
                5000 + k * 10,
                5000,
                0,
                0,
                rng.range(100, 900),
                rng.range(1, MAX_MASS),
            )
        })
        .collect();
    let w = world(vec![], vec![circle(5000, 5000, 50)]);
    let expected = reference_step(&bodies, &w, 30);
    for threads in [1, 2, 4] {
        assert_eq!(
            with_threads(threads, || physics::step(&bodies, &w, 30)),
            expected
        );
    }
}

#[test]
fn extreme_coordinates() {
    // Near 0: velocities of −2^40 take bodies far below 0; circles reach below 0 too.
    let near_zero = Scene {
        size: MAX_COORD,
        origin: 0,
        span: 1 << 22,
        n: 150,
        radii: (MAX_RADIUS - 4096, MAX_RADIUS),
        speed: MAX_COORD,
        boxes: 10,
        circles: 10,
        obstacle: MAX_RADIUS,
    };
    compare(5, &near_zero, 4);
    // Near 2^40.
    let near_top = Scene {
        origin: MAX_COORD - (1 << 22),
        ..near_zero
    };
    compare(6, &near_top, 4);
    // Slow, huge bodies in a pile, among small obstacles (the index's wide squares).
    let pile = Scene {
        origin: MAX_COORD - (1 << 23),
        span: 1 << 22,
        n: 200,
        speed: 1 << 10,
        boxes: 200,
        circles: 200,
        obstacle: 5000,
        ..near_zero
    };
    compare(7, &pile, 2);
    // Small bodies, fast, near 0 and the edge of a huge world.
    let small = Scene {
        origin: 0,
        span: 1 << 16,
        n: 300,
        radii: (1, 64),
        speed: 1 << 22,
        boxes: 20,
        circles: 20,
        obstacle: 4096,
        ..near_zero
    };
    compare(8, &small, 4);
}

#[test]
fn clusters_at_opposite_corners_of_a_huge_world() {
    // Two piles 2^40 apart, each among its own obstacles: the grids of the contacts and of the
    // obstacles coarsen (their cells double) until they are small, and still find every pair.
    let mut rng = Rng::new(9);
    let far = MAX_COORD - 60_000;
    let bodies: Vec<Body> = (1..=400)
        .map(|id| {
            let at = if id % 2 == 0 { far } else { 10_000 };
            body(
                id,
                at + rng.range(0, 40_000),
                at + rng.range(0, 40_000),
                rng.range(-30_000, 30_000),
                rng.range(-30_000, 30_000),
                rng.range(100, 3000),
                rng.range(1, 100),
            )
        })
        .collect();
    let mut boxes = Vec::new();
    let mut circles = Vec::new();
    for at in [10_000, far] {
        for _ in 0..20 {
            let (x, y) = (at + rng.range(0, 40_000), at + rng.range(0, 40_000));
            boxes.push(rect(x, y, x + rng.range(0, 5000), y + rng.range(0, 5000)));
            circles.push(circle(
                at + rng.range(0, 40_000),
                at + rng.range(0, 40_000),
                800,
            ));
        }
    }
    let w = World::new(MAX_COORD, MAX_COORD, boxes, circles).unwrap();
    let expected = reference_step(&bodies, &w, 30);
    let alone = World::new(MAX_COORD, MAX_COORD, vec![], vec![]).unwrap();
    let bare = reference_step(&bodies, &alone, 30);
    let single = |b: &Body| reference_step(&[*b], &alone, 30)[0];
    let met = bodies
        .iter()
        .zip(&bare)
        .filter(|(b, e)| single(b) != **e)
        .count();
    let hit = expected.iter().zip(&bare).filter(|(e, b)| e != b).count();
    assert!(
        met > 100 && hit > 10,
        "{met} bodies met a body, {hit} an obstacle"
    );
    for threads in [1, 2, 4] {
        assert_eq!(
            with_threads(threads, || physics::step(&bodies, &w, 30)),
            expected
        );
    }
}

#[test]
fn bodies_far_outside_a_circle_that_reaches_below_zero() {
    // The body's square is wholly below x = 0 and the circle's bounding box reaches it: the
    // circle is met (an index by truncating division would miss it).
    let w = World::new(1 << 20, 1 << 20, vec![], vec![circle(0, 5000, 2000)]).unwrap();
    let b = body(1, 0, 5000, -300 * 30, 300 * 30, 100, 1);
    let expected = reference_step(&[b], &w, 30);
    assert_eq!(physics::step(&[b], &w, 30), expected);
    // qx = −300, qy = 5300: d = 424, push = 1676, (−300·1676) div 424 = −1185 → (−1485, 6485),
    // then the edges: x = 100.
    assert_eq!(expected, vec![(1, 100, 6485)]);
}

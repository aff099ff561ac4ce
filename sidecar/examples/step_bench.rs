//! Times the physics step on the scene of `mix overworld.bench.sidecar` (rooms of 40 m with
//! walls, doors and pillars; bodies of 0.5 m wandering), without the BEAM:
//!
//!     ./cargo.sh run --release --example step_bench -- [BODIES] [STEPS] [THREADS]
//!
//! The allocator is set up as `serve` sets it (`keep_memory`). Prints the check's and the
//! step's time per tick (p50, p99 of STEPS samples).

use overworld_sidecar::physics::{self, Body, Circle, Rect, World};
use std::time::Instant;

/// A small deterministic generator (xorshift64*), so runs compare.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: i64) -> i64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n as u64) as i64
    }
}

fn scene(n: usize, rng: &mut Rng) -> (World, Vec<Body>) {
    const UNIT: i64 = 1024;
    let side = 80.max(40 * ((n as f64 * 16.0).sqrt() / 40.0).ceil() as i64);
    let rooms = side / 40;
    let mut boxes = Vec::new();
    for i in 1..rooms {
        for j in 0..rooms {
            for (x0, y0, x1, y1) in [
                (i * 40, j * 40, i * 40 + 1, j * 40 + 17),
                (i * 40, j * 40 + 23, i * 40 + 1, j * 40 + 40),
                (j * 40, i * 40, j * 40 + 17, i * 40 + 1),
                (j * 40 + 23, i * 40, j * 40 + 40, i * 40 + 1),
            ] {
                boxes.push(Rect {
                    x0: x0 * UNIT,
                    y0: y0 * UNIT,
                    x1: x1 * UNIT,
                    y1: y1 * UNIT,
                });
            }
        }
    }
    let mut circles = Vec::new();
    for i in 0..rooms {
        for j in 0..rooms {
            circles.push(Circle {
                cx: (i * 40 + 20) * UNIT,
                cy: (j * 40 + 20) * UNIT,
                r: 2 * UNIT,
            });
        }
    }
    let world = World::new(side * UNIT, side * UNIT, boxes, circles).expect("a valid world");
    let bodies = (0..n)
        .map(|i| Body {
            id: i as i64 + 1,
            x: rng.below(side * UNIT - 2 * UNIT) + UNIT,
            y: rng.below(side * UNIT - 2 * UNIT) + UNIT,
            vx: rng.below(4096) - 2048,
            vy: rng.below(4096) - 2048,
            r: 512,
            m: 1,
        })
        .collect();
    (world, bodies)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("a number"))
        .collect();
    let n = args.first().copied().unwrap_or(10_000);
    let steps = args.get(1).copied().unwrap_or(300);
    let threads = args.get(2).copied().unwrap_or(2);
    // As `serve` does.
    overworld_sidecar::keep_memory();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let (world, mut bodies) = scene(n, &mut rng);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("a thread pool");
    let (mut checks, mut steps_ms) = (Vec::new(), Vec::new());
    for t in 0..steps {
        let t0 = Instant::now();
        physics::check(&bodies, 30).expect("valid bodies");
        let t1 = Instant::now();
        let out = pool.install(|| physics::step(&bodies, &world, 30));
        let t2 = Instant::now();
        checks.push((t1 - t0).as_secs_f64() * 1e3);
        steps_ms.push((t2 - t1).as_secs_f64() * 1e3);
        for (b, (_, x, y)) in bodies.iter_mut().zip(out) {
            b.x = x;
            b.y = y;
            if (t as i64 + b.id) % 20 == 0 {
                b.vx = rng.below(4096) - 2048;
                b.vy = rng.below(4096) - 2048;
            }
        }
    }
    checks.sort_by(f64::total_cmp);
    steps_ms.sort_by(f64::total_cmp);
    println!(
        "{n} bodies, {threads} threads, {steps} steps: check p50 {:.3} ms, step p50 {:.3} ms p99 {:.3} ms",
        percentile(&checks, 0.5),
        percentile(&steps_ms, 0.5),
        percentile(&steps_ms, 0.99)
    );
}

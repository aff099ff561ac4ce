//! The executable: its test frames, refusals and arguments.

mod common;

use common::Rng;
use overworld_sidecar::frames::{self, PathInput, StepInput};
use overworld_sidecar::nav::PathError;
use overworld_sidecar::physics::{Body, Circle, Rect, MAX_COORD, MAX_RADIUS};
use std::io::Write;
use std::process::{Command, Output, Stdio};

fn run(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_overworld-sidecar"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the sidecar");
    let mut stdin = child.stdin.take().unwrap();
    // The child may exit before reading everything (bad arguments): a broken pipe is fine.
    let _ = stdin.write_all(input);
    drop(stdin);
    child.wait_with_output().unwrap()
}

fn refused(args: &[&str], input: &[u8]) -> String {
    let out = run(args, input);
    assert_eq!(out.status.code(), Some(2), "{args:?}");
    assert!(out.stdout.is_empty(), "{args:?}");
    String::from_utf8(out.stderr).unwrap()
}

fn two_bodies() -> StepInput {
    StepInput {
        width: 10_240,
        height: 10_240,
        tick_rate: 30,
        boxes: vec![],
        circles: vec![],
        bodies: vec![
            Body {
                id: 1,
                x: 5000,
                y: 5000,
                vx: 0,
                vy: 0,
                r: 512,
                m: 1,
            },
            Body {
                id: 2,
                x: 5600,
                y: 5000,
                vx: 0,
                vy: 0,
                r: 512,
                m: 1,
            },
        ],
    }
}

#[test]
fn step_answers_a_frame() {
    let out = run(&["step", "--threads", "2"], &two_bodies().encode());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        out.stdout,
        frames::encode_step_answer(&[(1, 4788, 5000), (2, 5812, 5000)])
    );
    // Byte for byte: "OWPR", version 1, n = 2, then (id, x, y) twice.
    let mut expected = b"OWPR".to_vec();
    expected.extend_from_slice(&1u32.to_le_bytes());
    for v in [2i64, 1, 4788, 5000, 2, 5812, 5000] {
        expected.extend_from_slice(&v.to_le_bytes());
    }
    assert_eq!(out.stdout, expected);
    // No bodies.
    let empty = StepInput {
        bodies: vec![],
        ..two_bodies()
    };
    let out = run(&["step"], &empty.encode());
    assert_eq!(frames::decode_step_answer(&out.stdout), Ok(vec![]));
}

#[test]
fn path_answers_a_frame() {
    let input = PathInput {
        width: 8 * 1024,
        height: 8 * 1024,
        cell: 1024,
        agent: 0,
        max_nodes: 20_000,
        boxes: vec![Rect {
            x0: 3100,
            y0: 0,
            x1: 4000,
            y1: 6000,
        }],
        circles: vec![Circle {
            cx: 7000,
            cy: 7000,
            r: 100,
        }],
        queries: vec![
            ((512, 512), (7 * 1024 + 100, 200)),
            ((3500, 100), (512, 512)),
            ((512, 512), (512, 600)),
            ((512, 512), (7000, 7000)),
        ],
    };
    let out = run(&["path"], &input.encode());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nav = input.nav().unwrap();
    let expected: Vec<_> = input.queries.iter().map(|&(f, t)| nav.path(f, t)).collect();
    assert_eq!(frames::decode_path_answer(&out.stdout).unwrap(), expected);
    assert_eq!(expected[1], Err(PathError::Blocked));
    assert_eq!(expected[2], Ok(vec![(512, 600)]));
    assert_eq!(expected[3], Err(PathError::Blocked));
    assert_eq!(out.stdout, frames::encode_path_answer(&expected));
}

#[test]
fn any_thread_count_gives_the_same_bytes() {
    let mut rng = Rng::new(3);
    let bodies = (1..=3000)
        .map(|id| Body {
            id,
            x: rng.range(0, 100_000),
            y: rng.range(0, 100_000),
            vx: rng.range(-5000, 5000),
            vy: rng.range(-5000, 5000),
            r: rng.range(200, 800),
            m: rng.range(1, 65_535),
        })
        .collect();
    let boxes = (0..50)
        .map(|_| {
            let (x0, y0) = (rng.range(0, 100_000), rng.range(0, 100_000));
            Rect {
                x0,
                y0,
                x1: x0 + rng.range(0, 5000),
                y1: y0 + rng.range(0, 5000),
            }
        })
        .collect();
    let step = StepInput {
        width: 100_000,
        height: 100_000,
        tick_rate: 30,
        boxes,
        circles: vec![],
        bodies,
    };
    let one = run(&["step", "--threads", "1"], &step.encode());
    assert!(one.status.success());
    assert_eq!(frames::decode_step_answer(&one.stdout).unwrap().len(), 3000);
    for t in ["2", "4"] {
        assert_eq!(
            run(&["step", "--threads", t], &step.encode()).stdout,
            one.stdout
        );
    }
    let queries = (0..300)
        .map(|_| {
            let mut p = || (rng.range(0, 100_000), rng.range(0, 100_000));
            (p(), p())
        })
        .collect();
    let path = PathInput {
        width: 100_000,
        height: 100_000,
        cell: 1024,
        agent: 512,
        max_nodes: 5_000,
        boxes: step.boxes.clone(),
        circles: vec![],
        queries,
    };
    let one = run(&["path", "--threads", "1"], &path.encode());
    assert!(one.status.success());
    for t in ["2", "4"] {
        assert_eq!(
            run(&["path", "--threads", t], &path.encode()).stdout,
            one.stdout
        );
    }
}

#[test]
fn out_of_range_frames_are_refused() {
    let ok = two_bodies();
    let b = ok.bodies[0];
    let bad_steps = [
        StepInput {
            tick_rate: 0,
            ..ok.clone()
        },
        StepInput {
            tick_rate: 1001,
            ..ok.clone()
        },
        StepInput {
            width: 0,
            ..ok.clone()
        },
        StepInput {
            height: MAX_COORD + 1,
            ..ok.clone()
        },
        StepInput {
            boxes: vec![Rect {
                x0: 5,
                y0: 0,
                x1: 4,
                y1: 1,
            }],
            ..ok.clone()
        },
        StepInput {
            boxes: vec![Rect {
                x0: -1,
                y0: 0,
                x1: 4,
                y1: 1,
            }],
            ..ok.clone()
        },
        StepInput {
            circles: vec![Circle {
                cx: 1,
                cy: 1,
                r: MAX_RADIUS + 1,
            }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body { m: 0, ..b }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body { m: 65_536, ..b }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body { r: 0, ..b }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body {
                x: MAX_COORD + 1,
                ..b
            }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body {
                vy: -MAX_COORD - 1,
                ..b
            }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![Body { id: 0, ..b }],
            ..ok.clone()
        },
        StepInput {
            bodies: vec![b, b],
            ..ok.clone()
        },
    ];
    for input in bad_steps {
        let err = refused(&["step"], &input.encode());
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with("overworld-sidecar: refused frame: "),
            "{err}"
        );
    }
    let path = PathInput {
        width: 8192,
        height: 8192,
        cell: 1024,
        agent: 0,
        max_nodes: 100,
        boxes: vec![],
        circles: vec![],
        queries: vec![((0, 0), (100, 100))],
    };
    assert!(run(&["path"], &path.encode()).status.success());
    let bad_paths = [
        PathInput {
            cell: 0,
            ..path.clone()
        },
        PathInput {
            cell: (1 << 20) + 1,
            ..path.clone()
        },
        PathInput {
            agent: -1,
            ..path.clone()
        },
        PathInput {
            max_nodes: 0,
            ..path.clone()
        },
        PathInput {
            width: MAX_COORD,
            height: MAX_COORD,
            ..path.clone()
        },
        PathInput {
            queries: vec![((-1, 0), (100, 100))],
            ..path.clone()
        },
        PathInput {
            queries: vec![((0, 0), (100, MAX_COORD + 1))],
            ..path.clone()
        },
        PathInput {
            circles: vec![Circle { cx: 1, cy: 1, r: 0 }],
            ..path.clone()
        },
    ];
    for input in bad_paths {
        let err = refused(&["path"], &input.encode());
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn frames_that_do_not_parse_are_refused() {
    let good = two_bodies().encode();
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        good[..7].to_vec(),
        good[..good.len() - 1].to_vec(),
        [&good[..], &[0]].concat(),
        [&good[..], &[0; 8]].concat(),
        [b"OWPX", &good[4..]].concat(),
        [b"OWNS", &good[4..]].concat(),
    ];
    let mut version2 = good.clone();
    version2[4] = 2;
    cases.push(version2);
    // Counts (words 3, 4, 5 after the header: nb, nc, n): negative, huge, off by one.
    for (word, value) in [
        (3, -1i64),
        (5, -1),
        (5, i64::MAX),
        (5, 1 << 40),
        (5, 3),
        (5, 1),
        (4, 1),
    ] {
        let mut frame = good.clone();
        let at = 8 + word * 8;
        frame[at..at + 8].copy_from_slice(&value.to_le_bytes());
        cases.push(frame);
    }
    for frame in cases {
        let err = refused(&["step"], &frame);
        assert_eq!(err.lines().count(), 1, "{err}");
    }
    refused(&["path"], &good);
}

#[test]
fn bad_arguments_print_the_usage() {
    let frame = two_bodies().encode();
    for args in [
        &[][..],
        &["serve"],
        &["stpe"],
        &["step", "--threads"],
        &["step", "--threads", "0"],
        &["step", "--threads", "x"],
        &["step", "--threads", "2", "--threads", "2"],
        &["step", "--bogus"],
        &["path", "4"],
    ] {
        let err = refused(args, &frame);
        assert!(
            err.contains("usage: overworld-sidecar step"),
            "{args:?}: {err}"
        );
    }
    let help = run(&["help"], b"");
    assert!(help.status.success());
    assert!(String::from_utf8(help.stdout).unwrap().contains("usage:"));
}

//! `overworld-sidecar serve`: the executable started as a zone starts it, spoken to over its
//! Unix socket by 1, 2 and 4 workers (threads), with the records in the frames or in a shared
//! segment in /dev/shm; its answers compared with `physics::step` over the stripes' bodies
//! together and with `Nav::path`; its refusals, its end, and its faults.

mod common;

use common::Rng;
use overworld_sidecar::nav::{Nav, Path, PathError, Query};
use overworld_sidecar::physics::{self, Body, Circle, Rect, World};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const EXE: &str = env!("CARGO_BIN_EXE_overworld-sidecar");
/// How long a test waits for an answer that must come.
const PATIENCE: Duration = Duration::from_secs(20);

/// A name no other test (or test run) uses.
fn unique(what: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    format!(
        "ow-serve-test-{}-{}-{what}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

// ---------------------------------------------------------------------------------------------
// The process.

/// A running `serve`, killed (if still running) and its socket removed when dropped.
struct Sidecar {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    socket: PathBuf,
}

impl Sidecar {
    /// Starts `serve --socket … --stripes N` with `extra` arguments, and reads its ready line.
    fn start(stripes: usize, extra: &[&str]) -> Sidecar {
        let socket = std::env::temp_dir().join(unique("sock"));
        let mut child = Command::new(EXE)
            .arg("serve")
            .arg("--socket")
            .arg(&socket)
            .args(["--stripes", &stripes.to_string(), "--threads", "2"])
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the sidecar");
        let stdin = child.stdin.take();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "overworld-sidecar ready 1\n");
        Sidecar {
            child,
            stdin,
            stdout,
            socket,
        }
    }

    fn connect(&self) -> Client {
        let stream = UnixStream::connect(&self.socket).expect("connect to the sidecar");
        stream.set_read_timeout(Some(PATIENCE)).unwrap();
        Client { stream }
    }

    /// Closes its standard input; its exit status, waited for at most `limit`.
    fn close_stdin(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        drop(self.stdin.take());
        self.wait(limit)
    }

    /// Its exit status, waited for at most `limit`.
    fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if start.elapsed() > limit {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// A worker's connection.
struct Client {
    stream: UnixStream,
}

impl Client {
    /// Sends one frame (`u32` big-endian length, then `payload`).
    fn send(&mut self, payload: &[u8]) {
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        self.stream.write_all(&frame).unwrap();
    }

    /// The next frame's payload; `None` at the end of the connection.
    fn recv(&mut self) -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        match self.stream.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return None,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return None,
            Err(e) => panic!("reading a frame: {e}"),
        }
        let mut payload = vec![0; u32::from_be_bytes(len) as usize];
        self.stream.read_exact(&mut payload).unwrap();
        Some(payload)
    }

    /// Whether nothing comes for `wait` (and the connection is still open).
    fn silent_for(&mut self, wait: Duration) -> bool {
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let mut byte = [0u8; 1];
        let silent = match self.stream.read(&mut byte) {
            Err(e) => matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            Ok(_) => false,
        };
        self.stream.set_read_timeout(Some(PATIENCE)).unwrap();
        silent
    }

    /// Everything until the end of the connection.
    fn rest(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        match self.stream.read_to_end(&mut all) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("reading to the end: {e}"),
        }
        all
    }

    /// Says hello and expects the welcome.
    fn hello(&mut self, zone: &Zone, stripe: i64, stripes: i64, transport: i64) {
        self.send(&zone.hello(stripe, stripes, transport));
        assert_eq!(self.recv().expect("a welcome"), welcome());
    }

    /// Sends a hello that must be refused: the error frame's message, then the end.
    fn refused_hello(&mut self, hello: &[u8]) -> String {
        self.send(hello);
        let error = self.recv().expect("an error frame");
        let (tick, message) = decode_error(&error);
        assert_eq!(tick, 0);
        assert_eq!(self.recv(), None, "closed after the error");
        message
    }
}

// ---------------------------------------------------------------------------------------------
// The frames, written here from the specification (not with the crate's encoders).

fn words(out: &mut Vec<u8>, values: &[i64]) {
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn word(buf: &[u8], k: usize) -> i64 {
    i64::from_le_bytes(buf[8 * k..8 * k + 8].try_into().unwrap())
}

fn welcome() -> Vec<u8> {
    let mut out = b"OWSA".to_vec();
    words(&mut out, &[1]);
    out
}

/// The zone: its world and navigation options, as a hello carries them.
#[derive(Clone, Debug)]
struct Zone {
    tick_rate: i64,
    width: i64,
    height: i64,
    cell: i64,
    agent: i64,
    max_nodes: i64,
    boxes: Vec<Rect>,
    circles: Vec<Circle>,
}

impl Zone {
    fn random(rng: &mut Rng) -> Zone {
        let size = 120_000;
        let boxes = (0..rng.range(0, 12))
            .map(|_| {
                let (x0, y0) = (rng.range(0, size), rng.range(0, size));
                Rect {
                    x0,
                    y0,
                    x1: x0 + rng.range(0, 6000),
                    y1: y0 + rng.range(0, 6000),
                }
            })
            .collect();
        let circles = (0..rng.range(0, 8))
            .map(|_| Circle {
                cx: rng.range(0, size),
                cy: rng.range(0, size),
                r: rng.range(100, 3000),
            })
            .collect();
        Zone {
            tick_rate: [10, 30, 60][rng.range(0, 2) as usize],
            width: size,
            height: size,
            cell: 1024,
            agent: rng.range(0, 600),
            max_nodes: 3000,
            boxes,
            circles,
        }
    }

    fn empty() -> Zone {
        Zone {
            tick_rate: 30,
            width: 10_240,
            height: 10_240,
            cell: 1024,
            agent: 0,
            max_nodes: 20_000,
            boxes: vec![],
            circles: vec![],
        }
    }

    fn hello(&self, stripe: i64, stripes: i64, transport: i64) -> Vec<u8> {
        let mut out = b"OWSH".to_vec();
        words(
            &mut out,
            &[
                1,
                stripe,
                stripes,
                transport,
                self.tick_rate,
                self.width,
                self.height,
                self.cell,
                self.agent,
                self.max_nodes,
                self.boxes.len() as i64,
                self.circles.len() as i64,
            ],
        );
        for b in &self.boxes {
            words(&mut out, &[b.x0, b.y0, b.x1, b.y1]);
        }
        for c in &self.circles {
            words(&mut out, &[c.cx, c.cy, c.r]);
        }
        out
    }

    fn world(&self) -> World {
        World::new(
            self.width,
            self.height,
            self.boxes.clone(),
            self.circles.clone(),
        )
        .unwrap()
    }

    fn nav(&self) -> Nav {
        Nav::new(&self.world(), self.cell, self.agent, self.max_nodes).unwrap()
    }
}

/// One stripe's request for a tick.
#[derive(Clone, Debug, Default)]
struct Req {
    tick: i64,
    bodies: Vec<Body>,
    queries: Vec<(i64, Query)>,
}

impl Req {
    /// Its records: `(id x y vx vy r m 0)*n (tag fx fy tx ty 0 0 0)*q`.
    fn records(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for b in &self.bodies {
            words(&mut out, &[b.id, b.x, b.y, b.vx, b.vy, b.r, b.m, 0]);
        }
        for &(tag, ((fx, fy), (tx, ty))) in &self.queries {
            words(&mut out, &[tag, fx, fy, tx, ty, 0, 0, 0]);
        }
        out
    }

    fn header(&self) -> [i64; 3] {
        [
            self.tick,
            self.bodies.len() as i64,
            self.queries.len() as i64,
        ]
    }

    /// The socket frame.
    fn frame(&self) -> Vec<u8> {
        let mut out = b"OWSQ".to_vec();
        words(&mut out, &self.header());
        out.extend_from_slice(&self.records());
        out
    }

    /// The shm frame: `"OWSQ" tick n q seq`.
    fn shm_frame(&self, seq: i64) -> Vec<u8> {
        let mut out = b"OWSQ".to_vec();
        words(&mut out, &self.header());
        words(&mut out, &[seq]);
        out
    }
}

/// An answer.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Answer {
    tick: i64,
    results: Vec<(i64, i64, i64)>,
    paths: Vec<(i64, Path)>,
}

impl Answer {
    /// Its records: `(id x y 0)*n (tag status k (x y)*k)*q`.
    fn records(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for &(id, x, y) in &self.results {
            words(&mut out, &[id, x, y, 0]);
        }
        for (tag, path) in &self.paths {
            let (status, points): (i64, &[(i64, i64)]) = match path {
                Ok(p) => (0, p),
                Err(PathError::Blocked) => (1, &[]),
                Err(PathError::Unreachable) => (2, &[]),
                Err(PathError::TooFar) => (3, &[]),
            };
            words(&mut out, &[*tag, status, points.len() as i64]);
            for &(x, y) in points {
                words(&mut out, &[x, y]);
            }
        }
        out
    }

    /// The socket frame: `"OWSR" tick n q` and its records.
    fn frame(&self) -> Vec<u8> {
        let mut out = b"OWSR".to_vec();
        words(
            &mut out,
            &[
                self.tick,
                self.results.len() as i64,
                self.paths.len() as i64,
            ],
        );
        out.extend_from_slice(&self.records());
        out
    }
}

/// Reads answer records (`n` results, `q` paths), checking every word.
fn decode_records(tick: i64, n: usize, q: usize, buf: &[u8]) -> Answer {
    assert_eq!(buf.len() % 8, 0);
    let mut k = 0;
    let mut next = || {
        k += 1;
        word(buf, k - 1)
    };
    let mut results = Vec::new();
    for _ in 0..n {
        let r = (next(), next(), next());
        assert_eq!(next(), 0, "a result's fourth word");
        results.push(r);
    }
    let mut paths = Vec::new();
    for _ in 0..q {
        let (tag, status, count) = (next(), next(), next());
        let points: Vec<(i64, i64)> = (0..count).map(|_| (next(), next())).collect();
        let path = match status {
            0 => Ok(points),
            _ => {
                assert_eq!(count, 0);
                Err([
                    PathError::Blocked,
                    PathError::Unreachable,
                    PathError::TooFar,
                ][status as usize - 1])
            }
        };
        paths.push((tag, path));
    }
    assert_eq!(k * 8, buf.len(), "no bytes after the records");
    Answer {
        tick,
        results,
        paths,
    }
}

/// Reads a socket answer.
fn decode_answer(buf: &[u8]) -> Answer {
    assert_eq!(&buf[0..4], b"OWSR", "{:?}", String::from_utf8_lossy(buf));
    let body = &buf[4..];
    let (tick, n, q) = (word(body, 0), word(body, 1), word(body, 2));
    decode_records(tick, n as usize, q as usize, &body[24..])
}

/// Reads an error frame: its tick and message.
fn decode_error(buf: &[u8]) -> (i64, String) {
    assert_eq!(&buf[0..4], b"OWSE", "{:?}", String::from_utf8_lossy(buf));
    (
        word(&buf[4..], 0),
        String::from_utf8(buf[12..].to_vec()).unwrap(),
    )
}

/// What the sidecar must answer each stripe: one step over all the stripes' bodies, in stripe
/// order, and each query's path.
fn expected(zone: &Zone, world: &World, nav: &Nav, reqs: &[Req]) -> Vec<Answer> {
    let all: Vec<Body> = reqs.iter().flat_map(|r| r.bodies.clone()).collect();
    let stepped = physics::step(&all, world, zone.tick_rate);
    let mut at = 0;
    reqs.iter()
        .map(|r| {
            let results = stepped[at..at + r.bodies.len()].to_vec();
            at += r.bodies.len();
            let paths = r
                .queries
                .iter()
                .map(|&(tag, (from, to))| (tag, nav.path(from, to)))
                .collect();
            Answer {
                tick: r.tick,
                results,
                paths,
            }
        })
        .collect()
}

/// Random bodies (ids `ids`), dense enough for contacts, and path queries.
fn random_req(rng: &mut Rng, zone: &Zone, tick: i64, ids: &[i64], queries: usize) -> Req {
    let bodies = ids
        .iter()
        .map(|&id| Body {
            id,
            x: rng.range(0, zone.width / 3),
            y: rng.range(0, zone.height / 3),
            vx: rng.range(-8000, 8000),
            vy: rng.range(-8000, 8000),
            r: rng.range(200, 900),
            m: rng.range(1, 65_535),
        })
        .collect();
    let queries = (0..queries)
        .map(|_| {
            let tag = rng.range(-1000, 1000);
            let mut p = || (rng.range(0, zone.width - 1), rng.range(0, zone.height - 1));
            (tag, (p(), p()))
        })
        .collect();
    Req {
        tick,
        bodies,
        queries,
    }
}

/// The ids `1..=total` shuffled and cut in `stripes` parts of random sizes (some maybe empty).
fn split_ids(rng: &mut Rng, total: i64, stripes: usize) -> Vec<Vec<i64>> {
    let mut ids: Vec<i64> = (1..=total).collect();
    rng.shuffle(&mut ids);
    let mut cuts: Vec<usize> = (1..stripes).map(|_| rng.range(0, total) as usize).collect();
    cuts.push(0);
    cuts.push(total as usize);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| ids[w[0]..w[1]].to_vec()).collect()
}

/// The requests of several ticks: each tick's bodies where the last one left them (and some
/// random new ones), with new queries.
fn ticks(rng: &mut Rng, zone: &Zone, stripes: usize, count: usize) -> Vec<Vec<Req>> {
    let (world, nav) = (zone.world(), zone.nav());
    let total = rng.range(0, 1500);
    let parts = split_ids(rng, total, stripes);
    let mut reqs: Vec<Req> = parts
        .iter()
        .map(|ids| {
            let q = rng.range(0, 6) as usize;
            random_req(rng, zone, 1, ids, q)
        })
        .collect();
    let mut all = Vec::new();
    for t in 0..count {
        all.push(reqs.clone());
        let answers = expected(zone, &world, &nav, &reqs);
        for (r, a) in reqs.iter_mut().zip(&answers) {
            r.tick = t as i64 + 2;
            for (b, &(id, x, y)) in r.bodies.iter_mut().zip(&a.results) {
                assert_eq!(b.id, id);
                (b.x, b.y) = (x, y);
            }
            let q = rng.range(0, 6) as usize;
            let fresh = random_req(rng, zone, 0, &[], q);
            r.queries = fresh.queries;
        }
    }
    all
}

/// `stripes` workers, each on its own connection and thread: hello, then every tick's request
/// and its answer. The answers, by tick then stripe.
fn run_workers(sidecar: &Sidecar, zone: &Zone, ticks: &[Vec<Req>]) -> Vec<Vec<Answer>> {
    let stripes = ticks[0].len();
    let per_stripe: Vec<Vec<Answer>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..stripes)
            .map(|s| {
                let mut client = sidecar.connect();
                scope.spawn(move || {
                    client.hello(zone, s as i64, stripes as i64, 0);
                    ticks
                        .iter()
                        .map(|reqs| {
                            client.send(&reqs[s].frame());
                            decode_answer(&client.recv().expect("an answer"))
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    (0..ticks.len())
        .map(|t| per_stripe.iter().map(|a| a[t].clone()).collect())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The process: its ready line, its end, its arguments.

#[test]
fn says_ready_and_exits_at_the_end_of_its_standard_input() {
    let mut sidecar = Sidecar::start(2, &[]);
    // With connections open, one of them mid-tick.
    let zone = Zone::empty();
    let mut a = sidecar.connect();
    a.hello(&zone, 0, 2, 0);
    a.send(
        &Req {
            tick: 1,
            ..Req::default()
        }
        .frame(),
    );
    let _b = sidecar.connect();
    let start = Instant::now();
    let status = sidecar
        .close_stdin(Duration::from_secs(1))
        .expect("exited within a second");
    assert!(status.success(), "{status:?}");
    assert!(start.elapsed() < Duration::from_secs(1));
    // Nothing after the ready line on its standard output.
    let mut rest = String::new();
    sidecar.stdout.read_to_string(&mut rest).unwrap();
    assert_eq!(rest, "");
    assert_eq!(a.recv(), None);
}

#[test]
fn a_stale_socket_file_is_replaced() {
    let socket = std::env::temp_dir().join(unique("stale"));
    std::fs::write(&socket, b"stale").unwrap();
    let mut child = Command::new(EXE)
        .arg("serve")
        .arg("--socket")
        .arg(&socket)
        .args(["--stripes", "1"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "overworld-sidecar ready 1\n");
    let mut c = Client {
        stream: UnixStream::connect(&socket).unwrap(),
    };
    c.hello(&Zone::empty(), 0, 1, 0);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    let _ = std::fs::remove_file(&socket);
}

#[test]
fn bad_arguments_and_fatal_errors() {
    let run = |args: &[&str]| {
        let out = Command::new(EXE)
            .args(args)
            .stdin(Stdio::piped())
            .output()
            .unwrap();
        assert!(out.stdout.is_empty(), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        (out.status.code(), err)
    };
    let sock = std::env::temp_dir().join(unique("args"));
    let sock = sock.to_str().unwrap();
    // `serve --socket SOCK --stripes 2` and `more`.
    let two =
        |more: &[&'static str]| [&["serve", "--socket", sock, "--stripes", "2"][..], more].concat();
    for args in [
        vec!["serve", "--stripes", "2"],
        vec!["serve", "--socket", sock],
        vec!["serve", "--socket", sock, "--stripes", "0"],
        vec!["serve", "--socket", sock, "--stripes", "x"],
        two(&["--stripes", "2"]),
        two(&["--threads", "0"]),
        two(&["--fault", "kill"]),
        two(&["--fault", "kill:0"]),
        two(&["--fault", "boom:1"]),
        two(&["--fault", "late:1"]),
        two(&["--fault", "half:1"]),
        two(&["--bogus"]),
        vec!["serve", "--socket"],
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}");
        assert!(err.contains("usage:"), "{args:?}: {err}");
    }
    // A socket that cannot be bound; a shared segment that is missing or does not match.
    let shm = PathBuf::from("/dev/shm").join(unique("args"));
    let shm_arg = shm.to_str().unwrap();
    let bad_socket = "/nonexistent-directory/sidecar.sock";
    let shm_args = |stripes| vec!["--socket", sock, "--stripes", stripes, "--shm", shm_arg];
    let cases: Vec<(Vec<&str>, Option<Vec<u8>>)> = vec![
        (vec!["--socket", bad_socket, "--stripes", "1"], None),
        (shm_args("1"), None),
        (
            shm_args("1"),
            Some(segment_header(b"OWSX", 1, 1, 128, 128, 320)),
        ),
        (
            shm_args("2"),
            Some(segment_header(b"OWSS", 1, 1, 128, 128, 320)),
        ),
        (
            shm_args("1"),
            Some(segment_header(b"OWSS", 2, 1, 128, 128, 320)),
        ),
        (
            shm_args("1"),
            Some(segment_header(b"OWSS", 1, 1, 100, 156, 320)),
        ),
        (
            shm_args("1"),
            Some(segment_header(b"OWSS", 1, 1, 128, 128, 384)),
        ),
        (
            shm_args("1"),
            Some(segment_header(b"OWSS", 1, 1, 0, 256, 320)),
        ),
    ];
    for (args, header) in cases {
        if let Some(header) = &header {
            // A file of 320 bytes: its header, zeros.
            let mut bytes = header.clone();
            bytes.resize(320, 0);
            std::fs::write(&shm, bytes).unwrap();
        }
        let mut all = vec!["serve"];
        all.extend(&args);
        let (code, err) = run(&all);
        assert_eq!(code, Some(1), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        let _ = std::fs::remove_file(&shm);
    }
    let _ = std::fs::remove_file(sock);
}

// ---------------------------------------------------------------------------------------------
// Steps.

#[test]
fn answers_are_one_step_over_all_stripes_with_1_2_and_4_workers() {
    let mut rng = Rng::new(17);
    for stripes in [1, 2, 4] {
        for round in 0..2 {
            let zone = Zone::random(&mut rng);
            let ticks = ticks(&mut rng, &zone, stripes, 4);
            let sidecar = Sidecar::start(stripes, &[]);
            let got = run_workers(&sidecar, &zone, &ticks);
            let (world, nav) = (zone.world(), zone.nav());
            for (t, reqs) in ticks.iter().enumerate() {
                let want = expected(&zone, &world, &nav, reqs);
                assert_eq!(got[t], want, "{stripes} stripes, round {round}, tick {t}");
                // Byte for byte, too.
                assert_eq!(
                    got[t].iter().map(Answer::frame).collect::<Vec<_>>(),
                    want.iter().map(Answer::frame).collect::<Vec<_>>()
                );
            }
        }
    }
}

#[test]
fn contacts_across_stripes_are_resolved_together() {
    // Two bodies overlapping, one in each stripe: each is pushed by the other.
    let zone = Zone::empty();
    let body = |id, x| Body {
        id,
        x,
        y: 5000,
        vx: 0,
        vy: 0,
        r: 512,
        m: 1,
    };
    let reqs = vec![vec![
        Req {
            tick: 9,
            bodies: vec![body(1, 5000)],
            queries: vec![(42, ((512, 512), (512, 600)))],
        },
        Req {
            tick: 9,
            bodies: vec![body(2, 5600)],
            queries: vec![],
        },
    ]];
    let sidecar = Sidecar::start(2, &[]);
    let got = run_workers(&sidecar, &zone, &reqs);
    assert_eq!(got[0][0].results, vec![(1, 4788, 5000)]);
    assert_eq!(got[0][1].results, vec![(2, 5812, 5000)]);
    assert_eq!(got[0][0].paths, vec![(42, Ok(vec![(512, 600)]))]);
    assert_eq!(got[0][1].tick, 9);
}

/// Two workers of a 2-stripe sidecar, hello'd for `zone` (stripes 0 and 1) on `transport`.
fn two_workers(sidecar: &Sidecar, zone: &Zone, transport: i64) -> (Client, Client) {
    let mut a = sidecar.connect();
    let mut b = sidecar.connect();
    a.hello(zone, 0, 2, transport);
    b.hello(zone, 1, 2, transport);
    (a, b)
}

fn body(id: i64, x: i64) -> Body {
    Body {
        id,
        x,
        y: 5000,
        vx: 300,
        vy: 0,
        r: 100,
        m: 10,
    }
}

fn req(tick: i64, bodies: Vec<Body>) -> Req {
    Req {
        tick,
        bodies,
        queries: vec![],
    }
}

/// Workers `a` and `b` (stripes 0 and 1) get their shares of one step over `reqs`.
fn answered(
    a: &mut Client,
    b: &mut Client,
    (zone, world, nav): (&Zone, &World, &Nav),
    reqs: &[Req],
) {
    let want = expected(zone, world, nav, reqs);
    assert_eq!(decode_answer(&a.recv().unwrap()), want[0]);
    assert_eq!(decode_answer(&b.recv().unwrap()), want[1]);
}

#[test]
fn a_newer_request_replaces_an_older_one() {
    let zone = Zone::empty();
    let (world, nav) = (zone.world(), zone.nav());
    let sidecar = Sidecar::start(2, &[]);
    let (mut a, mut b) = two_workers(&sidecar, &zone, 0);
    // Stripe 1 waits with tick 1 while stripe 0 is at tick 2: no step until stripe 1's newer
    // request (tick 2) replaces its older one.
    b.send(&req(1, vec![body(2, 8000)]).frame());
    a.send(&req(2, vec![body(1, 2000)]).frame());
    assert!(a.silent_for(Duration::from_millis(200)));
    b.send(&req(2, vec![body(2, 9000)]).frame());
    answered(
        &mut a,
        &mut b,
        (&zone, &world, &nav),
        &[req(2, vec![body(1, 2000)]), req(2, vec![body(2, 9000)])],
    );
    // Stripe 0's tick 3 is replaced by its tick 4 before stripe 1 gets there: tick 3 is never
    // answered.
    a.send(&req(3, vec![body(1, 3000)]).frame());
    a.send(&req(4, vec![body(1, 4000), body(4, 40)]).frame());
    b.send(&req(4, vec![body(2, 9000)]).frame());
    answered(
        &mut a,
        &mut b,
        (&zone, &world, &nav),
        &[
            req(4, vec![body(1, 4000), body(4, 40)]),
            req(4, vec![body(2, 9000)]),
        ],
    );
    // A newer request for the same tick replaces the one waiting (given the time to arrive).
    a.send(&req(5, vec![body(1, 3000)]).frame());
    a.send(&req(5, vec![body(1, 3500), body(3, 100)]).frame());
    std::thread::sleep(Duration::from_millis(300));
    b.send(&req(5, vec![body(2, 7000)]).frame());
    answered(
        &mut a,
        &mut b,
        (&zone, &world, &nav),
        &[
            req(5, vec![body(1, 3500), body(3, 100)]),
            req(5, vec![body(2, 7000)]),
        ],
    );
    assert!(a.silent_for(Duration::from_millis(100)));
    assert!(b.silent_for(Duration::from_millis(1)));
}

#[test]
fn refused_steps_answer_an_error_frame_to_every_stripe() {
    let zone = Zone::empty();
    let sidecar = Sidecar::start(2, &[]);
    let (mut a, mut b) = two_workers(&sidecar, &zone, 0);
    let bad_bodies = [
        Body { m: 0, ..body(1, 1) },
        Body {
            m: 65_536,
            ..body(1, 1)
        },
        Body { r: 0, ..body(1, 1) },
        Body {
            r: (1 << 20) + 1,
            ..body(1, 1)
        },
        Body {
            x: -1,
            ..body(1, 1)
        },
        Body {
            y: (1 << 40) + 1,
            ..body(1, 1)
        },
        Body {
            vx: (1 << 40) + 1,
            ..body(1, 1)
        },
        Body {
            vy: -(1 << 40) - 1,
            ..body(1, 1)
        },
        Body {
            id: 0,
            ..body(1, 1)
        },
        // The same id as stripe 1's body.
        body(2, 1),
    ];
    let mut tick = 10;
    for bad in bad_bodies {
        tick += 1;
        a.send(&req(tick, vec![body(5, 500), bad]).frame());
        b.send(&req(tick, vec![body(2, 9000)]).frame());
        for c in [&mut a, &mut b] {
            let (t, message) = decode_error(&c.recv().unwrap());
            assert_eq!(t, tick);
            assert!(!message.is_empty());
        }
    }
    // Duplicates within a stripe, and a query point out of range.
    tick += 1;
    a.send(&req(tick, vec![body(5, 500), body(5, 600)]).frame());
    b.send(&req(tick, vec![]).frame());
    assert_eq!(decode_error(&a.recv().unwrap()).0, tick);
    assert_eq!(decode_error(&b.recv().unwrap()).0, tick);
    for point in [(-1, 5), (5, (1 << 40) + 1)] {
        tick += 1;
        a.send(&req(tick, vec![]).frame());
        b.send(
            &Req {
                tick,
                bodies: vec![],
                queries: vec![(1, ((5, 5), point))],
            }
            .frame(),
        );
        assert_eq!(decode_error(&a.recv().unwrap()).0, tick);
        assert_eq!(decode_error(&b.recv().unwrap()).0, tick);
    }
    // The next good tick is answered.
    tick += 1;
    a.send(&req(tick, vec![body(1, 500)]).frame());
    b.send(&req(tick, vec![body(2, 9000)]).frame());
    assert_eq!(decode_answer(&a.recv().unwrap()).results.len(), 1);
    assert_eq!(decode_answer(&b.recv().unwrap()).tick, tick);
}

#[test]
fn hellos_that_are_refused() {
    let zone = Zone::empty();
    let sidecar = Sidecar::start(2, &[]);
    let mut version2 = zone.hello(0, 2, 0);
    version2[4] = 2;
    let refusals = [
        version2,
        zone.hello(0, 3, 0),
        zone.hello(2, 2, 0),
        zone.hello(-1, 2, 0),
        zone.hello(0, 2, 1),
        zone.hello(0, 2, 7),
        Zone {
            tick_rate: 0,
            ..zone.clone()
        }
        .hello(0, 2, 0),
        Zone {
            width: 0,
            ..zone.clone()
        }
        .hello(0, 2, 0),
        Zone {
            cell: 0,
            ..zone.clone()
        }
        .hello(0, 2, 0),
        Zone {
            max_nodes: 0,
            ..zone.clone()
        }
        .hello(0, 2, 0),
        // A grid of more than 2^26 cells.
        Zone {
            width: 1 << 40,
            height: 1 << 40,
            ..zone.clone()
        }
        .hello(0, 2, 0),
        Zone {
            boxes: vec![Rect {
                x0: 5,
                y0: 0,
                x1: 4,
                y1: 0,
            }],
            ..zone.clone()
        }
        .hello(0, 2, 0),
        Zone {
            circles: vec![Circle { cx: 5, cy: 5, r: 0 }],
            ..zone.clone()
        }
        .hello(0, 2, 0),
    ];
    for hello in refusals {
        let message = sidecar.connect().refused_hello(&hello);
        assert!(!message.is_empty());
    }
    // Hellos that do not parse: closed without a word.
    let good = zone.hello(0, 2, 0);
    let mut negative = good.clone();
    negative[4 + 8 * 10..4 + 8 * 11].copy_from_slice(&(-1i64).to_le_bytes());
    for bad in [
        b"OWSX"
            .iter()
            .chain(&good[4..])
            .copied()
            .collect::<Vec<u8>>(),
        good[..good.len() - 8].to_vec(),
        [&good[..], &[0u8; 8]].concat(),
        good[..10].to_vec(),
        vec![],
        negative,
        req(1, vec![]).frame(),
    ] {
        let mut c = sidecar.connect();
        c.send(&bad);
        assert_eq!(c.recv(), None);
    }
    // A length above 64 MiB.
    let mut c = sidecar.connect();
    c.stream
        .write_all(&(64u32 << 20 | 1).to_be_bytes())
        .unwrap();
    assert_eq!(c.recv(), None);
    // The sidecar still works.
    let (mut a, mut b) = two_workers(&sidecar, &zone, 0);
    a.send(&req(1, vec![]).frame());
    b.send(&req(1, vec![]).frame());
    assert_eq!(decode_answer(&a.recv().unwrap()).tick, 1);
    assert_eq!(decode_answer(&b.recv().unwrap()).tick, 1);
}

#[test]
fn a_bad_frame_closes_its_connection_only() {
    let zone = Zone::empty();
    let sidecar = Sidecar::start(2, &[]);
    let (mut a, mut b) = two_workers(&sidecar, &zone, 0);
    let good = req(1, vec![body(1, 500)]).frame();
    let mut bad_frames = vec![
        b"OWSX"
            .iter()
            .chain(&good[4..])
            .copied()
            .collect::<Vec<u8>>(),
        good[..good.len() - 8].to_vec(),
        [&good[..], &[0u8; 64]].concat(),
        good[..20].to_vec(),
        zone.hello(1, 2, 0),
    ];
    for (word_at, value) in [(2, 2i64), (2, -1), (3, 1), (2, i64::MAX)] {
        let mut f = good.clone();
        f[4 + 8 * (word_at - 1)..4 + 8 * word_at].copy_from_slice(&value.to_le_bytes());
        bad_frames.push(f);
    }
    let mut tick = 0;
    for bad in bad_frames {
        tick += 1;
        // A stray connection's garbage changes nothing (a hello is no garbage there).
        if bad[0..4] != *b"OWSH" {
            let mut stray = sidecar.connect();
            stray.send(&bad);
            assert_eq!(stray.recv(), None);
        }
        // Stripe 1's bad frame closes stripe 1's connection only.
        a.send(&req(tick, vec![body(1, 500)]).frame());
        b.send(&bad);
        assert_eq!(b.recv(), None, "closed after {bad:?}");
        assert!(a.silent_for(Duration::from_millis(20)));
        // Stripe 1 comes back and the tick completes.
        b = sidecar.connect();
        b.hello(&zone, 1, 2, 0);
        b.send(&req(tick, vec![body(2, 9000)]).frame());
        assert_eq!(decode_answer(&a.recv().unwrap()).tick, tick);
        assert_eq!(decode_answer(&b.recv().unwrap()).tick, tick);
    }
}

#[test]
fn a_new_hello_replaces_the_stripes_connection() {
    let zone = Zone::empty();
    let sidecar = Sidecar::start(2, &[]);
    let (mut a, mut b) = two_workers(&sidecar, &zone, 0);
    a.send(&req(1, vec![body(1, 500)]).frame());
    std::thread::sleep(Duration::from_millis(100));
    let mut a2 = sidecar.connect();
    a2.hello(&zone, 0, 2, 0);
    assert_eq!(a.recv(), None, "the older connection is closed");
    // Its request went with it.
    b.send(&req(1, vec![body(2, 9000)]).frame());
    assert!(b.silent_for(Duration::from_millis(200)));
    a2.send(&req(1, vec![body(1, 700)]).frame());
    let answer = decode_answer(&a2.recv().unwrap());
    assert_eq!(answer.results[0].0, 1);
    assert_eq!(answer.results[0].1, 710);
    assert_eq!(decode_answer(&b.recv().unwrap()).tick, 1);
    // The newest hello's world is used (here a tick rate of 10: 300 / 10 = 30 units).
    let mut b2 = sidecar.connect();
    b2.hello(
        &Zone {
            tick_rate: 10,
            ..zone.clone()
        },
        1,
        2,
        0,
    );
    a2.send(&req(2, vec![body(1, 700)]).frame());
    b2.send(&req(2, vec![]).frame());
    assert_eq!(decode_answer(&a2.recv().unwrap()).results[0].1, 730);
    assert_eq!(decode_answer(&b2.recv().unwrap()).tick, 2);
}

// ---------------------------------------------------------------------------------------------
// The shared segment.

fn segment_header(
    magic: &[u8; 4],
    version: u32,
    stripes: u64,
    request_bytes: u64,
    answer_bytes: u64,
    total: u64,
) -> Vec<u8> {
    let mut out = magic.to_vec();
    out.extend_from_slice(&version.to_le_bytes());
    for v in [stripes, request_bytes, answer_bytes, total, 0, 0, 0] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

/// The zone's side of a shared segment: a file in /dev/shm, created, sized, its header written,
/// mapped; removed when dropped.
struct Shm {
    path: PathBuf,
    file: File,
    base: *mut u8,
    total: usize,
    request_bytes: usize,
    answer_bytes: usize,
}

// Only atomics touch the mapping.
unsafe impl Send for Shm {}
unsafe impl Sync for Shm {}

impl Shm {
    fn create(stripes: usize, request_bytes: usize, answer_bytes: usize) -> Shm {
        let path = PathBuf::from("/dev/shm").join(unique("shm"));
        let total = 64 + stripes * (request_bytes + answer_bytes);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .unwrap();
        file.set_len(total as u64).unwrap();
        let header = segment_header(
            b"OWSS",
            1,
            stripes as u64,
            request_bytes as u64,
            answer_bytes as u64,
            total as u64,
        );
        file.write_all_at(&header, 0).unwrap();
        // SAFETY: a shared mapping of the whole file, checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        assert_ne!(base, libc::MAP_FAILED);
        Shm {
            path,
            file,
            base: base as *mut u8,
            total,
            request_bytes,
            answer_bytes,
        }
    }

    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }

    fn size(&self) -> u64 {
        self.file.metadata().unwrap().len()
    }

    fn word(&self, offset: usize) -> &AtomicU64 {
        assert!(offset % 8 == 0 && offset + 8 <= self.total);
        // SAFETY: inside the mapping, aligned.
        unsafe { AtomicU64::from_ptr(self.base.add(offset) as *mut u64) }
    }

    fn request_region(&self, stripe: usize) -> usize {
        64 + stripe * (self.request_bytes + self.answer_bytes)
    }

    fn answer_region(&self, stripe: usize) -> usize {
        self.request_region(stripe) + self.request_bytes
    }

    /// Writes a region under its sequence lock: `seq + 1`, fence, the header's other words
    /// and `records`, fence, `seq + 2`. The new `seq`.
    fn write_region(&self, at: usize, header: [i64; 4], records: &[u8]) -> i64 {
        let lock = self.word(at);
        // (Made even when a test left it odd.)
        let seq = (lock.load(Ordering::Relaxed) as i64 + 1) & !1;
        lock.store((seq + 1) as u64, Ordering::Relaxed);
        fence(Ordering::Release);
        for (k, v) in header.iter().chain(&[0, 0, 0]).enumerate() {
            self.word(at + 8 + 8 * k)
                .store(*v as u64, Ordering::Relaxed);
        }
        for k in 0..records.len() / 8 {
            self.word(at + 64 + 8 * k)
                .store(word(records, k) as u64, Ordering::Relaxed);
        }
        fence(Ordering::Release);
        lock.store((seq + 2) as u64, Ordering::Relaxed);
        seq + 2
    }

    /// Writes a stripe's request: the `seq` to announce.
    fn write_request(&self, stripe: usize, r: &Req) -> i64 {
        let records = r.records();
        let [tick, n, q] = r.header();
        self.write_region(
            self.request_region(stripe),
            [tick, n, q, records.len() as i64],
            &records,
        )
    }

    /// The answer region's `seq` now.
    fn answer_seq(&self, stripe: usize) -> i64 {
        self.word(self.answer_region(stripe))
            .load(Ordering::Acquire) as i64
    }

    /// Reads a stripe's answer under its sequence lock, as announced by an `"OWSR" tick n q
    /// seq bytes` frame.
    fn read_answer(&self, stripe: usize, frame: &[u8]) -> Result<Answer, String> {
        assert_eq!(&frame[0..4], b"OWSR");
        assert_eq!(frame.len(), 4 + 5 * 8);
        let f = &frame[4..];
        let (tick, n, q, seq, bytes) = (word(f, 0), word(f, 1), word(f, 2), word(f, 3), word(f, 4));
        if self.size() != self.total as u64 {
            return Err("the segment's size changed".into());
        }
        let at = self.answer_region(stripe);
        let lock = self.word(at);
        let seen = lock.load(Ordering::Acquire) as i64;
        let header: Vec<i64> = (1..8)
            .map(|k| self.word(at + 8 * k).load(Ordering::Relaxed) as i64)
            .collect();
        let records: Vec<u8> = (0..bytes as usize / 8)
            .flat_map(|k| {
                self.word(at + 64 + 8 * k)
                    .load(Ordering::Relaxed)
                    .to_le_bytes()
            })
            .collect();
        fence(Ordering::Acquire);
        let again = lock.load(Ordering::Relaxed) as i64;
        if seen != seq || again != seq || seq % 2 != 0 {
            return Err(format!("seq {seen} then {again}, announced {seq}"));
        }
        assert_eq!(header, [tick, n, q, bytes, 0, 0, 0]);
        Ok(decode_records(tick, n as usize, q as usize, &records))
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        // SAFETY: the mapping of `create`.
        unsafe {
            libc::munmap(self.base as *mut libc::c_void, self.total);
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// A worker of the shm transport: writes its request in the segment, announces it, and reads
/// the answer it is announced.
fn shm_round(client: &mut Client, shm: &Shm, stripe: usize, r: &Req) -> Result<Answer, String> {
    let seq = shm.write_request(stripe, r);
    client.send(&r.shm_frame(seq));
    let frame = client.recv().expect("an answer");
    shm.read_answer(stripe, &frame)
}

#[test]
fn the_shared_segment_with_1_2_and_4_workers() {
    let mut rng = Rng::new(99);
    for stripes in [1, 2, 4] {
        let zone = Zone::random(&mut rng);
        let ticks = ticks(&mut rng, &zone, stripes, 4);
        // Room for 1,500 bodies and some queries per stripe.
        let shm = Shm::create(stripes, 64 * 1600, 64 * 1600 + 64 * 1024);
        let sidecar = Sidecar::start(stripes, &["--shm", shm.arg()]);
        let (world, nav) = (zone.world(), zone.nav());
        let got: Vec<Vec<Answer>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..stripes)
                .map(|s| {
                    let mut client = sidecar.connect();
                    let (shm, zone, ticks) = (&shm, &zone, &ticks);
                    scope.spawn(move || {
                        client.hello(zone, s as i64, stripes as i64, 1);
                        ticks
                            .iter()
                            .map(|reqs| shm_round(&mut client, shm, s, &reqs[s]).unwrap())
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (t, reqs) in ticks.iter().enumerate() {
            let want = expected(&zone, &world, &nav, reqs);
            for s in 0..stripes {
                assert_eq!(
                    got[s][t], want[s],
                    "{stripes} stripes, tick {t}, stripe {s}"
                );
            }
        }
        // Each answer advanced its region's seq by 2.
        for s in 0..stripes {
            assert_eq!(shm.answer_seq(s), 2 * ticks.len() as i64);
        }
    }
}

#[test]
fn shared_segment_requests_that_are_refused() {
    let zone = Zone::empty();
    // Room for 3 bodies in a request, 2 results in an answer.
    let shm = Shm::create(1, 64 * 4, 128);
    let sidecar = Sidecar::start(1, &["--shm", shm.arg()]);
    // The wrong transport.
    let message = sidecar.connect().refused_hello(&zone.hello(0, 1, 0));
    assert!(message.contains("transport"), "{message}");
    let good = req(1, vec![body(1, 500), body(2, 900)]);
    let mut c = sidecar.connect();
    c.hello(&zone, 0, 1, 1);
    assert_eq!(shm_round(&mut c, &shm, 0, &good).unwrap().results.len(), 2);
    // An answer larger than its region comes in the frame (the records after the 3 words).
    let three = req(2, vec![body(1, 500), body(2, 900), body(3, 10)]);
    let want = expected(
        &zone,
        &zone.world(),
        &zone.nav(),
        std::slice::from_ref(&three),
    );
    let seq = shm.write_request(0, &three);
    c.send(&three.shm_frame(seq));
    assert_eq!(decode_answer(&c.recv().unwrap()), want[0]);
    // So does the answer to a request that came in the frame (more bodies than the request
    // region holds), and the segment is used again after it.
    let four = req(3, (1..=4).map(|i| body(i, 300 * i)).collect());
    let want = expected(
        &zone,
        &zone.world(),
        &zone.nav(),
        std::slice::from_ref(&four),
    );
    c.send(&four.frame());
    assert_eq!(decode_answer(&c.recv().unwrap()), want[0]);
    assert_eq!(shm_round(&mut c, &shm, 0, &good).unwrap().results.len(), 2);
    // Requests that close the connection.
    type Bad = Box<dyn Fn(&Shm) -> Vec<u8>>;
    let bad: Vec<Bad> = vec![
        // Another seq than the region's.
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![]));
            req(3, vec![]).shm_frame(seq + 2)
        }),
        // An odd seq (the region left mid-write).
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![]));
            shm.word(shm.request_region(0))
                .store(seq as u64 + 1, Ordering::Release);
            req(3, vec![]).shm_frame(seq + 1)
        }),
        // The region's tick or n not the frame's.
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![]));
            req(4, vec![]).shm_frame(seq)
        }),
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![body(1, 5)]));
            req(3, vec![]).shm_frame(seq)
        }),
        // More records than the region holds.
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![]));
            let mut f = b"OWSQ".to_vec();
            words(&mut f, &[3, 4, 0, seq]);
            f
        }),
        // A frame that is neither an shm request nor a request with its records.
        Box::new({
            let frame = good.frame();
            move |_| frame[..frame.len() - 8].to_vec()
        }),
        Box::new(|shm| {
            let seq = shm.write_request(0, &req(3, vec![]));
            [req(3, vec![]).shm_frame(seq), vec![0; 8]].concat()
        }),
    ];
    for make in &bad {
        let mut c = sidecar.connect();
        c.hello(&zone, 0, 1, 1);
        c.send(&make(&shm));
        assert_eq!(c.recv(), None);
    }
    let mut c = sidecar.connect();
    c.hello(&zone, 0, 1, 1);
    assert_eq!(shm_round(&mut c, &shm, 0, &good).unwrap().tick, 1);
}

// ---------------------------------------------------------------------------------------------
// Faults.

/// A 2-stripe sidecar with a fault, its two workers hello'd (transport 0, or 1 with `shm`).
fn faulty(fault: &str, shm: Option<&Shm>) -> (Sidecar, Client, Client) {
    let zone = Zone::empty();
    let mut args = vec!["--fault", fault];
    if let Some(shm) = shm {
        args.extend(["--shm", shm.arg()]);
    }
    let sidecar = Sidecar::start(2, &args);
    let (a, b) = two_workers(&sidecar, &zone, i64::from(shm.is_some()));
    (sidecar, a, b)
}

/// Tick `tick`'s requests of the fault tests: a body each.
fn fault_reqs(tick: i64) -> [Req; 2] {
    [
        req(tick, vec![body(1, 1000 + tick)]),
        req(tick, vec![body(2, 8000 + tick)]),
    ]
}

/// Tick `tick`'s answers.
fn fault_answers(tick: i64) -> Vec<Answer> {
    let zone = Zone::empty();
    expected(&zone, &zone.world(), &zone.nav(), &fault_reqs(tick))
}

/// Sends tick `tick` on both sockets; the two answers' payloads (`None`: the end).
fn socket_tick(a: &mut Client, b: &mut Client, tick: i64) -> [Option<Vec<u8>>; 2] {
    let [ra, rb] = fault_reqs(tick);
    a.send(&ra.frame());
    b.send(&rb.frame());
    [a.recv(), b.recv()]
}

/// Sends tick `tick` through the segment; the two announcing frames.
fn shm_tick(shm: &Shm, a: &mut Client, b: &mut Client, tick: i64) -> [Vec<u8>; 2] {
    let [ra, rb] = fault_reqs(tick);
    let seq = shm.write_request(0, &ra);
    a.send(&ra.shm_frame(seq));
    let seq = shm.write_request(1, &rb);
    b.send(&rb.shm_frame(seq));
    [a.recv().unwrap(), b.recv().unwrap()]
}

fn good_socket_tick(a: &mut Client, b: &mut Client, tick: i64) {
    let got = socket_tick(a, b, tick).map(|f| decode_answer(&f.unwrap()));
    assert_eq!(got.to_vec(), fault_answers(tick));
}

#[test]
fn fault_kill() {
    let (mut sidecar, mut a, mut b) = faulty("kill:2", None);
    good_socket_tick(&mut a, &mut b, 1);
    assert_eq!(socket_tick(&mut a, &mut b, 2), [None, None]);
    let status = sidecar.wait(PATIENCE).unwrap();
    assert_eq!(status.signal(), Some(libc::SIGABRT), "{status:?}");
}

#[test]
fn fault_hang() {
    let (mut sidecar, mut a, mut b) = faulty("hang:2", None);
    good_socket_tick(&mut a, &mut b, 1);
    for tick in [2, 3] {
        let [ra, rb] = fault_reqs(tick);
        a.send(&ra.frame());
        b.send(&rb.frame());
        assert!(a.silent_for(Duration::from_millis(300)));
        assert!(b.silent_for(Duration::from_millis(1)));
    }
    // Still listening, and still ending with its standard input.
    sidecar.connect().hello(&Zone::empty(), 0, 2, 0);
    assert!(sidecar
        .close_stdin(Duration::from_secs(1))
        .unwrap()
        .success());
}

#[test]
fn fault_late() {
    let (_sidecar, mut a, mut b) = faulty("late:300:2", None);
    good_socket_tick(&mut a, &mut b, 1);
    let start = Instant::now();
    good_socket_tick(&mut a, &mut b, 2);
    assert!(start.elapsed() >= Duration::from_millis(300));
    good_socket_tick(&mut a, &mut b, 3);
}

#[test]
fn fault_garble() {
    let (_sidecar, mut a, mut b) = faulty("garble:2", None);
    good_socket_tick(&mut a, &mut b, 1);
    let want = fault_answers(2);
    for (got, want) in socket_tick(&mut a, &mut b, 2).iter().zip(&want) {
        let got = got.as_ref().unwrap();
        assert_ne!(&got[0..4], b"OWSR");
        assert_eq!(got[4..], want.frame()[4..]);
    }
    good_socket_tick(&mut a, &mut b, 3);
}

#[test]
fn fault_truncate() {
    let (sidecar, mut a, mut b) = faulty("truncate:1", None);
    let [ra, rb] = fault_reqs(1);
    a.send(&ra.frame());
    b.send(&rb.frame());
    let payload = fault_answers(1)[0].frame();
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&payload);
    assert_eq!(a.rest(), frame[..frame.len() / 2]);
    assert_eq!(b.rest(), b"");
    // The process goes on: new workers are answered.
    let (mut a, mut b) = two_workers(&sidecar, &Zone::empty(), 0);
    good_socket_tick(&mut a, &mut b, 2);
}

#[test]
fn fault_wrong_tick() {
    let (_sidecar, mut a, mut b) = faulty("wrong-tick:1", None);
    let got = socket_tick(&mut a, &mut b, 1).map(|f| decode_answer(&f.unwrap()));
    for (got, want) in got.iter().zip(fault_answers(1)) {
        assert_eq!(got.tick, 2);
        assert_eq!(got.results, want.results);
    }
    good_socket_tick(&mut a, &mut b, 2);
}

#[test]
fn fault_half() {
    let shm = Shm::create(2, 256, 256);
    let (_sidecar, mut a, mut b) = faulty("half:2", Some(&shm));
    let frames = shm_tick(&shm, &mut a, &mut b, 1);
    assert_eq!(shm.read_answer(0, &frames[0]).unwrap(), fault_answers(1)[0]);
    let frames = shm_tick(&shm, &mut a, &mut b, 2);
    let announced = word(&frames[0][4..], 3);
    assert_eq!(announced % 2, 1, "an odd seq announced");
    assert_eq!(shm.answer_seq(0), announced, "and left in the region");
    assert!(shm.read_answer(0, &frames[0]).is_err());
    assert_eq!(shm.read_answer(1, &frames[1]).unwrap(), fault_answers(2)[1]);
    // The next answer is whole again.
    let frames = shm_tick(&shm, &mut a, &mut b, 3);
    assert_eq!(shm.read_answer(0, &frames[0]).unwrap(), fault_answers(3)[0]);
}

#[test]
fn fault_wrong_seq() {
    let shm = Shm::create(2, 256, 256);
    let (_sidecar, mut a, mut b) = faulty("wrong-seq:1", Some(&shm));
    let frames = shm_tick(&shm, &mut a, &mut b, 1);
    for (s, frame) in frames.iter().enumerate() {
        assert_ne!(word(&frame[4..], 3), shm.answer_seq(s));
        assert!(shm.read_answer(s, frame).is_err());
    }
    let frames = shm_tick(&shm, &mut a, &mut b, 2);
    assert_eq!(shm.read_answer(1, &frames[1]).unwrap(), fault_answers(2)[1]);
}

#[test]
fn fault_shrink_and_grow() {
    for (fault, factor) in [("shrink:2", 0.5), ("grow:2", 2.0)] {
        let shm = Shm::create(2, 256, 256);
        let (_sidecar, mut a, mut b) = faulty(fault, Some(&shm));
        let frames = shm_tick(&shm, &mut a, &mut b, 1);
        assert_eq!(shm.read_answer(1, &frames[1]).unwrap(), fault_answers(1)[1]);
        let frames = shm_tick(&shm, &mut a, &mut b, 2);
        assert_eq!(shm.size(), (shm.total as f64 * factor) as u64, "{fault}");
        for (s, frame) in frames.iter().enumerate() {
            assert_eq!(&frame[0..4], b"OWSR");
            assert!(shm.read_answer(s, frame).is_err(), "{fault}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A measure (`cargo.sh test --release --test serve -- --ignored --nocapture`).

#[test]
#[ignore]
fn measure_round_trips() {
    let mut rng = Rng::new(5);
    let zone = Zone {
        width: 1 << 20,
        height: 1 << 20,
        cell: 4096,
        ..Zone::random(&mut rng)
    };
    let world = zone.world();
    let body = |rng: &mut Rng, id| Body {
        id,
        x: rng.range(0, 1 << 20),
        y: rng.range(0, 1 << 20),
        vx: rng.range(-3000, 3000),
        vy: rng.range(-3000, 3000),
        r: 400,
        m: 70,
    };
    for (stripes, total) in [(1, 10_000), (2, 10_000), (4, 10_000), (2, 1_000)] {
        let reqs: Vec<Req> = (0..stripes)
            .map(|s| Req {
                tick: 0,
                bodies: (0..total / stripes)
                    .map(|i| body(&mut rng, 1 + s * total + i))
                    .collect(),
                queries: vec![],
            })
            .collect();
        let all: Vec<Body> = reqs.iter().flat_map(|r| r.bodies.clone()).collect();
        let rounds = 200;
        // The same step in this process, in a pool of 2 threads as the sidecar's: the median.
        let compute = common::with_threads(2, || {
            let mut times: Vec<Duration> = (0..rounds)
                .map(|_| {
                    let start = Instant::now();
                    std::hint::black_box(physics::step(&all, &world, zone.tick_rate));
                    start.elapsed()
                })
                .collect();
            times.sort();
            times[times.len() / 2]
        });
        for shm in [false, true] {
            let segment = shm.then(|| Shm::create(stripes as usize, 64 * 10_100, 64 * 10_100));
            let args: Vec<&str> = match &segment {
                Some(s) => vec!["--shm", s.arg()],
                None => vec![],
            };
            let sidecar = Sidecar::start(stripes as usize, &args);
            let times: Vec<Duration> = std::thread::scope(|scope| {
                let handles: Vec<_> = (0..stripes as usize)
                    .map(|s| {
                        let mut client = sidecar.connect();
                        let (zone, reqs, segment) = (&zone, &reqs, &segment);
                        scope.spawn(move || {
                            client.hello(zone, s as i64, stripes, i64::from(shm));
                            let mut times = Vec::new();
                            for t in 0..rounds as i64 {
                                let r = Req {
                                    tick: t,
                                    ..reqs[s].clone()
                                };
                                let start = Instant::now();
                                match segment {
                                    Some(seg) => {
                                        shm_round(&mut client, seg, s, &r).unwrap();
                                    }
                                    None => {
                                        client.send(&r.frame());
                                        client.recv().unwrap();
                                    }
                                }
                                times.push(start.elapsed());
                            }
                            times
                        })
                    })
                    .collect();
                let all: Vec<Vec<Duration>> =
                    handles.into_iter().map(|h| h.join().unwrap()).collect();
                all[0].clone()
            });
            let mut sorted = times[10..].to_vec();
            sorted.sort();
            println!(
                "{total} bodies, {stripes} stripes, {}: step computed in-process {:?} (median), \
                 round trip median {:?} (p90 {:?})",
                if shm { "shm" } else { "socket" },
                compute,
                sorted[sorted.len() / 2],
                sorted[sorted.len() * 9 / 10]
            );
        }
    }
}

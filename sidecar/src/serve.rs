//! `overworld-sidecar serve`: the zone's protocol, version 1 (docs/sidecar.md, "The zone's
//! protocol, version 1").
//!
//! The process binds a Unix stream socket, says `overworld-sidecar ready 1` on standard output,
//! and exits (status 0) when its standard input ends. Each of the zone's N bucket workers
//! connects, says hello for its stripe, then sends one request per tick; the sidecar keeps each
//! stripe's newest request and, when all N hold one for the same tick, computes one physics step
//! over all their bodies (concatenated in stripe order) and their path queries, and answers each
//! stripe with its own results in its request's order.
//!
//! Threads: the main thread accepts connections; one thread per connection reads its frames
//! (and, with the shared segment, copies its request's records out of the segment) into buffers
//! it reuses; one stepper thread waits for a complete tick, computes it in a rayon pool of
//! `--threads` threads and writes the answers; one thread reads standard input to its end and
//! exits the process. The buffers of requests circulate between the connections and the stepper
//! (swapped, never reallocated once large enough).

use crate::nav::{self, Nav, Path, Query};
use crate::physics::{self, Body, World};
use crate::shm::{Publish, Segment};
use crate::wire::{self, Hello, HelloError, Request, ShmRequest};
use std::io::{BufReader, Read, Write};
use std::net::Shutdown;
use std::ops::Range;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The line written on standard output once the socket listens (1: the protocol's version).
pub const READY: &str = "overworld-sidecar ready 1";
/// The most stripes a sidecar serves (a thread each).
pub const MAX_STRIPES: usize = 1024;
/// How long a write of an answer may block on a worker that does not read before its
/// connection is closed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// The wrong magic of the `garble` fault.
const GARBLED: &[u8; 4] = b"OWSX";

/// The options of `serve`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// The Unix socket's path (`--socket`).
    pub socket: PathBuf,
    /// The number of stripes, N (`--stripes`).
    pub stripes: usize,
    /// The rayon threads of the step (`--threads`).
    pub threads: usize,
    /// The shared segment's file (`--shm`): the transport 1.
    pub shm: Option<PathBuf>,
    /// The fault to inject (`--fault`).
    pub fault: Option<Fault>,
}

/// What a fault does (docs/sidecar.md, "Faults").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// Aborts after reading the requests, before answering.
    Kill,
    /// Never answers that step nor any later one.
    Hang,
    /// Answers that many milliseconds late.
    Late(u64),
    /// Answers every stripe with a wrong magic (`"OWSX"`).
    Garble,
    /// Writes the first half of stripe 0's answer frame, then closes every connection.
    Truncate,
    /// Answers every stripe with tick + 1.
    WrongTick,
    /// (shm) Leaves stripe 0's answer region with an odd `seq`, and announces that `seq`.
    Half,
    /// (shm) Announces to every stripe the `seq` after its region's (`seq + 2`).
    WrongSeq,
    /// (shm) Truncates the segment to half its size, then answers.
    Shrink,
    /// (shm) Doubles the segment's size, then answers.
    Grow,
}

/// A fault: its kind, at the `step`-th step the process computes (1-based), once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub step: u64,
}

impl Fault {
    /// Reads `KIND:K` (`late:MS:K` for `late`).
    pub fn parse(spec: &str) -> Result<Fault, String> {
        let bad = || format!("--fault {spec:?}: expected KIND:K or late:MS:K (K >= 1)");
        let parts: Vec<&str> = spec.split(':').collect();
        let number = |s: &str| s.parse::<u64>().map_err(|_| bad());
        let (kind, k) = match parts[..] {
            ["late", ms, k] => (FaultKind::Late(number(ms)?), k),
            [kind, k] => (
                match kind {
                    "kill" => FaultKind::Kill,
                    "hang" => FaultKind::Hang,
                    "garble" => FaultKind::Garble,
                    "truncate" => FaultKind::Truncate,
                    "wrong-tick" => FaultKind::WrongTick,
                    "half" => FaultKind::Half,
                    "wrong-seq" => FaultKind::WrongSeq,
                    "shrink" => FaultKind::Shrink,
                    "grow" => FaultKind::Grow,
                    _ => return Err(bad()),
                },
                k,
            ),
            _ => return Err(bad()),
        };
        match number(k)? {
            0 => Err(bad()),
            step => Ok(Fault { kind, step }),
        }
    }

    /// Whether the fault is one of the shared segment's.
    pub fn needs_shm(&self) -> bool {
        matches!(
            self.kind,
            FaultKind::Half | FaultKind::WrongSeq | FaultKind::Shrink | FaultKind::Grow
        )
    }
}

/// Writes one line on standard error (never fails: a closed standard error is ignored).
fn log(message: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr().lock(), "overworld-sidecar: {message}");
}

/// The world and its navigation grid, as a hello gives them (shared by the hellos that give
/// the same).
struct Geometry {
    world: World,
    nav: Nav,
    agent: i64,
}

impl Geometry {
    /// Whether `hello` describes this world and grid.
    fn same(&self, hello: &Hello) -> bool {
        let w = &self.world;
        (
            w.width,
            w.height,
            self.nav.cell,
            self.agent,
            self.nav.max_nodes,
        ) == (
            hello.width,
            hello.height,
            hello.nav_cell,
            hello.nav_agent,
            hello.nav_max_nodes,
        ) && w.boxes == hello.boxes
            && w.circles == hello.circles
    }
}

/// What the newest hello set: the world (with its grid) and the tick rate.
struct Env {
    geometry: Arc<Geometry>,
    tick_rate: i64,
}

/// A registered connection: the stream the stepper writes the stripe's answers to.
struct Conn {
    id: u64,
    stream: Arc<UnixStream>,
}

/// A stripe: its connection and its newest request (when `waiting`).
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    pending: Request,
    waiting: bool,
}

/// What the connections and the stepper share, under [`Shared::state`].
struct State {
    slots: Vec<Slot>,
    env: Option<Arc<Env>>,
}

impl State {
    /// Whether every stripe holds a request, all for the same tick.
    fn complete(&self) -> bool {
        let tick = self.slots[0].pending.tick;
        self.env.is_some()
            && self
                .slots
                .iter()
                .all(|s| s.waiting && s.pending.tick == tick)
    }
}

/// The server.
struct Shared {
    stripes: usize,
    segment: Option<Segment>,
    fault: Option<Fault>,
    pool: rayon::ThreadPool,
    state: Mutex<State>,
    /// Signalled when the state may be complete.
    ready: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock is impossible (panics abort the process); take it anyway.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The transport this sidecar was started for: 1 with a shared segment, else 0.
    fn transport(&self) -> i64 {
        i64::from(self.segment.is_some())
    }
}

/// Runs the server: returns only on a fatal error (its message), the process otherwise exits
/// when its standard input ends.
pub fn run(options: Options) -> Result<std::convert::Infallible, String> {
    let stripes = options.stripes;
    let segment = match &options.shm {
        Some(path) => Some(Segment::open(path, stripes)?),
        None => None,
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(options.threads)
        .thread_name(|i| format!("step-{i}"))
        .build()
        .map_err(|e| format!("cannot start {} threads: {e}", options.threads))?;
    let path = &options.socket;
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("removing {}: {e}", path.display())),
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("binding {}: {e}", path.display()))?;
    std::thread::Builder::new()
        .name("stdin".into())
        .spawn(watch_stdin)
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    let shared = Arc::new(Shared {
        stripes,
        segment,
        fault: options.fault,
        pool,
        state: Mutex::new(State {
            slots: (0..stripes).map(|_| Slot::default()).collect(),
            env: None,
        }),
        ready: Condvar::new(),
    });
    let stepper = Arc::clone(&shared);
    std::thread::Builder::new()
        .name("stepper".into())
        .spawn(move || Stepper::new(stepper).run())
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{READY}")
            .and_then(|_| out.flush())
            .map_err(|e| format!("writing standard output: {e}"))?;
    }
    let next_id = AtomicU64::new(1);
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, say: wait a little rather than spin.
                log(format_args!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        let shared = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name(format!("conn-{id}"))
            .spawn(move || connection(&shared, stream, id));
        if let Err(e) = spawned {
            log(format_args!("connection {id}: cannot start a thread: {e}"));
        }
    }
}

/// Reads standard input to its end (or an error), then exits the process (status 0).
fn watch_stdin() {
    let mut stdin = std::io::stdin().lock();
    let mut buf = [0u8; 4096];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    std::process::exit(0);
}

/// A connection: its hello, then its requests until it ends or sends a frame that does not
/// parse. It is closed (both ways) when this returns.
fn connection(shared: &Shared, stream: UnixStream, id: u64) {
    let stream = Arc::new(stream);
    if let Err(e) = stream.set_write_timeout(Some(WRITE_TIMEOUT)) {
        log(format_args!("connection {id}: {e}"));
    }
    let mut reader = BufReader::with_capacity(64 << 10, &*stream);
    let mut buf = Vec::new();
    if let Some(stripe) = hello(shared, &stream, id, &mut reader, &mut buf) {
        if let Err(e) = requests(shared, stripe, id, &mut reader, &mut buf) {
            log(format_args!(
                "connection {id} (stripe {stripe}): {e}; closed"
            ));
        }
        let mut state = shared.lock();
        let slot = &mut state.slots[stripe];
        if slot.conn.as_ref().is_some_and(|c| c.id == id) {
            slot.conn = None;
            slot.waiting = false;
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
}

/// Reads and answers the connection's hello: its stripe once registered, `None` when the
/// connection is to be closed (refused with an error frame, or a frame that does not parse).
fn hello(
    shared: &Shared,
    stream: &Arc<UnixStream>,
    id: u64,
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
) -> Option<usize> {
    match wire::read_frame(reader, buf) {
        Ok(true) => {}
        Ok(false) => return None,
        Err(e) => {
            log(format_args!("connection {id}: {e}; closed"));
            return None;
        }
    }
    let refuse = |message: String| {
        log(format_args!("connection {id}: hello refused: {message}"));
        let mut out = Vec::new();
        wire::error(&mut out, 0, &message);
        let _ = (&**stream).write_all(&out);
        None
    };
    let hello = match Hello::parse(buf) {
        Ok(h) => h,
        Err(HelloError::Version(v)) => {
            return refuse(format!(
                "protocol version {v}, this sidecar speaks {}",
                wire::VERSION
            ))
        }
        Err(HelloError::Parse(e)) => {
            log(format_args!("connection {id}: {e}; closed"));
            return None;
        }
    };
    let n = shared.stripes;
    if hello.stripes != n as i64 {
        return refuse(format!(
            "a hello for {} stripes, this sidecar serves {n}",
            hello.stripes
        ));
    }
    if !(0..n as i64).contains(&hello.stripe) {
        return refuse(format!(
            "a hello for stripe {}, outside 0..{n}",
            hello.stripe
        ));
    }
    if hello.transport != shared.transport() {
        return refuse(format!(
            "a hello for transport {}, this sidecar was started for transport {}",
            hello.transport,
            shared.transport()
        ));
    }
    let stripe = hello.stripe as usize;
    let env = match environment(shared, hello) {
        Ok(env) => env,
        Err(e) => return refuse(e),
    };
    // The welcome goes before the connection is registered: the stepper writes to it only
    // after, and only once the worker's first request is in.
    let mut out = Vec::new();
    wire::welcome(&mut out);
    if (&**stream).write_all(&out).is_err() {
        return None;
    }
    let mut state = shared.lock();
    state.env = Some(env);
    let slot = &mut state.slots[stripe];
    // The stripe's older connection (and its request) are replaced.
    if let Some(old) = slot.conn.replace(Conn {
        id,
        stream: Arc::clone(stream),
    }) {
        let _ = old.stream.shutdown(Shutdown::Both);
    }
    slot.waiting = false;
    Some(stripe)
}

/// The environment a hello describes (checked): the current world and grid when they are the
/// same (a grid is built once per world), a new one otherwise.
fn environment(shared: &Shared, hello: Hello) -> Result<Arc<Env>, String> {
    physics::check(&[], hello.tick_rate)?;
    let current = shared.lock().env.as_ref().map(|e| Arc::clone(&e.geometry));
    let geometry = match current {
        Some(g) if g.same(&hello) => g,
        _ => {
            let world = World::new(hello.width, hello.height, hello.boxes, hello.circles)?;
            let nav = Nav::new(&world, hello.nav_cell, hello.nav_agent, hello.nav_max_nodes)?;
            Arc::new(Geometry {
                world,
                nav,
                agent: hello.nav_agent,
            })
        }
    };
    Ok(Arc::new(Env {
        geometry,
        tick_rate: hello.tick_rate,
    }))
}

/// Reads the requests of a registered connection into its stripe's slot, until the connection
/// ends (`Ok`), is replaced (`Ok`) or sends a frame that does not parse (the error).
fn requests(
    shared: &Shared,
    stripe: usize,
    id: u64,
    reader: &mut impl Read,
    buf: &mut Vec<u8>,
) -> Result<(), String> {
    let mut mine = Request::default();
    let mut records = Vec::new();
    loop {
        match wire::read_frame(reader, buf) {
            Ok(true) => {}
            Ok(false) => return Ok(()),
            Err(e) => return Err(e.to_string()),
        }
        match &shared.segment {
            None => mine.parse(buf)?,
            // A request whose records do not fit the stripe's region comes in the frame.
            Some(_) if buf.len() != wire::SHM_REQUEST_BYTES => {
                mine.parse(buf)?;
                mine.framed = true;
            }
            Some(segment) => {
                let r = ShmRequest::parse(buf)?;
                let h = segment.read_request(stripe, r.seq, r.records(), &mut records)?;
                if (h.tick, h.n, h.q, h.bytes)
                    != (r.tick, r.n as i64, r.q as i64, r.records() as i64)
                {
                    return Err(format!(
                        "the request region holds tick {} n {} q {} bytes {}, the frame \
                         announces tick {} n {} q {}",
                        h.tick, h.n, h.q, h.bytes, r.tick, r.n, r.q
                    ));
                }
                mine.parse_records(r.tick, r.n, r.q, &records)?;
                mine.framed = false;
            }
        }
        let mut state = shared.lock();
        let slot = &mut state.slots[stripe];
        if slot.conn.as_ref().is_none_or(|c| c.id != id) {
            return Ok(());
        }
        std::mem::swap(&mut slot.pending, &mut mine);
        slot.waiting = true;
        if state.complete() {
            shared.ready.notify_one();
        }
    }
}

/// The stepper: waits for a complete tick, computes it and answers, with buffers kept from
/// tick to tick.
struct Stepper {
    shared: Arc<Shared>,
    /// The requests of the tick being computed, one per stripe.
    taken: Vec<Request>,
    /// Their connections (`None`: the stripe's connection is gone).
    conns: Vec<Option<Arc<UnixStream>>>,
    /// All the bodies, in stripe order.
    bodies: Vec<Body>,
    /// All the path queries, in stripe order.
    queries: Vec<Query>,
    /// Their paths.
    paths: Vec<Path>,
    /// A frame being written (with the segment, an answer's records are written here first).
    out: Vec<u8>,
    /// The last `seq` of each stripe's answer region (shm).
    seqs: Vec<i64>,
    /// The steps computed so far.
    count: u64,
}

impl Stepper {
    fn new(shared: Arc<Shared>) -> Stepper {
        let n = shared.stripes;
        let seqs = match &shared.segment {
            Some(segment) => (0..n).map(|s| segment.answer_seq(s)).collect(),
            None => Vec::new(),
        };
        Stepper {
            shared,
            taken: (0..n).map(|_| Request::default()).collect(),
            conns: vec![None; n],
            bodies: Vec::new(),
            queries: Vec::new(),
            paths: Vec::new(),
            out: Vec::new(),
            seqs,
            count: 0,
        }
    }

    fn run(mut self) {
        loop {
            let env = self.take();
            self.count += 1;
            let fault = self
                .shared
                .fault
                .filter(|f| f.step == self.count)
                .map(|f| f.kind);
            match fault {
                Some(FaultKind::Kill) => std::process::abort(),
                Some(FaultKind::Hang) => loop {
                    std::thread::park();
                },
                _ => {}
            }
            let outcome = self.compute(&env);
            self.answer(outcome, fault);
        }
    }

    /// Waits for a complete tick and takes its requests (and the connections to answer).
    fn take(&mut self) -> Arc<Env> {
        let shared = Arc::clone(&self.shared);
        let mut state = shared.lock();
        while !state.complete() {
            state = shared.ready.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        for (s, slot) in state.slots.iter_mut().enumerate() {
            std::mem::swap(&mut slot.pending, &mut self.taken[s]);
            slot.waiting = false;
            self.conns[s] = slot.conn.as_ref().map(|c| Arc::clone(&c.stream));
        }
        Arc::clone(state.env.as_ref().unwrap())
    }

    /// The step of the taken requests: the bodies' new positions (and the paths in
    /// `self.paths`), or why the step is refused.
    fn compute(&mut self, env: &Env) -> Result<Vec<(i64, i64, i64)>, String> {
        self.bodies.clear();
        self.queries.clear();
        for r in &self.taken {
            self.bodies.extend_from_slice(&r.bodies);
            self.queries.extend(r.queries.iter().map(|&(_, q)| q));
        }
        physics::check(&self.bodies, env.tick_rate)?;
        for r in &self.taken {
            for (tag, query) in &r.queries {
                nav::check_query(query).map_err(|e| format!("query {tag} {e}"))?;
            }
        }
        let Stepper {
            bodies,
            queries,
            paths,
            shared,
            ..
        } = self;
        let g = &env.geometry;
        Ok(shared.pool.install(|| {
            g.nav.paths_into(queries, paths);
            physics::step(bodies, &g.world, env.tick_rate)
        }))
    }

    /// Answers every stripe of the tick: its results, or the error frame of a refused step;
    /// with the fault of this step, if any.
    fn answer(&mut self, outcome: Result<Vec<(i64, i64, i64)>, String>, fault: Option<FaultKind>) {
        let shared = Arc::clone(&self.shared);
        if let Some(FaultKind::Late(ms)) = fault {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if let (Some(segment), Some(kind @ (FaultKind::Shrink | FaultKind::Grow))) =
            (&shared.segment, fault)
        {
            let total = segment.total_bytes() as u64;
            let size = if kind == FaultKind::Shrink {
                total / 2
            } else {
                total * 2
            };
            if let Err(e) = segment.set_size(size) {
                log(format_args!("fault: {e}"));
            }
        }
        let (mut body_at, mut query_at) = (0, 0);
        for s in 0..shared.stripes {
            let (n, q) = (self.taken[s].bodies.len(), self.taken[s].queries.len());
            let (bodies, queries) = (body_at..body_at + n, query_at..query_at + q);
            (body_at, query_at) = (bodies.end, queries.end);
            let Some(stream) = self.conns[s].take() else {
                continue;
            };
            let results = outcome.as_ref().map(|all| &all[bodies]);
            self.encode(s, results, queries, fault);
            let out = &mut self.out;
            if fault == Some(FaultKind::Garble) {
                out[4..8].copy_from_slice(GARBLED);
            }
            if fault == Some(FaultKind::Truncate) {
                // Under the lock: no worker sees its connection end (and says a new hello)
                // before every connection of now is closed.
                let state = shared.lock();
                let _ = (&*stream).write_all(&out[..out.len() / 2]);
                let _ = stream.shutdown(Shutdown::Both);
                for c in self.conns.iter_mut().filter_map(Option::take) {
                    let _ = c.shutdown(Shutdown::Both);
                }
                for c in state.slots.iter().filter_map(|s| s.conn.as_ref()) {
                    let _ = c.stream.shutdown(Shutdown::Both);
                }
                return;
            }
            if let Err(e) = (&*stream).write_all(out) {
                log(format_args!("stripe {s}: writing an answer: {e}; closed"));
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }

    /// Writes stripe `s`'s answer frame in `self.out`: its `results` and the paths of its
    /// `queries` (a range of `self.paths`), or the error of a refused step. With the shared
    /// segment the records go in the stripe's answer region, and the frame announces them.
    fn encode(
        &mut self,
        s: usize,
        results: Result<&[(i64, i64, i64)], &String>,
        queries: Range<usize>,
        fault: Option<FaultKind>,
    ) {
        let r = &self.taken[s];
        let out = &mut self.out;
        let tick = if fault == Some(FaultKind::WrongTick) {
            r.tick.wrapping_add(1)
        } else {
            r.tick
        };
        let results = match results {
            Ok(results) => results,
            Err(message) => return wire::error(out, tick, message),
        };
        let paths = &self.paths[queries];
        let (n, q) = (results.len() as i64, paths.len() as i64);
        wire::begin_frame(out, b"OWSR");
        wire::put(out, &[tick, n, q]);
        let start = out.len();
        let tags = r.queries.iter().map(|&(tag, _)| tag);
        wire::put_records(out, results, tags, paths);
        // With the segment the records move to the stripe's answer region, unless its request
        // came in a frame or they do not fit the region: then they stay in the frame, as
        // without the segment.
        let records = &out[start..];
        let segment = self
            .shared
            .segment
            .as_ref()
            .filter(|segment| !r.framed && records.len() <= segment.answer_room());
        let Some(segment) = segment else {
            if let Err(e) = wire::end_frame(out) {
                wire::error(out, tick, &e);
            }
            return;
        };
        let publish = if fault == Some(FaultKind::Half) && s == 0 {
            Publish::LeaveOdd
        } else {
            Publish::Complete
        };
        let bytes = records.len() as i64;
        let mut seq = segment.write_answer(s, &mut self.seqs[s], (tick, n, q), records, publish);
        if fault == Some(FaultKind::WrongSeq) {
            seq = seq.wrapping_add(2);
        }
        wire::begin_frame(out, b"OWSR");
        wire::put(out, &[tick, n, q, seq, bytes]);
        wire::end_frame(out).unwrap();
    }
}

//! The `overworld-sidecar` executable: answers one test frame of docs/sidecar.md read from
//! standard input (`step`, `path`), or serves the zone's protocol on a Unix socket (`serve`).

use overworld_sidecar::frames::{self, PathInput, StepInput};
use overworld_sidecar::physics;
use overworld_sidecar::serve::{self, Fault, Options, MAX_STRIPES};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "\
usage: overworld-sidecar step [--threads T]   answer an \"OWPS\" frame on stdin (a physics step)
       overworld-sidecar path [--threads T]   answer an \"OWNS\" frame on stdin (path queries)
       overworld-sidecar serve --socket PATH --stripes N [--threads T] [--shm FILE] [--fault SPEC]
                                              serve the zone's protocol on a Unix socket (N stripes,
                                              1..1024), the records in the frames or, with --shm,
                                              in the shared segment FILE; exits at the end of stdin
       overworld-sidecar help                 this text
T rayon threads (default: the machine's cores). SPEC (tests): KIND:K, the fault at the K-th step,
KIND one of kill, hang, late:MS, garble, truncate, wrong-tick and, with --shm, half, wrong-seq,
shrink, grow. Frames and protocol: docs/sidecar.md.";

/// What the command line asks for.
enum Command {
    Step { threads: usize },
    Path { threads: usize },
    Serve(Options),
    Help,
}

/// The machine's cores, the default number of threads.
fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Reads a `--threads` value.
fn threads(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if (1..=1024).contains(&n) => Ok(n),
        _ => Err(format!("--threads {v:?}: expected 1..1024")),
    }
}

/// Reads the options of `serve`, each at most once.
fn parse_serve(rest: &[String]) -> Result<Options, String> {
    let (mut socket, mut stripes, mut threads_, mut shm, mut fault) =
        (None, None, None, None, None);
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        let mut value = || {
            it.next()
                .map(String::as_str)
                .ok_or_else(|| format!("{arg} needs a value"))
        };
        match arg.as_str() {
            "--socket" if socket.is_none() => socket = Some(PathBuf::from(value()?)),
            "--stripes" if stripes.is_none() => {
                let v = value()?;
                match v.parse::<usize>() {
                    Ok(n) if (1..=MAX_STRIPES).contains(&n) => stripes = Some(n),
                    _ => return Err(format!("--stripes {v:?}: expected 1..{MAX_STRIPES}")),
                }
            }
            "--threads" if threads_.is_none() => threads_ = Some(threads(value()?)?),
            "--shm" if shm.is_none() => shm = Some(PathBuf::from(value()?)),
            "--fault" if fault.is_none() => fault = Some(Fault::parse(value()?)?),
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let socket = socket.ok_or("serve needs --socket PATH")?;
    let stripes = stripes.ok_or("serve needs --stripes N")?;
    if let Some(f) = fault.filter(|f| f.needs_shm() && shm.is_none()) {
        return Err(format!("the fault {:?} needs --shm", f.kind));
    }
    Ok(Options {
        socket,
        stripes,
        threads: threads_.unwrap_or_else(cores),
        shm,
        fault,
    })
}

fn parse(args: &[String]) -> Result<Command, String> {
    let (sub, rest) = match args.split_first() {
        Some((sub, rest)) => (sub.as_str(), rest),
        None => return Err("no subcommand".to_string()),
    };
    if matches!(sub, "help" | "-h" | "--help") && rest.is_empty() {
        return Ok(Command::Help);
    }
    if sub == "serve" {
        return parse_serve(rest).map(Command::Serve);
    }
    if sub != "step" && sub != "path" {
        return Err(format!("unknown subcommand {sub:?}"));
    }
    let mut threads_ = None;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--threads" if threads_.is_none() => {
                let v = it.next().ok_or("--threads needs a number")?;
                threads_ = Some(threads(v)?);
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let threads = threads_.unwrap_or_else(cores);
    Ok(if sub == "step" {
        Command::Step { threads }
    } else {
        Command::Path { threads }
    })
}

/// Runs `f` in a pool of `threads` rayon threads.
fn in_pool<T: Send>(threads: usize, f: impl FnOnce() -> T + Send) -> Result<T, String> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| format!("cannot start {threads} threads: {e}"))?;
    Ok(pool.install(f))
}

fn read_stdin() -> Result<Vec<u8>, String> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut buf)
        .map_err(|e| format!("reading standard input: {e}"))?;
    Ok(buf)
}

fn write_stdout(bytes: &[u8]) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)
        .and_then(|_| out.flush())
        .map_err(|e| format!("writing standard output: {e}"))
}

fn fail(status: u8, message: &str) -> ExitCode {
    eprintln!("overworld-sidecar: {message}");
    ExitCode::from(status)
}

/// Answers the test frame on standard input: `decode` reads it (status 2 when it refuses it),
/// `compute` makes the answer in a pool of `threads` rayon threads, written on standard output
/// (status 1 when standard input or output, or the pool, fails).
fn answer<T: Sync>(
    threads: usize,
    decode: impl FnOnce(&[u8]) -> Result<T, String>,
    compute: impl FnOnce(&T) -> Vec<u8> + Send,
) -> ExitCode {
    let input = match read_stdin() {
        Ok(buf) => buf,
        Err(e) => return fail(1, &e),
    };
    let decoded = match decode(&input) {
        Ok(d) => d,
        Err(e) => return fail(2, &format!("refused frame: {e}")),
    };
    match in_pool(threads, || compute(&decoded)).and_then(|bytes| write_stdout(&bytes)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("overworld-sidecar: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match command {
        Command::Help => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Command::Serve(options) => {
            overworld_sidecar::keep_memory();
            match serve::run(options) {
                Ok(never) => match never {},
                Err(e) => fail(1, &e),
            }
        }
        Command::Step { threads } => answer(
            threads,
            |input| {
                let scene = StepInput::decode(input)?;
                let world = scene.world()?;
                Ok((scene, world))
            },
            |(scene, world)| {
                frames::encode_step_answer(&physics::step(&scene.bodies, world, scene.tick_rate))
            },
        ),
        Command::Path { threads } => answer(
            threads,
            |input| {
                let queries = PathInput::decode(input)?;
                let nav = queries.nav()?;
                Ok((queries, nav))
            },
            |(queries, nav)| frames::encode_path_answer(&nav.paths(&queries.queries)),
        ),
    }
}

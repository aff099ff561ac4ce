//! The `overworld-sidecar` executable: answers one test frame of docs/sidecar.md read from
//! standard input (`step`, `path`). A later `serve` subcommand will speak a socket protocol.

use overworld_sidecar::frames::{self, PathInput, StepInput};
use overworld_sidecar::physics;
use std::io::{Read, Write};
use std::process::ExitCode;

const USAGE: &str = "\
usage: overworld-sidecar step [--threads N]   answer an \"OWPS\" frame on stdin (a physics step)
       overworld-sidecar path [--threads N]   answer an \"OWNS\" frame on stdin (path queries)
       overworld-sidecar help                 this text
N rayon threads (default: the machine's cores). Frames: docs/sidecar.md.";

/// What the command line asks for.
enum Command {
    Step { threads: usize },
    Path { threads: usize },
    Help,
}

fn parse(args: &[String]) -> Result<Command, String> {
    let (sub, rest) = match args.split_first() {
        Some((sub, rest)) => (sub.as_str(), rest),
        None => return Err("no subcommand".to_string()),
    };
    if matches!(sub, "help" | "-h" | "--help") && rest.is_empty() {
        return Ok(Command::Help);
    }
    if sub != "step" && sub != "path" {
        return Err(format!("unknown subcommand {sub:?}"));
    }
    let mut threads = None;
    let mut it = rest.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--threads" if threads.is_none() => {
                let v = it.next().ok_or("--threads needs a number")?;
                match v.parse::<usize>() {
                    Ok(n) if (1..=1024).contains(&n) => threads = Some(n),
                    _ => return Err(format!("--threads {v:?}: expected 1..1024")),
                }
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let threads = threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let command = match parse(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("overworld-sidecar: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let input = match command {
        Command::Help => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        _ => match read_stdin() {
            Ok(buf) => buf,
            Err(e) => return fail(1, &e),
        },
    };
    let answer = match command {
        Command::Step { threads } => {
            let scene = match StepInput::decode(&input) {
                Ok(s) => s,
                Err(e) => return fail(2, &format!("refused frame: {e}")),
            };
            let world = match scene.world() {
                Ok(w) => w,
                Err(e) => return fail(2, &format!("refused frame: {e}")),
            };
            in_pool(threads, || {
                frames::encode_step_answer(&physics::step(&scene.bodies, &world, scene.tick_rate))
            })
        }
        Command::Path { threads } => {
            let queries = match PathInput::decode(&input) {
                Ok(q) => q,
                Err(e) => return fail(2, &format!("refused frame: {e}")),
            };
            let nav = match queries.nav() {
                Ok(n) => n,
                Err(e) => return fail(2, &format!("refused frame: {e}")),
            };
            in_pool(threads, || {
                frames::encode_path_answer(&nav.paths(&queries.queries))
            })
        }
        Command::Help => unreachable!(),
    };
    match answer.and_then(|bytes| write_stdout(&bytes)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(1, &e),
    }
}

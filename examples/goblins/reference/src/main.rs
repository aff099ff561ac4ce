//! `overworld-reference --entities N --ticks T [--warmup W] [--threads K] [--rate 30] [--seed 0]`
//!
//! Runs W warm-up ticks then T measured ticks of the goblin scenario as fast as possible and
//! prints one line of JSON with per-tick timings and the final-state checksum.

use overworld_reference::{Engine, Params};
use std::process::ExitCode;
use std::time::Instant;

const USAGE: &str = "usage: overworld-reference --entities N --ticks T [--warmup W] [--threads K] \
[--rate HZ] [--seed S]\n  \
--entities N  number of goblins (>= 1, required)\n  \
--ticks T     measured ticks (>= 1, required)\n  \
--warmup W    unmeasured ticks run first (default 0)\n  \
--threads K   worker threads (default 1)\n  \
--rate HZ     tick rate in Hz used by the rules (>= 1, default 30)\n  \
--seed S      world seed, unsigned 64-bit (default 0)";

struct Args {
    entities: usize,
    ticks: usize,
    warmup: usize,
    threads: usize,
    rate: i64,
    seed: u64,
}

enum Parsed {
    Run(Args),
    Help,
}

fn parse_num<T: std::str::FromStr>(flag: &str, value: Option<String>) -> Result<T, String> {
    let v = value.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse::<T>()
        .map_err(|_| format!("invalid value for {flag}: {v:?}"))
}

fn parse(args: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let mut it = args;
    let mut entities = None;
    let mut ticks = None;
    let mut warmup = 0usize;
    let mut threads = 1usize;
    let mut rate = 30i64;
    let mut seed = 0u64;
    while let Some(a) = it.next() {
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
            _ => (a.clone(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next());
        match flag.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "--entities" => entities = Some(parse_num::<usize>(&flag, value())?),
            "--ticks" => ticks = Some(parse_num::<usize>(&flag, value())?),
            "--warmup" => warmup = parse_num(&flag, value())?,
            "--threads" => threads = parse_num(&flag, value())?,
            "--rate" => rate = parse_num(&flag, value())?,
            "--seed" => seed = parse_num(&flag, value())?,
            other => return Err(format!("unknown argument: {other:?}")),
        }
    }
    let entities = entities.ok_or("--entities is required")?;
    let ticks = ticks.ok_or("--ticks is required")?;
    if entities < 1 || entities >= u32::MAX as usize {
        return Err(format!("--entities must be in 1..{}", u32::MAX));
    }
    if ticks < 1 {
        return Err("--ticks must be >= 1".into());
    }
    if threads < 1 {
        return Err("--threads must be >= 1".into());
    }
    if !(1..=1_000_000).contains(&rate) {
        return Err("--rate must be in 1..=1000000".into());
    }
    Ok(Parsed::Run(Args {
        entities,
        ticks,
        warmup,
        threads,
        rate,
        seed,
    }))
}

/// Nearest-rank percentile (`per_mille` = 500 for p50, 990 for p99, 999 for p99.9) of sorted
/// samples.
fn nearest_rank(sorted: &[u64], per_mille: usize) -> u64 {
    let n = sorted.len();
    let rank = (per_mille * n).div_ceil(1000).max(1);
    sorted[rank - 1]
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Parsed::Run(a)) => a,
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(msg) => {
            eprintln!("overworld-reference: {msg}\n{USAGE}");
            return ExitCode::from(2);
        }
    };

    let params = Params::new(args.entities, args.rate, args.seed);
    let mut engine = Engine::new(params, args.threads);
    for _ in 0..args.warmup {
        engine.tick();
    }
    let mut samples = Vec::with_capacity(args.ticks);
    for _ in 0..args.ticks {
        let t0 = Instant::now();
        engine.tick();
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    let checksum = engine.checksum();
    drop(engine);

    let total: u64 = samples.iter().sum();
    let avg = total as f64 / samples.len() as f64 / 1000.0;
    samples.sort_unstable();
    println!(
        "{{\"entities\":{},\"threads\":{},\"rate\":{},\"seed\":{},\"warmup\":{},\"ticks\":{},\
\"avg_us\":{:.1},\"p50_us\":{:.1},\"p99_us\":{:.1},\"p999_us\":{:.1},\"max_us\":{:.1},\
\"checksum\":{}}}",
        args.entities,
        args.threads,
        args.rate,
        args.seed,
        args.warmup,
        args.ticks,
        avg,
        us(nearest_rank(&samples, 500)),
        us(nearest_rank(&samples, 990)),
        us(nearest_rank(&samples, 999)),
        us(*samples.last().unwrap()),
        checksum
    );
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<u64> = (1..=1000).collect();
        assert_eq!(nearest_rank(&v, 500), 500);
        assert_eq!(nearest_rank(&v, 990), 990);
        assert_eq!(nearest_rank(&v, 999), 999);
        let v: Vec<u64> = (1..=10).collect();
        assert_eq!(nearest_rank(&v, 500), 5);
        assert_eq!(nearest_rank(&v, 990), 10);
        assert_eq!(nearest_rank(&[7], 999), 7);
    }
}

//! A mutation fuzzer on stable Rust: each target runs mutations of real inputs (the tiny
//! models' files, the default model's metadata, real chat templates, OpenAI bodies) and
//! must answer every one without a panic, a hang or a runaway allocation.
//!
//! `cargo test --test fuzz` runs a short pass of every target (CI). For a long run:
//! `cargo test --release --test fuzz -- --runs 1000000 [--seed S] [TARGET...]`
//! (`scripts/fuzz.sh` does that). An execution over [`HANG_SECONDS`] counts as a hang;
//! one growing the heap by more than [`RUNAWAY_BYTES`] as a runaway allocation, and a
//! single allocation over 1 GiB aborts the run naming the execution. Failing inputs are
//! written to `target/fuzz-failures/`; `--replay FILE TARGET` runs one again and prints
//! its outcome or panic. A run is deterministic: the same seed and count give the same
//! inputs.

mod fuzz_support;

use std::collections::HashSet;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fuzz_support::alloc::{self, Counting};
use fuzz_support::targets::{self, Target};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// An execution taking longer than this is a hang.
const HANG_SECONDS: u64 = 10;
/// An execution growing the heap by more than this is a runaway allocation.
const RUNAWAY_BYTES: usize = 256 << 20;
/// Executions per target when not told otherwise: a pass of a few seconds.
const DEFAULT_RUNS: u64 = 1000;
/// A progress line every this many executions.
const PROGRESS_EVERY: u64 = 100_000;
/// Most inputs kept per target (seeds plus inputs that met a new outcome).
const MAX_POOL: usize = 512;

struct Options {
    runs: u64,
    seed: u64,
    replay: Option<PathBuf>,
    filters: Vec<String>,
}

fn options() -> Result<Options, String> {
    let mut options = Options { runs: DEFAULT_RUNS, seed: 0, replay: None, filters: Vec::new() };
    if let Some(runs) = std::env::var_os("PAGODA_FUZZ_RUNS") {
        options.runs = runs.to_string_lossy().parse().map_err(|_| "PAGODA_FUZZ_RUNS is not a number")?;
    }
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            args.next().and_then(|v| v.parse().ok()).ok_or_else(|| format!("{name} needs a number"))
        };
        match arg.as_str() {
            "--runs" => options.runs = number("--runs")?,
            "--seed" => options.seed = number("--seed")?,
            "--replay" => options.replay = Some(args.next().ok_or("--replay needs a file")?.into()),
            // Flags cargo's test runner passes to every test binary.
            flag if flag.starts_with('-') => {}
            filter => options.filters.push(filter.to_owned()),
        }
    }
    Ok(options)
}

/// The message of the last panic, taken by the runner.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

fn take_panic() -> String {
    LAST_PANIC.lock().map(|mut last| last.take()).ok().flatten().unwrap_or_default()
}

#[derive(Default)]
struct Tally {
    accepted: u64,
    panics: u64,
    hangs: u64,
    runaways: u64,
    largest_allocation: usize,
    peak_growth: usize,
    outcomes: HashSet<String>,
}

/// The input of execution `n`: a mutation of a seed (mostly) or of an input that met a
/// new outcome, drawn from (seed, n); the first `num_seeds` pool entries are the seeds.
fn input_for(target: &dyn Target, pool: &[Vec<u8>], num_seeds: usize, seed: u64, n: u64) -> Vec<u8> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let from = if rng.random_bool(0.6) { num_seeds } else { pool.len() };
    let base = &pool[rng.random_range(0..from)];
    let other = &pool[rng.random_range(0..pool.len())];
    target.mutate(&mut rng, base, other)
}

fn save_failure(target: &str, n: u64, what: &str, input: &[u8]) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("../fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("{target}-{n}-{what}.bin"));
    let _ = std::fs::write(&path, input);
    path
}

fn fuzz(target: &mut dyn Target, options: &Options) -> Tally {
    let mut pool = target.seeds();
    let num_seeds = pool.len();
    let mut tally = Tally::default();
    let name = target.name();
    for n in 0..options.runs {
        let input = input_for(target, &pool, num_seeds, options.seed, n);
        let baseline = alloc::start(n);
        let started = Instant::now();
        let result = catch_unwind(AssertUnwindSafe(|| target.run(&input)));
        let elapsed = started.elapsed();
        let (growth, largest) = alloc::finish(baseline);
        tally.largest_allocation = tally.largest_allocation.max(largest);
        tally.peak_growth = tally.peak_growth.max(growth);
        match result {
            Err(_) => {
                tally.panics += 1;
                eprintln!(
                    "{name}: execution {n} panicked; input in {}",
                    save_failure(name, n, "panic", &input).display()
                );
            }
            Ok(outcome) => {
                tally.accepted += u64::from(outcome.starts_with("ok"));
                if tally.outcomes.insert(outcome) && pool.len() < MAX_POOL {
                    pool.push(input.clone());
                }
            }
        }
        if elapsed > Duration::from_secs(HANG_SECONDS) {
            tally.hangs += 1;
            eprintln!(
                "{name}: execution {n} took {elapsed:?}; input in {}",
                save_failure(name, n, "hang", &input).display()
            );
        }
        if (n + 1) % PROGRESS_EVERY == 0 {
            eprintln!(
                "fuzz {name}: {} executions so far, {} panics, {} hangs, {} runaway allocations",
                n + 1,
                tally.panics,
                tally.hangs,
                tally.runaways
            );
        }
        if growth > RUNAWAY_BYTES {
            tally.runaways += 1;
            eprintln!(
                "{name}: execution {n} grew the heap by {growth} bytes; input in {}",
                save_failure(name, n, "alloc", &input).display()
            );
        }
    }
    tally
}

fn main() -> ExitCode {
    let options = match options() {
        Ok(options) => options,
        Err(message) => {
            eprintln!("fuzz: {message}");
            return ExitCode::FAILURE;
        }
    };
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(info.to_string());
        }
    }));
    let mut failed = false;
    for mut target in targets::all() {
        let name = target.name();
        if !options.filters.is_empty() && !options.filters.iter().any(|f| name == f) {
            continue;
        }
        if let Some(path) = &options.replay {
            let input = std::fs::read(path).unwrap_or_default();
            match catch_unwind(AssertUnwindSafe(|| target.run(&input))) {
                Ok(outcome) => println!("{name}: {outcome}"),
                Err(_) => println!("{name}: panicked: {}", take_panic()),
            }
            continue;
        }
        let started = Instant::now();
        let tally = fuzz(target.as_mut(), &options);
        println!(
            "fuzz {name}: {} executions (seed {}, {} accepted), {} panics, {} hangs, {} runaway allocations; {} distinct outcomes, largest allocation {} KiB, peak heap growth {} KiB, {:.1} s",
            options.runs,
            options.seed,
            tally.accepted,
            tally.panics,
            tally.hangs,
            tally.runaways,
            tally.outcomes.len(),
            tally.largest_allocation >> 10,
            tally.peak_growth >> 10,
            started.elapsed().as_secs_f64(),
        );
        failed |= tally.panics + tally.hangs + tally.runaways > 0;
    }
    if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS }
}

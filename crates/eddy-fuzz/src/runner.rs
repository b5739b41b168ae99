//! The fuzzing loop: cases from a seeded generator, each checked under
//! `catch_unwind`, for a bounded time.
//!
//! Settings (environment):
//! * `EDDY_FUZZ_SECONDS`: how long a target runs (default 10);
//! * `EDDY_FUZZ_SEED`: the generator's seed (default 1, so that `cargo test`
//!   is repeatable; a long run should pick its own);
//! * `EDDY_FUZZ_CASE_SECONDS`: one case longer than this is a hang
//!   (default 120): the input is printed and the process aborts;
//! * `EDDY_FUZZ_CORPUS`: a folder of `.test`/`.slt` files whose statements
//!   and queries join the seeds (the SQLite sqllogictest corpus).
//!
//! In a long run (over 60 s), before each case the input is written to
//! `$TMPDIR/eddy-fuzz-<target>.last`, so that a case that kills the process
//! (a stack overflow) leaves itself behind, and a case after which the
//! process's resident memory grew by more than 256 MiB is printed with the
//! growth (memory bursts are findings too).

use std::fmt::Display;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

/// What a run did.
#[derive(Debug, Clone)]
pub struct Report {
    /// Cases run.
    pub cases: u64,
    /// Cases whose check panicked, with their inputs.
    pub failures: Vec<String>,
    /// Wall-clock time.
    pub elapsed: Duration,
    /// The seed.
    pub seed: u64,
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs `check` on inputs from `generate` until the time is up; panics
/// (after printing every failing input) if any check panicked.
pub fn fuzz<I: Display + Send + 'static>(
    target: &str,
    mut generate: impl FnMut(&mut StdRng) -> I,
    check: impl Fn(&I),
) -> Report {
    let seconds = env_u64("EDDY_FUZZ_SECONDS", 10);
    let seed = env_u64("EDDY_FUZZ_SEED", 1);
    let case_limit = env_u64("EDDY_FUZZ_CASE_SECONDS", 120);
    let last_path = std::env::temp_dir().join(format!("eddy-fuzz-{target}.last"));
    let mut rng = StdRng::seed_from_u64(seed);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);

    // A watchdog: a case that runs past its limit is a hang.
    let case_started = Arc::new(AtomicU64::new(0));
    let current = Arc::new(Mutex::new(String::new()));
    let watchdog = {
        let case_started = Arc::clone(&case_started);
        let current = Arc::clone(&current);
        let target = target.to_string();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            let started = case_started.load(Ordering::Relaxed);
            if started == u64::MAX {
                return;
            }
            let now = start.elapsed().as_secs();
            if started > 0 && now.saturating_sub(started) > case_limit {
                eprintln!(
                    "fuzz {target}: a case ran longer than {case_limit} s (seed {seed}):\n{}",
                    current.lock().unwrap()
                );
                std::process::abort();
            }
        })
    };

    let mut report = Report {
        cases: 0,
        failures: Vec::new(),
        elapsed: Duration::ZERO,
        seed,
    };
    let long = seconds > 60;
    let mut resident = resident_bytes();
    while Instant::now() < deadline {
        let input = generate(&mut rng);
        let text = input.to_string();
        if long {
            let _ = std::fs::write(&last_path, &text);
        }
        *current.lock().unwrap() = text;
        case_started.store(start.elapsed().as_secs().max(1), Ordering::Relaxed);
        if catch_unwind(AssertUnwindSafe(|| check(&input))).is_err() {
            let text = current.lock().unwrap().clone();
            eprintln!(
                "fuzz {target}: case {} panicked (seed {seed}):\n{text}",
                report.cases
            );
            report.failures.push(text);
        }
        case_started.store(0, Ordering::Relaxed);
        if long {
            let now = resident_bytes();
            if now > resident + (256 << 20) {
                eprintln!(
                    "fuzz {target}: case {} grew resident memory from {} to {} MiB:\n{}",
                    report.cases,
                    resident >> 20,
                    now >> 20,
                    current.lock().unwrap()
                );
            }
            resident = now;
        }
        report.cases += 1;
    }
    case_started.store(u64::MAX, Ordering::Relaxed);
    let _ = watchdog.join();
    report.elapsed = start.elapsed();
    println!(
        "fuzz {target}: {} cases in {:.1} s (seed {seed}), {} failed",
        report.cases,
        report.elapsed.as_secs_f64(),
        report.failures.len()
    );
    assert!(
        report.failures.is_empty(),
        "fuzz {target}: {} case(s) panicked; inputs above",
        report.failures.len()
    );
    report
}

/// The process's resident memory (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

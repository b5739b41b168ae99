//! State larger than the memory budget: a join of two tables of N rows
//! each (unique keys, a 40-byte string per row), counted by a view, fed in
//! steps of 100,000 rows per table. The join's traces hold both tables.
//! The same feed runs four times, each in its own process so that peak
//! memory is its own: state in memory; state on disk (batches of 4 MiB and
//! more go to files) with merges into files in the step that asks for them
//! (`disk-step`) and on the storage's merger thread (`disk`, the default);
//! state on disk under a budget (`max_rss_mb`). Each
//! run ends with a checkpoint of the whole state (the cut is the pause a
//! pipeline's steps see; the rest is written while it steps on) and a
//! restore into a new pipeline. Peak RSS is split into its anonymous part
//! (heap, the block cache included) and its file-backed part (the
//! executable's pages).
//!
//! With `EDDY_SPILL_PROGRAM=groups` the view is a `GROUP BY` of the two
//! tables' union instead, with one group per key (N groups of two rows),
//! counted by a global aggregate: the state is the grouped aggregate's
//! running sums and last outputs, kept per key (`StateMap`s), not traces
//! of rows.
//!
//! Run: `cargo bench -p eddy-benches --bench spill` (release profile);
//! `EDDY_SPILL_ROWS` sets N (default 10,000,000), `EDDY_SPILL_BUDGET_MB`
//! the budget (default 512). `EDDY_SPILL_WORKERS` runs the pipeline on that
//! many workers and `EDDY_SPILL_RESUME_WORKERS` restores it on that many
//! (default: as many), so that the restore re-splits the state.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE a (k BIGINT, x BIGINT, pad VARCHAR);
CREATE TABLE b (k BIGINT, y BIGINT, pad VARCHAR);
CREATE VIEW matches AS SELECT COUNT(*) AS n, SUM(a.x + b.y) AS s FROM a JOIN b ON a.k = b.k;
";

const GROUPS: &str = "
CREATE TABLE a (k BIGINT, x BIGINT, pad VARCHAR);
CREATE TABLE b (k BIGINT, y BIGINT, pad VARCHAR);
CREATE VIEW matches AS SELECT COUNT(*) AS n, SUM(c) AS s FROM (
  SELECT k, COUNT(*) AS c, SUM(x) AS t FROM (SELECT k, x FROM a UNION ALL SELECT k, y FROM b) AS u GROUP BY k
) AS g;
";

/// The program `EDDY_SPILL_PROGRAM` names (`join`, the default, or `groups`).
fn program_text() -> &'static str {
    match std::env::var("EDDY_SPILL_PROGRAM").as_deref() {
        Ok("groups") => GROUPS,
        _ => PROGRAM,
    }
}

const STEP: i64 = 100_000;

fn rows(pipeline: &Pipeline, table: &str, from: i64, to: i64) -> ZSet {
    let schema = Arc::clone(pipeline.input(table).unwrap().schema());
    // Keys in a scattered order, so every merge interleaves old and new.
    let keys: Int64Array = (from..to)
        .map(|i| i.wrapping_mul(0x9E37_79B9) % (1 << 40))
        .collect();
    let values: Int64Array = (from..to).collect();
    let pad: StringArray = (from..to).map(|i| Some(format!("{i:040}"))).collect();
    ZSet::with_weight(
        RecordBatch::try_new(
            schema,
            vec![Arc::new(keys), Arc::new(values), Arc::new(pad)],
        )
        .unwrap(),
        1,
    )
}

/// A field of `/proc/self/status` in MiB (0 where missing).
fn status_mib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

/// The highest anonymous (heap) and file-backed (the executable, mapped
/// batch pages) parts of the resident set, sampled every 5 ms from a thread
/// of their own, so that a peak can be told apart.
fn sample_rss_parts() -> Arc<[AtomicU64; 2]> {
    let peaks = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let sampled = Arc::clone(&peaks);
    std::thread::spawn(move || loop {
        sampled[0].fetch_max(status_mib("RssAnon:"), Ordering::Relaxed);
        sampled[1].fetch_max(status_mib("RssFile:"), Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(5));
    });
    peaks
}

/// A number from the environment, or `default`.
fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The pipeline of the program on `workers` workers, with `storage`.
fn pipeline(storage: Option<&Arc<Storage>>, workers: usize) -> Pipeline {
    let options = eddy_sql::PipelineOptions {
        storage: storage.cloned(),
        workers,
        views: eddy_sql::ViewsKept::All,
        ..Default::default()
    };
    Pipeline::with_options(Program::parse(program_text()).unwrap(), options).unwrap()
}

/// One run, in this process: prints a table row.
fn run(mode: &str, n: i64, budget_mb: u64) {
    let workers = env_number("EDDY_SPILL_WORKERS", 1) as usize;
    let resume_workers = env_number("EDDY_SPILL_RESUME_WORKERS", workers as u64) as usize;
    let dir = std::env::temp_dir().join(format!("eddy-spill-{}", std::process::id()));
    let storage = (mode != "memory").then(|| Storage::open(&dir, 4 << 20).unwrap());
    let mut pipeline = pipeline(storage.as_ref(), workers);
    if let (true, Some(storage)) = (mode == "budget", &storage) {
        // As a server sizes it: the block cache is part of the budget.
        let cache = eddy_dbsp::storage::DEFAULT_CACHE_BYTES.min((budget_mb << 20) as usize / 4);
        storage.set_cache_bytes(cache);
        storage.watch_budget(budget_mb << 20).unwrap();
    }
    if let (true, Some(storage)) = (mode == "disk-step", &storage) {
        storage.set_background_merge_bytes(u64::MAX);
    }
    let parts = sample_rss_parts();
    let mut steps: Vec<Duration> = Vec::new();
    let started = Instant::now();
    let mut from = 0;
    while from < n {
        let to = (from + STEP).min(n);
        for table in ["a", "b"] {
            let change = rows(&pipeline, table, from, to);
            pipeline.push(table, change).unwrap();
        }
        let t = Instant::now();
        pipeline.step().unwrap();
        steps.push(t.elapsed());
        from = to;
    }
    let total = started.elapsed();
    let view = pipeline.view_rows("matches").unwrap();
    let count = view
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .map(|a| a.value(0))
        .unwrap_or(-1);
    assert_eq!(count, n, "every key matches once (is one group)");
    let peak = status_mib("VmHWM:");
    let (anonymous, file_backed) = (
        parts[0].load(Ordering::Relaxed),
        parts[1].load(Ordering::Relaxed),
    );
    // A checkpoint of the whole state (the pause a pipeline's steps would
    // see), then a restore into a new pipeline (recovery).
    let checkpoint = dir.join("checkpoint");
    std::fs::create_dir_all(&checkpoint).unwrap();
    let t = Instant::now();
    let pending = pipeline.checkpoint_cut(&checkpoint).unwrap();
    let pause = t.elapsed();
    let (written, linked) = pending.finish().unwrap();
    let whole = t.elapsed();
    let t = Instant::now();
    let mut restored = self::pipeline(storage.as_ref(), resume_workers);
    restored.restore(&checkpoint).unwrap();
    let recovery = t.elapsed();
    assert_eq!(
        restored.view_rows("matches").unwrap(),
        view,
        "the restored view differs"
    );
    drop(restored);
    let memory: usize = pipeline.operator_states().iter().map(|s| s.bytes).sum();
    let on_disk = storage.as_ref().map(|s| s.stats().bytes).unwrap_or(0);
    let state = memory as u64 + on_disk;
    let cache = storage
        .as_ref()
        .map(|s| s.stats().cache)
        .unwrap_or_default();
    let hit_rate = cache.hits as f64 / (cache.hits + cache.misses).max(1) as f64;
    steps.sort();
    let median = steps[steps.len() / 2];
    let max = steps[steps.len() - 1];
    let mib = |b: u64| b as f64 / 1048576.0;
    println!(
        "| {mode}{} | {n} | {:.0} MiB | {:.0} MiB | {:.0} MiB | {peak} MiB | {anonymous} MiB | {file_backed} MiB | {:.1} s | {median:.2?} | {max:.2?} | {pause:.2?} | {whole:.2?} ({:.0} MiB written, {:.0} MiB linked) | {recovery:.2?} | {:.0} MiB, {:.0}% hits |",
        match (workers, resume_workers) {
            (1, 1) => String::new(),
            (w, r) if w == r => format!(", {w} workers"),
            (w, r) => format!(", {w} workers, restored on {r}"),
        },
        mib(state),
        mib(memory as u64),
        mib(on_disk),
        total.as_secs_f64(),
        mib(written),
        mib(linked),
        mib(cache.capacity),
        100.0 * hit_rate,
    );
    drop(pipeline);
    drop(storage);
    let _ = std::fs::remove_dir_all(&dir);
}

fn main() {
    let n: i64 = std::env::var("EDDY_SPILL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000_000);
    let budget_mb: u64 = std::env::var("EDDY_SPILL_BUDGET_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(512);
    if let Ok(mode) = std::env::var("EDDY_SPILL_MODE") {
        run(&mode, n, budget_mb);
        return;
    }
    let what = match program_text() {
        GROUPS => "GROUP BY of the union",
        _ => "join",
    };
    println!(
        "{what} of two tables of {n} rows, steps of {STEP} rows per table; budget {budget_mb} MiB"
    );
    println!("| state | rows per table | state size | in memory | on disk | peak RSS | peak anonymous | peak file-backed | total | median step | slowest step | checkpoint pause (cut) | checkpoint written | restore | cache, hit rate |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let me = std::env::current_exe().unwrap();
    for mode in ["memory", "disk-step", "disk", "budget"] {
        let status = std::process::Command::new(&me)
            .env("EDDY_SPILL_MODE", mode)
            .env("EDDY_SPILL_ROWS", n.to_string())
            .env("EDDY_SPILL_BUDGET_MB", budget_mb.to_string())
            .status()
            .unwrap();
        assert!(status.success(), "{mode} run failed");
    }
}

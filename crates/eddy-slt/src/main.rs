//! `eddy-slt PATH...`: runs sqllogictest files (or folders of them) against
//! Eddy and prints a line per file and a closing `N passed, M failed`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};

struct Args {
    paths: Vec<PathBuf>,
    seed: u64,
    jobs: usize,
    floor_file: Option<PathBuf>,
    summary: Option<PathBuf>,
    quiet: bool,
    workers: usize,
}

const USAGE: &str =
    "usage: eddy-slt [--seed N] [--jobs N] [--workers N] [--floor FILE] [--summary FILE] [--differences FILE] [--quiet] PATH...\n\
Runs every .test/.slt file under each PATH; each query becomes an incrementally\n\
maintained Eddy view. --floor FILE fails the run when fewer queries pass than\n\
the number recorded in FILE (its first number). --summary FILE writes the totals\n\
(passed, failed, skipped by skipif/onlyif, time) and the failures grouped by kind.\n\
--differences FILE counts the failures of the queries it lists (checked against\n\
PostgreSQL: sql-tests/sqlite-differences.txt) as documented differences.\n\
--workers N splits every keyed operator of each query's pipeline into N shards\n\
(runtime_config.workers); the answers must not change.";

fn parse_args() -> Result<Args> {
    let mut args = Args {
        paths: vec![],
        seed: 0,
        jobs: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        floor_file: None,
        summary: None,
        quiet: false,
        workers: 1,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--seed" => args.seed = it.next().context("--seed needs a value")?.parse()?,
            "--jobs" => args.jobs = it.next().context("--jobs needs a value")?.parse()?,
            "--floor" => args.floor_file = Some(it.next().context("--floor needs a file")?.into()),
            "--summary" => args.summary = Some(it.next().context("--summary needs a file")?.into()),
            "--differences" => {
                let list = PathBuf::from(it.next().context("--differences needs a file")?);
                eddy_slt::differences::load(&list).map_err(|e| anyhow::anyhow!(e))?;
            }
            "--workers" => args.workers = it.next().context("--workers needs a value")?.parse()?,
            "--quiet" => args.quiet = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            p if p.starts_with("--") => bail!("unknown option {p}\n{USAGE}"),
            p => args.paths.push(p.into()),
        }
    }
    if args.paths.is_empty() {
        bail!("{USAGE}");
    }
    Ok(args)
}

fn collect(path: &Path, out: &mut Vec<PathBuf>, top: bool) -> Result<()> {
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()?;
        entries.sort();
        for e in entries {
            collect(&e, out, false)?;
        }
    } else if top || path.extension().is_some_and(|e| e == "test" || e == "slt") {
        out.push(path.to_path_buf());
    }
    Ok(())
}

fn read_floor(path: &Path) -> Result<usize> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .context("no number in the floor file")?
        .parse()
        .context("bad floor")
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let mut files = Vec::new();
    for p in &args.paths {
        if !p.exists() {
            bail!("{} does not exist", p.display());
        }
        collect(p, &mut files, true)?;
    }
    let started = std::time::Instant::now();
    let next = AtomicUsize::new(0);
    let reports = Mutex::new(vec![None; files.len()]);
    let printed = Mutex::new(0usize);
    std::thread::scope(|s| {
        for _ in 0..args.jobs.max(1) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= files.len() {
                    break;
                }
                let db = eddy_slt::Database::new().with_workers(args.workers);
                let report = eddy_slt::run_file_with(&files[i], args.seed, db);
                reports.lock().unwrap()[i] = Some(report);
                // Print finished files in order.
                let mut p = printed.lock().unwrap();
                let done = reports.lock().unwrap();
                while *p < files.len() {
                    let Some(r) = &done[*p] else { break };
                    print_report(&files[*p], r, args.quiet);
                    *p += 1;
                }
            });
        }
    });
    let reports: Vec<_> = reports
        .into_inner()
        .unwrap()
        .into_iter()
        .flatten()
        .collect();
    let passed: usize = reports.iter().map(|r| r.passed).sum();
    let failed: usize = reports.iter().map(|r| r.failed).sum();
    let documented: usize = reports.iter().map(|r| r.documented).sum();
    println!("{passed} passed, {failed} failed ({documented} failures explained by documented differences)");
    if let Some(path) = &args.summary {
        let text = summary(&files, &reports, started.elapsed().as_secs_f64());
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(floor) = &args.floor_file {
        let floor = read_floor(floor)?;
        if passed < floor {
            bail!("{passed} queries passed, below the floor of {floor}");
        }
        eprintln!("floor {floor}: ok ({} above)", passed - floor);
    }
    Ok(())
}

/// The run's totals and its failures grouped by kind, most frequent
/// first, each with the first place it happened (Markdown).
fn summary(files: &[PathBuf], reports: &[eddy_slt::FileReport], seconds: f64) -> String {
    use std::collections::BTreeMap;
    use std::fmt::Write as _;
    let sum = |f: fn(&eddy_slt::FileReport) -> usize| reports.iter().map(f).sum::<usize>();
    let mut kinds: BTreeMap<&str, (usize, String)> = BTreeMap::new();
    for (file, r) in files.iter().zip(reports) {
        for (kind, (n, line)) in &r.kinds {
            let e = kinds
                .entry(kind)
                .or_insert_with(|| (0, format!("{}:{line}", file.display())));
            e.0 += n;
        }
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
    let mut out = String::new();
    let _ = writeln!(out, "| files | queries passed | queries failed | queries skipped (skipif/onlyif) | statements failed | failures explained by documented differences | seconds |");
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|");
    let _ = writeln!(
        out,
        "| {} | {} | {} | {} | {} | {} | {seconds:.0} |",
        files.len(),
        sum(|r| r.passed),
        sum(|r| r.failed),
        sum(|r| r.skipped),
        sum(|r| r.statement_failures),
        sum(|r| r.documented),
    );
    let _ = writeln!(out, "\n| failures | kind | first at |\n|---:|---|---|");
    for (kind, (n, at)) in kinds {
        let kind = kind.replace('|', "\\|").replace('\n', " ");
        let _ = writeln!(out, "| {n} | {kind} | {at} |");
    }
    out
}

fn print_report(path: &Path, r: &eddy_slt::FileReport, quiet: bool) {
    let statements = if r.statement_failures > 0 {
        format!(", {} statements failed", r.statement_failures)
    } else {
        String::new()
    };
    println!(
        "{}: {} passed, {} failed{statements}",
        path.display(),
        r.passed,
        r.failed
    );
    if quiet {
        return;
    }
    for f in &r.failures {
        let sql: String = f.sql.split_whitespace().collect::<Vec<_>>().join(" ");
        println!("  line {}: {sql}\n    {}", f.line, f.reason);
    }
}

//! Nexmark: each query of `benches/nexmark/queries` over the tables of
//! `benches/nexmark/table.sql`, fed by the in-process `nexmark` generator,
//! run headless in an `eddy serve` of its own process (so that peak memory
//! is the query's) the way Feldera's runner drives a pipeline: created and
//! started over the REST API, `/stats` polled every 5 ms (over one kept-alive
//! connection, as an HTTP client session does) until
//! `global_metrics.pipeline_complete`. Outputs are not drained: views are
//! computed and their changes counted (`view_changes`), not sent anywhere.
//!
//! Prints, per query, events/s (all events over the time from the start
//! request to completion), peak RSS and the number of output changes, as a
//! table and as CSV. A query the engine refuses is listed with the reason.
//!
//! Run: `cargo bench -p eddy-benches --bench nexmark -- [--query qN]...
//! [--events N] [--threads N] [--workers N] [--max-buffered N]
//! [--runtime-config JSON] [--csv FILE]` (defaults: every query, 1,000,000
//! events, one generator thread, one worker, the server's default input
//! buffer; `--runtime-config '{"storage": false}'` adds fields to the
//! pipeline's `runtime_config`).

mod common;

/// The command line, for `--help` and a wrong argument.
const USAGE: &str = "usage: nexmark [--query qN]... [--events N] [--threads N] [--workers N] \
[--max-buffered N] [--runtime-config JSON] [--csv FILE]";

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

struct Args {
    queries: Vec<String>,
    events: u64,
    threads: u64,
    workers: u64,
    /// `runtime_config.max_buffered_records`, when given.
    buffered: Option<u64>,
    /// More `runtime_config` fields, as a JSON object.
    config: Option<Value>,
    csv: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args {
        queries: Vec::new(),
        events: 1_000_000,
        threads: 1,
        workers: 1,
        buffered: None,
        config: None,
        csv: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--query" => a.queries.push(value()),
            "--events" => a.events = value().parse().expect("--events N"),
            "--threads" => a.threads = value().parse().expect("--threads N"),
            "--workers" => a.workers = value().parse().expect("--workers N"),
            "--csv" => a.csv = Some(value().into()),
            "--max-buffered" => a.buffered = Some(value().parse().expect("--max-buffered N")),
            "--runtime-config" => {
                a.config = Some(serde_json::from_str(&value()).expect("--runtime-config JSON"))
            }
            // Cargo passes `--bench` through.
            "--bench" => {}
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => {
                eprintln!("unknown argument {other}\n{USAGE}");
                std::process::exit(2);
            }
        }
    }
    if a.queries.is_empty() {
        a.queries = (0..=22).map(|i| format!("q{i}")).collect();
    }
    a
}

fn suite() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("nexmark")
}

/// The outcome of one query, as a CSV line.
fn measure(query: &str, a: &Args) -> String {
    let (events, threads, workers) = (a.events, a.threads, a.workers);
    let table = std::fs::read_to_string(suite().join("table.sql"))
        .unwrap()
        .replace("{events}", &events.to_string())
        .replace("{threads}", &threads.to_string());
    let view = std::fs::read_to_string(suite().join(format!("queries/{query}.sql")))
        .unwrap_or_else(|e| panic!("{query}: {e}"));
    let dir = std::env::temp_dir().join(format!("eddy-bench-nexmark-{}", std::process::id()));
    let url = common::serve(&dir);
    let base = format!("{url}/v0/pipelines/{query}");
    let mut config = json!({"workers": workers});
    if let Some(n) = a.buffered {
        config["max_buffered_records"] = json!(n);
    }
    if let Some(Value::Object(more)) = &a.config {
        for (k, v) in more {
            config[k] = v.clone();
        }
    }
    let body = json!({
        "program_code": format!("{table}\n{view}"),
        "runtime_config": config,
    });
    let agent = ureq::Agent::new();
    let created = agent.put(&base).send_string(&body.to_string());
    if let Err(e) = created {
        let reason = match e {
            ureq::Error::Status(_, r) => r.into_string().unwrap_or_default(),
            other => other.to_string(),
        };
        let reason: String = reason.chars().filter(|c| *c != ',' && *c != '\n').collect();
        let _ = std::fs::remove_dir_all(&dir);
        return format!("{query},not runnable,{reason}");
    }
    let started = Instant::now();
    agent.post(&format!("{base}/start")).call().expect("start");
    let stats = loop {
        let text = agent
            .get(&format!("{base}/stats"))
            .call()
            .expect("stats")
            .into_string()
            .expect("body");
        let s: Value = serde_json::from_str(&text).expect("json");
        if s["global_metrics"]["pipeline_complete"] == true {
            break s;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let secs = started.elapsed().as_secs_f64();
    let changes: u64 = stats["view_changes"]
        .as_object()
        .map(|m| m.values().filter_map(Value::as_u64).sum())
        .unwrap_or(0);
    let steps = stats["global_metrics"]["steps"].as_u64().unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
    format!(
        "{query},{:.0},{secs:.3},{},{changes},{steps}",
        events as f64 / secs,
        peak_rss_mib()
    )
}

fn peak_rss_mib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        / 1024
}

fn main() {
    let a = args();
    if let Ok(query) = std::env::var("EDDY_NEXMARK_QUERY") {
        println!("{}", measure(&query, &a));
        return;
    }
    println!(
        "Nexmark, {} events, {} generator thread(s), {} worker(s)",
        a.events, a.threads, a.workers
    );
    println!("| query | events/s | seconds | peak RSS MiB | output changes | steps |");
    println!("|---|---:|---:|---:|---:|---:|");
    let me = std::env::current_exe().unwrap();
    let mut csv =
        String::from("query,events_per_second,seconds,peak_rss_mib,output_changes,steps\n");
    let mut rates = Vec::new();
    for query in &a.queries {
        let out = std::process::Command::new(&me)
            .args(std::env::args().skip(1))
            .env("EDDY_NEXMARK_QUERY", query)
            .output()
            .unwrap();
        let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if !out.status.success() || line.is_empty() {
            println!(
                "| {query} | failed: {} | | | | |",
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .last()
                    .unwrap_or("")
            );
            continue;
        }
        let fields: Vec<&str> = line.split(',').collect();
        if fields.get(1) == Some(&"not runnable") {
            println!(
                "| {query} | not runnable: {} | | | | |",
                fields[2..].join(",")
            );
        } else {
            println!("| {} |", fields.join(" | "));
            rates.extend(fields.get(1).and_then(|r| r.parse::<f64>().ok()));
        }
        csv.push_str(&line);
        csv.push('\n');
    }
    if !rates.is_empty() {
        let geomean = (rates.iter().map(|r| r.ln()).sum::<f64>() / rates.len() as f64).exp();
        println!(
            "geomean over {} queries: {geomean:.0} events/s",
            rates.len()
        );
    }
    if let Some(path) = a.csv {
        std::fs::write(&path, csv).unwrap();
    }
}

//! HTTP ingest throughput: an `eddy serve` (in this process, on a loopback
//! port) with one table and a filter-and-project view; the client posts
//! 1,000,000 rows in requests of 50,000, as JSON (`insert_delete`) and as
//! CSV, and the figure runs from the first request until the completion
//! token of the last one is complete (every row processed and its change
//! written to an egress stream that is drained throughout).
//!
//! Run: `cargo bench -p eddy-benches --bench ingest`

mod common;

use std::io::Read;
use std::time::{Duration, Instant};

const ROWS: usize = 1_000_000;
const PER_REQUEST: usize = 50_000;

const PROGRAM: &str = "CREATE TABLE t (id BIGINT NOT NULL, name VARCHAR, amount INT);
CREATE VIEW v AS SELECT id, name, amount * 2 AS doubled FROM t WHERE amount % 10 <> 0;";

fn body(format: &str, from: usize) -> String {
    let mut s = String::with_capacity(PER_REQUEST * 64);
    for i in from..from + PER_REQUEST {
        let name = ["ann", "bob", "cy", "di"][i % 4];
        let amount = i % 1000;
        if format == "json" {
            s.push_str(&format!(
                "{{\"insert\": {{\"id\": {i}, \"name\": \"{name}\", \"amount\": {amount}}}}}\n"
            ));
        } else {
            s.push_str(&format!("{i},{name},{amount}\n"));
        }
    }
    s
}

fn run(url: &str, pipeline: &str, format: &str) -> f64 {
    let base = format!("{url}/v0/pipelines/{pipeline}");
    let program = serde_json::json!({"name": pipeline, "program_code": PROGRAM}).to_string();
    ureq::put(&base).send_string(&program).expect("deploy");
    ureq::post(&format!("{base}/start")).call().expect("start");
    // Drain the view's changes throughout, as a client would.
    let egress = ureq::post(&format!("{base}/egress/v?format=json"))
        .call()
        .expect("egress");
    let drain = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 16];
        let mut r = egress.into_reader();
        while r.read(&mut buf).map(|n| n > 0).unwrap_or(false) {}
    });
    let bodies: Vec<String> = (0..ROWS / PER_REQUEST)
        .map(|i| body(format, i * PER_REQUEST))
        .collect();
    let bytes: usize = bodies.iter().map(String::len).sum();
    let started = Instant::now();
    let mut token = String::new();
    for b in &bodies {
        let r: serde_json::Value = ureq::post(&format!("{base}/ingress/t?format={format}"))
            .send_string(b)
            .expect("ingress")
            .into_string()
            .map(|t| serde_json::from_str(&t).expect("json"))
            .expect("body");
        token = r["token"].as_str().expect("token").to_string();
    }
    loop {
        let s: serde_json::Value = ureq::get(&format!("{base}/completion_status?token={token}"))
            .call()
            .expect("status")
            .into_string()
            .map(|t| serde_json::from_str(&t).expect("json"))
            .expect("body");
        if s["status"] == "complete" {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let secs = started.elapsed().as_secs_f64();
    ureq::post(&format!("{base}/stop?force=true"))
        .call()
        .expect("stop");
    drain.join().unwrap();
    let rate = ROWS as f64 / secs;
    println!(
        "{format:>4}: {ROWS} rows ({:.1} MB) in {secs:.2} s = {rate:.0} records/s",
        bytes as f64 / 1e6
    );
    rate
}

fn main() {
    let dir = std::env::temp_dir().join(format!("eddy-bench-ingest-{}", std::process::id()));
    let url = common::serve(&dir);
    let json = run(&url, "ingest_json", "json");
    let csv = run(&url, "ingest_csv", "csv");
    println!("csv / json: {:.2}", csv / json);
    let _ = std::fs::remove_dir_all(dir);
}

//! Step latency versus table size: a table of N rows feeds a join and a
//! grouped aggregate; we time single steps that change one row, at
//! N = 10,000 and N = 1,000,000. If the work follows the change, the two
//! latencies are close (ratio near 1). The pipeline is built as the
//! server builds it: views that are not materialized keep no rows.
//!
//! Run: `cargo bench -p eddy-benches --bench step` (release profile).

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch, StringArray};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, PipelineOptions, Program, ViewsKept};

const PROGRAM: &str = "
CREATE TABLE facts (id BIGINT, k BIGINT, v BIGINT);
CREATE TABLE dims (k BIGINT, name VARCHAR);
CREATE VIEW joined AS SELECT f.id, f.v, d.name FROM facts f JOIN dims d ON f.k = d.k;
CREATE VIEW totals AS SELECT k, COUNT(*) AS n, SUM(v) AS total, AVG(v) AS mean FROM facts GROUP BY k;
";

/// Number of distinct keys: groups grow with N (N / 1000 rows each).
const KEYS: i64 = 1000;

fn facts(pipeline: &Pipeline, ids: std::ops::Range<i64>, weight: i64) -> ZSet {
    let schema = Arc::clone(pipeline.input("facts").unwrap().schema());
    let id: Int64Array = ids.clone().collect();
    let k: Int64Array = ids.clone().map(|i| i % KEYS).collect();
    let v: Int64Array = ids.map(|i| i * 7 % 101).collect();
    ZSet::with_weight(
        RecordBatch::try_new(schema, vec![Arc::new(id), Arc::new(k), Arc::new(v)]).unwrap(),
        weight,
    )
}

fn measure(n: i64) -> (Duration, Duration) {
    // As a server runs it: the views are not materialized, so their
    // changes are computed and their rows not kept.
    let options = PipelineOptions {
        views: ViewsKept::Materialized,
        ..PipelineOptions::default()
    };
    let mut pipeline = Pipeline::with_options(Program::parse(PROGRAM).unwrap(), options).unwrap();
    let dims_schema = Arc::clone(pipeline.input("dims").unwrap().schema());
    let k: Int64Array = (0..KEYS).collect();
    let name: StringArray = (0..KEYS).map(|i| Some(format!("name{i}"))).collect();
    let dims = RecordBatch::try_new(dims_schema, vec![Arc::new(k), Arc::new(name)]).unwrap();
    pipeline.push("dims", ZSet::with_weight(dims, 1)).unwrap();
    let load = Instant::now();
    let chunk = 100_000;
    let mut start = 0;
    while start < n {
        let end = (start + chunk).min(n);
        pipeline
            .push("facts", facts(&pipeline, start..end, 1))
            .unwrap();
        pipeline.step().unwrap();
        start = end;
    }
    let load = load.elapsed();
    // Single-row changes: insert a new row, then delete it again.
    let rounds = 200;
    let mut times = Vec::with_capacity(rounds * 2);
    for r in 0..rounds as i64 {
        let id = n + r;
        for w in [1, -1] {
            pipeline
                .push("facts", facts(&pipeline, id..id + 1, w))
                .unwrap();
            let t = Instant::now();
            pipeline.step().unwrap();
            times.push(t.elapsed());
        }
    }
    times.sort();
    (times[times.len() / 2], load)
}

fn main() {
    println!("step latency for a single-row change (median of 400 steps)");
    let (small, load_small) = measure(10_000);
    println!(
        "N = 10,000:    {:>10.1} µs per step (load {:.2?})",
        small.as_secs_f64() * 1e6,
        load_small
    );
    let (large, load_large) = measure(1_000_000);
    println!(
        "N = 1,000,000: {:>10.1} µs per step (load {:.2?})",
        large.as_secs_f64() * 1e6,
        load_large
    );
    println!(
        "ratio (1M / 10k): {:.2}",
        large.as_secs_f64() / small.as_secs_f64()
    );
}

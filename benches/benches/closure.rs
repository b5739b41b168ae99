//! Incremental recursion: the transitive closure of a graph of 1,000,000
//! edges (200,000 chains of 5 edges, so the closure holds 3,000,000 pairs)
//! is loaded in one step; then single edges are added (joining two chains)
//! and removed again, one per step. If recursion is incremental, such a
//! step costs what the closure's change costs (36 pairs), not the closure.
//!
//! Run: `cargo bench -p eddy-benches --bench closure` (release profile).

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Int64Array, RecordBatch};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE edges (x BIGINT, y BIGINT);
DECLARE RECURSIVE VIEW closure (x BIGINT, y BIGINT);
CREATE VIEW closure AS SELECT x, y FROM edges
    UNION SELECT e.x, c.y FROM edges e JOIN closure c ON e.y = c.x;
";

const CHAINS: i64 = 200_000;
const LENGTH: i64 = 5;

fn edges(pipeline: &Pipeline, pairs: &[(i64, i64)], weight: i64) -> ZSet {
    let schema = Arc::clone(pipeline.input("edges").unwrap().schema());
    let x: Int64Array = pairs.iter().map(|p| p.0).collect();
    let y: Int64Array = pairs.iter().map(|p| p.1).collect();
    ZSet::with_weight(
        RecordBatch::try_new(schema, vec![Arc::new(x), Arc::new(y)]).unwrap(),
        weight,
    )
}

/// Node `k` of chain `c`.
fn node(c: i64, k: i64) -> i64 {
    c * (LENGTH + 1) + k
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn main() {
    let mut pipeline = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    let all: Vec<(i64, i64)> = (0..CHAINS)
        .flat_map(|c| (0..LENGTH).map(move |k| (node(c, k), node(c, k + 1))))
        .collect();
    pipeline.push("edges", edges(&pipeline, &all, 1)).unwrap();
    let load = Instant::now();
    pipeline.step().unwrap();
    let load = load.elapsed();
    let pairs = pipeline.view_change("closure").unwrap().len();
    let rounds = 100;
    let (mut adds, mut removes) = (Vec::new(), Vec::new());
    for r in 0..rounds {
        // The last node of chain 2r to the first node of chain 2r + 1.
        let bridge = [(node(2 * r, LENGTH), node(2 * r + 1, 0))];
        for (w, times) in [(1, &mut adds), (-1, &mut removes)] {
            pipeline
                .push("edges", edges(&pipeline, &bridge, w))
                .unwrap();
            let t = Instant::now();
            pipeline.step().unwrap();
            times.push(t.elapsed());
            let changed = pipeline.view_change("closure").unwrap().len();
            assert_eq!(changed, 36, "a bridge adds or removes 6 × 6 pairs");
        }
    }
    println!(
        "closure of {} edges: {} pairs; load step {:.2?}; add one edge: median {:.2?}; \
         remove it: median {:.2?}; load / add = {:.0}",
        all.len(),
        pairs,
        load,
        median(adds.clone()),
        median(removes.clone()),
        load.as_secs_f64() / median(adds).as_secs_f64()
    );
}

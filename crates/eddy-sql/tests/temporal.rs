//! NOW() bounds: views that keep the rows of a moving time range, checked
//! after every step against DataFusion with NOW() replaced by the step's
//! time, on random rows (past, recent and future) inserted and deleted.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const T0: i64 = 1_700_000_000_000; // ms

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn batch(rows: &[(Option<i64>, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(
                rows.iter()
                    .map(|r| r.0)
                    .collect::<TimestampMillisecondArray>(),
            ),
            Arc::new(rows.iter().map(|r| Some(r.1)).collect::<Int64Array>()),
        ],
    )
    .unwrap()
}

const VIEWS: [&str; 5] = [
    "SELECT ts, v FROM ev WHERE ts >= NOW() - INTERVAL '10' SECOND",
    "SELECT v FROM ev WHERE ts > NOW() - INTERVAL 10 SECONDS AND ts <= NOW() AND v > 1",
    "SELECT COUNT(*) AS n, SUM(v) AS s FROM ev WHERE CURRENT_TIMESTAMP - INTERVAL '30' SECOND < ts",
    "SELECT v FROM ev WHERE ts < NOW() + INTERVAL '5' SECOND",
    "SELECT v, COUNT(*) AS n FROM ev WHERE NOW() >= ts AND ts >= NOW() - INTERVAL '20' SECOND GROUP BY v",
];

#[test]
fn views_follow_the_clock() {
    let mut text = "CREATE TABLE ev (ts TIMESTAMP(3), v BIGINT);\n".to_string();
    for (i, v) in VIEWS.iter().enumerate() {
        text.push_str(&format!("CREATE VIEW v{i} AS {v};\n"));
    }
    for seed in 0..10u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut p = Pipeline::new(Program::parse(&text).unwrap()).unwrap();
        assert!(p.uses_clock());
        let mut rows: Vec<(Option<i64>, i64)> = Vec::new();
        let mut now = T0;
        for step in 0..15 {
            now += rng.gen_range(0..6_000);
            let mut inserts = Vec::new();
            for _ in 0..rng.gen_range(0..5) {
                let ts = if rng.gen_bool(0.1) {
                    None
                } else {
                    Some(now + rng.gen_range(-40_000..15_000))
                };
                inserts.push((ts, rng.gen_range(0..4)));
            }
            let mut deletes = Vec::new();
            for _ in 0..rng.gen_range(0..3) {
                if !rows.is_empty() {
                    deletes.push(rows.swap_remove(rng.gen_range(0..rows.len())));
                }
            }
            rows.extend(&inserts);
            let change = ZSet::concat(
                &schema(),
                &[
                    ZSet::with_weight(batch(&inserts), 1),
                    ZSet::with_weight(batch(&deletes), -1),
                ],
            )
            .unwrap();
            p.push("ev", change).unwrap();
            p.step_at(now * 1_000_000).unwrap();
            let tables: HashMap<String, RecordBatch> = [("ev".to_string(), batch(&rows))].into();
            let literal = format!("to_timestamp_millis({now})");
            for (i, v) in VIEWS.iter().enumerate() {
                let oracle = v
                    .replace("NOW()", &literal)
                    .replace("CURRENT_TIMESTAMP", &literal);
                let expected = common::datafusion_rows(&tables, &oracle).unwrap();
                let got = p.view_rows(&format!("v{i}")).unwrap();
                assert_eq!(
                    common::sorted_rows(&got),
                    common::sorted_rows(&expected),
                    "seed {seed} step {step}: {v}"
                );
            }
        }
    }
}

#[test]
fn now_elsewhere_is_refused() {
    for view in [
        "SELECT NOW() AS t FROM ev",
        "SELECT v FROM ev WHERE ts = NOW()",
        "SELECT v FROM ev WHERE ts >= NOW() - INTERVAL '1' HOUR AND v >= NOW() - INTERVAL '1' HOUR",
    ] {
        let text =
            format!("CREATE TABLE ev (ts TIMESTAMP(3), v TIMESTAMP(3));\nCREATE VIEW x AS {view};");
        let result = Program::parse(&text).and_then(Pipeline::new);
        let e = result
            .err()
            .unwrap_or_else(|| panic!("{view} was accepted"))
            .to_string();
        assert!(e.contains("NOW()"), "{view}: {e}");
    }
}

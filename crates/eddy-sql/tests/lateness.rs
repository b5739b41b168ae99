//! LATENESS: late changes are dropped and counted, and the views over the
//! rest equal a batch run over the rows that were not late (checked against
//! DataFusion on random change streams whose timestamps mostly advance).

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("ts", DataType::Int64, false),
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn rows(schema: &SchemaRef, rows: &[(i64, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        Arc::clone(schema),
        vec![
            Arc::new(rows.iter().map(|r| r.0).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| Some(r.1)).collect::<Int64Array>()),
            Arc::new(rows.iter().map(|r| Some(r.2)).collect::<Int64Array>()),
        ],
    )
    .unwrap()
}

fn late(pipeline: &Pipeline, relation: &str) -> u64 {
    pipeline
        .late_records()
        .iter()
        .find(|(r, _)| r == relation)
        .map(|(_, n)| n.load(Ordering::Relaxed))
        .unwrap()
}

#[test]
fn late_inserts_and_deletes_are_dropped_and_counted() {
    let program = Program::parse(
        "CREATE TABLE t (ts BIGINT NOT NULL LATENESS 10, k BIGINT, v BIGINT);
         CREATE VIEW s AS SELECT k, SUM(v) AS total FROM t GROUP BY k;",
    )
    .unwrap();
    let s = Arc::clone(&program.tables[0].schema);
    let mut p = Pipeline::new(program).unwrap();
    p.push(
        "t",
        ZSet::with_weight(rows(&s, &[(100, 1, 1), (50, 1, 2)]), 1),
    )
    .unwrap();
    p.step().unwrap();
    // Largest ts is 100, so ts < 90 is late from now on: the insert at 85
    // and the delete of the row at 50 are dropped; 90 and 120 pass.
    p.push(
        "t",
        ZSet::with_weight(rows(&s, &[(85, 1, 10), (90, 1, 100)]), 1),
    )
    .unwrap();
    p.push("t", ZSet::with_weight(rows(&s, &[(50, 1, 2)]), -1))
        .unwrap();
    p.push("t", ZSet::with_weight(rows(&s, &[(120, 2, 7)]), 1))
        .unwrap();
    p.step().unwrap();
    assert_eq!(late(&p, "t"), 2);
    let got = common::sorted_rows(&p.view_rows("s").unwrap());
    assert_eq!(got, vec!["1|103", "2|7"]);
    // Now the waterline is 110: 105 is late, 110 is not.
    p.push(
        "t",
        ZSet::with_weight(rows(&s, &[(105, 2, 1), (110, 2, 1000)]), 1),
    )
    .unwrap();
    p.step().unwrap();
    assert_eq!(late(&p, "t"), 3);
    let got = common::sorted_rows(&p.view_rows("s").unwrap());
    assert_eq!(got, vec!["1|103", "2|1007"]);
}

#[test]
fn timestamps_take_an_interval_in_either_spelling() {
    for lateness in [
        "INTERVAL '4' SECOND",
        "INTERVAL 4 SECONDS",
        "INTERVAL '4 seconds'",
    ] {
        let program = Program::parse(&format!(
            "CREATE TABLE t (ts TIMESTAMP(3) NOT NULL LATENESS {lateness}, v BIGINT);
             CREATE VIEW c AS SELECT COUNT(*) AS n FROM t;"
        ))
        .unwrap_or_else(|e| panic!("{lateness}: {e}"));
        let s = Arc::clone(&program.tables[0].schema);
        let mut p = Pipeline::new(program).unwrap();
        let batch = |ms: &[i64]| {
            let ts: TimestampMillisecondArray = ms.iter().map(|&m| Some(m)).collect();
            let ts = datafusion::arrow::compute::cast(
                &ts,
                &DataType::Timestamp(TimeUnit::Millisecond, None),
            )
            .unwrap();
            let v = Int64Array::from(vec![1; ms.len()]);
            ZSet::with_weight(
                RecordBatch::try_new(Arc::clone(&s), vec![ts, Arc::new(v)]).unwrap(),
                1,
            )
        };
        p.push("t", batch(&[10_000])).unwrap();
        p.step().unwrap();
        p.push("t", batch(&[5_999, 6_000, 9_000])).unwrap();
        p.step().unwrap();
        assert_eq!(late(&p, "t"), 1, "{lateness}");
        assert_eq!(common::sorted_rows(&p.view_rows("c").unwrap()), vec!["3"]);
    }
}

#[test]
fn views_take_lateness_statements_before_or_after_them() {
    let text = "CREATE TABLE t (ts BIGINT NOT NULL, v BIGINT);
                LATENESS early.ts 5;
                CREATE VIEW early AS SELECT ts, v FROM t;
                CREATE VIEW late AS SELECT ts + 1 AS t1, v FROM t;
                LATENESS late.t1 4;";
    let program = Program::parse(text).unwrap();
    assert_eq!(program.views[0].lateness.len(), 1);
    assert_eq!(program.views[1].lateness.len(), 1);
    let s = Arc::clone(&program.tables[0].schema);
    let mut p = Pipeline::new(program).unwrap();
    let b = |ts: &[i64]| {
        ZSet::with_weight(
            RecordBatch::try_new(
                Arc::clone(&s),
                vec![
                    Arc::new(Int64Array::from(ts.to_vec())),
                    Arc::new(Int64Array::from(vec![1; ts.len()])),
                ],
            )
            .unwrap(),
            1,
        )
    };
    p.push("t", b(&[100])).unwrap();
    p.step().unwrap();
    p.push("t", b(&[94, 95])).unwrap();
    p.step().unwrap();
    assert_eq!(common::sorted_rows(&p.view_rows("early").unwrap()).len(), 2);
    // For `early` 94 is late (waterline 100 − 5); for `late` both
    // t1 = 95 and 96 are (waterline 101 − 4 = 97).
    assert_eq!(common::sorted_rows(&p.view_rows("late").unwrap()).len(), 1);
    assert_eq!(late(&p, "early"), 1);
    assert_eq!(late(&p, "late"), 2);
}

#[test]
fn bad_lateness_is_a_located_error() {
    for (text, message) in [
        (
            "CREATE TABLE t (name VARCHAR LATENESS INTERVAL '1' HOUR)",
            "cannot be subtracted from column 'name'",
        ),
        (
            "CREATE TABLE t (ts BIGINT);\nLATENESS v.ts 3;",
            "the program defines no view 'v'",
        ),
        (
            "CREATE TABLE t (ts BIGINT);\nLATENESS t.ts 3;",
            "'t' is a table",
        ),
        (
            "CREATE TABLE t (ts BIGINT);\nCREATE VIEW v AS SELECT ts FROM t;\nLATENESS v.nope 3;",
            "'nope', which is not a column",
        ),
        ("CREATE TABLE t (ts BIGINT LATENESS NULL)", "is NULL"),
    ] {
        let e = Program::parse(text).unwrap_err().to_string();
        assert!(e.contains(message), "{text}: {e}");
    }
    let e = Program::parse("CREATE TABLE t (ts BIGINT);\nLATENESS t.ts 3;")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("2:"), "{e}");
}

/// The model: which changes are late, decided from the rule in the docs.
struct Model {
    max_ts: Option<i64>,
    rows: Vec<(i64, i64, i64)>,
    late: u64,
}

#[test]
fn views_equal_a_batch_run_over_the_rows_that_were_not_late() {
    let views = [
        "SELECT k, COUNT(*) AS n, SUM(v) AS s FROM t GROUP BY k",
        "SELECT ts / 10 AS w, MAX(v) AS m FROM t GROUP BY ts / 10",
        "SELECT k, ts, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY ts DESC, v) AS rn FROM t",
        "SELECT a.k, a.ts, b.v FROM t a JOIN t b ON a.k = b.k AND b.ts BETWEEN a.ts - 5 AND a.ts",
        "SELECT DISTINCT k, v FROM t WHERE v > 2",
    ];
    let lateness = 8;
    let mut text =
        format!("CREATE TABLE t (ts BIGINT NOT NULL LATENESS {lateness}, k BIGINT, v BIGINT);\n");
    for (i, v) in views.iter().enumerate() {
        text.push_str(&format!("CREATE VIEW v{i} AS {v};\n"));
    }
    let s = schema();
    for seed in 0..20u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut p = Pipeline::new(Program::parse(&text).unwrap()).unwrap();
        let mut model = Model {
            max_ts: None,
            rows: Vec::new(),
            late: 0,
        };
        let mut clock = 0i64;
        for step in 0..12 {
            clock += rng.gen_range(0..6);
            let waterline = model.max_ts.map(|m| m - lateness);
            let is_late = |ts: i64| waterline.is_some_and(|w| ts < w);
            let mut inserts = Vec::new();
            for _ in 0..rng.gen_range(0..6) {
                // Mostly near the clock, sometimes far behind it.
                let ts = clock
                    - if rng.gen_bool(0.2) {
                        rng.gen_range(0..20)
                    } else {
                        rng.gen_range(0..3)
                    };
                inserts.push((ts, rng.gen_range(0..3), rng.gen_range(0..5)));
            }
            let mut deletes = Vec::new();
            for _ in 0..rng.gen_range(0..3) {
                if model.rows.is_empty() {
                    break;
                }
                let i = rng.gen_range(0..model.rows.len());
                let row = model.rows[i];
                deletes.push(row);
                if !is_late(row.0) {
                    model.rows.swap_remove(i);
                } else {
                    model.late += 1;
                }
            }
            let mut seen = model.max_ts;
            for r in &inserts {
                if is_late(r.0) {
                    model.late += 1;
                } else {
                    model.rows.push(*r);
                    seen = Some(seen.map_or(r.0, |m| m.max(r.0)));
                }
            }
            for r in &deletes {
                if !is_late(r.0) {
                    seen = Some(seen.map_or(r.0, |m| m.max(r.0)));
                }
            }
            model.max_ts = seen;
            let change = ZSet::concat(
                &s,
                &[
                    ZSet::with_weight(rows(&s, &inserts), 1),
                    ZSet::with_weight(rows(&s, &deletes), -1),
                ],
            )
            .unwrap();
            p.push("t", change).unwrap();
            p.step().unwrap();
            assert_eq!(late(&p, "t"), model.late, "seed {seed} step {step}");
            let tables: HashMap<String, RecordBatch> =
                [("t".to_string(), rows(&s, &model.rows))].into();
            for (i, v) in views.iter().enumerate() {
                let expected = common::datafusion_rows(&tables, v).unwrap();
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

//! LATENESS: late changes are dropped and counted, and the views over the
//! rest equal a batch run over the rows that were not late (checked against
//! DataFusion on random change streams whose timestamps mostly advance).

mod common;

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch, TimestampMillisecondArray};
use datafusion::arrow::compute::cast;
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

/// Rows of `schema` from integers, each column cast to its type.
fn int_rows<const N: usize>(schema: &SchemaRef, rows: &[[i64; N]]) -> RecordBatch {
    let columns = (0..N)
        .map(|i| {
            let values: datafusion::arrow::array::ArrayRef =
                Arc::new(rows.iter().map(|r| r[i]).collect::<Int64Array>());
            cast(&values, schema.field(i).data_type()).unwrap()
        })
        .collect();
    RecordBatch::try_new(Arc::clone(schema), columns).unwrap()
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

/// A value within the lateness of its type's least value sets no
/// waterline: `value − lateness` would wrap around to a huge bound, after
/// which every row would be late.
#[test]
fn values_near_the_least_of_their_type_set_no_wrapped_waterline() {
    for (time_type, least) in [("BIGINT UNSIGNED", 3), ("BIGINT", i64::MIN + 3)] {
        let program = Program::parse(&format!(
            "CREATE TABLE t (ts {time_type} NOT NULL LATENESS 10, k BIGINT, v BIGINT);
             CREATE VIEW s AS SELECT k, SUM(v) AS total FROM t GROUP BY k;"
        ))
        .unwrap();
        let s = Arc::clone(&program.tables[0].schema);
        let mut p = Pipeline::new(program).unwrap();
        let change = |ts: i64, v: i64| ZSet::with_weight(int_rows(&s, &[[ts, 1, v]]), 1);
        p.push("t", change(least, 1)).unwrap();
        p.step().unwrap();
        // The least value's bound wraps: no waterline yet, so 20 is not late.
        p.push("t", change(20, 10)).unwrap();
        p.step().unwrap();
        // 20 set the waterline 10: 9 is late, 10 is not.
        p.push("t", change(9, 100)).unwrap();
        p.push("t", change(10, 1000)).unwrap();
        p.step().unwrap();
        assert_eq!(late(&p, "t"), 1, "{time_type}");
        let got = common::sorted_rows(&p.view_rows("s").unwrap());
        assert_eq!(got, vec!["1|1011"], "{time_type}");
    }
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

/// Pushes `inserts` and `deletes` (rows of `schema`) into table `bid` of
/// each pipeline, and steps it.
fn push_and_step(
    pipelines: [&mut Pipeline; 2],
    schema: &SchemaRef,
    inserts: RecordBatch,
    deletes: RecordBatch,
) {
    let change = ZSet::concat(
        schema,
        &[
            ZSet::with_weight(inserts, 1),
            ZSet::with_weight(deletes, -1),
        ],
    )
    .unwrap();
    for p in pipelines {
        p.push("bid", change.clone()).unwrap();
        p.step().unwrap();
    }
}

/// Each view of `oracles` in `p` equals its query run by DataFusion over
/// `tables`.
fn assert_views(
    p: &Pipeline,
    tables: &[(&str, RecordBatch)],
    oracles: &[(&str, String)],
    step: impl std::fmt::Display,
) {
    let tables: HashMap<String, RecordBatch> = tables
        .iter()
        .map(|(n, b)| (n.to_string(), b.clone()))
        .collect();
    for (view, sql) in oracles {
        let expected = common::sorted_rows(&common::datafusion_rows(&tables, sql).unwrap());
        assert_eq!(
            common::sorted_rows(&p.view_rows(view).unwrap()),
            expected,
            "step {step}: {view}"
        );
    }
}

/// The operators of `gc` (a program with LATENESS) keep under a third of
/// the state entries of `all` (the same program without it).
fn assert_collected(gc: &Pipeline, all: &Pipeline) {
    let (kept_gc, kept_all) = (gc.state_entries(), all.state_entries());
    assert!(
        kept_gc * 3 < kept_all,
        "with waterlines the operators keep {kept_gc} entries, without {kept_all}"
    );
}

/// Garbage collection below waterlines: windowed aggregates (linear and
/// not), a join on the window, a DISTINCT and an `emit_final` view stay
/// equal to a batch run over the rows that were not late, while their
/// operators keep a fraction of the state that the same program without
/// LATENESS keeps; the pipeline is restarted from a checkpoint every 50
/// steps.
#[test]
fn state_below_waterlines_is_forgotten_and_views_stay_exact() {
    let program = |lateness: &str| {
        format!(
            "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, ts BIGINT NOT NULL {lateness});
             CREATE VIEW w AS SELECT window_start, COUNT(*) AS n, MAX(price) AS top
               FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), 10)) GROUP BY window_start;
             CREATE VIEW per AS SELECT auction, window_start, COUNT(*) AS n
               FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), 10)) GROUP BY auction, window_start;
             CREATE VIEW hot AS SELECT p.window_start, p.auction, p.n FROM per p
               JOIN (SELECT window_start, MAX(n) AS m FROM per GROUP BY window_start) x
               ON p.window_start = x.window_start AND p.n = x.m;
             CREATE VIEW bidders AS SELECT DISTINCT bidder, ts / 10 AS w FROM bid;"
        )
    };
    // A final view needs a waterline: only the program with LATENESS has one.
    let fin = "CREATE VIEW fin WITH ('emit_final' = 'window_start') AS
               SELECT window_start, COUNT(*) AS n
               FROM TABLE(TUMBLE(TABLE bid, DESCRIPTOR(ts), 10)) GROUP BY window_start;";
    let start = "ts - ts % 10";
    let oracles = [
        ("w", format!("SELECT {start} AS window_start, COUNT(*) AS n, MAX(price) AS top FROM bid GROUP BY 1")),
        ("per", format!("SELECT auction, {start} AS window_start, COUNT(*) AS n FROM bid GROUP BY 1, 2")),
        ("hot", format!(
            "WITH per AS (SELECT auction, {start} AS window_start, COUNT(*) AS n FROM bid GROUP BY 1, 2)
             SELECT p.window_start, p.auction, p.n FROM per p JOIN
             (SELECT window_start, MAX(n) AS m FROM per GROUP BY window_start) x
             ON p.window_start = x.window_start AND p.n = x.m")),
        ("bidders", "SELECT DISTINCT bidder, ts / 10 AS w FROM bid".to_string()),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("bidder", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        Field::new("ts", DataType::Int64, false),
    ]));
    let batch = |rows: &[[i64; 4]]| int_rows(&schema, rows);
    let lateness = 20;
    let text = program(&format!("LATENESS {lateness}")) + fin;
    let mut gc = Pipeline::new(Program::parse(&text).unwrap()).unwrap();
    let mut all = Pipeline::new(Program::parse(&program("")).unwrap()).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut kept: Vec<[i64; 4]> = Vec::new();
    let mut max_ts: Option<i64> = None;
    let mut clock = 0;
    for step in 0..400 {
        clock += rng.gen_range(0..5);
        let waterline = max_ts.map(|m| m - lateness);
        let is_late = |ts: i64| waterline.is_some_and(|w| ts < w);
        let mut inserts = Vec::new();
        for _ in 0..rng.gen_range(20..60) {
            let behind = if rng.gen_bool(0.05) {
                rng.gen_range(0..60)
            } else {
                rng.gen_range(0..8)
            };
            let ts = (clock - behind).max(0);
            inserts.push([
                rng.gen_range(0..6),
                rng.gen_range(0..30),
                rng.gen_range(1..100),
                ts,
            ]);
        }
        let mut deletes = Vec::new();
        for _ in 0..rng.gen_range(0..4) {
            if kept.is_empty() {
                break;
            }
            let i = rng.gen_range(0..kept.len());
            deletes.push(kept[i]);
            if !is_late(kept[i][3]) {
                kept.swap_remove(i);
            }
        }
        let mut seen = max_ts;
        for r in inserts.iter().chain(&deletes) {
            if !is_late(r[3]) {
                seen = Some(seen.map_or(r[3], |m| m.max(r[3])));
            }
        }
        kept.extend(inserts.iter().filter(|r| !is_late(r[3])));
        max_ts = seen;
        // The run without LATENESS sees only the rows that were not late.
        let on_time = |rows: &[[i64; 4]]| -> Vec<[i64; 4]> {
            rows.iter().filter(|r| !is_late(r[3])).copied().collect()
        };
        for (p, ins, del) in [
            (&mut gc, inserts.clone(), deletes.clone()),
            (&mut all, on_time(&inserts), on_time(&deletes)),
        ] {
            let change = ZSet::concat(
                &schema,
                &[
                    ZSet::with_weight(batch(&ins), 1),
                    ZSet::with_weight(batch(&del), -1),
                ],
            )
            .unwrap();
            p.push("bid", change).unwrap();
            p.step().unwrap();
        }
        // A restart from a checkpoint now and then: waterlines, collected
        // state, late counts and final windows carry on as they were.
        if step % 50 == 25 {
            let late_before = late(&gc, "bid");
            gc = common::restarted(gc, "lateness");
            assert_eq!(late(&gc, "bid"), late_before);
        }
        if step % 40 != 39 {
            continue;
        }
        assert_views(&gc, &[("bid", batch(&kept))], &oracles, step);
        // emit_final: exactly the windows below the window start's waterline.
        let closed = (max_ts.unwrap() - lateness).div_euclid(10) * 10;
        let sql = format!("SELECT {start} AS window_start, COUNT(*) AS n FROM bid GROUP BY 1 HAVING {start} < {closed}");
        assert_views(&gc, &[("bid", batch(&kept))], &[("fin", sql)], step);
    }
    assert_collected(&gc, &all);
}

/// Garbage collection in band joins (`b.ts BETWEEN a.ts AND a.expires`),
/// window functions and per-partition top-k partitioned by a window, and
/// ASOF joins on times with waterlines: the
/// views stay equal to a batch run over the rows that were not late, and
/// the operators keep a fraction of the state of the same program without
/// LATENESS.
#[test]
fn band_joins_windows_and_top_k_forget_state_below_waterlines() {
    let program = |lateness: &str| {
        format!(
            "CREATE TABLE auction (id BIGINT, ts BIGINT NOT NULL {lateness}, expires BIGINT);
             CREATE TABLE bid (auction BIGINT, price BIGINT, ts BIGINT NOT NULL {lateness});
             CREATE VIEW won AS SELECT a.id, b.price, b.ts FROM auction a JOIN bid b
               ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires;
             CREATE VIEW per AS SELECT auction, ts / 10 AS w, COUNT(*) AS n FROM bid GROUP BY auction, ts / 10;
             CREATE VIEW ranked AS SELECT w, auction, n FROM (SELECT w, auction, n,
               ROW_NUMBER() OVER (PARTITION BY w ORDER BY n DESC, auction) AS rn FROM per) x WHERE rn <= 2;
             CREATE VIEW lagged AS SELECT w, auction, n - LAG(n) OVER (PARTITION BY w ORDER BY auction) AS d FROM per;
             CREATE VIEW asofed AS SELECT DISTINCT b.auction, b.ts, a.ts AS ats FROM bid b
               LEFT ASOF JOIN auction a MATCH_CONDITION (b.ts >= a.ts) ON b.auction % 5 = a.id % 5;"
        )
    };
    let per = "SELECT auction, ts / 10 AS w, COUNT(*) AS n FROM bid GROUP BY auction, ts / 10";
    let oracles = [
        ("won", "SELECT a.id, b.price, b.ts FROM auction a JOIN bid b ON a.id = b.auction AND b.ts BETWEEN a.ts AND a.expires".to_string()),
        ("ranked", format!("SELECT w, auction, n FROM (SELECT w, auction, n, ROW_NUMBER() OVER (PARTITION BY w ORDER BY n DESC, auction) AS rn FROM ({per}) p) x WHERE rn <= 2")),
        ("lagged", format!("SELECT w, auction, n - LAG(n) OVER (PARTITION BY w ORDER BY auction) AS d FROM ({per}) p")),
        ("asofed", "SELECT b.auction, b.ts, MAX(a.ts) AS ats FROM bid b LEFT JOIN auction a \
                    ON b.auction % 5 = a.id % 5 AND a.ts <= b.ts GROUP BY b.auction, b.ts".to_string()),
    ];
    let schema = |names: [&str; 3]| {
        Arc::new(Schema::new(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Int64, *n != "ts"))
                .collect::<Vec<_>>(),
        ))
    };
    let (auction_schema, bid_schema) = (
        schema(["id", "ts", "expires"]),
        schema(["auction", "price", "ts"]),
    );
    let batch = |schema: &SchemaRef, rows: &[[i64; 3]]| {
        let col = |i: usize| Arc::new(rows.iter().map(|r| r[i]).collect::<Int64Array>()) as _;
        RecordBatch::try_new(Arc::clone(schema), vec![col(0), col(1), col(2)]).unwrap()
    };
    let lateness = 15;
    let mut gc =
        Pipeline::new(Program::parse(&program(&format!("LATENESS {lateness}"))).unwrap()).unwrap();
    let mut all = Pipeline::new(Program::parse(&program("")).unwrap()).unwrap();
    let mut rng = StdRng::seed_from_u64(11);
    // Per table: rows kept, largest time seen; the time column is 1 in
    // auction rows and 2 in bid rows.
    let mut kept: [Vec<[i64; 3]>; 2] = [Vec::new(), Vec::new()];
    let mut max_ts: [Option<i64>; 2] = [None, None];
    let mut clock = 0;
    let mut next_id = 0;
    for step in 0..600 {
        clock += rng.gen_range(0..4);
        let mut changes: [Vec<([i64; 3], i64)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..rng.gen_range(5..20) {
            let ts = (clock - rng.gen_range(0..6)).max(0);
            changes[0].push(([next_id, ts, ts + rng.gen_range(0..30)], 1));
            next_id += 1;
        }
        for _ in 0..rng.gen_range(10..40) {
            let behind = if rng.gen_bool(0.05) {
                rng.gen_range(0..50)
            } else {
                rng.gen_range(0..6)
            };
            let auction = (next_id - 1 - rng.gen_range(0..20)).max(0);
            changes[1].push(([auction, rng.gen_range(1..100), (clock - behind).max(0)], 1));
        }
        for (t, change) in changes.iter_mut().enumerate() {
            for _ in 0..rng.gen_range(0..3) {
                if !kept[t].is_empty() {
                    let i = rng.gen_range(0..kept[t].len());
                    change.push((kept[t][i], -1));
                }
            }
        }
        let time = [1, 2];
        let mut on_time: [Vec<([i64; 3], i64)>; 2] = [Vec::new(), Vec::new()];
        for t in 0..2 {
            let waterline = max_ts[t].map(|m| m - lateness);
            let mut seen = max_ts[t];
            for &(row, w) in &changes[t] {
                if waterline.is_some_and(|wl| row[time[t]] < wl) {
                    continue;
                }
                if w > 0 {
                    kept[t].push(row);
                } else if let Some(i) = kept[t].iter().position(|r| *r == row) {
                    kept[t].swap_remove(i);
                } else {
                    continue;
                }
                on_time[t].push((row, w));
                seen = Some(seen.map_or(row[time[t]], |m| m.max(row[time[t]])));
            }
            max_ts[t] = seen;
        }
        let zset = |schema: &SchemaRef, rows: &[([i64; 3], i64)]| {
            let values: Vec<[i64; 3]> = rows.iter().map(|r| r.0).collect();
            ZSet::new(batch(schema, &values), rows.iter().map(|r| r.1).collect())
        };
        for (p, input) in [(&mut gc, &changes), (&mut all, &on_time)] {
            p.push("auction", zset(&auction_schema, &input[0])).unwrap();
            p.push("bid", zset(&bid_schema, &input[1])).unwrap();
            p.step().unwrap();
        }
        if step % 100 != 99 {
            continue;
        }
        let tables: HashMap<String, RecordBatch> = [
            ("auction".to_string(), batch(&auction_schema, &kept[0])),
            ("bid".to_string(), batch(&bid_schema, &kept[1])),
        ]
        .into();
        for (view, sql) in &oracles {
            let expected = common::sorted_rows(&common::datafusion_rows(&tables, sql).unwrap());
            assert_eq!(
                common::sorted_rows(&gc.view_rows(view).unwrap()),
                expected,
                "step {step}: {view}"
            );
            assert_eq!(
                common::sorted_rows(&all.view_rows(view).unwrap()),
                expected,
                "step {step}: {view}"
            );
        }
    }
    assert_collected(&gc, &all);
}

/// HOP windows (10 wide, every 2) as in Nexmark's q5: a row's copies, one
/// per window, are made without keeping the stream, and the counts per
/// auction and window, and the top auctions of each window, are forgotten
/// once the waterline passes their window; the views stay equal to a batch
/// run, across a restart from a checkpoint.
#[test]
fn hop_windows_are_forgotten_once_closed() {
    hop_windows_of("BIGINT");
    hop_windows_of("INT");
}

fn hop_windows_of(time_type: &str) {
    let program = |lateness: &str| {
        format!(
            "CREATE TABLE bid (auction BIGINT, price BIGINT, ts {time_type} NOT NULL {lateness});
             CREATE VIEW counts AS SELECT auction, window_start, window_end, COUNT(*) AS n
               FROM TABLE(HOP(TABLE bid, DESCRIPTOR(ts), 2, 10))
               GROUP BY auction, window_start, window_end;
             CREATE VIEW hot AS SELECT c.auction, c.window_start, c.n FROM counts c
               JOIN (SELECT window_start, MAX(n) AS m FROM counts GROUP BY window_start) x
               ON c.window_start = x.window_start WHERE c.n >= x.m;"
        )
    };
    // The five windows of a time: starts ts - ts % 2 - 2k, k = 0 .. 4.
    let counts = "SELECT auction, s AS window_start, s + 10 AS window_end, COUNT(*) AS n
                  FROM (SELECT auction, ts - ts % 2 - 2 * k AS s FROM bid
                        CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS h(k)) w
                  GROUP BY 1, 2, 3";
    let oracles = [
        ("counts", counts.to_string()),
        (
            "hot",
            format!(
                "WITH counts AS ({counts}) SELECT c.auction, c.window_start, c.n FROM counts c
                 JOIN (SELECT window_start, MAX(n) AS m FROM counts GROUP BY window_start) x
                 ON c.window_start = x.window_start WHERE c.n >= x.m"
            ),
        ),
    ];
    // Times lag the clock by less than the lateness: no row is late, and
    // both programs see the same rows.
    let mut gc = Pipeline::new(Program::parse(&program("LATENESS 5")).unwrap()).unwrap();
    let mut all = Pipeline::new(Program::parse(&program("")).unwrap()).unwrap();
    let schema = Arc::clone(&gc.program().table("bid").unwrap().schema);
    let batch = |rows: &[[i64; 3]]| int_rows(&schema, rows);
    let mut rng = StdRng::seed_from_u64(11);
    let mut kept: Vec<[i64; 3]> = Vec::new();
    for step in 0..300 {
        let clock = 10 + step;
        let inserts: Vec<[i64; 3]> = (0..rng.gen_range(5..30))
            .map(|_| {
                let ts = clock - rng.gen_range(0..5);
                [rng.gen_range(0..8), rng.gen_range(1..100), ts]
            })
            .collect();
        let deletes: Vec<[i64; 3]> = match kept.len() {
            n if n > 0 && rng.gen_bool(0.3) => {
                vec![kept.swap_remove(rng.gen_range(n - n.min(20)..n))]
            }
            _ => vec![],
        };
        kept.extend(&inserts);
        push_and_step(
            [&mut gc, &mut all],
            &schema,
            batch(&inserts),
            batch(&deletes),
        );
        if step == 150 {
            gc = common::restarted(gc, &format!("hop-{time_type}"));
        }
        if step % 100 != 99 {
            continue;
        }
        assert_views(&gc, &[("bid", batch(&kept))], &oracles, step);
    }
    assert_eq!(late(&gc, "bid"), 0);
    assert_collected(&gc, &all);
}

/// A band against an expression of the other side (Nexmark's q7: each
/// window's top bids, `b.ts BETWEEN m.window_end - 10 AND m.window_end`):
/// the join forgets the bids below the windows' waterline less the
/// window's width, and the view stays equal to a batch run.
#[test]
fn a_band_against_an_expression_of_the_other_side_forgets_state() {
    let program = |lateness: &str| {
        format!(
            "CREATE TABLE t (ts BIGINT NOT NULL {lateness}, k BIGINT, v BIGINT);
             CREATE VIEW top AS SELECT b.k, b.v, b.ts FROM t b
               JOIN (SELECT window_end, MAX(v) AS m FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), 10))
                     GROUP BY window_start, window_end) m
               ON b.v = m.m WHERE b.ts BETWEEN m.window_end - 10 AND m.window_end - 1;"
        )
    };
    let oracle = "SELECT b.k, b.v, b.ts FROM t b
                  JOIN (SELECT ts - ts % 10 + 10 AS we, MAX(v) AS m FROM t GROUP BY ts - ts % 10 + 10) m
                  ON b.v = m.m WHERE b.ts BETWEEN m.we - 10 AND m.we - 1";
    let s = schema();
    let mut gc = Pipeline::new(Program::parse(&program("LATENESS 5")).unwrap()).unwrap();
    let mut all = Pipeline::new(Program::parse(&program("")).unwrap()).unwrap();
    let mut rng = StdRng::seed_from_u64(7);
    let mut kept: Vec<(i64, i64, i64)> = Vec::new();
    let mut clock = 0i64;
    for step in 0..300 {
        clock += rng.gen_range(0..3);
        // Times lag the clock by less than the lateness: none is late, so
        // both programs see the same rows.
        let mut change: Vec<((i64, i64, i64), i64)> = (0..rng.gen_range(5..30))
            .map(|_| {
                let row = (
                    (clock - rng.gen_range(0..4)).max(0),
                    rng.gen_range(0..50),
                    rng.gen_range(0..1000),
                );
                (row, 1)
            })
            .collect();
        // Deletions of recent rows (old ones would be late).
        for _ in 0..rng.gen_range(0..3) {
            if let Some(i) = kept.iter().position(|r| r.0 >= clock - 2) {
                change.push((kept.swap_remove(i), -1));
            }
        }
        kept.extend(change.iter().filter(|c| c.1 > 0).map(|c| c.0));
        let values: Vec<(i64, i64, i64)> = change.iter().map(|c| c.0).collect();
        let weights: Vec<i64> = change.iter().map(|c| c.1).collect();
        for p in [&mut gc, &mut all] {
            p.push("t", ZSet::new(rows(&s, &values), weights.clone()))
                .unwrap();
            p.step().unwrap();
        }
        if step % 50 == 49 {
            let tables: HashMap<String, RecordBatch> = [("t".to_string(), rows(&s, &kept))].into();
            let expected = common::sorted_rows(&common::datafusion_rows(&tables, oracle).unwrap());
            assert_eq!(
                common::sorted_rows(&gc.view_rows("top").unwrap()),
                expected,
                "step {step}"
            );
            assert_eq!(
                common::sorted_rows(&all.view_rows("top").unwrap()),
                expected,
                "step {step}"
            );
        }
    }
    assert_collected(&gc, &all);
}

/// Session windows forget the sessions that a waterline on their time has
/// closed: the window operator keeps the rows of open sessions only, the
/// aggregate over the sessions forgets the closed ones' counts, and
/// the view stays equal to the same program's without LATENESS (no row is
/// late, so both see the same rows); the pipeline with LATENESS is
/// restarted from a checkpoint once it has forgotten some.
#[test]
fn session_windows_forget_closed_sessions() {
    sessions_of("BIGINT");
    sessions_of("INT");
}

fn sessions_of(time_type: &str) {
    let program = |lateness: &str| {
        format!(
            "CREATE TABLE bid (bidder BIGINT, ts {time_type} NOT NULL {lateness});
             CREATE VIEW sessions AS SELECT bidder, COUNT(*) AS n,
                 SESSION_START(ts, 3) AS s, SESSION_END(ts, 3) AS e
               FROM bid GROUP BY bidder, SESSION(ts, 3);
             CREATE VIEW spans AS SELECT bidder, ts,
                 session_start(ts, 3) OVER (PARTITION BY bidder ORDER BY ts) AS s
               FROM bid;"
        )
    };
    let mut gc = Pipeline::new(Program::parse(&program("LATENESS 5")).unwrap()).unwrap();
    let mut all = Pipeline::new(Program::parse(&program("")).unwrap()).unwrap();
    let schema = Arc::clone(&gc.program().table("bid").unwrap().schema);
    let batch = |rows: &[[i64; 2]]| int_rows(&schema, rows);
    // 200 bidders bid about every 12 steps each: most sessions (a gap of
    // 3) close, some run on.
    let mut rng = StdRng::seed_from_u64(17);
    let mut kept: Vec<[i64; 2]> = Vec::new();
    for step in 0..600 {
        let clock = 10 + step;
        let inserts: Vec<[i64; 2]> = (0..rng.gen_range(5..30))
            .map(|_| [rng.gen_range(0..200), clock - rng.gen_range(0..=6)])
            .collect();
        // Some rows come at the waterline itself (the clock of the step
        // before, less the lateness of 5); rows deleted are above it.
        let deletes: Vec<[i64; 2]> = match kept.len() {
            n if n > 0 && rng.gen_bool(0.3) => {
                let i = rng.gen_range(n - n.min(20)..n);
                match kept[i][1] >= clock - 4 {
                    true => vec![kept.swap_remove(i)],
                    false => vec![],
                }
            }
            _ => vec![],
        };
        kept.extend(&inserts);
        push_and_step(
            [&mut gc, &mut all],
            &schema,
            batch(&inserts),
            batch(&deletes),
        );
        // After the windows' first collection (4,096 updates, about step
        // 235): the restored traces have forgotten sessions.
        if step == 300 {
            gc = common::restarted(gc, &format!("sessions-{time_type}"));
        }
        if step % 100 == 99 {
            for view in ["sessions", "spans"] {
                let with = common::sorted_rows(&gc.view_rows(view).unwrap());
                let without = common::sorted_rows(&all.view_rows(view).unwrap());
                let first = with.iter().zip(&without).find(|(a, b)| a != b);
                assert!(
                    with == without,
                    "step {step}: {view} has {} rows with a waterline, {} without; first differing: {first:?}",
                    with.len(),
                    without.len()
                );
            }
        }
    }
    assert_eq!(late(&gc, "bid"), 0);
    // The windows keep the open sessions' rows; the sessions' ends carry
    // the waterline, so the aggregate forgets the closed sessions' counts.
    for operator in ["window", "aggregate"] {
        let entries = |p: &Pipeline| -> usize {
            let states = p.operator_states();
            states
                .iter()
                .filter(|s| s.operator == operator)
                .map(|s| s.entries)
                .sum()
        };
        let (kept_gc, kept_all) = (entries(&gc), entries(&all));
        assert!(
            kept_all > 0 && kept_gc * 5 < kept_all,
            "{time_type}: the {operator}s keep {kept_gc} entries with a waterline, {kept_all} without"
        );
    }
}

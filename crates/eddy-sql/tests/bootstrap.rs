//! Program changes that keep state: a pipeline of a changed program takes
//! over the unchanged tables' and views' state from the pipeline restored
//! from the old program's checkpoint, and its next step computes only the
//! new and changed views, from the whole contents of what they read.
//! Checked against DataFusion over every row fed, before and after more
//! changes arrive.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

/// `t` is not materialized and has a lateness: only state carried over,
/// operator by operator, can keep `a` right across the change.
const TABLES: &str = "
    CREATE TABLE t (k BIGINT, x BIGINT, ts BIGINT NOT NULL LATENESS 10);
    CREATE TABLE m (k BIGINT, y BIGINT) WITH ('materialized' = 'true');
    CREATE VIEW a AS SELECT k, SUM(x) AS s, COUNT(*) AS n FROM t GROUP BY k;";

const OLD: &str = "
    CREATE VIEW b AS SELECT k, SUM(y) AS s FROM m GROUP BY k;
    CREATE VIEW c AS SELECT a.k, a.s, b.s AS bs FROM a JOIN b ON a.k = b.k;
    CREATE VIEW gone AS SELECT DISTINCT k FROM t;";

/// `b` changes, so `c` (which reads it) does; `d` (over the kept view
/// `a`) and `e` (over the materialized table `m`) are new.
const NEW: &str = "
    CREATE VIEW b AS SELECT k, MAX(y) AS s FROM m GROUP BY k;
    CREATE VIEW c AS SELECT a.k, a.s, b.s AS bs FROM a JOIN b ON a.k = b.k;
    CREATE VIEW d AS SELECT k, n FROM a WHERE n > 3;
    CREATE VIEW e AS SELECT k, COUNT(*) AS n FROM m GROUP BY k;";

/// Each view's query over the tables, for the oracle.
const ORACLES: &[(&str, &str)] = &[
    (
        "a",
        "SELECT k, SUM(x) AS s, COUNT(*) AS n FROM t GROUP BY k",
    ),
    ("b", "SELECT k, MAX(y) AS s FROM m GROUP BY k"),
    (
        "c",
        "SELECT a.k, a.s, b.s AS bs FROM (SELECT k, SUM(x) AS s FROM t GROUP BY k) a
         JOIN (SELECT k, MAX(y) AS s FROM m GROUP BY k) b ON a.k = b.k",
    ),
    (
        "d",
        "SELECT k, n FROM (SELECT k, COUNT(*) AS n FROM t GROUP BY k) a WHERE n > 3",
    ),
    ("e", "SELECT k, COUNT(*) AS n FROM m GROUP BY k"),
];

fn program(views: &str) -> Program {
    Program::parse(&format!("{TABLES}{views}")).unwrap_or_else(|e| panic!("{e}"))
}

fn columns(schema: &SchemaRef, cols: Vec<Vec<i64>>) -> RecordBatch {
    let arrays = cols
        .into_iter()
        .map(|c| Arc::new(Int64Array::from(c)) as _)
        .collect();
    RecordBatch::try_new(Arc::clone(schema), arrays).unwrap()
}

/// The rows fed so far, and the feeding.
struct Feed {
    t: Vec<[i64; 3]>,
    m: Vec<[i64; 2]>,
}

impl Feed {
    fn t_batch(&self, p: &Pipeline, rows: &[[i64; 3]]) -> RecordBatch {
        let schema = &p.program().table("t").unwrap().schema;
        columns(
            schema,
            (0..3)
                .map(|i| rows.iter().map(|r| r[i]).collect())
                .collect(),
        )
    }

    fn m_batch(&self, p: &Pipeline, rows: &[[i64; 2]]) -> RecordBatch {
        let schema = &p.program().table("m").unwrap().schema;
        columns(
            schema,
            (0..2)
                .map(|i| rows.iter().map(|r| r[i]).collect())
                .collect(),
        )
    }

    /// Feeds rows `from..to` of both tables in one step.
    fn step(&mut self, p: &mut Pipeline, from: i64, to: i64) {
        let t: Vec<[i64; 3]> = (from..to).map(|i| [i % 7, i, i]).collect();
        let m: Vec<[i64; 2]> = (from..to).map(|i| [i % 5, i * 3 % 11]).collect();
        p.push("t", ZSet::with_weight(self.t_batch(p, &t), 1))
            .unwrap();
        p.push("m", ZSet::with_weight(self.m_batch(p, &m), 1))
            .unwrap();
        p.step().unwrap();
        self.t.extend(t);
        self.m.extend(m);
    }

    fn check(&self, p: &Pipeline, views: &[&str]) {
        let tables: HashMap<String, RecordBatch> = [
            ("t".to_string(), self.t_batch(p, &self.t)),
            ("m".to_string(), self.m_batch(p, &self.m)),
        ]
        .into();
        for (view, sql) in ORACLES.iter().filter(|(v, _)| views.contains(v)) {
            let expected = common::sorted_rows(&common::datafusion_rows(&tables, sql).unwrap());
            assert_eq!(
                common::sorted_rows(&p.view_rows(view).unwrap()),
                expected,
                "{view}"
            );
        }
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("eddy-bootstrap-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The old program's pipeline, fed and checkpointed, restored from its
/// checkpoint as a start would.
fn old_pipeline(feed: &mut Feed, name: &str) -> Pipeline {
    let mut p = Pipeline::new(program(OLD)).unwrap();
    for s in 0..5 {
        feed.step(&mut p, s * 20, (s + 1) * 20);
    }
    let dir = scratch(name);
    p.checkpoint(&dir).unwrap();
    let mut old = Pipeline::new(program(OLD)).unwrap();
    old.restore(&dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    old
}

#[test]
fn unchanged_views_keep_their_state_and_the_rest_is_computed() {
    let mut feed = Feed {
        t: Vec::new(),
        m: Vec::new(),
    };
    let old = old_pipeline(&mut feed, "keep");
    let mut p = Pipeline::new(program(NEW)).unwrap();
    let kept = ["t", "m", "a"].map(String::from);
    let dir = scratch("keep-scratch");
    p.take_state(&old, &kept, &dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    drop(old);
    // The first step computes the new and changed views whole; the kept
    // view's change is empty (its outputs hold it already).
    p.step().unwrap();
    assert!(p.view_change("a").unwrap().is_empty());
    for view in ["b", "c", "d", "e"] {
        assert_eq!(
            p.view_change(view).unwrap().len(),
            p.view_rows(view).unwrap().num_rows(),
            "{view} comes out whole"
        );
    }
    feed.check(&p, &["a", "b", "c", "d", "e"]);
    // And everything goes on incrementally, the late filter included.
    for s in 5..9 {
        feed.step(&mut p, s * 20, (s + 1) * 20);
        feed.check(&p, &["a", "b", "c", "d", "e"]);
    }
    // A restart of the new program from its own checkpoint goes on too.
    let mut p = common::restarted(p, "bootstrap");
    feed.step(&mut p, 180, 200);
    feed.check(&p, &["a", "b", "c", "d", "e"]);
}

#[test]
fn a_new_view_over_a_table_whose_contents_are_not_kept_is_an_error() {
    let mut feed = Feed {
        t: Vec::new(),
        m: Vec::new(),
    };
    let old = old_pipeline(&mut feed, "refuse");
    let mut p = Pipeline::new(program(&format!(
        "{OLD}CREATE VIEW f AS SELECT COUNT(*) AS n FROM t;"
    )))
    .unwrap();
    let kept = ["t", "m", "a", "b", "c", "gone"].map(String::from);
    let dir = scratch("refuse-scratch");
    p.take_state(&old, &kept, &dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let err = p.step().unwrap_err().to_string();
    assert!(
        err.contains("view 'f'") && err.contains("table 't'"),
        "{err}"
    );
}

#[test]
fn a_relation_built_otherwise_is_refused() {
    let mut feed = Feed {
        t: Vec::new(),
        m: Vec::new(),
    };
    let old = old_pipeline(&mut feed, "other");
    // `b` is not the same view: claiming it unchanged cannot go through.
    let mut p = Pipeline::new(program(
        "CREATE VIEW b AS SELECT k, SUM(y) AS s FROM m WHERE y > 2 GROUP BY k;",
    ))
    .unwrap();
    let dir = scratch("other-scratch");
    let result = p.take_state(&old, &["b".to_string()], &dir);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(result.is_err());
}

#[test]
fn a_recursive_group_is_kept_whole_or_not_at_all() {
    let text = "CREATE TABLE edges (x INT, y INT);
        DECLARE RECURSIVE VIEW closure (x INT, y INT);
        CREATE LOCAL VIEW step AS SELECT e.x, closure.y FROM edges e JOIN closure ON e.y = closure.x;
        CREATE VIEW closure AS (SELECT * FROM edges) UNION (SELECT * FROM step);";
    let old = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let dir = scratch("group-scratch");
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let err = p
        .take_state(&old, &["edges".to_string(), "step".to_string()], &dir)
        .unwrap_err()
        .to_string();
    assert!(err.contains("computed together"), "{err}");
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    let all = ["edges", "step", "closure"].map(String::from);
    p.take_state(&old, &all, &dir).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A table with a primary key keeps its rows in its upsert's state (one
/// per key), so a new view over it is computed from them, without
/// declaring it materialized.
#[test]
fn a_new_view_over_a_table_with_a_primary_key_is_computed_from_its_rows() {
    let old_text = "CREATE TABLE u (id BIGINT PRIMARY KEY, v BIGINT);\n\
                    CREATE VIEW s AS SELECT SUM(v) AS s FROM u;";
    let new_text = format!(
        "{old_text}\nCREATE MATERIALIZED VIEW byv AS SELECT v, COUNT(*) AS n FROM u GROUP BY v;"
    );
    for workers in [1, 3] {
        let build = |text: &str| {
            let options = eddy_sql::PipelineOptions {
                storage: None,
                workers,
                views: eddy_sql::ViewsKept::Materialized,
                ..Default::default()
            };
            Pipeline::with_options(Program::parse(text).unwrap(), options).unwrap()
        };
        let mut model: std::collections::BTreeMap<i64, i64> = Default::default();
        let upsert = |p: &mut Pipeline,
                      model: &mut std::collections::BTreeMap<i64, i64>,
                      rows: Vec<[i64; 2]>| {
            let schema = Arc::clone(&p.program().table("u").unwrap().schema);
            let batch = columns(
                &schema,
                (0..2)
                    .map(|i| rows.iter().map(|r| r[i]).collect())
                    .collect(),
            );
            p.push("u", ZSet::with_weight(batch, 1)).unwrap();
            p.step().unwrap();
            model.extend(rows.iter().map(|r| (r[0], r[1])));
        };
        let rows = |p: &Pipeline, model: &std::collections::BTreeMap<i64, i64>| {
            let schema = &p.program().table("u").unwrap().schema;
            columns(
                schema,
                vec![
                    model.keys().copied().collect(),
                    model.values().copied().collect(),
                ],
            )
        };
        let expect = |p: &Pipeline, model: &std::collections::BTreeMap<i64, i64>, sql: &str| {
            let tables: HashMap<String, RecordBatch> = [("u".to_string(), rows(p, model))].into();
            common::sorted_rows(&common::datafusion_rows(&tables, sql).unwrap())
        };
        let mut p = build(old_text);
        upsert(&mut p, &mut model, (0..50).map(|i| [i, i % 4]).collect());
        // Inserting an existing key replaces its row.
        upsert(&mut p, &mut model, (0..20).map(|i| [i, 9]).collect());
        let dir = scratch(&format!("keyed-{workers}"));
        p.checkpoint(&dir).unwrap();
        let mut old = build(old_text);
        old.restore(&dir).unwrap();
        let mut p = build(&new_text);
        let scratch_dir = scratch(&format!("keyed-scratch-{workers}"));
        p.take_state(&old, &["u", "s"].map(String::from), &scratch_dir)
            .unwrap();
        p.step().unwrap();
        let byv = "SELECT v, COUNT(*) AS n FROM u GROUP BY v";
        assert_eq!(
            common::sorted_rows(&p.view_rows("byv").unwrap()),
            expect(&p, &model, byv),
            "{workers} workers: the new view comes out whole"
        );
        assert_eq!(
            p.view_change("byv").unwrap().len(),
            p.view_rows("byv").unwrap().num_rows()
        );
        assert!(p.view_change("s").unwrap().is_empty());
        // And goes on incrementally.
        upsert(&mut p, &mut model, (45..55).map(|i| [i, 1]).collect());
        assert_eq!(
            common::sorted_rows(&p.view_rows("byv").unwrap()),
            expect(&p, &model, byv),
            "{workers} workers, after more upserts"
        );
        for dir in [dir, scratch_dir] {
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}

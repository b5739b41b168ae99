//! A checkpoint is a cut: once [`Pipeline::checkpoint_cut`] returns, the
//! pipeline may step on (merging and deleting the batches the cut saw)
//! while the rest of the checkpoint is written, and the checkpoint still
//! restores the state at the cut.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::{Pipeline, PipelineOptions, Program, ViewsKept};

const PROGRAM: &str = "
    CREATE TABLE a (k BIGINT, x BIGINT) WITH ('materialized' = 'true');
    CREATE TABLE b (k BIGINT, y BIGINT);
    CREATE VIEW j AS SELECT a.k, SUM(x + y) AS s, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k;
    CREATE VIEW d AS SELECT COUNT(DISTINCT x) AS d FROM a;";

fn rows(schema: &SchemaRef, from: i64, to: i64) -> ZSet {
    let ks = Int64Array::from_iter_values((from..to).map(|i| i % 97));
    let vs = Int64Array::from_iter_values(from..to);
    let batch = RecordBatch::try_new(Arc::clone(schema), vec![Arc::new(ks), Arc::new(vs)]).unwrap();
    ZSet::with_weight(batch, 1)
}

/// All the rows of a keyed table's read, in one batch.
fn read_all(read: &eddy_sql::pipeline::KeyedRows, schema: &SchemaRef) -> RecordBatch {
    let mut parts = Vec::new();
    read(&mut |b| {
        parts.push(b);
        true
    })
    .unwrap();
    datafusion::arrow::compute::concat_batches(schema, &parts).unwrap()
}

fn feed(p: &mut Pipeline, from: i64, to: i64) {
    for t in ["a", "b"] {
        let schema = Arc::clone(&p.program().table(t).unwrap().schema);
        p.push(t, rows(&schema, from, to)).unwrap();
    }
    p.step().unwrap();
}

fn views(p: &Pipeline) -> Vec<Vec<String>> {
    ["j", "d"]
        .iter()
        .map(|v| common::sorted_rows(&p.view_rows(v).unwrap()))
        .collect()
}

#[test]
fn a_checkpoint_holds_its_cut_while_the_pipeline_steps_on() {
    for threshold in [usize::MAX, 0] {
        let dir = std::env::temp_dir().join(format!("eddy-cut-{threshold}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let storage = Storage::open(&dir.join("storage"), threshold).unwrap();
        let build = || {
            Pipeline::with_storage(Program::parse(PROGRAM).unwrap(), Arc::clone(&storage)).unwrap()
        };
        let mut p = build();
        for i in 0..20 {
            feed(&mut p, i * 500, (i + 1) * 500);
        }
        let at_cut = views(&p);
        let checkpoint = dir.join("checkpoint");
        std::fs::create_dir_all(&checkpoint).unwrap();
        let pending = p.checkpoint_cut(&checkpoint).unwrap();
        // The pipeline goes on: its traces merge, and batch files the cut
        // saw are deleted.
        for i in 20..60 {
            feed(&mut p, i * 500, (i + 1) * 500);
        }
        assert_ne!(views(&p), at_cut);
        pending.finish().unwrap();
        let mut restored = build();
        restored.restore(&checkpoint).unwrap();
        assert_eq!(views(&restored), at_cut, "threshold {threshold}");
        assert_eq!(
            restored.table_rows("a").unwrap().unwrap().num_rows(),
            10_000
        );
        // And it is incremental state: the same later input gives the same.
        for i in 20..60 {
            feed(&mut restored, i * 500, (i + 1) * 500);
        }
        assert_eq!(views(&restored), views(&p), "threshold {threshold}");
        drop((p, restored, storage));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// With [`ViewsKept::Materialized`] only materialized views keep their
/// rows: another view's changes are still computed, its rows cannot be
/// read, it costs no contents, and a checkpoint of one kind of pipeline
/// is not restored into the other.
#[test]
fn only_materialized_views_keep_their_rows_when_asked() {
    let text = PROGRAM.replace("CREATE VIEW d", "CREATE MATERIALIZED VIEW d");
    let options = |views| PipelineOptions {
        storage: None,
        workers: 1,
        views,
        ..PipelineOptions::default()
    };
    let build =
        |views| Pipeline::with_options(Program::parse(&text).unwrap(), options(views)).unwrap();
    let mut kept = build(ViewsKept::Materialized);
    let mut all = build(ViewsKept::All);
    for i in 0..5 {
        feed(&mut kept, i * 100, (i + 1) * 100);
        feed(&mut all, i * 100, (i + 1) * 100);
        // The changes are the same either way.
        for v in ["j", "d"] {
            let change = |p: &Pipeline| {
                let z = p.view_change(v).unwrap().consolidate().unwrap();
                (common::sorted_rows(z.batch()), z.weights().to_vec())
            };
            assert_eq!(change(&kept), change(&all));
        }
    }
    assert!(!kept.keeps_view("j") && kept.keeps_view("d") && all.keeps_view("j"));
    let err = kept.view_rows("j").unwrap_err().to_string();
    assert!(err.contains("view 'j' is not materialized"), "{err}");
    assert_eq!(
        common::sorted_rows(&kept.view_rows("d").unwrap()),
        common::sorted_rows(&all.view_rows("d").unwrap())
    );
    let contents = |p: &Pipeline| -> Vec<String> {
        p.operator_states()
            .into_iter()
            .map(|s| s.operator)
            .filter(|o| o.starts_with("view contents"))
            .collect()
    };
    assert_eq!(contents(&kept), ["view contents: d"]);
    assert_eq!(contents(&all).len(), 2);
    // A checkpoint restores into the same kind of pipeline only.
    let dir = std::env::temp_dir().join(format!("eddy-kept-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    kept.checkpoint(&dir).unwrap();
    assert!(build(ViewsKept::All).restore(&dir).is_err());
    let mut restored = build(ViewsKept::Materialized);
    restored.restore(&dir).unwrap();
    feed(&mut restored, 500, 600);
    feed(&mut all, 500, 600);
    assert_eq!(
        common::sorted_rows(&restored.view_rows("d").unwrap()),
        common::sorted_rows(&all.view_rows("d").unwrap())
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A checkpoint restores only into the circuit that wrote it; another one
/// (another program, or one planned otherwise by another build) is
/// refused, naming the first node that differs.
#[test]
fn a_checkpoint_of_another_circuit_is_refused_naming_the_node() {
    let dir = std::env::temp_dir().join(format!("eddy-other-circuit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    feed(&mut p, 0, 100);
    p.checkpoint(&dir).unwrap();
    // `j` with an outer join: more nodes.
    let other = PROGRAM.replace(
        "FROM a JOIN b ON a.k = b.k",
        "FROM a LEFT JOIN b ON a.k = b.k",
    );
    let mut q = Pipeline::new(Program::parse(&other).unwrap()).unwrap();
    let e = q.restore(&dir).unwrap_err().to_string();
    assert!(
        e.contains("another circuit") && e.contains("in the checkpoint") && e.contains("clear"),
        "{e}"
    );
    // The same program restores.
    let mut same = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    same.restore(&dir).unwrap();
    assert_eq!(views(&same), views(&p));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A keyed table's rows taken for a query are those of when they were
/// taken, read later while the pipeline steps on: its upsert's batches
/// (files, with storage of threshold 0) merge and are replaced meanwhile.
#[test]
fn a_keyed_tables_rows_read_later_are_those_of_when_they_were_taken() {
    let dir = std::env::temp_dir().join(format!("eddy-keyed-later-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let storage = Storage::open(&dir.join("storage"), 0).unwrap();
    let text = "CREATE TABLE u (id BIGINT PRIMARY KEY, v BIGINT);";
    let options = PipelineOptions {
        storage: Some(Arc::clone(&storage)),
        workers: 3,
        views: ViewsKept::Materialized,
        ..PipelineOptions::default()
    };
    let mut p = Pipeline::with_options(Program::parse(text).unwrap(), options).unwrap();
    let schema = Arc::clone(&p.program().table("u").unwrap().schema);
    let upsert = |p: &mut Pipeline, from: i64, to: i64, v: i64| {
        let ids = Int64Array::from_iter_values(from..to);
        let vs = Int64Array::from_iter_values((from..to).map(|_| v));
        let batch =
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(ids), Arc::new(vs)]).unwrap();
        p.push("u", ZSet::with_weight(batch, 1)).unwrap();
        p.step().unwrap();
    };
    for i in 0..10 {
        upsert(&mut p, i * 100, (i + 1) * 100, 1);
    }
    let (_, read) = p.keyed_rows("u").unwrap();
    // Every row replaced, and more added, in steps that merge the batches.
    for i in 0..20 {
        upsert(&mut p, i * 100, (i + 1) * 100, 2);
    }
    let rows = read_all(&read, &schema);
    assert_eq!(
        common::sorted_rows(&rows),
        common::sorted_rows(&{
            let ids = Int64Array::from_iter_values(0..1000);
            let vs = Int64Array::from_iter_values((0..1000).map(|_| 1));
            RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(ids), Arc::new(vs)]).unwrap()
        })
    );
    let (_, now) = p.keyed_rows("u").unwrap();
    assert_eq!(read_all(&now, &schema).num_rows(), 2000);
    // Read in chunks, and no further than the reader wants.
    upsert(&mut p, 2000, 20_000, 3);
    let (_, now) = p.keyed_rows("u").unwrap();
    let mut sizes = Vec::new();
    now(&mut |b| {
        sizes.push(b.num_rows());
        true
    })
    .unwrap();
    assert_eq!(sizes.iter().sum::<usize>(), 20_000);
    assert!(sizes.len() > 1, "one chunk of {sizes:?}");
    let mut chunks = 0;
    now(&mut |_| {
        chunks += 1;
        false
    })
    .unwrap();
    assert_eq!(chunks, 1);
    // Reads do not wait on each other: one inside another (a query that
    // scans the table twice) reads it all.
    let mut inner = 0;
    now(&mut |_| {
        if inner == 0 {
            inner = read_all(&now, &schema).num_rows();
        }
        true
    })
    .unwrap();
    assert_eq!(inner, 20_000);
    drop((p, storage));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The same program as an earlier build of Eddy plans it and as this one
/// does: view `s` is built of other operators (a union with an empty
/// branch stands for another plan of the same query), the rest alike.
const EARLIER: &str = "
    CREATE TABLE a (k BIGINT, x BIGINT) WITH ('materialized' = 'true');
    CREATE TABLE b (k BIGINT, y BIGINT);
    CREATE VIEW s AS SELECT k, COUNT(*) AS n FROM a GROUP BY k;
    CREATE VIEW t AS SELECT SUM(n) AS total, COUNT(*) AS groups FROM s;
    CREATE VIEW j AS SELECT a.k, SUM(x + y) AS s, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k;
    CREATE VIEW o AS SELECT k, COUNT(*) AS n FROM a GROUP BY k ORDER BY k;";

/// `EARLIER` with `s` and `o` planned otherwise: `x` is never negative
/// here, so the branch added is empty.
fn replanned(text: &str) -> String {
    replanned_with(text, "x < 0")
}

/// `EARLIER` with `s` and `o` reading the rows of `a` where `extra` holds
/// twice.
fn replanned_with(text: &str, extra: &str) -> String {
    text.replace(
        "FROM a GROUP BY k",
        &format!("FROM (SELECT k FROM a UNION ALL SELECT k FROM a WHERE {extra}) AS u GROUP BY k"),
    )
}

/// Each view's change in the last step, as sorted rows and weights.
fn changes(p: &Pipeline) -> Vec<(Vec<String>, Vec<i64>)> {
    ["s", "t", "j", "o"]
        .iter()
        .map(|v| {
            let z = p.view_change(v).unwrap().consolidate().unwrap();
            let mut rows: Vec<(String, i64)> = common::sorted_rows(z.batch())
                .into_iter()
                .zip(z.weights().iter().copied())
                .collect();
            rows.sort();
            rows.into_iter().unzip()
        })
        .collect()
}

/// A checkpoint of a program that this build plans otherwise than the
/// build that wrote it (an upgrade of Eddy) resumes: tables and the views
/// built alike keep their state, the view planned otherwise is computed
/// again from the tables' kept rows, and from then on every view changes
/// exactly as the pipeline that wrote the checkpoint does (nothing counted
/// twice, nothing lost), on any number of workers.
#[test]
fn a_view_planned_otherwise_by_a_later_build_is_computed_again_and_the_rest_kept() {
    let dir = std::env::temp_dir().join(format!("eddy-replanned-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut earlier = Pipeline::new(Program::parse(EARLIER).unwrap()).unwrap();
    for i in 0..4 {
        feed(&mut earlier, i * 300, (i + 1) * 300);
    }
    earlier.checkpoint(&dir).unwrap();
    let later = replanned(EARLIER);
    for workers in [1, 3] {
        let build = || {
            let options = PipelineOptions {
                storage: None,
                workers,
                views: ViewsKept::All,
                ..PipelineOptions::default()
            };
            Pipeline::with_options(Program::parse(&later).unwrap(), options).unwrap()
        };
        // A plain restore wants the very same circuit.
        let e = build().restore(&dir).unwrap_err().to_string();
        assert!(e.contains("another circuit"), "{e}");
        let mut p = build();
        p.resume(&dir).unwrap();
        assert_eq!(p.recomputed_views(), ["o", "s"]);
        assert!(p.recomputed_differently().is_empty());
        let mut e = Pipeline::new(Program::parse(EARLIER).unwrap()).unwrap();
        e.restore(&dir).unwrap();
        for v in ["s", "t", "j", "o"] {
            assert_eq!(
                common::sorted_rows(&p.view_rows(v).unwrap()),
                common::sorted_rows(&e.view_rows(v).unwrap()),
                "{v}, {workers} workers"
            );
        }
        for i in 4..8 {
            feed(&mut p, i * 300, (i + 1) * 300);
            feed(&mut e, i * 300, (i + 1) * 300);
            assert_eq!(changes(&p), changes(&e), "step {i}, {workers} workers");
        }
        // Deletions too: they reach the recomputed view's state.
        for t in ["a", "b"] {
            let schema = Arc::clone(&p.program().table(t).unwrap().schema);
            p.push(t, rows(&schema, 0, 500).negate()).unwrap();
            e.push(t, rows(&schema, 0, 500).negate()).unwrap();
        }
        p.step().unwrap();
        e.step().unwrap();
        assert_eq!(changes(&p), changes(&e), "deletions, {workers} workers");
        // The ordered view reads in its order.
        assert_eq!(
            p.view_rows("o").unwrap().column(0),
            e.view_rows("o").unwrap().column(0)
        );
        for v in ["s", "t", "j", "o"] {
            assert_eq!(
                common::sorted_rows(&p.view_rows(v).unwrap()),
                common::sorted_rows(&e.view_rows(v).unwrap()),
                "{v}, {workers} workers"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A view whose other plan gives other rows (as a build that corrects an
/// earlier one's answer would) holds the new rows, and says so.
#[test]
fn a_view_recomputed_with_other_rows_holds_the_new_ones_and_says_so() {
    let dir = checkpoint_of(EARLIER, "eddy-replan-other");
    let other = replanned_with(EARLIER, "x < 100");
    let mut p = Pipeline::new(Program::parse(&other).unwrap()).unwrap();
    p.resume(&dir).unwrap();
    assert_eq!(p.recomputed_differently(), ["o", "s"]);
    let mut fresh = Pipeline::new(Program::parse(&other).unwrap()).unwrap();
    feed(&mut fresh, 0, 300);
    feed(&mut p, 300, 400);
    feed(&mut fresh, 300, 400);
    for v in ["s", "o"] {
        assert_eq!(
            common::sorted_rows(&p.view_rows(v).unwrap()),
            common::sorted_rows(&fresh.view_rows(v).unwrap()),
            "{v}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// What cannot be kept across another plan is refused, saying why: a view
/// planned otherwise that reads a table whose rows are not kept, a table
/// built otherwise, another program's relations, and a view planned
/// otherwise with a lateness.
#[test]
fn what_another_plan_cannot_keep_is_refused_saying_why() {
    let dir = checkpoint_of(EARLIER, "eddy-replan-refused");
    let resumed = |text: &str| resume_error(text, &dir);
    // `j` reads `b`, which is not materialized.
    let e = resumed(&EARLIER.replace(
        "FROM a JOIN b ON a.k = b.k",
        "FROM a JOIN (SELECT k, y FROM b UNION ALL SELECT k, y FROM b WHERE y < 0) AS b ON a.k = b.k",
    ));
    assert!(
        e.contains("view 'j'") && e.contains("table 'b'") && e.contains("materialized"),
        "{e}"
    );
    let e = resumed(&EARLIER.replace(
        "CREATE TABLE b (k BIGINT, y BIGINT);",
        "CREATE TABLE b (k BIGINT, y BIGINT) WITH ('append_only' = 'true');",
    ));
    assert!(e.contains("table 'b' is built otherwise"), "{e}");
    let e = resumed(&format!("{EARLIER} CREATE VIEW z AS SELECT k FROM a;"));
    assert!(e.contains("other tables and views"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
    // A view with a lateness would lose its progress.
    let late = format!("{EARLIER} LATENESS s.k 10;");
    let dir = checkpoint_of(&late, "eddy-replan-late");
    let e = resume_error(&replanned(&late), &dir);
    assert!(e.contains("view 's'") && e.contains("LATENESS"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A checkpoint, in a new folder named after `name`, of a pipeline of
/// `text` fed one step.
fn checkpoint_of(text: &str, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    feed(&mut p, 0, 300);
    p.checkpoint(&dir).unwrap();
    dir
}

/// Why a pipeline of `text` does not resume from the checkpoint in `dir`.
fn resume_error(text: &str, dir: &std::path::Path) -> String {
    let mut p = Pipeline::new(Program::parse(text).unwrap()).unwrap();
    p.resume(dir).map(|_| p).err().unwrap().to_string()
}

//! A checkpoint is a cut: once [`Pipeline::checkpoint_cut`] returns, the
//! pipeline may step on (merging and deleting the batches the cut saw)
//! while the rest of the checkpoint is written, and the checkpoint still
//! restores the state at the cut.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int64Array, RecordBatch};
use datafusion::arrow::datatypes::SchemaRef;
use eddy_dbsp::{Storage, ZSet};
use eddy_sql::{Pipeline, Program};

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

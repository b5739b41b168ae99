//! `BETWEEN SYMMETRIC` and `BETWEEN ASYMMETRIC` (comparisons.md): `x
//! BETWEEN SYMMETRIC a AND b` is `(a <= x AND x <= b) OR (b <= x AND x <=
//! a)`, with SQL's NULLs; `ASYMMETRIC` is plain `BETWEEN`; kept as rows
//! come and go.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{Int32Array, RecordBatch};
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program};

const PROGRAM: &str = "
CREATE TABLE t (id INT, x INT, y INT);
CREATE VIEW b AS SELECT id, x BETWEEN SYMMETRIC 6 AND 2 AS s,
  x NOT BETWEEN SYMMETRIC y AND (1 + 3) AS ns, x BETWEEN ASYMMETRIC 6 AND 2 AS a,
  CASE WHEN x BETWEEN SYMMETRIC y AND 2 AND id > 1 THEN 'in' ELSE 'out' END AS c FROM t;
";

fn push(p: &mut Pipeline, rows: &[(i32, Option<i32>, Option<i32>)], weight: i64) {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.2))),
        ],
    )
    .unwrap();
    p.push("t", ZSet::with_weight(batch, weight)).unwrap();
    p.step().unwrap();
}

#[test]
fn symmetric_bounds_in_either_order() {
    let mut p = Pipeline::new(Program::parse(PROGRAM).unwrap()).unwrap();
    let rows = [
        (1, Some(5), None),
        (2, Some(3), Some(7)),
        (3, Some(9), Some(1)),
    ];
    push(&mut p, &rows, 1);
    assert_eq!(
        common::sorted_rows(&p.view_rows("b").unwrap()),
        vec![
            "1|true|NULL|false|out",
            "2|true|true|false|in",
            "3|false|true|false|out",
        ]
    );
    push(&mut p, &rows[1..2], -1);
    assert_eq!(
        common::sorted_rows(&p.view_rows("b").unwrap()),
        vec!["1|true|NULL|false|out", "3|false|true|false|out"]
    );
}

//! Feldera's type rules for aggregates, kept as the input changes: `AVG`,
//! `STDDEV_*` and `VAR_*` of an integer or DECIMAL argument have the
//! argument's type, truncated toward zero; DOUBLE arguments keep DOUBLE.
//! Under PostgreSQL's rules the same views are DOUBLE.

mod common;

use std::sync::Arc;

use datafusion::arrow::array::{
    Array, Decimal128Array, Float64Array, Int32Array, Int8Array, RecordBatch,
};
use datafusion::arrow::datatypes::DataType;
use eddy_dbsp::ZSet;
use eddy_sql::{Pipeline, Program, Rules};

const PROGRAM: &str = "
CREATE TABLE t (g INT, i INT, ti TINYINT, d DECIMAL(7, 2), f DOUBLE);
CREATE VIEW a AS SELECT g, AVG(i) AS ai, AVG(ti) AS ati, AVG(d) AS ad, AVG(f) AS af,
  STDDEV_POP(i) AS sp, STDDEV_SAMP(d) AS ss, VAR_POP(i) AS vp,
  STDDEV_POP(DISTINCT i) AS spd, AVG(DISTINCT i) AS aid, STDDEV_SAMP(i) AS ssi
FROM t GROUP BY g;
CREATE VIEW lin AS SELECT g, COUNT(*) AS n, AVG(i) AS ai FROM t GROUP BY g;
CREATE VIEW w AS SELECT g, i, AVG(i) OVER (PARTITION BY g ORDER BY i ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS m FROM t;
";

/// Rows `(g, i, d in hundredths, f)`; `ti` is `i`.
fn batch(p: &Pipeline, rows: &[(i32, i32, i128, f64)]) -> RecordBatch {
    let schema = Arc::clone(&p.program().table("t").unwrap().schema);
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int32Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(Int8Array::from_iter_values(rows.iter().map(|r| r.1 as i8))),
            Arc::new(
                Decimal128Array::from_iter_values(rows.iter().map(|r| r.2))
                    .with_precision_and_scale(7, 2)
                    .unwrap(),
            ),
            Arc::new(Float64Array::from_iter_values(rows.iter().map(|r| r.3))),
        ],
    )
    .unwrap()
}

fn pipeline(rules: Rules) -> Pipeline {
    let mut p = Pipeline::new(Program::parse_with(PROGRAM, rules).unwrap()).unwrap();
    let rows = [
        (1, 1, 100, 1.0),
        (1, 4, 200, 2.0),
        (1, 10, 206, 2.0),
        (1, 10, 300, 3.0),
        (2, -1, -100, -1.0),
        (2, -2, -201, -2.0),
    ];
    let b = batch(&p, &rows);
    p.push("t", ZSet::with_weight(b, 1)).unwrap();
    p.step().unwrap();
    p
}

#[test]
fn feldera_averages_and_deviations_keep_the_argument_type() {
    let mut p = pipeline(Rules::Feldera);
    let schema = p.view_rows("a").unwrap().schema();
    let types: Vec<DataType> = schema
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        vec![
            DataType::Int32,
            DataType::Int32,
            DataType::Int8,
            DataType::Decimal128(7, 2),
            DataType::Float64,
            DataType::Int32,
            DataType::Decimal128(7, 2),
            DataType::Int32,
            DataType::Int32,
            DataType::Int32,
            DataType::Int32,
        ]
    );
    // g 1: i 1, 4, 10, 10 (avg 6.25; Feldera's integer variances: Σx² 217,
    // (Σx)²/n 156, var_pop 61/4 = 15, stddev_pop 3, var_samp 61/3 = 20,
    // stddev_samp 4; distinct 1, 4, 10: var_pop 14, stddev_pop 3, avg 5);
    // d 1.00, 2.00, 2.06, 3.00 (avg 2.015, stddev_samp 0.817). g 2: i -1,
    // -2 (avg -1.5 truncates to -1; var_samp (5 - 9/2) / 1 = 1, where the
    // exact stddev_samp is 0.707); d -1.00, -2.01 (avg -1.505, stddev_samp
    // 0.714).
    assert_eq!(
        common::sorted_rows(&p.view_rows("a").unwrap()),
        vec![
            "1|6|6|2.01|2.000000|3|0.81|15|3|5|4",
            "2|-1|-1|-1.50|-1.500000|0|0.71|0|0|-1|1",
        ]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("lin").unwrap()),
        vec!["1|4|6", "2|2|-1"]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("w").unwrap()),
        vec!["1|10|10", "1|10|7", "1|1|1", "1|4|2", "2|-1|-1", "2|-2|-2"]
    );
    // One of the 10s goes: g 1 is 1, 4, 10 (avg 5, var_pop 14, stddev_pop
    // 3, var_samp 21, stddev_samp 4); d 1.00, 2.00, 2.06 (avg 1.6867,
    // stddev_samp 0.595).
    let gone = batch(&p, &[(1, 10, 300, 3.0)]);
    p.push("t", ZSet::with_weight(gone, -1)).unwrap();
    p.step().unwrap();
    assert_eq!(
        common::sorted_rows(&p.view_rows("a").unwrap()),
        vec![
            "1|5|5|1.68|1.666667|3|0.59|14|3|5|4",
            "2|-1|-1|-1.50|-1.500000|0|0.71|0|0|-1|1",
        ]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("lin").unwrap()),
        vec!["1|3|5", "2|2|-1"]
    );
    assert_eq!(
        common::sorted_rows(&p.view_rows("w").unwrap()),
        vec!["1|10|7", "1|1|1", "1|4|2", "2|-1|-1", "2|-2|-2"]
    );
}

#[test]
fn postgres_averages_and_deviations_are_doubles() {
    let p = pipeline(Rules::Postgres);
    let rows = p.view_rows("lin").unwrap();
    assert_eq!(rows.schema().field(2).data_type(), &DataType::Float64);
    assert_eq!(
        common::sorted_rows(&rows),
        vec!["1|4|6.250000", "2|2|-1.500000"]
    );
    let rows = p.view_rows("a").unwrap();
    assert_eq!(rows.schema().field(5).data_type(), &DataType::Float64);
    let sp = rows
        .column(5)
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap();
    let g = rows
        .column(0)
        .as_any()
        .downcast_ref::<Int32Array>()
        .unwrap();
    for r in 0..rows.num_rows() {
        let want = if g.value(r) == 1 {
            15.1875f64.sqrt()
        } else {
            0.5
        };
        assert!((sp.value(r) - want).abs() < 1e-9, "{}", sp.value(r));
        assert!(sp.is_valid(r));
    }
}

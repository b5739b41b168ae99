//! Property test: the session window functions over a window operator that
//! re-evaluates only the chains a change reaches
//! ([`eddy_dbsp::operator::Extent::Chain`]) keep exactly the output of one
//! that re-evaluates whole partitions (DataFusion's batch evaluation), in
//! both orders, with NULLs first or last, duplicates and deletions.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::logical_expr::{WindowFrame, WindowFunctionDefinition};
use datafusion::physical_expr::expressions::{col, lit};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::windows::create_window_expr;
use eddy_dbsp::operator::{self as op, Extent, Operator};
use eddy_dbsp::ZSet;
use proptest::prelude::*;

type Row = Vec<Option<i64>>;
type Bag = BTreeMap<Row, i64>;

/// A key, a time and a payload (rows of equal time differ).
fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn column(i: usize) -> Arc<dyn PhysicalExpr> {
    col(["k", "t", "v"][i], &input_schema()).unwrap()
}

/// `session_start` (0) or `session_end` (1) over `ORDER BY t` with `gap`.
fn function(which: usize, gap: i64, options: SortOptions) -> Arc<dyn WindowExpr> {
    let udwf = Arc::clone(&eddy_sql::sessions::functions()[which]);
    create_window_expr(
        &WindowFunctionDefinition::WindowUDF(udwf),
        format!("f{which}"),
        &[column(1), lit(gap)],
        &[column(0)],
        &[PhysicalSortExpr {
            expr: column(1),
            options,
        }],
        Arc::new(WindowFrame::new(Some(false))),
        input_schema(),
        false,
        false,
        None,
    )
    .unwrap()
}

fn output_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("t", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("start", DataType::Int64, true),
        Field::new("end", DataType::Int64, true),
    ]))
}

fn zset(rows: &[(Row, i64)]) -> ZSet {
    let columns = (0..3)
        .map(|c| Arc::new(rows.iter().map(|(r, _)| r[c]).collect::<Int64Array>()) as Arc<dyn Array>)
        .collect();
    ZSet::new(
        RecordBatch::try_new(input_schema(), columns).unwrap(),
        rows.iter().map(|(_, w)| *w).collect(),
    )
}

fn add_to(bag: &mut Bag, z: &ZSet) {
    for i in 0..z.len() {
        let row: Row = z
            .batch()
            .columns()
            .iter()
            .map(|c| {
                let a = c.as_any().downcast_ref::<Int64Array>().unwrap();
                a.is_valid(i).then(|| a.value(i))
            })
            .collect();
        *bag.entry(row).or_default() += z.weights()[i];
    }
    bag.retain(|_, w| *w != 0);
}

/// One step: rows to insert and picks of existing rows to delete.
type Step = (Vec<(Option<i64>, Option<i64>, i64)>, Vec<usize>);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let key = prop_oneof![1 => Just(None), 8 => (0i64..3).prop_map(Some)];
    // Times near the ends of the range too, where a gap overflows.
    let time = prop_oneof![
        1 => Just(None),
        12 => (0i64..40).prop_map(Some),
        1 => (0i64..3).prop_map(|d| Some(i64::MAX - d)),
        1 => (0i64..3).prop_map(|d| Some(i64::MIN + d)),
    ];
    prop::collection::vec(
        (
            prop::collection::vec((key, time, 0i64..3), 0..12),
            prop::collection::vec(0usize..1000, 0..6),
        ),
        1..10,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn chains_match_whole_partitions(
        steps in steps(),
        gap in 1i64..8,
        descending in prop::bool::ANY,
        nulls_first in prop::bool::ANY,
    ) {
        let options = SortOptions { descending, nulls_first };
        let functions: Vec<_> = (0..2).map(|w| function(w, gap, options)).collect();
        let chains = functions.iter().map(|f| (Arc::clone(f), Extent::Chain { gap })).collect();
        let whole = functions.iter().map(|f| (Arc::clone(f), Extent::Partition)).collect();
        let mut chains = op::Window::new(input_schema(), vec![column(0)], chains, output_schema()).unwrap();
        let mut whole = op::Window::new(input_schema(), vec![column(0)], whole, output_schema()).unwrap();
        prop_assert!(chains.evaluates_ranges());
        prop_assert!(!whole.evaluates_ranges());
        let (mut model, mut got, mut expected) = (Bag::new(), Bag::new(), Bag::new());
        for (inserts, deletes) in &steps {
            let mut change: Vec<(Row, i64)> = Vec::new();
            for &d in deletes {
                let present: Vec<Row> = model.keys().cloned().collect();
                if present.is_empty() {
                    break;
                }
                let row = present[d % present.len()].clone();
                *model.get_mut(&row).unwrap() -= 1;
                model.retain(|_, w| *w != 0);
                change.push((row, -1));
            }
            for &(k, t, v) in inserts {
                *model.entry(vec![k, t, Some(v)]).or_default() += 1;
                change.push((vec![k, t, Some(v)], 1));
            }
            let z = zset(&change);
            add_to(&mut got, &chains.eval(&[&z]).unwrap());
            add_to(&mut expected, &whole.eval(&[&z]).unwrap());
            prop_assert_eq!(&got, &expected);
        }
    }
}

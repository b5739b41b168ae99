//! Property test: a window operator that re-evaluates only the ranges a
//! change reaches keeps exactly the output of one that re-evaluates whole
//! partitions (whose functions are DataFusion's batch evaluation), for
//! every kind of extent, ascending and descending, with NULLs, duplicates
//! and deletions.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::functions_window::lead_lag::{lag_udwf, lead_udwf};
use datafusion::functions_window::nth_value::{first_value_udwf, last_value_udwf};
use datafusion::functions_window::rank::{dense_rank_udwf, rank_udwf};
use datafusion::functions_window::row_number::row_number_udwf;
use datafusion::logical_expr::{
    WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::physical_expr::expressions::{col, lit};
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::windows::create_window_expr;
use eddy_dbsp::operator::{self as op, Extent, Operator, RangeOffset};
use eddy_dbsp::ZSet;
use proptest::prelude::*;

type Row = Vec<Option<i64>>;
type Bag = BTreeMap<Row, i64>;

/// The functions the test draws from, by number.
const FUNCTIONS: usize = 14;

fn input_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]))
}

fn column(i: usize) -> Arc<dyn PhysicalExpr> {
    col(["k", "v"][i], &input_schema()).unwrap()
}

fn rows_bound(n: Option<u64>, preceding: bool) -> WindowFrameBound {
    let v = ScalarValue::UInt64(n);
    if preceding {
        WindowFrameBound::Preceding(v)
    } else {
        WindowFrameBound::Following(v)
    }
}

fn range_bound(n: Option<i64>, preceding: bool) -> WindowFrameBound {
    let v = ScalarValue::Int64(n);
    if preceding {
        WindowFrameBound::Preceding(v)
    } else {
        WindowFrameBound::Following(v)
    }
}

/// Function `which` over `ORDER BY v` with `options`, with its extent.
fn function(which: usize, options: SortOptions) -> (Arc<dyn WindowExpr>, Extent) {
    use WindowFrameBound::CurrentRow;
    use WindowFrameUnits::{Range, Rows};
    let order = vec![PhysicalSortExpr {
        expr: column(1),
        options,
    }];
    let by = |n: i64| RangeOffset::By(ScalarValue::Int64(Some(n)));
    let running = WindowFrame::new(Some(false));
    let (fun, args, frame, extent): (
        WindowFunctionDefinition,
        Vec<Arc<dyn PhysicalExpr>>,
        WindowFrame,
        Extent,
    ) = match which {
        0 => (
            WindowFunctionDefinition::WindowUDF(row_number_udwf()),
            vec![],
            running,
            Extent::Rank { dense: false },
        ),
        1 => (
            WindowFunctionDefinition::WindowUDF(rank_udwf()),
            vec![],
            running,
            Extent::Rank { dense: false },
        ),
        2 => (
            WindowFunctionDefinition::WindowUDF(dense_rank_udwf()),
            vec![],
            running,
            Extent::Rank { dense: true },
        ),
        3 => (
            WindowFunctionDefinition::WindowUDF(lag_udwf()),
            vec![column(1), lit(2i64)],
            running,
            Extent::Rows {
                preceding: Some(2),
                following: Some(0),
            },
        ),
        4 => (
            WindowFunctionDefinition::WindowUDF(lead_udwf()),
            vec![column(1)],
            running,
            Extent::Rows {
                preceding: Some(0),
                following: Some(1),
            },
        ),
        5 => (
            WindowFunctionDefinition::AggregateUDF(sum_udaf()),
            vec![column(1)],
            WindowFrame::new_bounds(Rows, rows_bound(Some(2), true), rows_bound(Some(1), false)),
            Extent::Rows {
                preceding: Some(2),
                following: Some(1),
            },
        ),
        6 => (
            WindowFunctionDefinition::AggregateUDF(count_udaf()),
            vec![column(1)],
            WindowFrame::new_bounds(Range, range_bound(Some(2), true), CurrentRow),
            Extent::Range {
                preceding: by(2),
                following: RangeOffset::Current,
            },
        ),
        7 => (
            WindowFunctionDefinition::AggregateUDF(max_udaf()),
            vec![column(0)],
            WindowFrame::new_bounds(Range, CurrentRow, range_bound(Some(3), false)),
            Extent::Range {
                preceding: RangeOffset::Current,
                following: by(3),
            },
        ),
        8 => (
            WindowFunctionDefinition::AggregateUDF(sum_udaf()),
            vec![column(1)],
            running,
            Extent::Range {
                preceding: RangeOffset::Unbounded,
                following: RangeOffset::Current,
            },
        ),
        9 => (
            WindowFunctionDefinition::WindowUDF(first_value_udwf()),
            vec![column(0)],
            WindowFrame::new_bounds(Rows, rows_bound(Some(1), false), rows_bound(Some(3), false)),
            Extent::Rows {
                preceding: Some(0),
                following: Some(3),
            },
        ),
        10 => (
            WindowFunctionDefinition::AggregateUDF(sum_udaf()),
            vec![column(0)],
            WindowFrame::new_bounds(Rows, rows_bound(None, true), CurrentRow),
            Extent::Rows {
                preceding: None,
                following: Some(0),
            },
        ),
        11 => (
            WindowFunctionDefinition::AggregateUDF(min_udaf()),
            vec![column(0)],
            WindowFrame::new_bounds(Range, range_bound(Some(1), false), range_bound(None, false)),
            Extent::Range {
                preceding: RangeOffset::Current,
                following: RangeOffset::Unbounded,
            },
        ),
        12 => (
            WindowFunctionDefinition::WindowUDF(last_value_udwf()),
            vec![column(0)],
            WindowFrame::new_bounds(
                Range,
                range_bound(Some(1), true),
                range_bound(Some(2), false),
            ),
            Extent::Range {
                preceding: by(1),
                following: by(2),
            },
        ),
        _ => (
            WindowFunctionDefinition::AggregateUDF(count_udaf()),
            vec![column(0)],
            WindowFrame::new_bounds(Rows, rows_bound(Some(3), true), rows_bound(Some(1), true)),
            Extent::Rows {
                preceding: Some(3),
                following: Some(0),
            },
        ),
    };
    let expr = create_window_expr(
        &fun,
        "f".into(),
        &args,
        &[column(0)],
        &order,
        Arc::new(frame),
        input_schema(),
        false,
        false,
        None,
    )
    .unwrap();
    (expr, extent)
}

fn output_schema(functions: usize) -> SchemaRef {
    let mut fields = vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ];
    for i in 0..functions {
        fields.push(Field::new(format!("f{i}"), DataType::Int64, true));
    }
    Arc::new(Schema::new(fields))
}

fn zset(rows: &[(Row, i64)]) -> ZSet {
    let s = input_schema();
    let columns = (0..2)
        .map(|c| Arc::new(rows.iter().map(|(r, _)| r[c]).collect::<Int64Array>()) as Arc<dyn Array>)
        .collect();
    ZSet::new(
        RecordBatch::try_new(s, columns).unwrap(),
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
type Step = (Vec<(Option<i64>, Option<i64>)>, Vec<usize>);

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let key = prop_oneof![1 => Just(None), 8 => (0i64..3).prop_map(Some)];
    let value = prop_oneof![1 => Just(None), 8 => (0i64..12).prop_map(Some)];
    prop::collection::vec(
        (
            prop::collection::vec((key, value), 0..12),
            prop::collection::vec(0usize..1000, 0..6),
        ),
        1..10,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn ranges_match_whole_partitions(
        steps in steps(),
        which in prop::collection::vec(0usize..FUNCTIONS, 1..4),
        descending in prop::bool::ANY,
        nulls_first in prop::bool::ANY,
    ) {
        let options = SortOptions { descending, nulls_first };
        let out = output_schema(which.len());
        let functions: Vec<_> = which.iter().map(|&w| function(w, options)).collect();
        let whole_functions = functions.iter().map(|(f, _)| (Arc::clone(f), Extent::Partition)).collect();
        let mut ranges = op::Window::new(input_schema(), vec![column(0)], functions, Arc::clone(&out)).unwrap();
        let mut whole = op::Window::new(input_schema(), vec![column(0)], whole_functions, Arc::clone(&out)).unwrap();
        prop_assert!(ranges.evaluates_ranges());
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
            for &(k, v) in inserts {
                *model.entry(vec![k, v]).or_default() += 1;
                change.push((vec![k, v], 1));
            }
            let z = zset(&change);
            add_to(&mut got, &ranges.eval(&[&z]).unwrap());
            add_to(&mut expected, &whole.eval(&[&z]).unwrap());
            prop_assert_eq!(&got, &expected);
        }
    }
}

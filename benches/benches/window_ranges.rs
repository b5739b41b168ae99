//! Window functions over one long partition: does a change cost its range
//! or the partition? A partition of 1,000,000 rows (`ORDER BY ts`) is
//! loaded in one step; then one row is appended per step, and one row is
//! inserted in the middle per step. Each function runs twice: in range
//! mode (the operator's default when the function's reach is bounded) and
//! forced to re-evaluate whole partitions, measured side by side.
//!
//! Run: `cargo bench -p eddy-benches --bench window_ranges` (release).

use std::sync::Arc;
use std::time::{Duration, Instant};

use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::functions_window::lead_lag::lag_udwf;
use datafusion::functions_window::row_number::row_number_udwf;
use datafusion::logical_expr::{
    WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::physical_expr::expressions::col;
use datafusion::physical_expr::window::WindowExpr;
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::windows::create_window_expr;
use eddy_dbsp::operator::{Extent, Operator, RangeOffset, Window};
use eddy_dbsp::ZSet;

const ROWS: i64 = 1_000_000;
const ROUNDS: usize = 20;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("sym", DataType::Int64, false),
        Field::new("ts", DataType::Int64, false),
        Field::new("price", DataType::Float64, false),
    ]))
}

fn column(name: &str) -> Arc<dyn PhysicalExpr> {
    col(name, &schema()).unwrap()
}

fn rows(ts: impl Iterator<Item = i64>) -> ZSet {
    let ts: Vec<i64> = ts.collect();
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(vec![1; ts.len()])),
            Arc::new(Int64Array::from(ts.clone())),
            Arc::new(
                ts.iter()
                    .map(|t| (t % 1000) as f64)
                    .collect::<Float64Array>(),
            ),
        ],
    )
    .unwrap();
    ZSet::with_weight(batch, 1)
}

/// The benchmarked functions: name, expression and extent.
fn functions() -> Vec<(&'static str, Arc<dyn WindowExpr>, Extent)> {
    let order = vec![PhysicalSortExpr {
        expr: column("ts"),
        options: SortOptions::default(),
    }];
    let make = |fun: WindowFunctionDefinition, frame: WindowFrame| {
        let args = if matches!(fun, WindowFunctionDefinition::WindowUDF(ref u) if u.name() == "row_number")
        {
            vec![]
        } else {
            vec![column("price")]
        };
        create_window_expr(
            &fun,
            "f".into(),
            &args,
            &[column("sym")],
            &order,
            Arc::new(frame),
            schema(),
            false,
            false,
            None,
        )
        .unwrap()
    };
    let rows = |n: u64| {
        WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(ScalarValue::UInt64(Some(n))),
            WindowFrameBound::CurrentRow,
        )
    };
    let range = WindowFrame::new_bounds(
        WindowFrameUnits::Range,
        WindowFrameBound::Preceding(ScalarValue::Int64(Some(100))),
        WindowFrameBound::CurrentRow,
    );
    vec![
        (
            "LAG(price)",
            make(
                WindowFunctionDefinition::WindowUDF(lag_udwf()),
                WindowFrame::new(Some(false)),
            ),
            Extent::Rows {
                preceding: Some(1),
                following: Some(0),
            },
        ),
        (
            "SUM ROWS 9 PRECEDING",
            make(WindowFunctionDefinition::AggregateUDF(sum_udaf()), rows(9)),
            Extent::Rows {
                preceding: Some(9),
                following: Some(0),
            },
        ),
        (
            "SUM RANGE 100 PRECEDING",
            make(WindowFunctionDefinition::AggregateUDF(sum_udaf()), range),
            Extent::Range {
                preceding: RangeOffset::By(ScalarValue::Int64(Some(100))),
                following: RangeOffset::Current,
            },
        ),
        (
            "ROW_NUMBER",
            make(
                WindowFunctionDefinition::WindowUDF(row_number_udwf()),
                WindowFrame::new(Some(false)),
            ),
            Extent::Rank { dense: false },
        ),
        (
            "running SUM",
            make(
                WindowFunctionDefinition::AggregateUDF(sum_udaf()),
                WindowFrame::new(Some(false)),
            ),
            Extent::Range {
                preceding: RangeOffset::Unbounded,
                following: RangeOffset::Current,
            },
        ),
    ]
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// Load, then the medians of an append step and a middle-insert step.
fn run(expr: Arc<dyn WindowExpr>, extent: Extent) -> (Duration, Duration, Duration) {
    let mut out: Vec<Field> = schema()
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    out.push(Field::new(
        "f",
        expr.field().unwrap().data_type().clone(),
        true,
    ));
    let mut window = Window::new(
        schema(),
        vec![column("sym")],
        vec![(expr, extent)],
        Arc::new(Schema::new(out)),
    )
    .unwrap();
    // Even timestamps; appends and middle inserts use odd or new ones.
    let load = rows((0..ROWS).map(|i| 2 * i));
    let t = Instant::now();
    window.eval(&[&load]).unwrap();
    let load = t.elapsed();
    let (mut append, mut middle) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS as i64 {
        let t = Instant::now();
        window
            .eval(&[&rows(std::iter::once(2 * ROWS + 2 * r))])
            .unwrap();
        append.push(t.elapsed());
        let t = Instant::now();
        window
            .eval(&[&rows(std::iter::once(ROWS + 2 * r + 1))])
            .unwrap();
        middle.push(t.elapsed());
    }
    (load, median(append), median(middle))
}

fn main() {
    println!("one partition of {ROWS} rows; medians of {ROUNDS} single-row steps");
    println!("| function | mode | load | append one row | insert in the middle |");
    println!("|---|---|---:|---:|---:|");
    for (name, expr, extent) in functions() {
        let ranged = run(Arc::clone(&expr), extent);
        let whole = run(expr, Extent::Partition);
        for (mode, (load, append, middle)) in [("ranges", ranged), ("whole partition", whole)] {
            println!("| {name} | {mode} | {load:.2?} | {append:.2?} | {middle:.2?} |");
        }
        println!(
            "| {name} | whole / ranges | | {:.0}× | {:.0}× |",
            whole.1.as_secs_f64() / ranged.1.as_secs_f64(),
            whole.2.as_secs_f64() / ranged.2.as_secs_f64()
        );
    }
}

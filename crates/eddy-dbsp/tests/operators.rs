//! Property tests: every operator, fed random sequences of valid changes,
//! must keep its integrated output equal to a naive full recomputation over
//! the integrated inputs. Every one-input operator runs twice: in memory,
//! and built with a storage of threshold 0, where every trace batch is a
//! file and every keyed map moves to its trace at each step. One- and
//! two-input operators go on, every other step, in a circuit restored from
//! a checkpoint of the one before.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{Array, Int64Array, RecordBatch};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::functions_aggregate::count::count_udaf;
use datafusion::functions_aggregate::min_max::{max_udaf, min_udaf};
use datafusion::functions_aggregate::sum::sum_udaf;
use datafusion::functions_window::row_number::row_number_udwf;
use datafusion::logical_expr::Operator as BinOp;
use datafusion::logical_expr::{
    WindowFrame, WindowFrameBound, WindowFrameUnits, WindowFunctionDefinition,
};
use datafusion::physical_expr::aggregate::AggregateExprBuilder;
use datafusion::physical_expr::expressions::{binary, col, lit};
use datafusion::physical_expr::{PhysicalExpr, PhysicalSortExpr};
use datafusion::physical_plan::windows::create_window_expr;
use eddy_dbsp::checkpoint::{StateReader, StateWriter};
use eddy_dbsp::operator::aggregate::AggregateCall;
use eddy_dbsp::operator::join::JoinSide;
use eddy_dbsp::operator::{self as op, Integrate};
use eddy_dbsp::{Circuit, InputHandle, NodeId, ZSet};
use proptest::prelude::*;

type Row = Vec<Option<i64>>;
type Bag = BTreeMap<Row, i64>;
/// One step: rows to insert, and picks of existing rows to delete.
type Step = (Vec<(Option<i64>, Option<i64>)>, Vec<usize>);

fn schema(names: &[&str]) -> SchemaRef {
    Arc::new(Schema::new(
        names
            .iter()
            .map(|n| Field::new(*n, DataType::Int64, true))
            .collect::<Vec<_>>(),
    ))
}

fn zset(schema: &SchemaRef, rows: &[(Row, i64)]) -> ZSet {
    let columns = (0..schema.fields().len())
        .map(|c| Arc::new(rows.iter().map(|(r, _)| r[c]).collect::<Int64Array>()) as Arc<dyn Array>)
        .collect();
    let batch = RecordBatch::try_new(Arc::clone(schema), columns).unwrap();
    ZSet::new(batch, rows.iter().map(|(_, w)| *w).collect())
}

fn bag(z: &ZSet) -> Bag {
    let mut out = Bag::new();
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
        *out.entry(row).or_default() += z.weights()[i];
    }
    out.retain(|_, w| *w != 0);
    out
}

/// One step of changes for a two-column relation: inserts of random rows and
/// deletions of rows that exist (so the integrated input stays a relation).
fn changes() -> impl Strategy<Value = Vec<Step>> {
    let value = prop_oneof![1 => Just(None), 6 => (0i64..4).prop_map(Some)];
    let row = (value.clone(), value);
    prop::collection::vec(
        (
            prop::collection::vec(row, 0..5),
            prop::collection::vec(0usize..100, 0..3),
        ),
        1..8,
    )
}

/// Steps of insertions only.
fn insertions() -> impl Strategy<Value = Vec<Step>> {
    changes().prop_map(|steps| {
        steps
            .into_iter()
            .map(|(inserts, _)| (inserts, Vec::new()))
            .collect()
    })
}

/// `RankTopK` on partition `k`, ordered by `v` descending (NULLs last),
/// against the model; `inserts_only` keeps only the first rows.
fn check_rank_topk(
    steps: &[Step],
    limit: u64,
    which: usize,
    inserts_only: bool,
) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let ranking = [
        op::Ranking::RowNumber,
        op::Ranking::Rank,
        op::Ranking::DenseRank,
    ][which];
    let order = vec![PhysicalSortExpr {
        expr: kv(1),
        options: SortOptions {
            descending: true,
            nulls_first: false,
        },
    }];
    let out_schema = schema(&["k", "v", "n"]);
    check_unary(
        steps,
        |c, i| {
            let mut top = op::RankTopK::new(
                Arc::clone(&s),
                vec![kv(0)],
                order.clone(),
                ranking,
                limit,
                Arc::clone(&out_schema),
            )
            .unwrap();
            if inserts_only {
                top = top.inserts_only();
            }
            c.add(top, &[i], Arc::clone(&out_schema)).unwrap()
        },
        |m| {
            let mut out = Bag::new();
            for (_, mut rows) in partitions(m) {
                // v descending, NULLs last.
                rows.sort_by(|a, b| match (a[1], b[1]) {
                    (Some(x), Some(y)) => y.cmp(&x),
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, _) => std::cmp::Ordering::Greater,
                    (_, None) => std::cmp::Ordering::Less,
                });
                let (mut rank, mut dense) = (0i64, 0i64);
                for (i, r) in rows.iter().enumerate() {
                    if i == 0 || rows[i - 1][1] != r[1] {
                        rank = i as i64 + 1;
                        dense += 1;
                    }
                    let n = match ranking {
                        op::Ranking::RowNumber => i as i64 + 1,
                        op::Ranking::Rank => rank,
                        op::Ranking::DenseRank => dense,
                    };
                    if n as u64 <= limit {
                        *out.entry(vec![r[0], r[1], Some(n)]).or_default() += 1;
                    }
                }
            }
            out
        },
    )
}

/// The groups `(k, v)` of an insertions-only input with their `COUNT(*)`,
/// ranked per `k` by the count, highest first: the top-k that keeps only
/// each partition's first rows (`rising`: each group's change deletes its
/// old count and inserts a higher one) against the one that keeps all.
/// With `project`, `v` is dropped before the ranking, so that groups of
/// one count are one row of a weight above 1, which may lie across k.
fn check_rising_counts(
    steps: &[Step],
    limit: u64,
    which: usize,
    project: bool,
    storage: Option<Arc<eddy_dbsp::Storage>>,
) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let counts = schema(&["k", "v", "n"]);
    let (ranked, out) = match project {
        true => (schema(&["k", "n"]), schema(&["k", "n", "r"])),
        false => (Arc::clone(&counts), schema(&["k", "v", "n", "r"])),
    };
    let ranking = [op::Ranking::RowNumber, op::Ranking::Rank][which];
    let mut circuit = Circuit::new();
    let (input, handle): (NodeId, InputHandle) = circuit.add_input(Arc::clone(&s)).unwrap();
    let (all, first) = eddy_dbsp::storage::with_storage(storage, || {
        let count = AggregateExprBuilder::new(count_udaf(), vec![lit(1i64)])
            .schema(Arc::clone(&s))
            .alias("n")
            .build()
            .unwrap();
        let call = AggregateCall {
            function: Arc::new(count),
            filter: None,
            order_by: vec![],
        };
        let agg = op::Aggregate::new(
            Arc::clone(&s),
            vec![kv(0), kv(1)],
            vec![call],
            Arc::clone(&counts),
        )
        .unwrap()
        .inserts_only();
        let mut agg = circuit.add(agg, &[input], Arc::clone(&counts)).unwrap();
        if project {
            let exprs = vec![col("k", &counts).unwrap(), col("n", &counts).unwrap()];
            let map = op::Map::new(exprs, Arc::clone(&ranked));
            agg = circuit.add(map, &[agg], Arc::clone(&ranked)).unwrap();
        }
        let top = || {
            op::RankTopK::new(
                Arc::clone(&ranked),
                vec![col("k", &ranked).unwrap()],
                vec![PhysicalSortExpr {
                    expr: col("n", &ranked).unwrap(),
                    options: SortOptions {
                        descending: true,
                        nulls_first: false,
                    },
                }],
                ranking,
                limit,
                Arc::clone(&out),
            )
            .unwrap()
        };
        let all = circuit.add(top(), &[agg], Arc::clone(&out)).unwrap();
        let first = circuit
            .add(top().rising(), &[agg], Arc::clone(&out))
            .unwrap();
        (all, first)
    });
    let mut integrated = [all, first].map(|_| Integrate::new(Arc::clone(&out)).unwrap());
    let mut model = Bag::new();
    for (inserts, deletes) in steps {
        let change = step_change(&mut model, inserts, deletes);
        handle.push(zset(&s, &change)).unwrap();
        circuit.step().unwrap();
        for (node, sum) in [all, first].into_iter().zip(&mut integrated) {
            sum.add(circuit.output(node).unwrap()).unwrap();
        }
        prop_assert_eq!(
            bag(&integrated[0].contents().unwrap()),
            bag(&integrated[1].contents().unwrap())
        );
    }
    Ok(())
}

/// Applies a step to the model and returns the change to push.
fn step_change(
    model: &mut Bag,
    inserts: &[(Option<i64>, Option<i64>)],
    deletes: &[usize],
) -> Vec<(Row, i64)> {
    let mut change = Vec::new();
    for &d in deletes {
        let rows: Vec<Row> = model.keys().cloned().collect();
        if rows.is_empty() {
            break;
        }
        let row = rows[d % rows.len()].clone();
        *model.get_mut(&row).unwrap() -= 1;
        if model[&row] == 0 {
            model.remove(&row);
        }
        change.push((row, -1));
    }
    for (a, b) in inserts {
        let row = vec![*a, *b];
        *model.entry(row.clone()).or_default() += 1;
        change.push((row, 1));
    }
    change
}

/// Runs a one-input operator against a naive model, in memory and then
/// with its state on disk.
fn check_unary(
    steps: &[Step],
    build: impl Fn(&mut Circuit, NodeId) -> NodeId,
    naive: impl Fn(&Bag) -> Bag,
) -> Result<(), TestCaseError> {
    check_unary_with(steps, &build, &naive, None)?;
    let dir = tempfile::tempdir().unwrap();
    let storage = eddy_dbsp::Storage::open(dir.path(), 0).unwrap();
    storage.set_background_merge_bytes(0);
    check_unary_with(steps, &build, &naive, Some(storage))
}

fn check_unary_with(
    steps: &[Step],
    build: &dyn Fn(&mut Circuit, NodeId) -> NodeId,
    naive: &dyn Fn(&Bag) -> Bag,
    storage: Option<Arc<eddy_dbsp::Storage>>,
) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let fresh = || {
        let mut circuit = Circuit::new();
        let (input, handle): (NodeId, InputHandle) = circuit.add_input(Arc::clone(&s)).unwrap();
        let out = eddy_dbsp::storage::with_storage(storage.clone(), || build(&mut circuit, input));
        (circuit, handle, out)
    };
    let (mut circuit, mut handle, out) = fresh();
    let mut integrated = Integrate::new(Arc::clone(circuit.schema(out))).unwrap();
    let mut model = Bag::new();
    for (i, (inserts, deletes)) in steps.iter().enumerate() {
        if i % 2 == 1 {
            (circuit, handle) = restored(&circuit, || {
                let (c, h, _) = fresh();
                (c, h)
            });
        }
        let change = step_change(&mut model, inserts, deletes);
        handle.push(zset(&s, &change)).unwrap();
        circuit.step().unwrap();
        integrated.add(circuit.output(out).unwrap()).unwrap();
        prop_assert_eq!(bag(&integrated.contents().unwrap()), naive(&model));
    }
    Ok(())
}

/// A circuit built by `fresh`, restored from a checkpoint of `circuit`
/// (every other step of the property tests goes on from one, so that
/// state an operator forgot to save shows as a wrong answer).
fn restored<H>(circuit: &Circuit, fresh: impl Fn() -> (Circuit, H)) -> (Circuit, H) {
    let dir = tempfile::tempdir().unwrap();
    let mut w = StateWriter::create(dir.path()).unwrap();
    circuit.save(&mut w).unwrap();
    w.finish().unwrap();
    let (mut circuit, handles) = fresh();
    let mut r = StateReader::open(dir.path()).unwrap();
    circuit.restore(&mut r).unwrap();
    r.finish().unwrap();
    (circuit, handles)
}

/// Runs `GROUP BY k` with `calls` over `v` against a model computing the
/// aggregates (`per_group`, after the key) from each group's `(v, weight)`s.
fn check_grouped(
    steps: &[Step],
    calls: Vec<AggregateCall>,
    out: SchemaRef,
    inserts_only: bool,
    per_group: impl Fn(&[(Option<i64>, i64)]) -> Row,
) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    check_unary(
        steps,
        |c, i| {
            let mut agg =
                op::Aggregate::new(Arc::clone(&s), vec![kv(0)], calls.clone(), Arc::clone(&out))
                    .unwrap();
            if inserts_only {
                agg = agg.inserts_only();
            }
            c.add(agg, &[i], Arc::clone(&out)).unwrap()
        },
        |m| {
            let mut groups: BTreeMap<Option<i64>, Vec<(Option<i64>, i64)>> = BTreeMap::new();
            for (r, w) in m {
                groups.entry(r[0]).or_default().push((r[1], *w));
            }
            groups
                .into_iter()
                .map(|(k, vs)| {
                    let mut row = vec![k];
                    row.extend(per_group(&vs));
                    (row, 1)
                })
                .collect()
        },
    )
}

/// The rows of a model relation grouped by their first column, each row
/// repeated by its weight.
fn partitions(m: &Bag) -> BTreeMap<Option<i64>, Vec<Row>> {
    let mut out: BTreeMap<Option<i64>, Vec<Row>> = BTreeMap::new();
    for (r, w) in m {
        out.entry(r[0])
            .or_default()
            .extend(std::iter::repeat_n(r.clone(), *w as usize));
    }
    out
}

fn kv(i: usize) -> Arc<dyn PhysicalExpr> {
    let s = schema(&["k", "v"]);
    col(["k", "v"][i], &s).unwrap()
}

proptest! {
    #[test]
    fn filter_matches_model(steps in changes()) {
        let s = schema(&["k", "v"]);
        let pred = binary(kv(1), BinOp::Gt, lit(1i64), &s).unwrap();
        check_unary(&steps, |c, i| c.add(op::Filter::new(Arc::clone(&pred)), &[i], schema(&["k", "v"])).unwrap(), |m| {
            m.iter().filter(|(r, _)| r[1].is_some_and(|v| v > 1)).map(|(r, w)| (r.clone(), *w)).collect()
        })?;
    }

    #[test]
    fn map_matches_model(steps in changes()) {
        let s = schema(&["k", "v"]);
        let sum = binary(kv(0), BinOp::Plus, kv(1), &s).unwrap();
        check_unary(&steps, |c, i| c.add(op::Map::new(vec![Arc::clone(&sum)], schema(&["s"])), &[i], schema(&["s"])).unwrap(), |m| {
            let mut out = Bag::new();
            for (r, w) in m {
                let s = match (r[0], r[1]) { (Some(a), Some(b)) => Some(a + b), _ => None };
                *out.entry(vec![s]).or_default() += w;
            }
            out
        })?;
    }

    #[test]
    fn distinct_matches_model(steps in changes()) {
        check_unary(&steps, |c, i| c.add(op::Distinct::new(&schema(&["k", "v"])).unwrap(), &[i], schema(&["k", "v"])).unwrap(), |m| {
            m.keys().map(|r| (r.clone(), 1)).collect()
        })?;
    }

    #[test]
    fn aggregate_matches_model(steps in changes()) {
        check_aggregates(&steps, false)?;
    }

    #[test]
    fn aggregate_over_insertions_only_matches_model(steps in insertions()) {
        check_aggregates(&steps, true)?;
    }

    /// `COUNT(DISTINCT v)`, and `COUNT(*)`, `COUNT(DISTINCT v)`, `MIN(v)` with
    /// `FILTER (WHERE v > 1)`: kept from ordered values and sums, equal to
    /// counting each group's rows.
    #[test]
    fn distinct_and_filtered_aggregates_match_model(steps in changes()) {
        check_distinct_and_filtered(&steps, false)?;
    }

    #[test]
    fn distinct_and_filtered_aggregates_over_insertions_only_match_model(steps in insertions()) {
        check_distinct_and_filtered(&steps, true)?;
    }
}

/// `COUNT`, `SUM`, `MAX` and `MIN` of `v` by `k`.
fn check_aggregates(steps: &[Step], inserts_only: bool) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let out = schema(&["k", "n", "total", "top", "low"]);
    let call = |f, name: &str| {
        let f = AggregateExprBuilder::new(f, vec![kv(1)])
            .schema(Arc::clone(&s))
            .alias(name)
            .build()
            .unwrap();
        AggregateCall {
            function: Arc::new(f),
            filter: None,
            order_by: vec![],
        }
    };
    let calls = vec![
        call(count_udaf(), "n"),
        call(sum_udaf(), "total"),
        call(max_udaf(), "top"),
        call(min_udaf(), "low"),
    ];
    check_grouped(steps, calls, out, inserts_only, |vs| {
        let n: i64 = vs.iter().filter(|(v, _)| v.is_some()).map(|(_, w)| w).sum();
        let total = vs
            .iter()
            .filter_map(|(v, w)| v.map(|v| v * w))
            .reduce(|a, b| a + b);
        let top = vs.iter().filter_map(|(v, _)| *v).max();
        let low = vs.iter().filter_map(|(v, _)| *v).min();
        vec![Some(n), total, top, low]
    })
}

/// `COUNT(DISTINCT v)`, and `COUNT(*)`, `COUNT(DISTINCT v)`, `MIN(v)` with
/// `FILTER (WHERE v > 1)`, by `k`.
fn check_distinct_and_filtered(steps: &[Step], inserts_only: bool) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let out = schema(&["k", "d", "n_big", "d_big", "low_big"]);
    let big = || Some(binary(kv(1), BinOp::Gt, lit(1i64), &s).unwrap());
    let build = |f, args, distinct: bool, filter: Option<Arc<dyn PhysicalExpr>>, name: &str| {
        let mut b = AggregateExprBuilder::new(f, args)
            .schema(Arc::clone(&s))
            .alias(name);
        if distinct {
            b = b.distinct();
        }
        AggregateCall {
            function: Arc::new(b.build().unwrap()),
            filter,
            order_by: vec![],
        }
    };
    let calls = vec![
        build(count_udaf(), vec![kv(1)], true, None, "d"),
        build(count_udaf(), vec![lit(1i64)], false, big(), "n_big"),
        build(count_udaf(), vec![kv(1)], true, big(), "d_big"),
        build(min_udaf(), vec![kv(1)], false, big(), "low_big"),
    ];
    check_grouped(steps, calls, out, inserts_only, |vs| {
        let values: std::collections::BTreeSet<i64> = vs.iter().filter_map(|(v, _)| *v).collect();
        let bigs: std::collections::BTreeSet<i64> =
            values.iter().copied().filter(|v| *v > 1).collect();
        let n_big: i64 = vs
            .iter()
            .filter(|(v, _)| v.is_some_and(|v| v > 1))
            .map(|(_, w)| w)
            .sum();
        vec![
            Some(values.len() as i64),
            Some(n_big),
            Some(bigs.len() as i64),
            bigs.first().copied(),
        ]
    })
}

proptest! {

    #[test]
    fn global_count_is_zero_on_empty_input(steps in changes()) {
        let s = schema(&["k", "v"]);
        let out = schema(&["n"]);
        let call = AggregateExprBuilder::new(count_udaf(), vec![kv(0)]).schema(Arc::clone(&s)).alias("n").build().unwrap();
        let call = Arc::new(call);
        check_unary(&steps, |c, i| {
            let calls = vec![AggregateCall { function: Arc::clone(&call), filter: None, order_by: vec![] }];
            c.add(op::Aggregate::new(Arc::clone(&s), vec![], calls, Arc::clone(&out)).unwrap(), &[i], Arc::clone(&out)).unwrap()
        }, |m| {
            let n: i64 = m.iter().filter(|(r, _)| r[0].is_some()).map(|(_, w)| w).sum();
            [(vec![Some(n)], 1)].into_iter().collect()
        })?;
    }

    #[test]
    fn topk_matches_model(steps in changes(), limit in 1usize..4, offset in 0usize..2) {
        let s = schema(&["k", "v"]);
        let order = vec![PhysicalSortExpr { expr: kv(1), options: SortOptions { descending: true, nulls_first: false } }];
        check_unary(&steps, |c, i| {
            let topk = op::TopK::new(Arc::clone(&s), order.clone(), offset, Some(limit)).unwrap();
            c.add(topk, &[i], schema(&["k", "v"])).unwrap()
        }, |m| {
            // v descending, NULLs last, ties by the row's own order.
            let mut rows: Vec<Row> = m.iter().flat_map(|(r, w)| std::iter::repeat_n(r.clone(), *w as usize)).collect();
            rows.sort_by(|a, b| match (a[1], b[1]) {
                (Some(x), Some(y)) => y.cmp(&x).then_with(|| a.cmp(b)),
                (None, None) => a.cmp(b),
                (None, _) => std::cmp::Ordering::Greater,
                (_, None) => std::cmp::Ordering::Less,
            });
            let mut out = Bag::new();
            for r in rows.into_iter().skip(offset).take(limit) {
                *out.entry(r).or_default() += 1;
            }
            out
        })?;
    }

    #[test]
    fn rank_topk_matches_model(steps in changes(), limit in 1u64..4, which in 0usize..3) {
        check_rank_topk(&steps, limit, which, false)?;
    }

    #[test]
    fn rank_topk_over_insertions_only_matches_model(steps in insertions(), limit in 1u64..4, which in 0usize..3) {
        check_rank_topk(&steps, limit, which, true)?;
    }

    #[test]
    fn rank_topk_over_rising_counts_matches_all_rows(steps in insertions(), limit in 1u64..4, which in 0usize..2, project: bool) {
        check_rising_counts(&steps, limit, which, project, None)?;
        let dir = tempfile::tempdir().unwrap();
        let storage = eddy_dbsp::Storage::open(dir.path(), 0).unwrap();
        storage.set_background_merge_bytes(0);
        check_rising_counts(&steps, limit, which, project, Some(storage))?;
    }

    #[test]
    fn window_matches_model(steps in changes()) {
        let s = schema(&["k", "v"]);
        let order = vec![PhysicalSortExpr { expr: kv(1), options: SortOptions { descending: false, nulls_first: false } }];
        let frame = Arc::new(WindowFrame::new_bounds(
            WindowFrameUnits::Rows,
            WindowFrameBound::Preceding(ScalarValue::UInt64(Some(1))),
            WindowFrameBound::CurrentRow,
        ));
        let make = |fun: WindowFunctionDefinition, args: Vec<Arc<dyn PhysicalExpr>>, frame: Arc<WindowFrame>| {
            create_window_expr(&fun, "f".into(), &args, &[kv(0)], &order, frame, Arc::clone(&s), false, false, None).unwrap()
        };
        let functions = vec![
            (make(WindowFunctionDefinition::WindowUDF(row_number_udwf()), vec![], Arc::new(WindowFrame::new(Some(true)))), op::Extent::Rank { dense: false }),
            (make(WindowFunctionDefinition::AggregateUDF(sum_udaf()), vec![kv(1)], frame), op::Extent::Rows { preceding: Some(1), following: Some(0) }),
        ];
        let out_schema = schema(&["k", "v", "rn", "s"]);
        check_unary(&steps, |c, i| {
            let window = op::Window::new(Arc::clone(&s), vec![kv(0)], functions.clone(), Arc::clone(&out_schema)).unwrap();
            c.add(window, &[i], Arc::clone(&out_schema)).unwrap()
        }, |m| {
            let mut out = Bag::new();
            for (_, mut rows) in partitions(m) {
                // v ascending, NULLs last.
                rows.sort_by(|a, b| match (a[1], b[1]) {
                    (Some(x), Some(y)) => x.cmp(&y),
                    (None, None) => std::cmp::Ordering::Equal,
                    (None, _) => std::cmp::Ordering::Greater,
                    (_, None) => std::cmp::Ordering::Less,
                });
                for (i, r) in rows.iter().enumerate() {
                    let frame = &rows[i.saturating_sub(1)..=i];
                    let values: Vec<i64> = frame.iter().filter_map(|f| f[1]).collect();
                    let sum = (!values.is_empty()).then(|| values.iter().sum());
                    *out.entry(vec![r[0], r[1], Some(i as i64 + 1), sum]).or_default() += 1;
                }
            }
            out
        })?;
    }

    #[test]
    fn temporal_filter_matches_model(steps in changes(), ticks in prop::collection::vec(0i64..3, 8), lower in prop::bool::ANY, upper in prop::bool::ANY, inclusive in prop::bool::ANY) {
        // Times are v; the bounds are now − 1 (below) and now + 1 (above).
        let s = schema(&["k", "v"]);
        let clock = op::Clock::new();
        let now_schema = op::Clock::schema();
        let now_ns = datafusion::physical_expr::expressions::cast(col("now", &now_schema).unwrap(), &now_schema, DataType::Int64).unwrap();
        let bound = |delta: i64| op::Bound {
            value: binary(Arc::clone(&now_ns), BinOp::Plus, lit(delta), &now_schema).unwrap(),
            inclusive,
        };
        let filter = op::TemporalFilter::new(
            Arc::clone(&s), kv(1), lower.then(|| bound(-1)), upper.then(|| bound(1)), clock.clone(),
        ).unwrap();
        let mut circuit = Circuit::new();
        let (input, handle) = circuit.add_input(Arc::clone(&s)).unwrap();
        let out = circuit.add(filter, &[input], Arc::clone(&s)).unwrap();
        let mut integrated = Integrate::new(Arc::clone(&s)).unwrap();
        let mut model = Bag::new();
        let mut now = 0i64;
        for (i, (inserts, deletes)) in steps.iter().enumerate() {
            now += ticks[i % ticks.len()];
            clock.advance(now);
            let change = step_change(&mut model, inserts, deletes);
            handle.push(zset(&s, &change)).unwrap();
            circuit.step().unwrap();
            integrated.add(circuit.output(out).unwrap()).unwrap();
            let inside = |v: i64| {
                let above_lower = !lower || if inclusive { v >= now - 1 } else { v > now - 1 };
                let below_upper = !upper || if inclusive { v <= now + 1 } else { v < now + 1 };
                above_lower && below_upper
            };
            let expected: Bag = model.iter().filter(|(r, _)| r[1].is_some_and(inside)).map(|(r, w)| (r.clone(), *w)).collect();
            prop_assert_eq!(bag(&integrated.contents().unwrap()), expected, "now {}", now);
        }
    }

    #[test]
    fn upsert_keeps_last_row_per_key(
        batches in prop::collection::vec(prop::collection::vec((0i64..3, 0i64..5, prop::bool::ANY), 0..5), 1..6),
        on_disk in prop::bool::ANY,
    ) {
        let s = schema(&["k", "v"]);
        let mut circuit = Circuit::new();
        let (input, handle) = circuit.add_input(Arc::clone(&s)).unwrap();
        // With storage of threshold 0, every merged batch of the upsert's
        // rows is a file.
        let dir = tempfile::tempdir().unwrap();
        let storage = on_disk.then(|| eddy_dbsp::Storage::open(dir.path(), 0).unwrap());
        let upsert = eddy_dbsp::storage::with_storage(storage, || op::Upsert::new(Arc::clone(&s), vec![0]).unwrap());
        let up = circuit.add(upsert, &[input], Arc::clone(&s)).unwrap();
        let mut integrated = Integrate::new(Arc::clone(&s)).unwrap();
        let mut model: BTreeMap<i64, i64> = BTreeMap::new();
        for batch in batches {
            let mut change = Vec::new();
            for (k, v, insert) in batch {
                if insert {
                    model.insert(k, v);
                    change.push((vec![Some(k), Some(v)], 1));
                } else {
                    model.remove(&k);
                    change.push((vec![Some(k), Some(v)], -1));
                }
            }
            handle.push(zset(&s, &change)).unwrap();
            circuit.step().unwrap();
            integrated.add(circuit.output(up).unwrap()).unwrap();
            let expected: Bag = model.iter().map(|(k, v)| (vec![Some(*k), Some(*v)], 1)).collect();
            prop_assert_eq!(bag(&integrated.contents().unwrap()), expected);
        }
    }

    #[test]
    fn join_matches_model(left in changes(), right in changes()) {
        let out = schema(&["k", "v", "k2", "v2"]);
        let mut integrated = Integrate::new(Arc::clone(&out)).unwrap();
        two_streams(&left, &right, |c, l, r| {
            let s = schema(&["k", "v"]);
            let join = op::Join::new(
                JoinSide::new(&s, vec![kv(0)]).unwrap(),
                JoinSide::new(&s, vec![kv(0)]).unwrap(),
                &[DataType::Int64],
                false,
                Arc::clone(&out),
            ).unwrap();
            c.add(join, &[l, r], Arc::clone(&out)).unwrap()
        }, |lm, rm, change| {
            integrated.add(change).unwrap();
            let mut expected = Bag::new();
            for (a, wa) in lm {
                for (b, wb) in rm {
                    if a[0].is_some() && a[0] == b[0] {
                        *expected.entry(vec![a[0], a[1], b[0], b[1]]).or_default() += wa * wb;
                    }
                }
            }
            prop_assert_eq!(bag(&integrated.contents().unwrap()), expected);
            Ok(())
        })?;
    }

    #[test]
    fn asof_join_matches_model(left in changes(), right in changes(), which in 0usize..4, left_outer in prop::bool::ANY) {
        let out = schema(&["k", "v", "k2", "v2"]);
        let matching = [op::AsofMatch::AtOrBefore, op::AsofMatch::Before, op::AsofMatch::AtOrAfter, op::AsofMatch::After][which];
        let mut integrated = Integrate::new(Arc::clone(&out)).unwrap();
        two_streams(&left, &right, |c, l, r| {
            let s = schema(&["k", "v"]);
            let side = || op::AsofSide { keys: vec![kv(0)], time: kv(1) };
            let join = op::AsofJoin::new(
                Arc::clone(&s), s, side(), side(), &[DataType::Int64], &DataType::Int64,
                matching, left_outer, Arc::clone(&out),
            ).unwrap();
            c.add(join, &[l, r], Arc::clone(&out)).unwrap()
        }, |lm, rm, change| {
            integrated.add(change).unwrap();
            let mut expected = Bag::new();
            for (a, wa) in lm {
                // The right time closest to a's, on the allowed side.
                let candidates = rm.keys().filter(|b| {
                    a[0].is_some() && a[0] == b[0] && a[1].is_some() && b[1].is_some() && {
                        let (t, u) = (a[1].unwrap(), b[1].unwrap());
                        match matching {
                            op::AsofMatch::AtOrBefore => u <= t,
                            op::AsofMatch::Before => u < t,
                            op::AsofMatch::AtOrAfter => u >= t,
                            op::AsofMatch::After => u > t,
                        }
                    }
                });
                let best = match matching {
                    op::AsofMatch::AtOrBefore | op::AsofMatch::Before => candidates.max_by_key(|b| b[1]),
                    _ => candidates.min_by_key(|b| b[1]),
                };
                match best {
                    Some(b) => *expected.entry(vec![a[0], a[1], b[0], b[1]]).or_default() += wa,
                    None if left_outer => *expected.entry(vec![a[0], a[1], None, None]).or_default() += wa,
                    None => {}
                }
            }
            prop_assert_eq!(bag(&integrated.contents().unwrap()), expected);
            Ok(())
        })?;
    }
}

/// Feeds two random change streams into a two-input circuit and returns,
/// per step, the integrated inputs and the node's output change.
fn two_streams(
    left: &[Step],
    right: &[Step],
    build: impl Fn(&mut Circuit, NodeId, NodeId) -> NodeId,
    mut check: impl FnMut(&Bag, &Bag, &ZSet) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let s = schema(&["k", "v"]);
    let fresh = || {
        let mut circuit = Circuit::new();
        let (l, lh) = circuit.add_input(Arc::clone(&s)).unwrap();
        let (r, rh) = circuit.add_input(Arc::clone(&s)).unwrap();
        let out = build(&mut circuit, l, r);
        (circuit, (lh, rh), out)
    };
    let (mut circuit, (mut lh, mut rh), out) = fresh();
    let (mut lm, mut rm) = (Bag::new(), Bag::new());
    let empty = (vec![], vec![]);
    for i in 0..left.len().max(right.len()) {
        if i % 2 == 1 {
            (circuit, (lh, rh)) = restored(&circuit, || {
                let (c, h, _) = fresh();
                (c, h)
            });
        }
        let (li, ld) = left.get(i).unwrap_or(&empty);
        let (ri, rd) = right.get(i).unwrap_or(&empty);
        lh.push(zset(&s, &step_change(&mut lm, li, ld))).unwrap();
        rh.push(zset(&s, &step_change(&mut rm, ri, rd))).unwrap();
        circuit.step().unwrap();
        check(&lm, &rm, circuit.output(out).unwrap())?;
    }
    Ok(())
}

fn sum_bags(a: &Bag, b: &Bag, sign: i64) -> Bag {
    let mut out = a.clone();
    for (r, w) in b {
        *out.entry(r.clone()).or_default() += sign * w;
    }
    out.retain(|_, w| *w != 0);
    out
}

proptest! {
    #[test]
    fn plus_and_negate_integrate_to_the_difference(left in changes(), right in changes()) {
        let mut integrated: Option<Integrate> = None;
        two_streams(&left, &right, |c, l, r| {
            let s = schema(&["k", "v"]);
            let neg = c.add(op::Negate, &[r], Arc::clone(&s)).unwrap();
            c.add(op::Plus::new(Arc::clone(&s)), &[l, neg], s).unwrap()
        }, |lm, rm, change| {
            let acc = integrated.get_or_insert_with(|| Integrate::new(schema(&["k", "v"])).unwrap());
            acc.add(change).unwrap();
            prop_assert_eq!(bag(&acc.contents().unwrap()), sum_bags(lm, rm, -1));
            Ok(())
        })?;
    }

    #[test]
    fn integrate_outputs_the_running_sum(steps in changes()) {
        let s = schema(&["k", "v"]);
        let mut circuit = Circuit::new();
        let (input, handle) = circuit.add_input(Arc::clone(&s)).unwrap();
        let int = circuit.add(Integrate::new(Arc::clone(&s)).unwrap(), &[input], Arc::clone(&s)).unwrap();
        let mut model = Bag::new();
        for (inserts, deletes) in &steps {
            handle.push(zset(&s, &step_change(&mut model, inserts, deletes))).unwrap();
            circuit.step().unwrap();
            prop_assert_eq!(bag(circuit.output(int).unwrap()), model.clone());
        }
    }

    #[test]
    fn differentiate_undoes_integrate_and_delay_shifts(steps in changes()) {
        let s = schema(&["k", "v"]);
        let mut circuit = Circuit::new();
        let (input, handle) = circuit.add_input(Arc::clone(&s)).unwrap();
        let int = circuit.add(Integrate::new(Arc::clone(&s)).unwrap(), &[input], Arc::clone(&s)).unwrap();
        let diff = circuit.add(op::Differentiate::new(Arc::clone(&s)), &[int], Arc::clone(&s)).unwrap();
        let delay = circuit.add(op::Delay::new(&s), &[input], Arc::clone(&s)).unwrap();
        let mut model = Bag::new();
        let mut previous_change = Bag::new();
        for (inserts, deletes) in &steps {
            let change = step_change(&mut model, inserts, deletes);
            handle.push(zset(&s, &change)).unwrap();
            circuit.step().unwrap();
            let this_change = bag(&zset(&s, &change));
            prop_assert_eq!(bag(circuit.output(diff).unwrap()), this_change.clone());
            prop_assert_eq!(bag(circuit.output(delay).unwrap()), previous_change);
            previous_change = this_change;
        }
    }
}

/// The transitive closure of the edges with positive weight, as a set
/// (edges with a NULL end reach nothing further).
fn closure(edges: &Bag) -> Bag {
    let mut set: std::collections::BTreeSet<Row> = edges
        .iter()
        .filter(|(_, w)| **w > 0)
        .map(|(r, _)| r.clone())
        .collect();
    loop {
        let mut grown = set.clone();
        for a in &set {
            for b in &set {
                if a[1].is_some() && a[1] == b[0] {
                    grown.insert(vec![a[0], b[1]]);
                }
            }
        }
        if grown.len() == set.len() {
            return set.into_iter().map(|r| (r, 1)).collect();
        }
        set = grown;
    }
}

/// A fixed point computing the closure of `edges`: `R = distinct(E + π(E ⋈ R))`,
/// or with `squared`, `R = distinct(E + π(R ⋈ R))` (both join inputs recursive).
fn closure_fixpoint(c: &mut Circuit, edges: NodeId, squared: bool) -> NodeId {
    let s = schema(&["k", "v"]);
    let joined = schema(&["k", "v", "k2", "v2"]);
    let ctx = op::Iteration::new();
    let mut inner = Circuit::new();
    let (e, eh) = inner.add_input(Arc::clone(&s)).unwrap();
    let (r, rh) = inner.add_input(Arc::clone(&s)).unwrap();
    let left = if squared { r } else { e };
    let join = op::NestedJoin::new(
        JoinSide::new(&s, vec![kv(1)]).unwrap(),
        JoinSide::new(&s, vec![kv(0)]).unwrap(),
        &[DataType::Int64],
        false,
        Arc::clone(&joined),
        ctx.clone(),
    )
    .unwrap();
    let j = inner.add(join, &[left, r], Arc::clone(&joined)).unwrap();
    let exprs = vec![col("k", &joined).unwrap(), col("v2", &joined).unwrap()];
    let step = inner
        .add(op::Map::new(exprs, Arc::clone(&s)), &[j], Arc::clone(&s))
        .unwrap();
    let both = inner
        .add(op::Plus::new(Arc::clone(&s)), &[e, step], Arc::clone(&s))
        .unwrap();
    let next = inner
        .add(
            op::NestedDistinct::new(&s, ctx.clone()).unwrap(),
            &[both],
            Arc::clone(&s),
        )
        .unwrap();
    let fixpoint = op::Fixpoint::new(inner, ctx, vec![eh], vec![(rh, next)]);
    let out = fixpoint.output(0);
    let fp = c
        .add(fixpoint, &[edges], Arc::new(Schema::empty()))
        .unwrap();
    c.add(out, &[fp], s).unwrap()
}

proptest! {
    #[test]
    fn fixpoint_closure_matches_model(steps in changes(), squared in prop::bool::ANY) {
        check_unary(&steps, |c, input| closure_fixpoint(c, input, squared), closure)?;
    }

    /// A recursion without DISTINCT that stops by itself: `R = E + σ(k < 4)(π(k + 1, v)(R))`
    /// sums every shift of every edge (bag semantics, as `UNION ALL`).
    #[test]
    fn fixpoint_union_all_matches_model(steps in changes()) {
        let s = schema(&["k", "v"]);
        check_unary(&steps, |c, input| {
            let ctx = op::Iteration::new();
            let mut inner = Circuit::new();
            let (e, eh) = inner.add_input(Arc::clone(&s)).unwrap();
            let (r, rh) = inner.add_input(Arc::clone(&s)).unwrap();
            let small = binary(kv(0), BinOp::Lt, lit(4i64), &s).unwrap();
            let f = inner.add(op::Filter::new(small), &[r], Arc::clone(&s)).unwrap();
            let exprs = vec![binary(kv(0), BinOp::Plus, lit(1i64), &s).unwrap(), kv(1)];
            let m = inner.add(op::Map::new(exprs, Arc::clone(&s)), &[f], Arc::clone(&s)).unwrap();
            let next = inner.add(op::Plus::new(Arc::clone(&s)), &[e, m], Arc::clone(&s)).unwrap();
            let fixpoint = op::Fixpoint::new(inner, ctx, vec![eh], vec![(rh, next)]);
            let out = fixpoint.output(0);
            let fp = c.add(fixpoint, &[input], Arc::new(Schema::empty())).unwrap();
            c.add(out, &[fp], Arc::clone(&s)).unwrap()
        }, |edges| {
            let mut out = Bag::new();
            for (row, w) in edges {
                let mut k = row[0];
                loop {
                    *out.entry(vec![k, row[1]]).or_default() += w;
                    match k {
                        Some(x) if x < 4 => k = Some(x + 1),
                        _ => break,
                    }
                }
            }
            out.retain(|_, w| *w != 0);
            out
        })?;
    }
}

/// A constant that fails (`61 / 0`) fails as a scalar even over a change
/// with no rows; that change has no values to fail, so it gives an empty
/// column. A row of a later change fails the evaluation, or, with the
/// expression wrapped in `NullOnError`, gets NULL there and is counted.
#[test]
fn a_failing_constant_over_an_empty_change_is_no_values() {
    let s = schema(&["k", "v"]);
    let expr = binary(lit(61i64), BinOp::Divide, lit(0i64), &s).unwrap();
    let empty = zset(&s, &[]);
    let column = &op::map::evaluate(&[Arc::clone(&expr)], &empty).unwrap()[0];
    assert_eq!(column.len(), 0);
    assert_eq!(column.data_type(), &DataType::Int64);
    let one = zset(&s, &[(vec![Some(1), Some(2)], 1)]);
    let failed = op::map::evaluate(&[Arc::clone(&expr)], &one).unwrap_err();
    assert!(failed.to_string().contains("Divide by zero"), "{failed}");
    let nulls = eddy_dbsp::row_errors::NullOnError::wrap(expr);
    let before = eddy_dbsp::row_errors::row_errors();
    let column = &op::map::evaluate(&[nulls], &one).unwrap()[0];
    assert_eq!(column.len(), 1);
    assert!(column.is_null(0));
    assert!(eddy_dbsp::row_errors::row_errors() > before);
}

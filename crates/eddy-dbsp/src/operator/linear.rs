//! Linear aggregates: `COUNT`, and `SUM`/`AVG` over integers, maintained from
//! running sums instead of from the group's rows.
//!
//! Incremental rule: these aggregates are linear in the input Z-set. Per
//! group the state is `(rows, [(non-NULL count, sum)])`; a change row of
//! weight `w` adds `w` to the counts and `w·x` to the sums, so a step costs
//! O(changed rows) whatever the size of the group, and the group's rows are
//! not stored at all. Floating-point and decimal sums are left to the
//! general path, so that results never depend on the order of updates.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::PhysicalExpr;

use super::aggregate::AggregateCall;
use crate::checkpoint::{Persist, StateReader, StateWriter};
use crate::Result;

/// What a linear aggregate computes from its running sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Count,
    Sum,
    Avg,
}

/// One linear aggregate call.
pub struct LinearCall {
    kind: Kind,
    arg: Arc<dyn PhysicalExpr>,
}

/// The running sums of one group.
#[derive(Debug, Clone, Default)]
pub struct GroupSums {
    /// Total weight of the group's rows.
    pub rows: i64,
    sums: Vec<(i64, i128)>,
}

impl Persist for GroupSums {
    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.rows)?;
        w.put(&self.sums)
    }

    fn load(r: &mut StateReader) -> Result<Self> {
        Ok(Self {
            rows: r.get()?,
            sums: r.get()?,
        })
    }
}

/// Returns the linear form of every call, or `None` if any call needs the
/// general path (DISTINCT, FILTER, ORDER BY, another function, or a
/// non-integer SUM/AVG).
pub fn linear_calls(calls: &[AggregateCall], input: &SchemaRef) -> Option<Vec<LinearCall>> {
    calls
        .iter()
        .map(|c| {
            let f = &c.function;
            if f.is_distinct() || c.filter.is_some() || !c.order_by.is_empty() {
                return None;
            }
            let args = f.expressions();
            let [arg] = args.as_slice() else { return None };
            let kind = match f.fun().name() {
                "count" => Kind::Count,
                "sum" => Kind::Sum,
                "avg" => Kind::Avg,
                _ => return None,
            };
            let integer = arg.data_type(input).ok()?.is_integer();
            if kind != Kind::Count && !integer {
                return None;
            }
            Some(LinearCall {
                kind,
                arg: Arc::clone(arg),
            })
        })
        .collect()
}

/// The arguments of every call over a change batch, as Int64 where summed.
pub fn arguments(
    calls: &[LinearCall],
    batch: &datafusion::arrow::array::RecordBatch,
) -> Result<Vec<ArrayRef>> {
    calls
        .iter()
        .map(|c| {
            let a = super::map::evaluate_one(&c.arg, batch)?;
            Ok(match c.kind {
                Kind::Count => a,
                Kind::Sum | Kind::Avg => cast(&a, &DataType::Int64)?,
            })
        })
        .collect()
}

impl GroupSums {
    /// Adds row `i` of the arguments with weight `w`.
    pub fn add(&mut self, calls: &[LinearCall], args: &[ArrayRef], i: usize, w: i64) {
        if self.sums.is_empty() {
            self.sums = vec![(0, 0); calls.len()];
        }
        self.rows += w;
        for (j, call) in calls.iter().enumerate() {
            let a = &args[j];
            if a.is_null(i) {
                continue;
            }
            self.sums[j].0 += w;
            if call.kind != Kind::Count {
                let v = a
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .expect("cast to Int64")
                    .value(i);
                self.sums[j].1 += i128::from(v) * i128::from(w);
            }
        }
    }

    /// The value of call `j` for this group.
    pub fn value(&self, calls: &[LinearCall], j: usize) -> ScalarValue {
        let (count, sum) = self.sums.get(j).copied().unwrap_or((0, 0));
        match calls[j].kind {
            Kind::Count => ScalarValue::Int64(Some(count)),
            Kind::Sum if count == 0 => ScalarValue::Int64(None),
            Kind::Sum => ScalarValue::Int64(Some(sum as i64)),
            Kind::Avg if count == 0 => ScalarValue::Float64(None),
            Kind::Avg => ScalarValue::Float64(Some(sum as f64 / count as f64)),
        }
    }
}

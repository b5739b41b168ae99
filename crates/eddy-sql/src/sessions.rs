//! Session windows as window functions: `session_start(ts, gap) OVER
//! (PARTITION BY key ORDER BY ts)` and `session_end(ts, gap) OVER (…)`.
//!
//! A partition's rows, in their order, fall into sessions: a row joins the
//! session of the row before it when their times are less than `gap`
//! apart, and starts a session otherwise. A session's window is
//! `[its least time, its greatest time + gap)`; a row whose time is NULL is
//! a session of its own, with NULL bounds (as is an end past the type's
//! range). `gap` is a positive constant: an interval without months over a
//! `TIMESTAMP`, an integer over an integer time.
//!
//! DataFusion's batch executor evaluates the functions over whole
//! partitions. The incremental window operator gives them the extent
//! [`eddy_dbsp::operator::Extent::Chain`]: a change re-evaluates only the
//! sessions around it, over a slice of whole sessions. The window table
//! function `SESSION` and `GROUP BY SESSION` are rewritten onto these
//! functions by [`crate::tvf`].

use std::sync::Arc;

use datafusion::arrow::array::{new_empty_array, Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{plan_err, Result, ScalarValue};
use datafusion::logical_expr::function::{PartitionEvaluatorArgs, WindowUDFFieldArgs};
use datafusion::logical_expr::{
    PartitionEvaluator, Signature, Volatility, WindowUDF, WindowUDFImpl,
};

use datafusion::physical_expr::expressions::Literal;

use crate::windows::ticks;

/// The names of the session functions: start, then end.
pub const NAMES: [&str; 2] = ["session_start", "session_end"];

/// A session gap in the ticks of a time of type `time`: positive, and
/// counted as [`ticks`] counts window sizes.
pub fn gap_ticks(gap: &ScalarValue, time: &DataType) -> Result<i64> {
    match ticks(gap, time, "gap")? {
        g if g > 0 => Ok(g),
        _ => plan_err!("a session gap must be positive, not {gap}"),
    }
}

/// `session_start` or `session_end`.
#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionFn {
    end: bool,
    signature: Signature,
}

/// The session window functions, to register in a session state.
pub fn functions() -> Vec<Arc<WindowUDF>> {
    [false, true]
        .into_iter()
        .map(|end| {
            Arc::new(WindowUDF::new_from_impl(SessionFn {
                end,
                signature: Signature::any(2, Volatility::Immutable),
            }))
        })
        .collect()
}

impl WindowUDFImpl for SessionFn {
    fn name(&self) -> &str {
        NAMES[usize::from(self.end)]
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn partition_evaluator(
        &self,
        args: PartitionEvaluatorArgs,
    ) -> Result<Box<dyn PartitionEvaluator>> {
        let constant = (args.input_exprs().get(1)).is_some_and(|gap| gap.is::<Literal>());
        if !constant {
            return plan_err!("{}() takes its gap as a constant", self.name());
        }
        Ok(Box::new(Sessions { end: self.end }))
    }

    fn field(&self, args: WindowUDFFieldArgs) -> Result<FieldRef> {
        let time = match args.input_fields() {
            [time, _gap] => time.data_type().clone(),
            other => {
                return plan_err!(
                    "{}() takes (time, gap), not {} arguments",
                    self.name(),
                    other.len()
                )
            }
        };
        match &time {
            DataType::Timestamp(_, _) | DataType::Null => {}
            t if t.is_integer() => {}
            other => {
                return plan_err!(
                    "{}() needs a TIMESTAMP or integer time column, not {other}",
                    self.name()
                )
            }
        }
        Ok(Arc::new(Field::new(args.name(), time, true)))
    }
}

/// Evaluates one function over a partition whose rows are in time order.
#[derive(Debug)]
struct Sessions {
    end: bool,
}

impl PartitionEvaluator for Sessions {
    fn evaluate_all(&mut self, values: &[ArrayRef], num_rows: usize) -> Result<ArrayRef> {
        let time = &values[0];
        let time_type = time.data_type().clone();
        if time_type == DataType::Null {
            return Ok(Arc::clone(time));
        }
        if num_rows == 0 {
            return Ok(new_empty_array(&time_type));
        }
        let gap = gap_ticks(&ScalarValue::try_from_array(&values[1], 0)?, &time_type)?;
        let times = cast(time, &DataType::Int64)?;
        let times = times
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64");
        let mut out: Vec<Option<i64>> = vec![None; num_rows];
        let mut first = 0;
        while first < num_rows {
            if times.is_null(first) {
                first += 1;
                continue;
            }
            let (mut least, mut greatest) = (times.value(first), times.value(first));
            let mut next = first + 1;
            while next < num_rows
                && times.is_valid(next)
                && (i128::from(times.value(next)) - i128::from(times.value(next - 1))).abs()
                    < i128::from(gap)
            {
                least = least.min(times.value(next));
                greatest = greatest.max(times.value(next));
                next += 1;
            }
            let value = if self.end {
                greatest.checked_add(gap)
            } else {
                Some(least)
            };
            out[first..next].fill(value);
            first = next;
        }
        let out: ArrayRef = Arc::new(Int64Array::from(out));
        Ok(cast(&out, &time_type)?)
    }
}

//! Period predicates (datetime.md): `(s1, e1) OVERLAPS (s2, e2)`,
//! `CONTAINS` (a period or one value), `EQUALS`, `PRECEDES`,
//! `IMMEDIATELY PRECEDES`, `SUCCEEDS`, `IMMEDIATELY SUCCEEDS`.
//!
//! A period is a pair of DATE, TIME or TIMESTAMP values of one type, or a
//! start and an INTERVAL (the end is the start moved by it); its ends may
//! come in either order, the smaller being the start. Both periods (and a
//! single value) are of one type; anything else is refused when planned
//! (`Cannot apply 'PRECEDES' to arguments of type '(<DATE>, <INTERVAL>)
//! PRECEDES (<TIMESTAMP>, <INTERVAL>)'`).
//!
//! The dialect reads `(a, b) OP (c, d)` (and `(a, b) CONTAINS v`) as the
//! call `eddy_period_op(a, b, c, d)` (`v` given twice; see [`call_name`]),
//! evaluated here with Arrow's kernels; SQL's NULL rules apply to every
//! comparison.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Time64NanosecondArray};
use datafusion::arrow::compute::kernels::{boolean, cmp, numeric, zip::zip};
use datafusion::arrow::datatypes::{DataType, IntervalUnit, TimeUnit};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The prefix of the functions' names.
const NAME: &str = "eddy_period";

/// The predicates, as written (after the left period).
pub const OPERATORS: &[&str] = &[
    "OVERLAPS",
    "CONTAINS",
    "EQUALS",
    "PRECEDES",
    "SUCCEEDS",
    "IMMEDIATELY PRECEDES",
    "IMMEDIATELY SUCCEEDS",
];

/// The name of the function of the predicate `op` (one of [`OPERATORS`]).
pub fn call_name(op: &str) -> String {
    format!("{NAME}_{}", op.to_lowercase().replace(' ', "_"))
}

/// The functions, to register in a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    OPERATORS
        .iter()
        .map(|op| {
            Arc::new(ScalarUDF::new_from_impl(Period {
                op,
                name: call_name(op),
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Period {
    op: &'static str,
    name: String,
    signature: Signature,
}

fn is_time(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Date32 | DataType::Time64(_) | DataType::Timestamp(..)
    )
}

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

impl ScalarUDFImpl for Period {
    fn name(&self) -> &str {
        &self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let op = self.op;
        let t = |t: &DataType| format!("<{}>", crate::castcheck::feldera_type(t));
        let [a, b, c, d] = args else {
            // A period of one value, or more than two (`(d) OVERLAPS (e)`).
            let (l, r) = args.split_at(args.len() / 2);
            let side = |s: &[DataType]| s.iter().map(t).collect::<Vec<_>>().join(", ");
            return plan_err!(
                "Cannot apply '{op}' to arguments of type '{} {op} {}'",
                side(l),
                side(r)
            );
        };
        let pair =
            |s: &DataType, e: &DataType| is_time(s) && (e == s || e.is_null() || is_interval(e));
        // A period of TIMEs moves by short intervals only.
        let short = |s: &DataType, e: &DataType| {
            !matches!(s, DataType::Time64(_))
                || !matches!(e, DataType::Interval(IntervalUnit::YearMonth))
        };
        if pair(a, b) && pair(c, d) && a == c && short(a, b) && short(c, d) {
            return Ok(args.to_vec());
        }
        plan_err!(
            "Cannot apply '{op}' to arguments of type '({}, {}) {op} ({}, {})'",
            t(a),
            t(b),
            t(c),
            t(d)
        )
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let [a, b, c, d] = arrays.as_slice() else {
            return exec_err!("'{}' takes two periods", self.op);
        };
        let (s1, e1) = bounds(a, b)?;
        let (s2, e2) = bounds(c, d)?;
        let le = |x: &ArrayRef, y: &ArrayRef| cmp::lt_eq(x, y);
        let eq = |x: &ArrayRef, y: &ArrayRef| cmp::eq(x, y);
        let and = |x: BooleanArray, y: BooleanArray| boolean::and_kleene(&x, &y);
        let out = match self.op {
            "OVERLAPS" => and(le(&s1, &e2)?, le(&s2, &e1)?)?,
            "CONTAINS" => and(le(&s1, &s2)?, le(&e2, &e1)?)?,
            "EQUALS" => and(eq(&s1, &s2)?, eq(&e1, &e2)?)?,
            "PRECEDES" => le(&e1, &s2)?,
            "SUCCEEDS" => le(&e2, &s1)?,
            "IMMEDIATELY PRECEDES" => eq(&e1, &s2)?,
            "IMMEDIATELY SUCCEEDS" => eq(&s1, &e2)?,
            other => return exec_err!("no period predicate {other}"),
        };
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// A period's start and end, in order: the end is `b`, or `a` moved by
/// the interval `b`.
fn bounds(a: &ArrayRef, b: &ArrayRef) -> Result<(ArrayRef, ArrayRef)> {
    let end = match b.data_type() {
        DataType::Interval(_) => moved(a, b)?,
        DataType::Null => datafusion::arrow::array::new_null_array(a.data_type(), a.len()),
        _ => Arc::clone(b),
    };
    // `zip` takes the first where the mask holds; a NULL mask takes the
    // second, and a comparison with NULL is NULL, so either is NULL there.
    let a_first = cmp::lt_eq(a, &end)?;
    let start = zip(&a_first, a, &end)?;
    let finish = zip(&a_first, &end, a)?;
    Ok((start, finish))
}

/// `t` moved by the interval `by`: Arrow's arithmetic for dates and
/// timestamps; a TIME moves around the clock.
fn moved(t: &ArrayRef, by: &ArrayRef) -> Result<ArrayRef> {
    if let DataType::Time64(TimeUnit::Nanosecond) = t.data_type() {
        const DAY: i128 = 86_400_000_000_000;
        let by =
            datafusion::arrow::compute::cast(by, &DataType::Interval(IntervalUnit::MonthDayNano))?;
        let times = t.as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>();
        let intervals = by.as_primitive::<datafusion::arrow::datatypes::IntervalMonthDayNanoType>();
        let out: Time64NanosecondArray = times
            .iter()
            .zip(intervals.iter())
            .map(|(t, i)| {
                let (t, i) = (t?, i?);
                let shift = i128::from(i.days) * DAY + i128::from(i.nanoseconds);
                Some((i128::from(t) + shift).rem_euclid(DAY) as i64)
            })
            .collect();
        return Ok(Arc::new(out));
    }
    Ok(numeric::add(t, by)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Date32Array, IntervalMonthDayNanoArray};
    use datafusion::arrow::datatypes::IntervalMonthDayNano;

    fn dates(days: &[Option<i32>]) -> ArrayRef {
        Arc::new(Date32Array::from(days.to_vec()))
    }

    #[test]
    fn periods_take_their_ends_in_either_order_and_intervals() {
        let (s, e) = bounds(
            &dates(&[Some(5), Some(9), None]),
            &dates(&[Some(7), Some(2), Some(1)]),
        )
        .unwrap();
        let s = s.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
        let e = e.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
        assert_eq!((s.value(0), e.value(0)), (5, 7));
        assert_eq!((s.value(1), e.value(1)), (2, 9));
        assert!(s.is_null(2) || e.is_null(2));
        let days: ArrayRef = Arc::new(IntervalMonthDayNanoArray::from(vec![
            IntervalMonthDayNano::new(0, 4, 0),
            IntervalMonthDayNano::new(0, -4, 0),
        ]));
        let (s, e) = bounds(&dates(&[Some(10), Some(10)]), &days).unwrap();
        let s = s.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
        let e = e.as_primitive::<datafusion::arrow::datatypes::Date32Type>();
        assert_eq!((s.value(0), e.value(0)), (10, 14));
        assert_eq!((s.value(1), e.value(1)), (6, 10));
    }

    #[test]
    fn periods_of_other_types_are_refused() {
        let f = Period {
            op: "PRECEDES",
            name: call_name("PRECEDES"),
            signature: Signature::user_defined(Volatility::Immutable),
        };
        let date = DataType::Date32;
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        let day = DataType::Interval(IntervalUnit::MonthDayNano);
        assert!(f
            .coerce_types(&[date.clone(), day.clone(), date.clone(), date.clone()])
            .is_ok());
        let err = f
            .coerce_types(&[date, day.clone(), ts, day])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "Cannot apply 'PRECEDES' to arguments of type '(<DATE>, <INTERVAL>) PRECEDES \
                 (<TIMESTAMP>, <INTERVAL>)'"
            ),
            "{err}"
        );
    }
}

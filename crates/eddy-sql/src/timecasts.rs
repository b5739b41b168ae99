//! Feldera's casts between numbers, times and timestamps, where Arrow's
//! cast means something else or refuses (datetime.md, casts.md):
//!
//! * a number cast to `TIMESTAMP` (with or without time zone) is a count
//!   of milliseconds since the Unix epoch, taken as a whole number; the
//!   cast's type is Calcite's `TIMESTAMP(0)`, so Feldera's answer keeps
//!   whole seconds, cut toward zero (`CAST(-1111.52 AS TIMESTAMP)` is
//!   `1969-12-31 23:59:59`). Arrow would read nanoseconds.
//! * a `TIMESTAMP` cast to a number is its milliseconds since the epoch
//!   (`1592749424123`), where Arrow gives nanoseconds.
//! * a `TIME` cast to a `TIMESTAMP` is that time of 1970-01-01, which
//!   Arrow refuses.
//! * a `DECIMAL` cast to `BOOLEAN` is whether it is not zero, as for the
//!   other numbers, which Arrow refuses.
//!
//! An analyzer rule of Feldera's planning state, run after type coercion
//! so that it sees the casts coercion inserts too. `SAFE_CAST` stays safe:
//! only its last step can fail, and it keeps the `TRY_CAST`.
//!
//! Stateless expressions: the incremental rule is that of the projection
//! or filter holding them.

use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::config::ConfigOptions;
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, TryCast};
use datafusion::logical_expr::{lit, BinaryExpr, Expr, LogicalPlan, Operator};
use datafusion::optimizer::AnalyzerRule;

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct TimeCasts;

impl AnalyzerRule for TimeCasts {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_casts_of_kind(plan, |inner, from, to, safe| {
            Ok(feldera_cast(inner, from, to, safe))
        })
    }

    fn name(&self) -> &str {
        "eddy_time_casts"
    }
}

/// `x` (of type `from`) cast to `to` as Feldera casts it, where that is
/// not Arrow's cast; `safe` for `SAFE_CAST`.
fn feldera_cast(x: Expr, from: &DataType, to: &DataType, safe: bool) -> Option<Expr> {
    let last = |e: Expr, t: &DataType| match safe {
        true => Expr::TryCast(TryCast::new(Box::new(e), t.clone())),
        false => Expr::Cast(Cast::new(Box::new(e), t.clone())),
    };
    match (from, to) {
        (f, DataType::Timestamp(_, _)) if is_number(f) => {
            let millis = cast(x, DataType::Int64);
            let seconds = Expr::BinaryExpr(BinaryExpr::new(
                Box::new(millis),
                Operator::Divide,
                Box::new(lit(1000i64)),
            ));
            Some(last(
                cast(seconds, DataType::Timestamp(TimeUnit::Second, None)),
                to,
            ))
        }
        (DataType::Timestamp(_, zone), t) if is_number(t) => {
            // Through the same zone, so that the instant is not moved.
            let millis = cast(x, DataType::Timestamp(TimeUnit::Millisecond, zone.clone()));
            Some(last(cast(millis, DataType::Int64), t))
        }
        (DataType::Time64(_) | DataType::Time32(_), DataType::Timestamp(unit, _)) => {
            let time = cast(x, DataType::Time64(TimeUnit::Nanosecond));
            let nanos = cast(time, DataType::Int64);
            let at = cast(nanos, DataType::Timestamp(TimeUnit::Nanosecond, None));
            Some(last(cast(at, DataType::Timestamp(*unit, None)), to))
        }
        (DataType::Decimal128(..) | DataType::Decimal256(..), DataType::Boolean) => {
            let zero = ScalarValue::new_zero(from).ok()?;
            Some(Expr::BinaryExpr(BinaryExpr::new(
                Box::new(x),
                Operator::NotEq,
                Box::new(Expr::Literal(zero, None)),
            )))
        }
        _ => None,
    }
}

fn cast(x: Expr, t: DataType) -> Expr {
    Expr::Cast(Cast::new(Box::new(x), t))
}

fn is_number(t: &DataType) -> bool {
    t.is_numeric() && !matches!(t, DataType::Float16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::logical_expr::col;

    #[test]
    fn only_the_casts_arrow_means_otherwise_are_rewritten() {
        let ts = DataType::Timestamp(TimeUnit::Nanosecond, None);
        assert!(feldera_cast(col("x"), &DataType::Int32, &ts, false).is_some());
        assert!(feldera_cast(col("x"), &ts, &DataType::Float64, true).is_some());
        assert!(feldera_cast(col("x"), &DataType::Utf8, &ts, false).is_none());
        assert!(feldera_cast(col("x"), &DataType::Int32, &DataType::Boolean, false).is_none());
        let safe = feldera_cast(col("x"), &ts, &DataType::Int32, true).unwrap();
        assert!(matches!(safe, Expr::TryCast(_)), "{safe}");
    }
}

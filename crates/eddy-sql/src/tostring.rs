//! Values cast to strings as Feldera writes them, where its text differs
//! from Arrow's: a BOOLEAN is `TRUE`/`FALSE`, a TIMESTAMP has a space
//! before its time (`2020-06-21 14:23:44.123654`, no trailing zeros in the
//! fraction, none when it is zero; a `TIMESTAMP WITH TIME ZONE` ends in
//! ` +00:00`), a binary string is its lowercase hex
//! digits (`0b1620`). An analyzer rule of the Feldera planning state, run
//! after type coercion, so that the casts coercion inserts (`CONCAT` of a
//! BOOLEAN) write the same text as written ones.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{exec_err, Result};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use eddy_io::variant::arrow::value_at;
use eddy_io::variant::json::scalar_text;
use eddy_io::variant::Variant;

/// The function's name.
pub const NAME: &str = "eddy_feldera_text";

/// `eddy_feldera_text(x)`.
pub fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(FelderaText {
        signature: Signature::any(1, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct FelderaText {
    signature: Signature,
}

/// Whether Feldera writes values of `t` otherwise than Arrow's cast.
fn written_otherwise(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Boolean
            | DataType::Timestamp(..)
            | DataType::Binary
            | DataType::FixedSizeBinary(_)
    )
}

impl ScalarUDFImpl for FelderaText {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let a = args.args[0].to_array(args.number_rows)?;
        Ok(ColumnarValue::Array(text(&a)?))
    }
}

/// Each value of `a` as Feldera's text.
fn text(a: &ArrayRef) -> Result<ArrayRef> {
    let mut out = Vec::with_capacity(a.len());
    for row in 0..a.len() {
        if a.is_null(row) {
            out.push(None);
            continue;
        }
        out.push(Some(match a.data_type() {
            DataType::Boolean => match a.as_boolean().value(row) {
                true => "TRUE".to_string(),
                false => "FALSE".to_string(),
            },
            DataType::Timestamp(..) => {
                // An instant is written with its zone, UTC (casts.md).
                let (v, zone) = match value_at(a.as_ref(), row) {
                    Ok(Variant::TimestampTz(ns)) => (Variant::Timestamp(ns), " +00:00"),
                    Ok(v) => (v, ""),
                    Err(e) => return exec_err!("{e}"),
                };
                match scalar_text(&v) {
                    Some(t) => t + zone,
                    None => return exec_err!("a TIMESTAMP out of range cannot be written"),
                }
            }
            DataType::Binary => hex(a.as_binary::<i32>().value(row)),
            DataType::FixedSizeBinary(_) => hex(a.as_fixed_size_binary().value(row)),
            other => return exec_err!("{NAME} of {other}"),
        }));
    }
    Ok(Arc::new(StringArray::from(out)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct FelderaStrings;

impl AnalyzerRule for FelderaStrings {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_casts(plan, |x, from, to| {
            let to_text = matches!(
                to,
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
            );
            if !to_text || !written_otherwise(from) {
                return Ok(None);
            }
            let text = Expr::ScalarFunction(ScalarFunction::new_udf(function(), vec![x]));
            Ok(Some(match to {
                DataType::Utf8 => text,
                other => Expr::Cast(datafusion::logical_expr::Cast::new(
                    Box::new(text),
                    other.clone(),
                )),
            }))
        })
    }

    fn name(&self) -> &str {
        "eddy_feldera_strings"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{BinaryArray, BooleanArray, TimestampNanosecondArray};

    #[test]
    fn booleans_timestamps_and_bytes_are_written_as_feldera_writes_them() {
        let b: ArrayRef = Arc::new(BooleanArray::from(vec![Some(true), Some(false), None]));
        let t = text(&b).unwrap();
        let t = t.as_string::<i32>();
        assert_eq!((t.value(0), t.value(1)), ("TRUE", "FALSE"));
        assert!(t.is_null(2));
        let ts: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![
            1_592_749_424_123_654_000,
            1_592_749_424_000_000_000,
        ]));
        let t = text(&ts).unwrap();
        let t = t.as_string::<i32>();
        assert_eq!(t.value(0), "2020-06-21 14:23:44.123654");
        assert_eq!(t.value(1), "2020-06-21 14:23:44");
        let bin: ArrayRef = Arc::new(BinaryArray::from(vec![&[11u8, 22, 32][..]]));
        assert_eq!(text(&bin).unwrap().as_string::<i32>().value(0), "0b1620");
    }
}

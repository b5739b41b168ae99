//! `eddy_nanos(x)`: a `DATE`, `TIME` or `TIMESTAMP` (or a string that
//! casts to a timestamp) as a BIGINT count of nanoseconds: since the epoch
//! for dates and timestamps, since midnight for times. The rewrites of
//! `TIMESTAMPDIFF` and of interval-qualified differences (`(a - b) SECOND`)
//! subtract two of these, which works for every pair of the same kind,
//! where casting a `TIME` to a `TIMESTAMP` (which Arrow cannot) did not.
//!
//! A stateless function: its incremental rule is that of the projection
//! holding it.

use std::sync::Arc;

use datafusion::arrow::compute::kernels::cast::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{DataType, TimeUnit};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The function's name.
pub const NAME: &str = "eddy_nanos";

/// `eddy_nanos(x)`.
pub fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Nanos {
        signature: Signature::any(1, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Nanos {
    signature: Signature,
}

/// The type `x` goes through on its way to a count of nanoseconds.
fn via(t: &DataType) -> Result<DataType> {
    Ok(match t {
        DataType::Time32(_) | DataType::Time64(_) => DataType::Time64(TimeUnit::Nanosecond),
        DataType::Date32
        | DataType::Date64
        | DataType::Timestamp(..)
        | DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Null => DataType::Timestamp(TimeUnit::Nanosecond, None),
        other => {
            return plan_err!(
                "a difference of times needs DATE, TIME or TIMESTAMP values, not {}",
                crate::error::sql_type_name(&other.to_string())
            )
        }
    })
}

impl ScalarUDFImpl for Nanos {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        via(&args[0])?;
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [x] = args.args.as_slice() else {
            return plan_err!("{NAME} takes one argument");
        };
        let strict = CastOptions {
            safe: false,
            ..Default::default()
        };
        let a = x.to_array(args.number_rows)?;
        let through = cast_with_options(&a, &via(a.data_type())?, &strict)?;
        let nanos = cast_with_options(&through, &DataType::Int64, &strict)?;
        Ok(match x {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&nanos, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(nanos),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, Date32Array, Int64Array, Time64NanosecondArray};
    use datafusion::arrow::datatypes::Field;

    fn nanos(a: Arc<dyn Array>) -> Vec<i64> {
        let arg = Arc::new(Field::new("x", a.data_type().clone(), true));
        let out = function()
            .invoke_with_args(ScalarFunctionArgs {
                number_rows: a.len(),
                args: vec![ColumnarValue::Array(a)],
                arg_fields: vec![arg],
                return_field: Arc::new(Field::new("n", DataType::Int64, true)),
                config_options: Arc::default(),
            })
            .unwrap()
            .into_array(1)
            .unwrap();
        let out = out.as_any().downcast_ref::<Int64Array>().unwrap();
        out.values().to_vec()
    }

    #[test]
    fn times_count_from_midnight_and_dates_from_the_epoch() {
        let hour = 3_600_000_000_000i64;
        assert_eq!(
            nanos(Arc::new(Time64NanosecondArray::from(vec![2 * hour, 0]))),
            vec![2 * hour, 0]
        );
        assert_eq!(
            nanos(Arc::new(Date32Array::from(vec![1, -1]))),
            vec![24 * hour, -24 * hour]
        );
    }
}

//! Feldera's timestamp functions that DataFusion has no function for, as
//! DataFusion UDFs (datetime.md):
//!
//! * `MAKE_TIMESTAMP(year, month, day, hour, minute, second)`: the
//!   timestamp of those parts, the seconds any number (`0.5`); NULL where
//!   they make no timestamp (a 13th month, a 61st second).
//! * `CONVERT_TIMEZONE(from, to, ts)`: the wall-clock time `ts` read in
//!   zone `from` (an IANA name or a fixed offset such as `+08:00`), as the
//!   wall-clock time of zone `to`; NULL where a zone cannot be parsed or
//!   the time does not exist (or exists twice) in `from`.
//!
//! Stateless functions: their incremental rule is that of the projection
//! or filter holding them.

use std::sync::Arc;

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeZone};
use datafusion::arrow::array::timezone::Tz;
use datafusion::arrow::array::{Array, AsArray, TimestampNanosecondArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Float64Type, Int64Type, TimeUnit};
use datafusion::common::{plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

const NAIVE: DataType = DataType::Timestamp(TimeUnit::Nanosecond, None);

/// The functions, to register in a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::new_from_impl(MakeTimestamp {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::new_from_impl(ConvertTimezone {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
    ]
}

fn refuse<T>(name: &str, args: &[DataType], forms: &str) -> Result<T> {
    let types: Vec<String> = args
        .iter()
        .map(|t| format!("<{}>", crate::castcheck::feldera_type(t)))
        .collect();
    plan_err!(
        "Cannot apply '{name}' to arguments of type '{name}({})'. Supported form(s): '{name}({forms})'",
        types.join(", ")
    )
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MakeTimestamp {
    signature: Signature,
}

impl ScalarUDFImpl for MakeTimestamp {
    fn name(&self) -> &str {
        "make_timestamp"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let number = |t: &DataType| t.is_null() || t.is_numeric();
        match args {
            [_, _, _, _, _, _] if args.iter().all(number) => {
                let mut out = vec![DataType::Int64; 5];
                out.push(DataType::Float64);
                Ok(out)
            }
            _ => refuse(
                "MAKE_TIMESTAMP",
                args,
                "<INTEGER>, <INTEGER>, <INTEGER>, <INTEGER>, <INTEGER>, <NUMERIC>",
            ),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(NAIVE)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<_>>>()?;
        let ints: Vec<_> = arrays[..5]
            .iter()
            .map(|a| a.as_primitive::<Int64Type>())
            .collect();
        let seconds = arrays[5].as_primitive::<Float64Type>();
        let out: TimestampNanosecondArray = (0..n)
            .map(|row| {
                if ints.iter().any(|a| a.is_null(row)) || seconds.is_null(row) {
                    return None;
                }
                let part = |i: usize| u32::try_from(ints[i].value(row)).ok();
                let year = i32::try_from(ints[0].value(row)).ok()?;
                let s = seconds.value(row);
                if !(0.0..60.0).contains(&s) {
                    return None;
                }
                let nanos = (s.fract() * 1e9).round() as u32;
                NaiveDate::from_ymd_opt(year, part(1)?, part(2)?)?
                    .and_hms_nano_opt(part(3)?, part(4)?, s.trunc() as u32, nanos.min(999_999_999))?
                    .and_utc()
                    .timestamp_nanos_opt()
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ConvertTimezone {
    signature: Signature,
}

impl ScalarUDFImpl for ConvertTimezone {
    fn name(&self) -> &str {
        "convert_timezone"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        let text = |t: &DataType| {
            t.is_null() || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
        };
        match args {
            [from, to, ts]
                if text(from)
                    && text(to)
                    && (ts.is_null() || matches!(ts, DataType::Timestamp(_, None))) =>
            {
                Ok(vec![DataType::Utf8, DataType::Utf8, NAIVE])
            }
            _ => refuse(
                "CONVERT_TIMEZONE",
                args,
                "<VARCHAR>, <VARCHAR>, <TIMESTAMP>",
            ),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(NAIVE)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let from = args.args[0].to_array(n)?;
        let to = args.args[1].to_array(n)?;
        let ts = cast(&args.args[2].to_array(n)?, &NAIVE)?;
        let (from, to) = (from.as_string::<i32>(), to.as_string::<i32>());
        let ts = ts.as_primitive::<datafusion::arrow::datatypes::TimestampNanosecondType>();
        let out: TimestampNanosecondArray = (0..n)
            .map(|row| {
                if from.is_null(row) || to.is_null(row) || ts.is_null(row) {
                    return None;
                }
                convert(from.value(row), to.value(row), ts.value(row))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

/// Wall-clock `ns` of zone `from` as the wall-clock time of zone `to`.
fn convert(from: &str, to: &str, ns: i64) -> Option<i64> {
    let (from, to) = (from.parse::<Tz>().ok()?, to.parse::<Tz>().ok()?);
    let wall: NaiveDateTime = DateTime::from_timestamp_nanos(ns).naive_utc();
    let instant = from.from_local_datetime(&wall).single()?;
    instant
        .with_timezone(&to)
        .naive_local()
        .and_utc()
        .timestamp_nanos_opt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(text: &str) -> i64 {
        datafusion::arrow::compute::kernels::cast_utils::string_to_timestamp_nanos(text).unwrap()
    }

    #[test]
    fn zones_convert_wall_clock_times() {
        assert_eq!(
            convert(
                "America/New_York",
                "America/Los_Angeles",
                ns("2008-03-05T12:25:29")
            ),
            Some(ns("2008-03-05T09:25:29"))
        );
        assert_eq!(
            convert("+08:00", "+00:00", ns("2020-01-01T08:00:00")),
            Some(ns("2020-01-01T00:00:00"))
        );
        assert_eq!(convert("Nowhere/City", "+00:00", 0), None);
        // 02:30 does not exist in New York on 2024-03-10.
        assert_eq!(
            convert("America/New_York", "+00:00", ns("2024-03-10T02:30:00")),
            None
        );
    }
}

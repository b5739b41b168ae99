//! Time windows: the functions that place a timestamp in its tumbling or
//! hopping windows, used by the window table functions and the group-window
//! form (see [`crate::tvf`]).
//!
//! * `tumble_start(ts, size [, offset])`: the start of the tumbling window
//!   of `size` that holds `ts`; windows start at `offset + k·size`.
//! * `tumble_end(ts, size [, offset])`: that start plus `size`.
//! * `hop_start(ts, slide, size, offset, k)`: the start of the `k`-th
//!   (from 0, latest first) hopping window that holds `ts`, or NULL when
//!   there are fewer than `k + 1` such windows.
//! * `hop_end(ts, slide, size, offset, k)`: that window's end (computed in
//!   the time's ticks: adding an interval to a timestamp goes through the
//!   calendar, several times slower).
//!
//! `ts` is a `TIMESTAMP` (sizes are intervals without months) or an
//! integer (sizes are integers); windows are half-open, `[start, end)`.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, TimeUnit};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// Which window function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    TumbleStart,
    TumbleEnd,
    HopStart,
    HopEnd,
}

/// One of the window functions.
#[derive(Debug, PartialEq, Eq, Hash)]
struct WindowFn {
    kind: Kind,
    signature: Signature,
}

/// The window functions, to register in a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [
        Kind::TumbleStart,
        Kind::TumbleEnd,
        Kind::HopStart,
        Kind::HopEnd,
    ]
    .into_iter()
    .map(|kind| {
        Arc::new(ScalarUDF::new_from_impl(WindowFn {
            kind,
            signature: Signature::variadic_any(Volatility::Immutable),
        }))
    })
    .collect()
}

/// Nanoseconds in one tick of a timestamp unit.
fn tick_nanos(unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => 1_000_000_000,
        TimeUnit::Millisecond => 1_000_000,
        TimeUnit::Microsecond => 1_000,
        TimeUnit::Nanosecond => 1,
    }
}

/// A window size, slide, offset or gap in the ticks of `ts_type`.
pub(crate) fn ticks(value: &ScalarValue, ts_type: &DataType, what: &str) -> Result<i64> {
    let of_days = |days: i32, nanos: Option<i64>| {
        i64::from(days)
            .checked_mul(86_400_000_000_000)
            .zip(nanos)
            .and_then(|(d, n)| d.checked_add(n))
    };
    let nanos = match value {
        ScalarValue::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
            of_days(v.days, Some(v.nanoseconds))
        }
        ScalarValue::IntervalDayTime(Some(v)) => {
            of_days(v.days, i64::from(v.milliseconds).checked_mul(1_000_000))
        }
        ScalarValue::IntervalYearMonth(_) | ScalarValue::IntervalMonthDayNano(_) => {
            return plan_err!("a window {what} cannot be counted in months: {value}")
        }
        v if v.data_type().is_integer() && ts_type.is_integer() => {
            return match v.cast_to(&DataType::Int64)? {
                ScalarValue::Int64(Some(n)) => Ok(n),
                _ => plan_err!("the window {what} is NULL"),
            };
        }
        v => {
            return plan_err!("the window {what} {v} does not fit a time column of type {ts_type}")
        }
    };
    let Some(nanos) = nanos else {
        return plan_err!("the window {what} {value} is out of range");
    };
    match ts_type {
        DataType::Timestamp(unit, _) => {
            let tick = tick_nanos(*unit);
            if nanos % tick != 0 {
                return plan_err!("the window {what} {value} is finer than the column's {unit:?}");
            }
            Ok(nanos / tick)
        }
        other if other.is_integer() => plan_err!(
            "the window {what} over an integer time column is an integer, not an INTERVAL"
        ),
        other => plan_err!(
            "windows need a TIMESTAMP or integer time column, not {}",
            crate::castcheck::feldera_type(other)
        ),
    }
}

fn scalar_arg<'a>(args: &'a [ColumnarValue], i: usize, what: &str) -> Result<&'a ScalarValue> {
    match args.get(i) {
        Some(ColumnarValue::Scalar(s)) => Ok(s),
        Some(_) => exec_err!("the window {what} must be a constant"),
        None => exec_err!("the window function lacks its {what}"),
    }
}

impl ScalarUDFImpl for WindowFn {
    fn name(&self) -> &str {
        match self.kind {
            Kind::TumbleStart => "tumble_start",
            Kind::TumbleEnd => "tumble_end",
            Kind::HopStart => "hop_start",
            Kind::HopEnd => "hop_end",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        let arity = match self.kind {
            Kind::TumbleStart | Kind::TumbleEnd => 2..=3,
            Kind::HopStart | Kind::HopEnd => 5..=5,
        };
        if !arity.contains(&arg_types.len()) {
            return plan_err!(
                "{}() takes {} arguments, not {}",
                self.name(),
                if matches!(self.kind, Kind::HopStart | Kind::HopEnd) {
                    "5"
                } else {
                    "2 or 3"
                },
                arg_types.len()
            );
        }
        match &arg_types[0] {
            t @ DataType::Timestamp(_, _) => Ok(t.clone()),
            t if t.is_integer() => Ok(t.clone()),
            DataType::Null => Ok(DataType::Null),
            other => plan_err!(
                "{}() needs a TIMESTAMP or integer time column, not {other}",
                self.name()
            ),
        }
    }

    /// The type, once the constant sizes fit the time column: a window of
    /// an INTERVAL over an integer column, or of months, is refused when
    /// the program is planned, in Feldera's words, not at the first row.
    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        let t = self.return_type(&types)?;
        let constants: &[&str] = match self.kind {
            Kind::TumbleStart | Kind::TumbleEnd => &["size", "offset"],
            Kind::HopStart | Kind::HopEnd => &["slide", "size", "offset"],
        };
        if types[0] != DataType::Null {
            for (i, what) in constants.iter().enumerate() {
                let Some(Some(v)) = args.scalar_arguments.get(i + 1) else {
                    continue;
                };
                if let Err(e) = ticks(v, &types[0], what) {
                    let name = match self.kind {
                        Kind::TumbleStart | Kind::TumbleEnd => "TUMBLE",
                        Kind::HopStart | Kind::HopEnd => "HOP",
                    };
                    let arg_types: Vec<String> = types
                        .iter()
                        .take(constants.len() + 1)
                        .map(|t| format!("<{}>", crate::castcheck::feldera_type(t)))
                        .collect();
                    return plan_err!(
                        "Cannot apply '{name}' to arguments of type '{name}({})': {}",
                        arg_types.join(", "),
                        e.strip_backtrace()
                            .trim_start_matches("Error during planning: ")
                    );
                }
            }
        }
        Ok(Arc::new(Field::new(self.name(), t, true)))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let ts = args.args[0].clone().into_array(n)?;
        let ts_type = ts.data_type().clone();
        if ts_type == DataType::Null {
            return Ok(ColumnarValue::Array(ts));
        }
        let (slide, size, offset, ks) = match self.kind {
            Kind::TumbleStart | Kind::TumbleEnd => {
                let size = ticks(scalar_arg(&args.args, 1, "size")?, &ts_type, "size")?;
                let offset = match args.args.get(2) {
                    Some(_) => ticks(scalar_arg(&args.args, 2, "offset")?, &ts_type, "offset")?,
                    None => 0,
                };
                (size, size, offset, None)
            }
            Kind::HopStart | Kind::HopEnd => {
                let slide = ticks(scalar_arg(&args.args, 1, "slide")?, &ts_type, "slide")?;
                let size = ticks(scalar_arg(&args.args, 2, "size")?, &ts_type, "size")?;
                let offset = ticks(scalar_arg(&args.args, 3, "offset")?, &ts_type, "offset")?;
                let ks = cast(&args.args[4].clone().into_array(n)?, &DataType::Int64)?;
                (slide, size, offset, Some(ks))
            }
        };
        if slide <= 0 || size <= 0 {
            return exec_err!("window sizes and slides must be positive");
        }
        let values = cast(&ts, &DataType::Int64)?;
        let values = values
            .as_any()
            .downcast_ref::<Int64Array>()
            .expect("cast to Int64");
        let kind = self.kind;
        let ks = ks.as_ref().map(|k| {
            k.as_any()
                .downcast_ref::<Int64Array>()
                .expect("cast to Int64")
        });
        let out: Int64Array = values
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let v = v?;
                let k = match ks {
                    Some(ks) if ks.is_null(i) => return None,
                    Some(ks) => ks.value(i),
                    None => 0,
                };
                let last = v.checked_sub(v.checked_sub(offset)?.rem_euclid(slide))?;
                let start = last.checked_sub(k.checked_mul(slide)?)?;
                match kind {
                    Kind::TumbleStart => Some(start),
                    Kind::TumbleEnd => start.checked_add(size),
                    // The k-th window back holds `v` only while it has not ended.
                    Kind::HopStart => (v < start.checked_add(size)?).then_some(start),
                    Kind::HopEnd => {
                        let end = start.checked_add(size)?;
                        (v < end).then_some(end)
                    }
                }
            })
            .collect();
        let out: ArrayRef = Arc::new(out);
        Ok(ColumnarValue::Array(cast(&out, &ts_type)?))
    }
}

//! The functions that make and use Feldera's qualified intervals (see
//! [`super`]): the qualifier is each call's last argument, a string
//! constant.
//!
//! * `eddy_interval(x, 'Q')`: `x` as an interval of type `Q`, its field
//!   carrying the qualifier. `x` is an interval, a count (months of a long
//!   interval, nanoseconds of a short one) or Feldera's text of one.
//! * `eddy_interval_text(x, 'Q')`: Feldera's text of `x`.
//! * `eddy_interval_count(x, 'Q')`: the number of `Q`'s last unit in `x`.
//! * `eddy_interval_scale(x, f, 'mul' | 'div', 'Q')`: `x * f` or `x / f`,
//!   in whole months or microseconds, truncated toward zero.
//! * `eddy_interval_days(x, 'Q')`: a short interval as whole days (what a
//!   DATE moves by, datetime.md), a long one as it is.
//! * `eddy_time_plus(t, x, sign, 'Q')`: a TIME moved by a short interval,
//!   wrapping around midnight; by a long one, unchanged (datetime.md).
//!
//! Stateless functions: their incremental rule is that of the projection
//! or filter holding them.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, IntervalMonthDayNanoArray, StringArray,
    Time64NanosecondArray,
};
use datafusion::arrow::datatypes::{
    DataType, Field, FieldRef, IntervalMonthDayNano, IntervalMonthDayNanoType, IntervalUnit,
    TimeUnit,
};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use super::{count, parse, text, IntervalError, Qualifier, Unit, METADATA_KEY};

/// What a function computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Qualify,
    Text,
    Count,
    Scale,
    Days,
    TimePlus,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Qualify => QUALIFY,
            Kind::Text => "eddy_interval_text",
            Kind::Count => "eddy_interval_count",
            Kind::Scale => "eddy_interval_scale",
            Kind::Days => "eddy_interval_days",
            Kind::TimePlus => "eddy_time_plus",
        }
    }

    fn arity(self) -> usize {
        match self {
            Kind::Scale | Kind::TimePlus => 4,
            _ => 2,
        }
    }
}

/// The name of `eddy_interval(x, 'Q')`.
pub const QUALIFY: &str = "eddy_interval";

#[derive(Debug, PartialEq, Eq, Hash)]
struct IntervalFunction {
    kind: Kind,
    signature: Signature,
}

/// Every function of the module, to register.
pub fn all() -> Vec<Arc<ScalarUDF>> {
    [
        Kind::Qualify,
        Kind::Text,
        Kind::Count,
        Kind::Scale,
        Kind::Days,
        Kind::TimePlus,
    ]
    .into_iter()
    .map(function)
    .collect()
}

fn function(kind: Kind) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(IntervalFunction {
        kind,
        signature: Signature::any(kind.arity(), Volatility::Immutable),
    }))
}

fn call(kind: Kind, mut args: Vec<Expr>, q: Qualifier) -> Expr {
    args.push(Expr::Literal(ScalarValue::Utf8(Some(q.to_string())), None));
    Expr::ScalarFunction(ScalarFunction::new_udf(function(kind), args))
}

/// `eddy_interval(x, 'Q')`.
pub fn qualify(x: Expr, q: Qualifier) -> Expr {
    call(Kind::Qualify, vec![x], q)
}

/// `eddy_interval_text(x, 'Q')`.
pub fn to_text(x: Expr, q: Qualifier) -> Expr {
    call(Kind::Text, vec![x], q)
}

/// `eddy_interval_count(x, 'Q')`.
pub fn to_count(x: Expr, q: Qualifier) -> Expr {
    call(Kind::Count, vec![x], q)
}

/// `eddy_interval_scale(x, f, 'mul' | 'div', 'Q')`.
pub fn scale(x: Expr, factor: Expr, divide: bool, q: Qualifier) -> Expr {
    let op = if divide { "div" } else { "mul" };
    let op = Expr::Literal(ScalarValue::Utf8(Some(op.to_string())), None);
    let factor = Expr::Cast(datafusion::logical_expr::Cast::new(
        Box::new(factor),
        DataType::Float64,
    ));
    call(Kind::Scale, vec![x, factor, op], q)
}

/// `eddy_interval_days(x, 'Q')`.
pub fn whole_days(x: Expr, q: Qualifier) -> Expr {
    call(Kind::Days, vec![x], q)
}

/// `eddy_time_plus(t, x, sign, 'Q')`.
pub fn time_plus(t: Expr, x: Expr, subtract: bool, q: Qualifier) -> Expr {
    let sign = Expr::Literal(
        ScalarValue::Int64(Some(if subtract { -1 } else { 1 })),
        None,
    );
    call(Kind::TimePlus, vec![t, x, sign], q)
}

/// The qualifier of a call's last argument, a string constant.
fn qualifier_of(arg: Option<&ScalarValue>, f: &str) -> Result<Qualifier> {
    match arg {
        Some(ScalarValue::Utf8(Some(s)) | ScalarValue::LargeUtf8(Some(s))) => {
            match Qualifier::parse(s) {
                Some(q) => Ok(q),
                None => plan_err!("{f}: '{s}' is not an interval qualifier"),
            }
        }
        _ => plan_err!("{f} takes an interval qualifier, a string constant, last"),
    }
}

/// The interval type, carrying `q` when there is one.
pub fn field(name: &str, q: Option<Qualifier>) -> Field {
    let f = Field::new(name, DataType::Interval(IntervalUnit::MonthDayNano), true);
    match q {
        Some(q) => f.with_metadata(HashMap::from([(METADATA_KEY.to_string(), q.to_string())])),
        None => f,
    }
}

impl ScalarUDFImpl for IntervalFunction {
    fn name(&self) -> &str {
        self.kind.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(match self.kind {
            Kind::Text => DataType::Utf8,
            Kind::Count => DataType::Int64,
            Kind::TimePlus => args[0].clone(),
            _ => DataType::Interval(IntervalUnit::MonthDayNano),
        })
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let name = self.kind.name();
        let q = qualifier_of(args.scalar_arguments.last().copied().flatten(), name)?;
        Ok(Arc::new(match self.kind {
            Kind::Qualify | Kind::Scale => field(name, Some(q)),
            Kind::Days => field(name, None),
            Kind::Text | Kind::Count | Kind::TimePlus => {
                let types: Vec<DataType> = args
                    .arg_fields
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect();
                Field::new(name, self.return_type(&types)?, true)
            }
        }))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let name = self.kind.name();
        let q = match args.args.last() {
            Some(ColumnarValue::Scalar(s)) => qualifier_of(Some(s), name)?,
            _ => return exec_err!("{name} takes an interval qualifier, a string constant, last"),
        };
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let n = if scalar { 1 } else { args.number_rows };
        let arrays = args
            .args
            .iter()
            .map(|a| a.to_array(n))
            .collect::<Result<Vec<ArrayRef>>>()?;
        let out = evaluate(self.kind, &arrays, q, n)?;
        Ok(if scalar {
            ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
        } else {
            ColumnarValue::Array(out)
        })
    }
}

fn failed(e: IntervalError) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Execution(e.to_string())
}

/// The amount (months or nanoseconds) of row `row` of `a` as an interval
/// of `q`: an interval, a count of months or nanoseconds, or text.
fn amount_at(a: &dyn Array, row: usize, q: Qualifier) -> Result<Option<i128>> {
    if a.is_null(row) {
        return Ok(None);
    }
    let from_parts = |months: i32, days: i32, nanos: i64| -> Result<i128> {
        let short = i128::from(days) * Unit::Day.size() + i128::from(nanos);
        match (q.is_long(), months, short) {
            (true, m, 0) => Ok(i128::from(m)),
            (false, 0, n) => Ok(n),
            _ => exec_err!("an interval of months and days has no type INTERVAL {q}"),
        }
    };
    Ok(Some(match a.data_type() {
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = a.as_primitive::<IntervalMonthDayNanoType>().value(row);
            from_parts(v.months, v.days, v.nanoseconds)?
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            let m = a
                .as_primitive::<datafusion::arrow::datatypes::IntervalYearMonthType>()
                .value(row);
            from_parts(m, 0, 0)?
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = a
                .as_primitive::<datafusion::arrow::datatypes::IntervalDayTimeType>()
                .value(row);
            from_parts(0, v.days, i64::from(v.milliseconds) * 1_000_000)?
        }
        DataType::Int64 => i128::from(
            a.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .value(row),
        ),
        DataType::Utf8 => parse(a.as_string::<i32>().value(row), q).map_err(failed)?,
        DataType::LargeUtf8 => parse(a.as_string::<i64>().value(row), q).map_err(failed)?,
        DataType::Utf8View => parse(a.as_string_view().value(row), q).map_err(failed)?,
        other => return exec_err!("{other} is not an interval of type INTERVAL {q}"),
    }))
}

/// An amount as Arrow's interval value.
fn interval_value(amount: i128, q: Qualifier) -> Result<IntervalMonthDayNano> {
    let overflow = || failed(IntervalError::Overflow(q));
    Ok(if q.is_long() {
        IntervalMonthDayNano::new(i32::try_from(amount).map_err(|_| overflow())?, 0, 0)
    } else {
        IntervalMonthDayNano::new(0, 0, i64::try_from(amount).map_err(|_| overflow())?)
    })
}

fn evaluate(kind: Kind, a: &[ArrayRef], q: Qualifier, n: usize) -> Result<ArrayRef> {
    let amounts = |i: usize| (0..n).map(move |row| amount_at(a[i].as_ref(), row, q));
    Ok(match kind {
        Kind::Qualify => Arc::new(
            amounts(0)
                .map(|x| x?.map(|v| interval_value(v, q)).transpose())
                .collect::<Result<IntervalMonthDayNanoArray>>()?,
        ),
        Kind::Text => Arc::new(
            amounts(0)
                .map(|x| Ok(x?.map(|v| text(v, q))))
                .collect::<Result<StringArray>>()?,
        ),
        Kind::Count => Arc::new(
            amounts(0)
                .map(|x| {
                    x?.map(|v| {
                        i64::try_from(count(v, q)).map_err(|_| failed(IntervalError::Overflow(q)))
                    })
                    .transpose()
                })
                .collect::<Result<Int64Array>>()?,
        ),
        Kind::Days => Arc::new(
            amounts(0)
                .map(|x| {
                    x?.map(|v| {
                        if q.is_long() {
                            interval_value(v, q)
                        } else {
                            let days = i32::try_from(v / Unit::Day.size())
                                .map_err(|_| failed(IntervalError::Overflow(q)))?;
                            Ok(IntervalMonthDayNano::new(0, days, 0))
                        }
                    })
                    .transpose()
                })
                .collect::<Result<IntervalMonthDayNanoArray>>()?,
        ),
        Kind::Scale => {
            let factors = a[1].as_primitive::<datafusion::arrow::datatypes::Float64Type>();
            let divide = match a[2].as_string::<i32>().value(0) {
                "div" => true,
                "mul" => false,
                other => return exec_err!("eddy_interval_scale: unknown operation {other}"),
            };
            Arc::new(
                amounts(0)
                    .enumerate()
                    .map(|(row, x)| {
                        let Some(v) = x? else { return Ok(None) };
                        if factors.is_null(row) {
                            return Ok(None);
                        }
                        let f = factors.value(row);
                        if divide && f == 0.0 {
                            return exec_err!("division by zero");
                        }
                        // Short intervals are whole microseconds
                        // (datetime.md), long ones whole months; the
                        // result is truncated toward zero.
                        let unit = if q.is_long() { 1.0 } else { 1_000.0 };
                        let base = (v as f64 / unit).trunc();
                        let scaled = if divide { base / f } else { base * f }.trunc();
                        if !scaled.is_finite() || scaled.abs() >= 9.2e18 / unit {
                            return Err(failed(IntervalError::Overflow(q)));
                        }
                        interval_value((scaled * unit) as i128, q).map(Some)
                    })
                    .collect::<Result<IntervalMonthDayNanoArray>>()?,
            )
        }
        Kind::TimePlus => {
            if a[0].data_type() != &DataType::Time64(TimeUnit::Nanosecond) {
                return exec_err!("eddy_time_plus of {}", a[0].data_type());
            }
            let times = a[0].as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>();
            let sign = a[2]
                .as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .value(0);
            let day = Unit::Day.size();
            Arc::new(
                (0..n)
                    .map(|row| {
                        let Some(v) = amount_at(a[1].as_ref(), row, q)? else {
                            return Ok(None);
                        };
                        if times.is_null(row) {
                            return Ok(None);
                        }
                        let t = i128::from(times.value(row));
                        // A long interval is whole months: a time of day
                        // stays as it is.
                        let moved = if q.is_long() {
                            t
                        } else {
                            t + i128::from(sign) * v
                        };
                        Ok(Some(moved.rem_euclid(day) as i64))
                    })
                    .collect::<Result<Time64NanosecondArray>>()?,
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Qualifier {
        Qualifier::parse(s).unwrap()
    }

    #[test]
    fn text_is_read_scaled_and_written() {
        let texts: ArrayRef = Arc::new(StringArray::from(vec![Some("+60"), None, Some("-5")]));
        let ym = q("MONTH");
        let iv = evaluate(Kind::Qualify, &[texts], ym, 3).unwrap();
        let f: ArrayRef = Arc::new(datafusion::arrow::array::Float64Array::from(vec![2.583; 3]));
        let op: ArrayRef = Arc::new(StringArray::from(vec!["mul"; 3]));
        let scaled = evaluate(Kind::Scale, &[iv, f, op], ym, 3).unwrap();
        let out = evaluate(Kind::Text, &[scaled], ym, 3).unwrap();
        let out = out.as_string::<i32>();
        assert_eq!(out.value(0), "+154");
        assert!(out.is_null(1));
        assert_eq!(out.value(2), "-12");
    }

    #[test]
    fn a_time_wraps_around_midnight() {
        let hour = 3_600_000_000_000i64;
        let t: ArrayRef = Arc::new(Time64NanosecondArray::from(vec![23 * hour]));
        let iv: ArrayRef = Arc::new(Int64Array::from(vec![2 * hour]));
        let sign: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let out = evaluate(Kind::TimePlus, &[t, iv, sign], q("HOUR"), 1).unwrap();
        assert_eq!(
            out.as_primitive::<datafusion::arrow::datatypes::Time64NanosecondType>()
                .value(0),
            hour
        );
    }
}

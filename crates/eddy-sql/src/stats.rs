//! `AVG`, `STDDEV_POP`, `STDDEV_SAMP` (`STDDEV`), `VAR_POP` and `VAR_SAMP`
//! (`VARIANCE`) as DataFusion aggregate UDFs that replace DataFusion's own
//! under the same names, with the type rule of the program's
//! [`Rules`](crate::Rules).
//!
//! Under Feldera's rules (after Calcite) these aggregates have the type of
//! their argument: the average of `INT`s is an `INT`, of `DECIMAL(7, 2)`s a
//! `DECIMAL(7, 2)`, and the standard deviation of `TINYINT`s a `TINYINT`.
//! `AVG` of an integer or DECIMAL argument is computed exactly (an `i128`
//! sum divided by the count, truncated toward zero as Feldera's division
//! and casts truncate: `AVG` of 1 and 2 is 1, of -1 and -2 is -1), never
//! through a DOUBLE. The variances and deviations of integers follow
//! Feldera's integer formula, `(Σx² - (Σx)² / n) / n` (or `n - 1`) with
//! integer division, and the integer square root: `STDDEV_SAMP` of 4 and 5
//! is 1 (0.707 exactly). Those of DECIMALs are computed as DOUBLE
//! (Welford's method) and truncated to the argument's type. A result out of
//! its type's range is an error, never a wrapped value. Floating-point
//! arguments, and every argument under PostgreSQL's rules, keep
//! DataFusion's functions (DOUBLE results).
//!
//! `DISTINCT` is supported for each of them under both rules (DataFusion
//! refuses `STDDEV_POP(DISTINCT …)`, and only once the pipeline runs).
//!
//! Incrementally, these are evaluated like any DataFusion aggregate (the
//! aggregate operator recomputes a touched group from its rows; window
//! frames retract), except `AVG` of integers, which the linear aggregate
//! keeps as a running sum and count per group.

use std::collections::HashSet;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::compute::kernels::cast::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::{
    DataType, Decimal128Type, Field, FieldRef, Float64Type, Int64Type, UInt64Type,
};
use datafusion::common::{exec_err, plan_err, Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::utils::format_state_name;
use datafusion::logical_expr::{
    Accumulator, AggregateUDF, AggregateUDFImpl, Signature, Volatility,
};

use crate::session::Rules;

/// The statistic an aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Stat {
    Avg,
    VarPop,
    VarSamp,
    StddevPop,
    StddevSamp,
}

impl Stat {
    /// The SQL name, for messages.
    fn sql_name(self) -> &'static str {
        match self {
            Stat::Avg => "AVG",
            Stat::VarPop => "VAR_POP",
            Stat::VarSamp => "VAR_SAMP",
            Stat::StddevPop => "STDDEV_POP",
            Stat::StddevSamp => "STDDEV_SAMP",
        }
    }
}

/// The five aggregates under `rules`, named as DataFusion's own (and
/// `VARIANCE` for `VAR_SAMP`, as Feldera names it), which they keep for
/// what the rules leave to DataFusion.
pub fn functions(rules: Rules) -> Vec<Arc<AggregateUDF>> {
    use datafusion::functions_aggregate::{average, stddev, variance};
    [
        (Stat::Avg, average::avg_udaf(), None),
        (Stat::VarPop, variance::var_pop_udaf(), None),
        (Stat::VarSamp, variance::var_samp_udaf(), Some("variance")),
        (Stat::StddevPop, stddev::stddev_pop_udaf(), None),
        (Stat::StddevSamp, stddev::stddev_udaf(), None),
    ]
    .into_iter()
    .map(|(stat, inner, also)| {
        let mut aliases = inner.aliases().to_vec();
        aliases.extend(also.map(String::from));
        Arc::new(AggregateUDF::new_from_impl(Typed {
            stat,
            feldera: rules == Rules::Feldera,
            aliases,
            inner,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    })
    .collect()
}

/// Whether `stat` of an argument of type `t` whose type the result keeps
/// is computed exactly, in integers: `AVG` of an integer or DECIMAL, and
/// the deviations and variances of an integer (Feldera computes those with
/// integer division, so that `STDDEV_SAMP` of 4 and 5 is 1, not 0.707
/// truncated). Those of a DECIMAL go through DOUBLE.
fn exact(stat: Stat, t: &DataType) -> bool {
    keeps_type(t) && (stat == Stat::Avg || t.is_integer())
}

/// Whether Feldera's rule gives the aggregate its argument's type.
fn keeps_type(t: &DataType) -> bool {
    t.is_integer() || matches!(t, DataType::Decimal128(..))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Typed {
    stat: Stat,
    /// Feldera's rules: an integer or DECIMAL argument's type is kept.
    feldera: bool,
    aliases: Vec<String>,
    /// DataFusion's aggregate, for floating-point arguments.
    inner: Arc<AggregateUDF>,
    signature: Signature,
}

impl Typed {
    /// Whether the result has the argument's type `t`.
    fn keeps(&self, t: &DataType) -> bool {
        self.feldera && keeps_type(t)
    }

    /// Whether this module's accumulator computes the call (otherwise
    /// DataFusion's does).
    fn own(&self, t: &DataType, distinct: bool) -> bool {
        self.keeps(t) || (distinct && self.stat != Stat::Avg)
    }

    /// The argument's type, refusing calls of another arity.
    fn argument<'a>(&self, args: &'a [DataType]) -> Result<&'a DataType> {
        match args {
            [t] => Ok(t),
            _ => plan_err!(
                "Invalid number of arguments to function '{}'. Was expecting 1 arguments",
                self.stat.sql_name()
            ),
        }
    }
}

impl AggregateUDFImpl for Typed {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        &self.aliases
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        if self.keeps(self.argument(args)?) {
            return Ok(args.to_vec());
        }
        crate::textargs::coerced_by(self.inner.as_ref(), args)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let t = self.argument(args)?;
        if self.keeps(t) {
            Ok(t.clone())
        } else {
            self.inner.return_type(args)
        }
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let t = args.expr_fields[0].data_type();
        if !self.own(t, args.is_distinct) {
            return self.inner.accumulator(args);
        }
        Ok(Box::new(StatAccumulator::new(
            self.stat,
            t.clone(),
            args.return_field.data_type().clone(),
            args.is_distinct,
        )))
    }

    fn create_sliding_accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        self.accumulator(args)
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        let t = args.input_fields[0].data_type();
        if !self.own(t, args.is_distinct) {
            return self.inner.state_fields(args);
        }
        let field = |what: &str, t: DataType| -> FieldRef {
            Arc::new(Field::new(format_state_name(args.name, what), t, true))
        };
        Ok(if args.is_distinct {
            vec![field(
                "distinct",
                DataType::List(Arc::new(Field::new_list_field(t.clone(), true))),
            )]
        } else if exact(self.stat, t) {
            vec![
                field("count", DataType::Int64),
                field("sum", DataType::Decimal128(38, 0)),
                field("sumsq", DataType::Decimal128(38, 0)),
            ]
        } else {
            vec![
                field("count", DataType::UInt64),
                field("mean", DataType::Float64),
                field("m2", DataType::Float64),
            ]
        })
    }
}

/// The running state of one group (or frame).
#[derive(Debug)]
struct StatAccumulator {
    stat: Stat,
    /// The argument's type.
    input: DataType,
    /// The result's type: the argument's, or DOUBLE for floats.
    output: DataType,
    /// Computed exactly (see [`exact`]): the count, the sum of the
    /// unscaled values and (but for `AVG`) the sum of their squares.
    count: i64,
    sum: i128,
    sumsq: i128,
    /// The deviations: Welford's count, mean and sum of squared
    /// differences.
    n: u64,
    mean: f64,
    m2: f64,
    /// With `DISTINCT`: the distinct non-NULL values seen.
    distinct: Option<HashSet<ScalarValue>>,
}

impl StatAccumulator {
    fn new(stat: Stat, input: DataType, output: DataType, distinct: bool) -> Self {
        Self {
            stat,
            input,
            output,
            count: 0,
            sum: 0,
            sumsq: 0,
            n: 0,
            mean: 0.0,
            m2: 0.0,
            distinct: distinct.then(HashSet::new),
        }
    }

    fn exact(&self) -> bool {
        exact(self.stat, &self.input)
    }

    /// The scale of the unscaled values that `AVG` sums.
    fn scale(&self) -> i8 {
        match self.input {
            DataType::Decimal128(_, s) => s,
            _ => 0,
        }
    }

    /// Adds (`sign` 1) or removes (`sign` -1) the non-NULL values of `a`.
    fn fold(&mut self, a: &ArrayRef, sign: i64) -> Result<()> {
        if self.exact() {
            let exact = cast_with_options(a, &DataType::Decimal128(38, self.scale()), &strict())?;
            let squares = self.stat != Stat::Avg;
            for v in exact.as_primitive::<Decimal128Type>().iter().flatten() {
                let sq = if squares { v.checked_mul(v) } else { Some(0) };
                let add = |total: i128, x: Option<i128>| {
                    x.and_then(|x| {
                        if sign > 0 {
                            total.checked_add(x)
                        } else {
                            total.checked_sub(x)
                        }
                    })
                };
                self.sum =
                    add(self.sum, Some(v)).ok_or_else(|| overflow(self.stat, &self.output))?;
                self.sumsq =
                    add(self.sumsq, sq).ok_or_else(|| overflow(self.stat, &self.output))?;
                self.count += sign;
            }
            return Ok(());
        }
        let floats = cast_with_options(a, &DataType::Float64, &strict())?;
        for x in floats.as_primitive::<Float64Type>().iter().flatten() {
            if sign > 0 {
                self.n += 1;
                let delta = x - self.mean;
                self.mean += delta / self.n as f64;
                self.m2 += delta * (x - self.mean);
            } else if self.n <= 1 {
                (self.n, self.mean, self.m2) = (0, 0.0, 0.0);
            } else {
                let delta = x - self.mean;
                self.n -= 1;
                self.mean -= delta / self.n as f64;
                self.m2 -= delta * (x - self.mean);
            }
        }
        Ok(())
    }

    /// The statistic of the values folded in, as a DOUBLE (NULL when
    /// there are too few).
    fn double(&self) -> Option<f64> {
        let n = self.n as f64;
        let variance = match self.stat {
            Stat::Avg => return (self.n > 0).then_some(self.mean),
            Stat::VarPop | Stat::StddevPop if self.n > 0 => self.m2 / n,
            Stat::VarSamp | Stat::StddevSamp if self.n > 1 => self.m2 / (n - 1.0),
            _ => return None,
        };
        // Rounding can leave a tiny negative sum of squares.
        let variance = variance.max(0.0);
        Some(match self.stat {
            Stat::StddevPop | Stat::StddevSamp => variance.sqrt(),
            _ => variance,
        })
    }

    /// The result of the values folded in, of the output type.
    fn result(&self) -> Result<ScalarValue> {
        if self.exact() {
            let n = i128::from(self.count);
            let divisor = match self.stat {
                Stat::VarSamp | Stat::StddevSamp => n - 1,
                _ => n,
            };
            if divisor <= 0 {
                return ScalarValue::try_from(&self.output);
            }
            // i128 division truncates toward zero, as Feldera's integer
            // division and casts do.
            let value = if self.stat == Stat::Avg {
                self.sum / n
            } else {
                // Feldera's formula, in integers: (Σx² - (Σx)²/n) / n (or
                // n - 1), then the integer square root.
                let square = self
                    .sum
                    .checked_mul(self.sum)
                    .ok_or_else(|| overflow(self.stat, &self.output))?;
                let variance = ((self.sumsq - square / n) / divisor).max(0);
                match self.stat {
                    Stat::StddevPop | Stat::StddevSamp => variance.isqrt(),
                    _ => variance,
                }
            };
            return match self.output {
                DataType::Decimal128(p, s) => Ok(ScalarValue::Decimal128(Some(value), p, s)),
                _ => ScalarValue::Decimal128(Some(value), 38, 0)
                    .cast_to_with_options(&self.output, &strict())
                    .map_err(|_| overflow(self.stat, &self.output)),
            };
        }
        let Some(x) = self.double() else {
            return ScalarValue::try_from(&self.output);
        };
        match self.output {
            DataType::Float64 => Ok(ScalarValue::Float64(Some(x))),
            DataType::Decimal128(p, s) => {
                let scaled = (x * 10f64.powi(i32::from(s))).trunc();
                let limit = 10f64.powi(i32::from(p));
                if !scaled.is_finite() || scaled.abs() >= limit {
                    return Err(overflow(self.stat, &self.output));
                }
                Ok(ScalarValue::Decimal128(Some(scaled as i128), p, s))
            }
            ref t => {
                let whole = x.trunc();
                // Past i64 (and u64) the value cannot fit any integer type.
                if !whole.is_finite() || whole.abs() >= 9.2e18 {
                    return Err(overflow(self.stat, t));
                }
                let v = if t.is_unsigned_integer() {
                    ScalarValue::UInt64(Some(whole as u64))
                } else {
                    ScalarValue::Int64(Some(whole as i64))
                };
                v.cast_to_with_options(t, &strict())
                    .map_err(|_| overflow(self.stat, t))
            }
        }
    }
}

/// Casts that fail rather than turn a value into NULL.
fn strict() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..Default::default()
    }
}

fn overflow(stat: Stat, t: &DataType) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Execution(format!(
        "{} causes overflow for type {}",
        stat.sql_name(),
        crate::error::sql_type_name(&t.to_string())
    ))
}

impl Accumulator for StatAccumulator {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let a = &values[0];
        if let Some(seen) = &mut self.distinct {
            for i in 0..a.len() {
                if a.is_valid(i) {
                    seen.insert(ScalarValue::try_from_array(a, i)?);
                }
            }
            return Ok(());
        }
        self.fold(a, 1)
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        if self.distinct.is_some() {
            return exec_err!("{}(DISTINCT) cannot retract rows", self.stat.sql_name());
        }
        self.fold(&values[0], -1)
    }

    fn supports_retract_batch(&self) -> bool {
        self.distinct.is_none()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let Some(seen) = &self.distinct else {
            return self.result();
        };
        let mut all =
            StatAccumulator::new(self.stat, self.input.clone(), self.output.clone(), false);
        if !seen.is_empty() {
            all.fold(&ScalarValue::iter_to_array(seen.iter().cloned())?, 1)?;
        }
        all.result()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        if let Some(seen) = &self.distinct {
            let values: Vec<ScalarValue> = seen.iter().cloned().collect();
            return Ok(vec![ScalarValue::List(ScalarValue::new_list_nullable(
                &values,
                &self.input,
            ))]);
        }
        Ok(if self.exact() {
            vec![
                ScalarValue::Int64(Some(self.count)),
                ScalarValue::Decimal128(Some(self.sum), 38, 0),
                ScalarValue::Decimal128(Some(self.sumsq), 38, 0),
            ]
        } else {
            vec![
                ScalarValue::UInt64(Some(self.n)),
                ScalarValue::Float64(Some(self.mean)),
                ScalarValue::Float64(Some(self.m2)),
            ]
        })
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        if self.distinct.is_some() {
            let lists = states[0].as_list::<i32>();
            for values in lists.iter().flatten() {
                self.update_batch(&[values])?;
            }
            return Ok(());
        }
        if self.exact() {
            let counts = states[0].as_primitive::<Int64Type>();
            let sums = states[1].as_primitive::<Decimal128Type>();
            let squares = states[2].as_primitive::<Decimal128Type>();
            for i in 0..counts.len() {
                self.count += counts.value(i);
                self.sum = self
                    .sum
                    .checked_add(sums.value(i))
                    .ok_or_else(|| overflow(self.stat, &self.output))?;
                self.sumsq = self
                    .sumsq
                    .checked_add(squares.value(i))
                    .ok_or_else(|| overflow(self.stat, &self.output))?;
            }
            return Ok(());
        }
        let (ns, means, m2s) = (
            states[0].as_primitive::<UInt64Type>(),
            states[1].as_primitive::<Float64Type>(),
            states[2].as_primitive::<Float64Type>(),
        );
        for i in 0..ns.len() {
            let (n, mean, m2) = (ns.value(i), means.value(i), m2s.value(i));
            if n == 0 {
                continue;
            }
            let total = self.n + n;
            let delta = mean - self.mean;
            self.m2 += m2 + delta * delta * (self.n as f64) * (n as f64) / total as f64;
            self.mean += delta * n as f64 / total as f64;
            self.n = total;
        }
        Ok(())
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
            + self
                .distinct
                .as_ref()
                .map_or(0, |s| s.iter().map(ScalarValue::size).sum::<usize>())
    }
}

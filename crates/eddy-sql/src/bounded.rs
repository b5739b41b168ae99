//! Functions whose result can be far larger than their arguments, bounded.
//!
//! `repeat('x', 2000000000)` is a few bytes of SQL and two gigabytes of
//! memory per row. DataFusion's memory pool does not see what a scalar
//! function allocates, so a program or an ad-hoc query could exhaust the
//! server's memory with one call. Each function here wraps DataFusion's own
//! and, before calling it, computes from its arguments how many bytes it
//! would make for the batch at hand; past [`MAX_RESULT_BYTES`] the call is
//! an error (the row's expression fails, as division by zero does) instead
//! of an allocation.
//!
//! Covered: `repeat`, `lpad`, `rpad`, `replace`, `array_repeat`, and the
//! integer forms of the array functions `range` and `generate_series`.

use std::sync::{Arc, OnceLock};

use datafusion::arrow::array::{Array, ArrayRef, Int64Array};
use datafusion::arrow::compute::cast;
use datafusion::arrow::compute::kernels::length::length;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::{exec_err, Result};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::execution::session_state::SessionStateBuilder;
use datafusion::logical_expr::simplify::{ExprSimplifyResult, SimplifyContext};
use datafusion::logical_expr::{
    ColumnarValue, Documentation, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature,
};

/// The most bytes one call of a bounded function may make for one batch.
pub const MAX_RESULT_BYTES: u64 = 64 << 20;

/// How a function's result size follows from its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Growth {
    /// `repeat(s, n)`: `len(s) × n`.
    Repeat,
    /// `lpad/rpad(s, n[, fill])`: `n` characters of up to 4 bytes.
    Pad,
    /// `replace(s, from, to)`: every `from` in `s` becomes `to`; an empty
    /// `from` puts `to` between every two characters.
    Replace,
    /// `array_repeat(x, n)`: `n` elements.
    ArrayRepeat,
    /// `range/generate_series([start,] stop[, step])`: `(stop − start) / step`
    /// elements.
    Range,
}

/// The names wrapped, and how each grows.
const BOUNDED: &[(&str, Growth)] = &[
    ("repeat", Growth::Repeat),
    ("lpad", Growth::Pad),
    ("rpad", Growth::Pad),
    ("replace", Growth::Replace),
    ("array_repeat", Growth::ArrayRepeat),
    ("range", Growth::Range),
    ("generate_series", Growth::Range),
];

/// DataFusion's function, checked before each call.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Bounded {
    inner: ScalarUDF,
    growth: Growth,
}

/// The bounded versions of DataFusion's default functions, built once: to
/// register in place of theirs.
pub fn functions() -> &'static [Arc<ScalarUDF>] {
    static FUNCTIONS: OnceLock<Vec<Arc<ScalarUDF>>> = OnceLock::new();
    FUNCTIONS.get_or_init(|| {
        let defaults = SessionStateBuilder::new().with_default_features().build();
        bounded_functions(&defaults)
    })
}

/// The bounded versions of the functions `registry` has.
fn bounded_functions(registry: &dyn FunctionRegistry) -> Vec<Arc<ScalarUDF>> {
    BOUNDED
        .iter()
        .filter_map(|(name, growth)| {
            let inner = registry.udf(name).ok()?;
            Some(Arc::new(ScalarUDF::new_from_impl(Bounded {
                inner: inner.as_ref().clone(),
                growth: *growth,
            })))
        })
        .collect()
}

/// An argument as an array of `rows` values.
fn array(arg: &ColumnarValue, rows: usize) -> Result<ArrayRef> {
    arg.to_array(rows)
}

/// Byte lengths of a string argument (NULL: 0).
fn lengths(arg: &ColumnarValue, rows: usize) -> Result<Vec<u64>> {
    let a = array(arg, rows)?;
    let a = match a.data_type() {
        DataType::Utf8View => cast(&a, &DataType::Utf8)?,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => a,
        // Not a string: its printed form is no longer than this bound.
        _ => return Ok(vec![64; rows]),
    };
    let l = cast(&length(&a)?, &DataType::Int64)?;
    Ok(as_i64s(&l).into_iter().map(|v| v.max(0) as u64).collect())
}

/// An integer argument (NULL: 0); `None` when it is not an integer.
fn integers(arg: &ColumnarValue, rows: usize) -> Result<Option<Vec<i64>>> {
    let a = array(arg, rows)?;
    if !a.data_type().is_integer() {
        return Ok(None);
    }
    Ok(Some(as_i64s(&cast(&a, &DataType::Int64)?)))
}

fn as_i64s(a: &ArrayRef) -> Vec<i64> {
    match a.as_any().downcast_ref::<Int64Array>() {
        Some(v) => (0..v.len())
            .map(|i| if v.is_null(i) { 0 } else { v.value(i) })
            .collect(),
        None => vec![0; a.len()],
    }
}

impl Bounded {
    /// The bytes the call would make, as far as the arguments tell.
    fn estimate(&self, args: &[ColumnarValue], rows: usize) -> Result<u64> {
        let count = |i: usize| -> Result<Vec<i64>> {
            Ok(match args.get(i) {
                Some(a) => integers(a, rows)?.unwrap_or_else(|| vec![0; rows]),
                None => vec![0; rows],
            })
        };
        let sum = |v: Vec<u64>| v.into_iter().fold(0u64, u64::saturating_add);
        Ok(match self.growth {
            Growth::Repeat if args.len() == 2 => {
                let (s, n) = (lengths(&args[0], rows)?, count(1)?);
                sum(s
                    .iter()
                    .zip(&n)
                    .map(|(s, n)| s.saturating_mul(n.max(&0).unsigned_abs()))
                    .collect())
            }
            Growth::Pad if args.len() >= 2 => sum(count(1)?
                .iter()
                .map(|n| n.max(&0).unsigned_abs().saturating_mul(4))
                .collect()),
            Growth::Replace if args.len() == 3 => {
                let (s, from, to) = (
                    lengths(&args[0], rows)?,
                    lengths(&args[1], rows)?,
                    lengths(&args[2], rows)?,
                );
                sum((0..rows)
                    .map(|i| match from[i] {
                        0 => s[i]
                            .saturating_add(1)
                            .saturating_mul(to[i].saturating_add(1)),
                        f => (s[i] / f).saturating_mul(to[i]).saturating_add(s[i]),
                    })
                    .collect())
            }
            Growth::ArrayRepeat if args.len() == 2 => sum(count(1)?
                .iter()
                .map(|n| n.max(&0).unsigned_abs().saturating_mul(8))
                .collect()),
            Growth::Range if !args.is_empty() => {
                let ints: Option<Vec<Vec<i64>>> = args
                    .iter()
                    .map(|a| integers(a, rows))
                    .collect::<Result<_>>()?;
                // Ranges of dates and times are left to DataFusion.
                let Some(ints) = ints else { return Ok(0) };
                let (start, stop, step) = match ints.len() {
                    1 => (vec![0; rows], ints[0].clone(), vec![1; rows]),
                    2 => (ints[0].clone(), ints[1].clone(), vec![1; rows]),
                    _ => (ints[0].clone(), ints[1].clone(), ints[2].clone()),
                };
                sum((0..rows)
                    .map(|i| {
                        let span = (i128::from(stop[i]) - i128::from(start[i])).unsigned_abs();
                        let step = i128::from(step[i]).unsigned_abs().max(1);
                        u64::try_from(span / step)
                            .unwrap_or(u64::MAX)
                            .saturating_mul(8)
                    })
                    .collect())
            }
            _ => 0,
        })
    }
}

impl ScalarUDFImpl for Bounded {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let bytes = self.estimate(&args.args, args.number_rows)?;
        if bytes > MAX_RESULT_BYTES {
            return exec_err!(
                "{}() would make about {} MiB here; one call may make at most {} MiB",
                self.inner.name(),
                bytes >> 20,
                MAX_RESULT_BYTES >> 20
            );
        }
        self.inner.invoke_with_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn simplify(&self, args: Vec<Expr>, info: &SimplifyContext) -> Result<ExprSimplifyResult> {
        self.inner.inner().simplify(args, info)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    fn run(sql: &str) -> Result<usize> {
        let ctx = SessionContext::new();
        for f in functions() {
            ctx.register_udf(f.as_ref().clone());
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let batches = ctx.sql(sql).await?.collect().await?;
            Ok(batches.iter().map(|b| b.num_rows()).sum())
        })
    }

    #[test]
    fn small_calls_run_and_huge_ones_are_errors() {
        for sql in [
            "SELECT repeat('ab', 1000)",
            "SELECT lpad('a', 1000, 'xy'), rpad('a', 10)",
            "SELECT replace('abc', 'b', 'xyz'), replace('abc', '', '-')",
            "SELECT array_repeat(1, 1000), range(1, 1000), generate_series(1, 1000, 2)",
            "SELECT range(DATE '2020-01-01', DATE '2020-02-01', INTERVAL '1 day')",
            "SELECT repeat(CAST(NULL AS VARCHAR), 5), repeat('x', NULL)",
        ] {
            assert_eq!(
                run(sql).unwrap_or_else(|e| panic!("{sql}: {e}")),
                1,
                "{sql}"
            );
        }
        for sql in [
            "SELECT repeat('ab', 100000000)",
            "SELECT lpad('a', 2000000000)",
            "SELECT rpad('a', 100000000, 'b')",
            "SELECT replace(repeat('x', 1000), '', repeat('y', 100000))",
            "SELECT array_repeat('x', 100000000)",
            "SELECT range(100000000)",
            "SELECT generate_series(-9223372036854775807, 9223372036854775807)",
            "SELECT repeat(s, 1000) FROM (VALUES (repeat('x', 100000))) AS t(s)",
        ] {
            let err = run(sql).unwrap_err().to_string();
            assert!(
                err.contains("one call may make at most 64 MiB"),
                "{sql}: {err}"
            );
        }
    }
}

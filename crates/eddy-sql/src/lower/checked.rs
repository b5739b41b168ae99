//! Runtime errors of expressions, as Feldera's SQL defines them.
//!
//! Integer `+`, `-` and `*` that overflow their type fail (DataFusion's
//! kernels wrap around unless asked to check), and so do integer `/` and
//! `%` by zero or past the type (`-128 / -1` as `TINYINT`). The error names
//! the operation with its operands and the SQL type, in Feldera's words:
//! `'120 + 100' causes overflow for type TINYINT`, `'250 / 0' causes
//! overflow for type TINYINT UNSIGNED`, `attempt to calculate the remainder
//! with a divisor of zero`. What a failure then does is the pipeline's [`RowErrors`]: fail
//! the step, or make the row's value NULL ([`NullOnError`]).

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Schema};
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_datafusion_err, DataFusionError, Result, ScalarValue};
use datafusion::logical_expr::{ColumnarValue, Operator};
use datafusion::physical_expr::expressions::{BinaryExpr, CastExpr, Column, Literal};
use datafusion::physical_expr::PhysicalExpr;
use eddy_dbsp::row_errors::NullOnError;

use crate::pipeline::RowErrors;

/// `expr` with checked integer arithmetic, failing on a row as `policy`
/// says.
pub(crate) fn prepare(
    expr: Arc<dyn PhysicalExpr>,
    schema: &Schema,
    policy: RowErrors,
) -> Result<Arc<dyn PhysicalExpr>> {
    let checked = expr
        .transform_up(|e| {
            let Some(b) = e.downcast_ref::<BinaryExpr>() else {
                return Ok(Transformed::no(e));
            };
            let arithmetic = matches!(
                b.op(),
                Operator::Plus
                    | Operator::Minus
                    | Operator::Multiply
                    | Operator::Divide
                    | Operator::Modulo
            );
            if !arithmetic {
                return Ok(Transformed::no(e));
            }
            let data_type = e.data_type(schema)?;
            if !data_type.is_integer() {
                return Ok(Transformed::no(e));
            }
            let inner = BinaryExpr::new(Arc::clone(b.left()), *b.op(), Arc::clone(b.right()))
                .with_fail_on_overflow(true);
            Ok(Transformed::yes(Arc::new(Checked {
                inner: Arc::new(inner),
                op: *b.op(),
                data_type,
            }) as Arc<dyn PhysicalExpr>))
        })?
        .data;
    Ok(match policy {
        RowErrors::Null if !infallible(&checked, schema) => NullOnError::wrap(checked),
        _ => checked,
    })
}

/// Whether `expr` cannot fail: a column, a constant, or an integer cast to
/// DOUBLE of one (left unwrapped, so that what reads expressions' shapes,
/// such as a join's key columns, still sees them).
fn infallible(expr: &Arc<dyn PhysicalExpr>, schema: &Schema) -> bool {
    if expr.is::<Column>() || expr.is::<Literal>() {
        return true;
    }
    expr.downcast_ref::<CastExpr>().is_some_and(|c| {
        c.cast_type() == &DataType::Float64
            && c.expr().data_type(schema).is_ok_and(|t| t.is_integer())
            && infallible(c.expr(), schema)
    })
}

/// The arithmetic of `expr`, checked or not.
pub(crate) fn binary(expr: &dyn PhysicalExpr) -> Option<&BinaryExpr> {
    match expr.downcast_ref::<Checked>() {
        Some(c) => c.inner.downcast_ref::<BinaryExpr>(),
        None => expr.downcast_ref::<BinaryExpr>(),
    }
}

/// The SQL name of an integer type.
pub(crate) fn sql_integer(data_type: &DataType) -> &'static str {
    match data_type {
        DataType::Int8 => "TINYINT",
        DataType::Int16 => "SMALLINT",
        DataType::Int32 => "INTEGER",
        DataType::Int64 => "BIGINT",
        DataType::UInt8 => "TINYINT UNSIGNED",
        DataType::UInt16 => "SMALLINT UNSIGNED",
        DataType::UInt32 => "INTEGER UNSIGNED",
        DataType::UInt64 => "BIGINT UNSIGNED",
        _ => "an integer type",
    }
}

/// Integer arithmetic that fails with Feldera's message.
#[derive(Debug, Eq)]
struct Checked {
    /// The operation, with `fail_on_overflow`.
    inner: Arc<dyn PhysicalExpr>,
    op: Operator,
    data_type: DataType,
}

// By hand, as DataFusion's own expressions do (rust-lang/rust#78808).
impl PartialEq for Checked {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl std::hash::Hash for Checked {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl Checked {
    /// Feldera's message for DataFusion's error `e` over `batch`.
    fn explain(&self, e: DataFusionError, batch: &RecordBatch) -> DataFusionError {
        let text = e.to_string();
        if text.contains("Divide by zero") {
            if self.op == Operator::Modulo {
                return exec_datafusion_err!(
                    "attempt to calculate the remainder with a divisor of zero"
                );
            }
            return match self.division_by_zero(batch) {
                Some(operation) => exec_datafusion_err!(
                    "'{operation}' causes overflow for type {}",
                    sql_integer(&self.data_type)
                ),
                None => exec_datafusion_err!("attempt to divide by zero"),
            };
        }
        match text.split_once("Overflow happened on: ") {
            Some((_, operation)) => exec_datafusion_err!(
                "'{}' causes overflow for type {}",
                operation.trim(),
                sql_integer(&self.data_type)
            ),
            None => e,
        }
    }
}

impl Checked {
    /// `l / r` for the first row of `batch` whose divisor is zero.
    fn division_by_zero(&self, batch: &RecordBatch) -> Option<String> {
        let n = batch.num_rows();
        let [l, r] = self.inner.children()[..] else {
            return None;
        };
        let l = l.evaluate(batch).and_then(|v| v.into_array(n)).ok()?;
        let r = r.evaluate(batch).and_then(|v| v.into_array(n)).ok()?;
        (0..n).find_map(|i| {
            let d = ScalarValue::try_from_array(&r, i).ok()?;
            if d != ScalarValue::new_zero(&d.data_type()).ok()? {
                return None;
            }
            let l = ScalarValue::try_from_array(&l, i).ok()?;
            Some(format!("{l} / {d}"))
        })
    }
}

impl fmt::Display for Checked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl PhysicalExpr for Checked {
    // Each of these reads its children once: a field built from both
    // (the default) would read a chain of N operations 2^N times.
    fn data_type(&self, _input_schema: &Schema) -> Result<DataType> {
        Ok(self.data_type.clone())
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.inner.nullable(input_schema)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        Ok(Arc::new(Field::new(
            "",
            self.data_type.clone(),
            self.nullable(input_schema)?,
        )))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        self.inner
            .evaluate(batch)
            .map_err(|e| self.explain(e, batch))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        self.inner.children()
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Arc::new(Checked {
            inner: Arc::clone(&self.inner).with_new_children(children)?,
            op: self.op,
            data_type: self.data_type.clone(),
        }))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

//! What an expression that fails on a row does.
//!
//! By default (Feldera's rule) it fails the step: [`evaluate_one`]
//! returns the error, the step is not taken, and whoever runs the circuit
//! reports it. An expression wrapped in [`NullOnError`] (the setting that
//! the SQLite corpus runs under) instead gives NULL on the rows where it
//! fails, evaluating them one by one, and counts them in [`row_errors`]:
//! the result stays a function of the input.
//!
//! [`evaluate_one`]: crate::operator::map::evaluate_one

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, FieldRef, Schema};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::PhysicalExpr;

/// Rows whose expression failed and became NULL, in this process.
static ROW_ERRORS: AtomicU64 = AtomicU64::new(0);

/// How many row evaluations failed and yielded NULL, in this process.
pub fn row_errors() -> u64 {
    ROW_ERRORS.load(Ordering::Relaxed)
}

/// An expression that is NULL on the rows where `inner` fails.
#[derive(Debug, Eq)]
pub struct NullOnError {
    inner: Arc<dyn PhysicalExpr>,
}

// By hand, as DataFusion's own expressions do (rust-lang/rust#78808).
impl PartialEq for NullOnError {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl Hash for NullOnError {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl NullOnError {
    /// `inner`, NULL where it fails.
    pub fn wrap(inner: Arc<dyn PhysicalExpr>) -> Arc<dyn PhysicalExpr> {
        Arc::new(Self { inner })
    }
}

impl fmt::Display for NullOnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.inner)
    }
}

impl PhysicalExpr for NullOnError {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.inner.data_type(input_schema)
    }

    fn nullable(&self, _input_schema: &Schema) -> Result<bool> {
        Ok(true)
    }

    fn return_field(&self, input_schema: &Schema) -> Result<FieldRef> {
        let field = self.inner.return_field(input_schema)?;
        Ok(Arc::new(field.as_ref().clone().with_nullable(true)))
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let n = batch.num_rows();
        if let Ok(v) = self.inner.evaluate(batch) {
            return Ok(v);
        }
        let data_type = self.inner.data_type(&batch.schema())?;
        let mut values = Vec::with_capacity(n);
        for i in 0..n {
            let row = batch.slice(i, 1);
            match self.inner.evaluate(&row).and_then(|v| v.into_array(1)) {
                Ok(a) => values.push(ScalarValue::try_from_array(&a, 0)?),
                Err(_) => {
                    ROW_ERRORS.fetch_add(1, Ordering::Relaxed);
                    values.push(ScalarValue::try_from(&data_type)?);
                }
            }
        }
        if n == 0 {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from(&data_type)?));
        }
        Ok(ColumnarValue::Array(ScalarValue::iter_to_array(values)?))
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        mut children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        Ok(Self::wrap(children.remove(0)))
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}

//! A connector's row filter (`snapshot_filter`, `filter`): a SQL boolean
//! expression over the table's columns, in DataFusion's dialect as
//! Feldera documents it, kept rows being those for which it is true (NULL
//! drops the row, as `WHERE` does). It is compiled once against the
//! table's schema and evaluated on each batch after the batch has the
//! table's types.

use std::sync::Arc;

use datafusion::arrow::array::{Array, BooleanArray, RecordBatch};
use datafusion::arrow::compute::filter_record_batch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::DFSchema;
use datafusion::logical_expr::{Expr, ExprSchemable, Volatility};
use datafusion::physical_expr::PhysicalExpr;
use datafusion::prelude::SessionContext;

/// A compiled filter.
#[derive(Debug)]
pub struct RowFilter {
    text: String,
    expr: Arc<dyn PhysicalExpr>,
}

impl RowFilter {
    /// Compiles `sql` over `schema`'s columns; `what` names the setting
    /// in errors.
    pub fn new(what: &str, sql: &str, schema: &SchemaRef) -> Result<Self, String> {
        let fail = |e: &dyn std::fmt::Display| format!("'{what}' ({sql}): {e}");
        let df_schema = DFSchema::try_from(Arc::clone(schema)).map_err(|e| fail(&e))?;
        let ctx = SessionContext::new();
        let expr = ctx.parse_sql_expr(sql, &df_schema).map_err(|e| fail(&e))?;
        // The same row must be judged the same every time it is read (when
        // a file adds it and when a later one removes it, and after a
        // restart): no `now()`, `random()`, ….
        let mut changing = None;
        let _ = expr.apply(|e| {
            if let Expr::ScalarFunction(f) = e {
                if f.func.signature().volatility != Volatility::Immutable {
                    changing = Some(f.func.name().to_string());
                    return Ok(TreeNodeRecursion::Stop);
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        if let Some(name) = changing {
            return Err(fail(&format!(
                "{name}() may answer differently each time a row is read: a filter takes constants"
            )));
        }
        let t = expr.get_type(&df_schema).map_err(|e| fail(&e))?;
        if t != datafusion::arrow::datatypes::DataType::Boolean {
            return Err(fail(&format!("a condition is BOOLEAN, this is {t}")));
        }
        let expr = ctx
            .create_physical_expr(expr, &df_schema)
            .map_err(|e| fail(&e))?;
        Ok(Self {
            text: sql.to_string(),
            expr,
        })
    }

    /// The rows of `batch` (of the schema given to [`Self::new`]) for
    /// which the condition is true.
    pub fn apply(&self, batch: &RecordBatch) -> Result<RecordBatch, String> {
        let fail = |e: &dyn std::fmt::Display| format!("filter ({}): {e}", self.text);
        let keep = self
            .expr
            .evaluate(batch)
            .and_then(|v| v.into_array(batch.num_rows()))
            .map_err(|e| fail(&e))?;
        let keep = keep
            .as_any()
            .downcast_ref::<BooleanArray>()
            .ok_or_else(|| fail(&"not a boolean"))?;
        if keep.null_count() == 0 && keep.true_count() == batch.num_rows() {
            return Ok(batch.clone());
        }
        filter_record_batch(batch, keep).map_err(|e| fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};
    use datafusion::arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn rows_are_kept_where_the_condition_is_true() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec![
                    Some("a"),
                    None,
                    Some("c"),
                    Some("d"),
                ])),
            ],
        )
        .unwrap();
        let f = RowFilter::new("filter", "id >= 2 AND name <> 'd'", &schema).unwrap();
        let kept = f.apply(&batch).unwrap();
        // Row 2's NULL name makes the condition NULL: dropped.
        let ids = kept
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap();
        assert_eq!(ids.values(), &[3]);
        assert!(RowFilter::new("filter", "nope > 1", &schema).is_err());
        let e = RowFilter::new("filter", "id > 1 AND now() > now()", &schema).unwrap_err();
        assert!(e.contains("now()") && e.contains("constants"), "{e}");
        assert!(RowFilter::new("filter", "random() < 0.5", &schema).is_err());
        let e = RowFilter::new("snapshot_filter", "id + 1", &schema).unwrap_err();
        assert!(
            e.contains("'snapshot_filter'") && e.contains("BOOLEAN"),
            "{e}"
        );
    }
}

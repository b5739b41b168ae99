//! `delta_table_input`'s `cdc` mode: the Delta table is a log of changes,
//! each row an insertion or, where `cdc_delete_filter` holds for it, a
//! deletion, applied in the order of `cdc_order_by` (Feldera's settings,
//! in DataFusion's dialect, as `SELECT * FROM t WHERE …` and `… ORDER BY
//! …` would take them).
//!
//! The events of a commit are the rows its files add less the rows its
//! files remove (so an `UPDATE` or `MERGE` that rewrites a file, or a
//! deletion vector that hides rows, brings only the rows it wrote; rows
//! removed from the log are not retracted). They are ordered by
//! `cdc_order_by`, rows it does not tell apart kept in the order read,
//! so the order is the same each time a commit is read (a resumed
//! pipeline skips the events the checkpoint holds). Without
//! `cdc_order_by`, the order read; without `cdc_delete_filter`, every row
//! inserts.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, RecordBatch, UInt64Array};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;

use crate::connector::blocking::block_on;
use crate::connector::filter::RowFilter;

/// Names of the columns the ordering query adds; a table column of the
/// same name is refused.
const SEQUENCE: &str = "__eddy_cdc_sequence";
const DELETE: &str = "__eddy_cdc_delete";

/// How a commit's rows become ordered events.
#[derive(Debug)]
pub struct Events {
    schema: SchemaRef,
    delete: Option<String>,
    order_by: Option<String>,
}

impl Events {
    /// Checks `cdc_delete_filter` and `cdc_order_by` over the table's
    /// columns (by ordering no rows).
    pub fn new(
        schema: &SchemaRef,
        delete: Option<&str>,
        order_by: Option<&str>,
    ) -> Result<Self, String> {
        if let Some(sql) = delete {
            // A condition of constants, as the filters are: a row is
            // judged the same each time its commit is read.
            RowFilter::new("cdc_delete_filter", sql, schema)?;
        }
        if schema
            .fields()
            .iter()
            .any(|f| f.name() == SEQUENCE || f.name() == DELETE)
        {
            return Err(format!(
                "mode 'cdc' cannot read a table with a column named {SEQUENCE} or {DELETE}"
            ));
        }
        let events = Self {
            schema: Arc::clone(schema),
            delete: delete.map(str::to_string),
            order_by: order_by.map(str::to_string),
        };
        events
            .order(RecordBatch::new_empty(Arc::clone(schema)))
            .map_err(|e| match order_by {
                Some(o) => format!("'cdc_order_by' ({o}): {e}"),
                None => e,
            })?;
        Ok(events)
    }

    /// `rows` (of the table's schema) in the order of `cdc_order_by`,
    /// with whether each is a deletion.
    pub fn order(&self, rows: RecordBatch) -> Result<(RecordBatch, BooleanArray), String> {
        let n = rows.num_rows();
        let mut fields: Vec<Field> = self
            .schema
            .fields()
            .iter()
            .map(|f| f.as_ref().clone())
            .collect();
        fields.push(Field::new(SEQUENCE, DataType::UInt64, false));
        let mut columns: Vec<ArrayRef> = rows.columns().to_vec();
        columns.push(Arc::new(UInt64Array::from_iter_values(0..n as u64)));
        let with_sequence = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
            .map_err(|e| e.to_string())?;
        let delete = self.delete.as_deref().unwrap_or("false");
        let order = match &self.order_by {
            Some(o) => format!("{o}, {SEQUENCE}"),
            None => SEQUENCE.to_string(),
        };
        let sql = format!(
            "SELECT *, COALESCE(({delete}), false) AS {DELETE} FROM eddy_cdc_rows ORDER BY {order}"
        );
        let ctx = SessionContext::new();
        let batches = block_on(async move {
            ctx.register_batch("eddy_cdc_rows", with_sequence)?;
            // The settings are the user's text: a query, never a statement.
            let only_a_query = SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_dml(false)
                .with_allow_statements(false);
            ctx.sql_with_options(&sql, only_a_query)
                .await?
                .collect()
                .await
        })
        .map_err(|e| e.to_string())?;
        let out_schema = match batches.first() {
            Some(b) => b.schema(),
            None => {
                return Ok((
                    RecordBatch::new_empty(Arc::clone(&self.schema)),
                    BooleanArray::from(Vec::<bool>::new()),
                ))
            }
        };
        let all = concat_batches(&out_schema, &batches).map_err(|e| e.to_string())?;
        let width = self.schema.fields().len();
        let events =
            RecordBatch::try_new(Arc::clone(&self.schema), all.columns()[..width].to_vec())
                .map_err(|e| e.to_string())?;
        let deletes = all
            .column_by_name(DELETE)
            .and_then(|c| c.as_boolean_opt())
            .ok_or("the deletion flag is not BOOLEAN")?
            .clone();
        debug_assert_eq!(deletes.null_count(), 0);
        Ok((events, deletes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int64Array, StringArray};

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("op", DataType::Utf8, true),
            Field::new("ts", DataType::Int64, true),
        ]))
    }

    #[test]
    fn events_are_ordered_and_flagged() {
        let rows = RecordBatch::try_new(
            schema(),
            vec![
                Arc::new(Int64Array::from(vec![1, 2, 3, 4])),
                Arc::new(StringArray::from(vec![
                    Some("i"),
                    Some("d"),
                    None,
                    Some("i"),
                ])),
                Arc::new(Int64Array::from(vec![
                    Some(30),
                    Some(10),
                    Some(20),
                    Some(10),
                ])),
            ],
        )
        .unwrap();
        let e = Events::new(&schema(), Some("op = 'd'"), Some("ts")).unwrap();
        let (events, deletes) = e.order(rows.clone()).unwrap();
        let ids = events
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        // ts 10 twice: the order read (2 before 4).
        assert_eq!(ids.values(), &[2, 4, 3, 1]);
        // A NULL op is not a deletion.
        assert_eq!(deletes, BooleanArray::from(vec![true, false, false, false]));
        let e = Events::new(&schema(), None, Some("ts DESC, id DESC")).unwrap();
        let (events, deletes) = e.order(rows.clone()).unwrap();
        let ids = events
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        assert_eq!(ids.values(), &[1, 3, 4, 2]);
        assert_eq!(deletes.true_count(), 0);
        let (events, _) = Events::new(&schema(), None, None)
            .unwrap()
            .order(rows)
            .unwrap();
        assert_eq!(events.num_rows(), 4);

        assert!(Events::new(&schema(), Some("nope = 1"), None).is_err());
        assert!(Events::new(&schema(), Some("random() < 0.5"), None).is_err());
        let e = Events::new(&schema(), None, Some("nope")).unwrap_err();
        assert!(e.contains("'cdc_order_by'"), "{e}");
    }
}

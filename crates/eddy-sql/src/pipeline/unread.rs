//! Columns of a table that nothing in the program reads.
//!
//! A view reads a table through the scans of its plan, each of which names
//! the columns it projects and those its pushed-down filters test. A column
//! that no scan names, that is no part of the primary key or of a
//! `LATENESS`, of a table whose rows are not kept (neither `materialized`
//! nor with a primary key, whose upsert keeps them), is never looked at: its values can be dropped as soon as
//! a change arrives. Nexmark's `bid` carries three strings (`channel`,
//! `url`, `extra`) that most queries never read, and the changes waiting
//! for a step and the step's copy of them would otherwise hold them all.
//!
//! Dropping a column replaces it with nulls (every column of a table's
//! input is nullable). Two rows that then become equal differ only in
//! columns nobody reads, so consolidating them changes no view. Only
//! columns of variable width are dropped: a fixed-width column of nulls
//! costs as much as the column.
//!
//! The input journal keeps whole rows (a later program may read more), so
//! the server drops columns after journaling.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::tree_node::TreeNodeRecursion;
use datafusion::logical_expr::LogicalPlan;
use eddy_dbsp::ZSet;

use crate::catalog::TableDef;
use crate::error::SqlResult;
use crate::program::Program;

/// Per table, the columns whose values are dropped on arrival.
#[derive(Clone, Debug, Default)]
pub struct UnreadColumns {
    /// The table's input schema (all nullable) and its unread columns, for
    /// tables that have some.
    tables: HashMap<String, (SchemaRef, Vec<usize>)>,
}

impl UnreadColumns {
    /// The unread columns of `program`'s tables, whose inputs have the
    /// schemas in `inputs`.
    pub(crate) fn of(program: &Program, inputs: &HashMap<String, SchemaRef>) -> Self {
        let read = columns_read(program);
        let mut tables = HashMap::new();
        for table in &program.tables {
            let Some(schema) = inputs.get(&table.name) else {
                continue;
            };
            let unread = unread(table, read.get(&table.name), schema);
            if !unread.is_empty() {
                tables.insert(table.name.clone(), (Arc::clone(schema), unread));
            }
        }
        Self { tables }
    }

    /// The columns of `table` that are dropped (none for a table not in
    /// the program).
    pub fn columns(&self, table: &str) -> &[usize] {
        self.tables.get(table).map_or(&[], |(_, c)| c.as_slice())
    }

    /// `change`, a change of `table` (with the table's column types), with
    /// its unread columns replaced by nulls and the input's schema.
    pub fn drop_from(&self, table: &str, change: ZSet) -> SqlResult<ZSet> {
        let Some((schema, unread)) = self.tables.get(table) else {
            return Ok(change);
        };
        let n = change.len();
        if change.batch().num_columns() != schema.fields().len() {
            // Not the table's columns: left for the input to refuse.
            return Ok(change);
        }
        if unread
            .iter()
            .all(|&c| change.batch().column(c).null_count() == n)
        {
            return Ok(change.with_schema(schema)?);
        }
        let (batch, weights) = change.into_parts();
        let mut columns = batch.columns().to_vec();
        for &c in unread {
            if columns[c].null_count() != n {
                columns[c] = new_null_array(columns[c].data_type(), n);
            }
        }
        let batch = RecordBatch::try_new(Arc::clone(schema), columns)?;
        Ok(ZSet::new(batch, weights))
    }
}

/// The columns of `table` nothing reads, given those its scans read.
fn unread(table: &TableDef, scans: Option<&HashSet<usize>>, schema: &SchemaRef) -> Vec<usize> {
    if table.keeps_rows() {
        return Vec::new();
    }
    let mut unread = Vec::new();
    for (c, field) in schema.fields().iter().enumerate() {
        let read = scans.is_some_and(|s| s.contains(&c))
            || table.primary_key.contains(&c)
            || table.lateness.iter().any(|l| l.column == c);
        if !read && variable_width(field.data_type()) {
            unread.push(c);
        }
    }
    unread
}

/// Whether a column of `data_type` holds its values in buffers that grow
/// with their sizes (strings, binaries, lists, maps, and structs or
/// fixed-size lists of those): a column of nulls of any other type costs
/// as much as the column.
fn variable_width(data_type: &DataType) -> bool {
    match data_type {
        DataType::Struct(fields) => fields.iter().any(|f| variable_width(f.data_type())),
        DataType::FixedSizeList(item, _) => variable_width(item.data_type()),
        t => {
            !(t.is_primitive()
                || matches!(
                    t,
                    DataType::Null | DataType::Boolean | DataType::FixedSizeBinary(_)
                ))
        }
    }
}

/// Per relation name, the columns the program's scans read: those each
/// scan projects (all when it projects none) and those its filters test.
/// A scan of a name that is also a recursive query's counts too: reading
/// more than is read is safe.
fn columns_read(program: &Program) -> HashMap<String, HashSet<usize>> {
    let mut read: HashMap<String, HashSet<usize>> = HashMap::new();
    for view in &program.views {
        let _ = view.plan.apply_with_subqueries(|p| {
            if let LogicalPlan::TableScan(scan) = p {
                let columns = read.entry(scan.table_name.table().to_string()).or_default();
                let source = scan.source.schema();
                let width = source.fields().len();
                match &scan.projection {
                    Some(p) => columns.extend(p.iter().copied()),
                    None => columns.extend(0..width),
                }
                // A filter's columns are the scanned table's, by name.
                for c in scan.filters.iter().flat_map(|f| f.column_refs()) {
                    match source.index_of(&c.name) {
                        Ok(i) => {
                            columns.insert(i);
                        }
                        Err(_) => columns.extend(0..width),
                    }
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
    }
    read
}

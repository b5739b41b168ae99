//! The catalog of a program: its tables and views.

use datafusion::arrow::datatypes::SchemaRef;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::LogicalPlan;

/// A table: an input of the program.
#[derive(Debug, Clone)]
pub struct TableDef {
    /// Normalized name (lowercase unless quoted).
    pub name: String,
    /// Column names and types.
    pub schema: SchemaRef,
    /// Indices of the PRIMARY KEY columns; empty when there is none.
    pub primary_key: Vec<usize>,
    /// Whether its rows are kept for ad-hoc queries (`WITH ('materialized' =
    /// 'true')`).
    pub materialized: bool,
    /// Whether it only ever receives insertions (`WITH ('append_only' =
    /// 'true')`): deletions sent to it are refused and counted.
    pub append_only: bool,
    /// The `WITH (…)` options, as written.
    pub options: Vec<(String, String)>,
    /// Columns declared with `LATENESS`.
    pub lateness: Vec<Lateness>,
    /// Where its `CREATE TABLE` statement starts in the program text, for
    /// errors found after the program checked (its connectors).
    pub at: Option<crate::error::Location>,
}

impl TableDef {
    /// Whether the pipeline keeps the table's rows, for ad-hoc queries and
    /// for a view added by a program change: declared `materialized`, or
    /// with a primary key (whose upsert keeps one row per key anyway; as
    /// Feldera materializes such tables).
    pub fn keeps_rows(&self) -> bool {
        self.materialized || !self.primary_key.is_empty()
    }
}

/// A column's lateness: changes whose value in the column is below the
/// largest value seen in earlier steps minus `amount` are late (dropped).
#[derive(Debug, Clone, PartialEq)]
pub struct Lateness {
    /// The column's index.
    pub column: usize,
    /// How far behind the largest value a change may be: an interval or a
    /// number, of a type that can be subtracted from the column's.
    pub amount: ScalarValue,
}

/// A view: an output of the program.
#[derive(Debug, Clone)]
pub struct ViewDef {
    /// Normalized name.
    pub name: String,
    /// Output columns.
    pub schema: SchemaRef,
    /// The optimized, decorrelated plan that was lowered.
    pub plan: LogicalPlan,
    /// Whether it was declared `MATERIALIZED`.
    pub materialized: bool,
    /// The `WITH (…)` options, as written.
    pub options: Vec<(String, String)>,
    /// Columns given a lateness by `LATENESS view.column …;` statements.
    pub lateness: Vec<Lateness>,
    /// The group of mutually recursive views it belongs to (numbered in
    /// program order), when it is one (`DECLARE RECURSIVE VIEW`).
    pub recursive: Option<usize>,
    /// Where its `CREATE VIEW` statement starts in the program text, for
    /// errors found after the program checked (while it is lowered).
    pub at: Option<crate::error::Location>,
}

//! `INSERT` and `DELETE` as changes to a table: Eddy's own translation,
//! never DataFusion's DML.
//!
//! * `INSERT INTO t [(cols)] VALUES … | SELECT …`: the source is a
//!   read-only query, run through the same checked path as `/query`; its
//!   columns are cast to the table's types (missing columns are NULL), and
//!   each row becomes an insertion (weight +1).
//! * `DELETE FROM t [WHERE cond]`: `SELECT * FROM t WHERE cond` over the
//!   pipeline's snapshot (so the table must be materialized) finds the rows,
//!   and each becomes a deletion (weight −1); a table with a primary key
//!   deletes by key.
//!
//! The changes enter the pipeline as HTTP ingress does (journaled under
//! fault tolerance), and the statement (or the transaction's `COMMIT`)
//! returns once the step that took them is done, so a later query sees them.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::sql::sqlparser::ast::{
    Delete, Expr, FromTable, Ident, Insert, ObjectName, SetExpr, TableFactor, TableObject,
};
use eddy_dbsp::ZSet;
use pgwire::error::PgWireError;

use super::error::{code, query_error, user_error};
use super::statement::rewrite_expr_text;
use crate::query::{self, Param, QueryLimits, Request};
use crate::runner::{Origin, Runner};

/// A change statement, parsed.
#[derive(Debug, Clone)]
pub struct Change {
    /// The table's name, normalized as SQL does (unquoted names lowercase).
    pub table: String,
    /// What it does.
    pub kind: ChangeKind,
    /// How many `$n` placeholders it has.
    pub params: usize,
}

/// What a change statement does.
#[derive(Debug, Clone)]
pub enum ChangeKind {
    /// Inserts the rows of a query into the named columns (all, in order,
    /// when none are named).
    Insert {
        /// The named columns, normalized.
        columns: Vec<String>,
        /// The query giving the rows, in DataFusion's SQL.
        source: String,
        /// Whether the source reads relations (then it needs a snapshot).
        reads: bool,
    },
    /// Deletes the rows that match a condition (all rows without one).
    Delete {
        /// The condition, in DataFusion's SQL.
        filter: Option<String>,
    },
}

impl Change {
    /// The command tag's word.
    pub fn command(&self) -> &'static str {
        match self.kind {
            ChangeKind::Insert { .. } => "INSERT",
            ChangeKind::Delete { .. } => "DELETE",
        }
    }
}

fn normalize(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_lowercase()
    }
}

fn table_name(name: &ObjectName) -> Result<String, PgWireError> {
    let parts: Vec<&Ident> = name.0.iter().filter_map(|p| p.as_ident()).collect();
    match parts[..] {
        [t] => Ok(normalize(t)),
        [s, t] if normalize(s) == "public" => Ok(normalize(t)),
        _ => Err(user_error(
            code::UNDEFINED_TABLE,
            format!("relation \"{name}\" does not exist"),
        )),
    }
}

fn unsupported(what: &str) -> PgWireError {
    user_error(code::NOT_SUPPORTED, format!("{what} is not supported"))
}

/// Reads an `INSERT` statement.
pub fn insert(i: Insert) -> Result<Change, PgWireError> {
    if i.on.is_some() {
        return Err(unsupported("INSERT … ON CONFLICT"));
    }
    if i.returning.is_some() {
        return Err(unsupported("INSERT … RETURNING"));
    }
    let TableObject::TableName(name) = &i.table else {
        return Err(unsupported("INSERT INTO a table function"));
    };
    let table = table_name(name)?;
    let Some(mut source) = i.source else {
        return Err(unsupported("INSERT without VALUES or a query"));
    };
    let reads = !matches!(source.body.as_ref(), SetExpr::Values(_));
    let mut statement = datafusion::sql::sqlparser::ast::Statement::Query(source.clone());
    super::statement::rewrite(&mut statement);
    if let datafusion::sql::sqlparser::ast::Statement::Query(q) = statement {
        source = q;
    }
    let columns = i
        .columns
        .iter()
        .map(|c| {
            c.0.last()
                .and_then(|p| p.as_ident())
                .map(normalize)
                .unwrap_or_default()
        })
        .collect();
    Ok(Change {
        table,
        params: 0,
        kind: ChangeKind::Insert {
            columns,
            source: source.to_string(),
            reads,
        },
    })
}

/// Reads a `DELETE` statement.
pub fn delete(d: Delete) -> Result<Change, PgWireError> {
    if d.using.is_some() {
        return Err(unsupported("DELETE … USING"));
    }
    if d.returning.is_some() {
        return Err(unsupported("DELETE … RETURNING"));
    }
    if d.limit.is_some() || !d.order_by.is_empty() {
        return Err(unsupported("DELETE … ORDER BY / LIMIT"));
    }
    let (FromTable::WithFromKeyword(from) | FromTable::WithoutKeyword(from)) = &d.from;
    let [only] = &from[..] else {
        return Err(unsupported("DELETE from several tables"));
    };
    let TableFactor::Table { name, alias, .. } = &only.relation else {
        return Err(unsupported("DELETE from a derived table"));
    };
    if alias.is_some() || !only.joins.is_empty() {
        return Err(unsupported("DELETE with an alias or a join"));
    }
    let table = table_name(name)?;
    Ok(Change {
        table,
        params: 0,
        kind: ChangeKind::Delete {
            filter: d.selection.map(|e: Expr| rewrite_expr_text(e)),
        },
    })
}

/// Quotes an identifier for DataFusion.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The changes a statement makes to its table, with the command tag's
/// row count: the source query (or the rows to delete) run over the
/// pipeline's snapshot within `limits`.
pub async fn changes(
    change: &Change,
    runner: &Runner,
    limits: QueryLimits,
    params: Vec<Param>,
) -> Result<(String, ZSet), PgWireError> {
    let schema = Arc::clone(runner.feeder.schema(&change.table).map_err(|_| {
        user_error(
            code::UNDEFINED_TABLE,
            format!("table \"{}\" does not exist in this pipeline", change.table),
        )
    })?);
    let snapshot = |needed: bool| async move {
        if needed {
            runner
                .snapshot()
                .await
                .map_err(|e| user_error(code::NOT_RUNNING, e))
        } else {
            Ok(Vec::new())
        }
    };
    match &change.kind {
        ChangeKind::Insert {
            columns,
            source,
            reads,
        } => {
            let mut request = Request::new(snapshot(*reads).await?, source.clone());
            request.params = params;
            let answer = query::run_request(request, limits)
                .await
                .map_err(query_error)?;
            let rows = conform(&schema, columns, &answer.schema, &answer.batches)?;
            Ok((change.table.clone(), ZSet::with_weight(rows, 1)))
        }
        ChangeKind::Delete { .. } if runner.feeder.append_only(&change.table) => Err(user_error(
            code::NOT_SUPPORTED,
            format!(
                "table \"{}\" is declared append_only: it refuses deletions",
                change.table
            ),
        )),
        ChangeKind::Delete { filter } => {
            let snapshot = snapshot(true).await?;
            if !snapshot.iter().any(|(name, _, _)| *name == change.table) {
                return Err(user_error(
                    code::NOT_SUPPORTED,
                    format!(
                        "DELETE reads the table's rows, and table \"{}\" is not materialized: \
                         declare it WITH ('materialized' = 'true')",
                        change.table
                    ),
                ));
            }
            let sql = match filter {
                Some(f) => format!("SELECT * FROM {} WHERE {f}", quote(&change.table)),
                None => format!("SELECT * FROM {}", quote(&change.table)),
            };
            let mut request = Request::new(snapshot, sql);
            request.params = params;
            let answer = query::run_request(request, limits)
                .await
                .map_err(query_error)?;
            let rows = concat(&answer.schema, &answer.batches)?
                .with_schema(&schema)
                .map_err(|e| user_error(code::INTERNAL, e.to_string()))?;
            Ok((change.table.clone(), rows.negate()))
        }
    }
}

fn concat(schema: &SchemaRef, batches: &[RecordBatch]) -> Result<ZSet, PgWireError> {
    datafusion::arrow::compute::concat_batches(schema, batches)
        .map(|b| ZSet::with_weight(b, 1))
        .map_err(|e| user_error(code::INTERNAL, e.to_string()))
}

/// The rows of an `INSERT`'s source as rows of the table: the named
/// columns (or all) cast to the table's types, the others NULL.
fn conform(
    table: &SchemaRef,
    columns: &[String],
    source: &SchemaRef,
    batches: &[RecordBatch],
) -> Result<RecordBatch, PgWireError> {
    let batch = datafusion::arrow::compute::concat_batches(source, batches)
        .map_err(|e| user_error(code::INTERNAL, e.to_string()))?;
    let targets: Vec<usize> = if columns.is_empty() {
        (0..table.fields().len().min(batch.num_columns())).collect()
    } else {
        columns
            .iter()
            .map(|c| {
                table.index_of(c).map_err(|_| {
                    user_error(
                        code::UNDEFINED_COLUMN,
                        format!("column \"{c}\" of table does not exist"),
                    )
                })
            })
            .collect::<Result<_, _>>()?
    };
    if batch.num_columns() != targets.len() {
        return Err(user_error(
            "42601",
            format!(
                "INSERT has {} expressions but {} target columns",
                batch.num_columns(),
                targets.len()
            ),
        ));
    }
    let options = CastOptions {
        safe: false,
        ..CastOptions::default()
    };
    let mut out: Vec<ArrayRef> = Vec::with_capacity(table.fields().len());
    for (i, field) in table.fields().iter().enumerate() {
        let array = match targets.iter().position(|&t| t == i) {
            Some(from) => cast_with_options(batch.column(from), field.data_type(), &options)
                .map_err(|e| {
                    user_error(
                        code::DATATYPE_MISMATCH,
                        format!("column \"{}\" is {}: {e}", field.name(), field.data_type()),
                    )
                })?,
            None => new_null_array(field.data_type(), batch.num_rows()),
        };
        if !field.is_nullable() && array.null_count() > 0 {
            return Err(user_error(
                code::NOT_NULL,
                format!(
                    "null value in column \"{}\" violates not-null constraint",
                    field.name()
                ),
            ));
        }
        out.push(array);
    }
    RecordBatch::try_new(Arc::clone(table), out)
        .map_err(|e| user_error(code::INTERNAL, e.to_string()))
}

/// Feeds changes into the pipeline as HTTP ingress does and waits until
/// the step that takes them is done.
pub async fn apply(runner: &Runner, changes: Vec<(String, ZSet)>) -> Result<(), PgWireError> {
    let feeder = &runner.feeder;
    let stopped = |e: crate::runner::FeedError| user_error(code::NOT_RUNNING, e.to_string());
    let mut token = None;
    for (table, rows) in changes {
        if rows.is_empty() {
            continue;
        }
        let origin = Origin {
            journal: true,
            ..Origin::default()
        };
        let fed = if feeder.journaled() {
            // The journal syncs to disk: not on the runtime's threads.
            let feeder = Arc::clone(feeder);
            tokio::task::spawn_blocking(move || feeder.feed_blocking(&table, rows, origin))
                .await
                .map_err(|e| user_error(code::INTERNAL, e.to_string()))?
        } else {
            feeder.feed(&table, rows, origin).await
        };
        token = Some(fed.map_err(stopped)?);
    }
    if let Some(token) = token {
        if !feeder.wait_processed(token).await || feeder.processed() < token {
            return Err(user_error(
                code::NOT_RUNNING,
                "the pipeline stopped before the change was processed",
            ));
        }
    }
    Ok(())
}

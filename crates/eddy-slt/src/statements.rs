//! The database state of one sqllogictest file: a program (tables, views)
//! and the current contents of every table, changed by statements.
//!
//! Row sets of `INSERT … SELECT/VALUES`, `DELETE … WHERE` and `UPDATE` are
//! computed by one-step Eddy pipelines over the current contents.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::sql::sqlparser::ast::{
    FromTable, ObjectName, Query, Statement, TableFactor, TableObject,
};
use eddy_dbsp::ZSet;
use eddy_sql::program::{normalize_ident, parse_statements, table_def};
use eddy_sql::{Pipeline, Program, SqlError, SqlResult};
use rand::rngs::StdRng;
use rand::Rng;

/// Name of the view that holds the query under test.
pub const QUERY_VIEW: &str = "__slt_query";

/// Tables, views and table contents.
#[derive(Clone)]
pub struct Database {
    /// Tables and views declared so far.
    pub program: Program,
    /// Current contents of every table, consolidated.
    pub data: HashMap<String, ZSet>,
    /// Indexes and triggers by name, with their table. They change no
    /// answer (Eddy has neither: a view is its own index and trigger), but
    /// their names follow SQLite's rules: a second of one name, or dropping
    /// or reindexing one that is not there, is an error.
    objects: HashMap<String, CatalogObject>,
    /// Where query pipelines are checkpointed between steps, if they are.
    restart_dir: Option<PathBuf>,
    /// Workers of the query pipelines (0 and 1: one).
    workers: usize,
}

impl Default for Database {
    fn default() -> Self {
        Self {
            // The corpus's rule: AVG of integers is a DOUBLE, as in
            // PostgreSQL and SQLite.
            program: Program::with_rules(eddy_sql::Rules::Postgres),
            data: HashMap::new(),
            objects: HashMap::new(),
            restart_dir: None,
            workers: 0,
        }
    }
}

/// An index or a trigger: a name in the catalog and nothing more.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CatalogObject {
    kind: ObjectKind,
    table: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ObjectKind {
    Index,
    Trigger,
}

fn last_name(name: &ObjectName) -> String {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .map(normalize_ident)
        .unwrap_or_default()
}

fn single_query(sql: &str) -> SqlResult<Query> {
    let mut statements = parse_statements(sql)?;
    match (statements.pop(), statements.is_empty()) {
        (Some(Statement::Query(mut q)), true) => {
            unique_output_names(&mut q);
            Ok(*q)
        }
        _ => Err(SqlError::new("expected one SELECT statement")),
    }
}

/// Gives repeated output column names of the top-level SELECT unique
/// aliases. A query result may repeat a column name (`SELECT 1 AS x, 2 AS
/// x`), a view may not; the checked answer does not depend on names.
fn unique_output_names(query: &mut Query) {
    use datafusion::sql::sqlparser::ast::{Expr, Ident, SelectItem, SetExpr};
    let SetExpr::Select(select) = query.body.as_mut() else {
        return;
    };
    let mut seen: Vec<String> = Vec::new();
    for (i, item) in select.projection.iter_mut().enumerate() {
        let name = match item {
            SelectItem::UnnamedExpr(Expr::Identifier(id)) => normalize_ident(id),
            SelectItem::UnnamedExpr(Expr::CompoundIdentifier(ids)) => {
                ids.last().map(normalize_ident).unwrap_or_default()
            }
            // DataFusion names every scalar subquery the same.
            SelectItem::UnnamedExpr(Expr::Subquery(_)) => "(<subquery>)".to_string(),
            SelectItem::UnnamedExpr(e) => e.to_string().to_lowercase(),
            SelectItem::ExprWithAlias { alias, .. } => normalize_ident(alias),
            _ => continue,
        };
        if seen.contains(&name) {
            let alias = Ident::new(format!("__col{i}"));
            *item = match std::mem::replace(item, SelectItem::Wildcard(Default::default())) {
                SelectItem::UnnamedExpr(expr) | SelectItem::ExprWithAlias { expr, .. } => {
                    SelectItem::ExprWithAlias { expr, alias }
                }
                other => other,
            };
        } else {
            seen.push(name);
        }
    }
}

impl Database {
    /// An empty database.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty database whose query pipelines are checkpointed into
    /// `scratch` after every step and restored into new pipelines (see
    /// [`Pipeline::checkpoint`]).
    pub fn restarting(scratch: &Path) -> Self {
        Self {
            restart_dir: Some(scratch.to_path_buf()),
            ..Self::default()
        }
    }

    /// The same database, whose query pipelines split every keyed
    /// operator into `workers` shards.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// A pipeline of `program` with this database's workers.
    fn pipeline(&self, program: Program) -> SqlResult<Pipeline> {
        let options = eddy_sql::PipelineOptions {
            storage: None,
            workers: self.workers,
            views: eddy_sql::ViewsKept::All,
            // The corpus's rule: a row whose expression fails is NULL.
            row_errors: eddy_sql::RowErrors::Null,
        };
        Pipeline::with_options(program, options)
    }

    /// Checkpoints `pipeline` and restores the checkpoint into a new
    /// pipeline of the same program, when the database restarts them.
    fn restart(&self, pipeline: Pipeline) -> SqlResult<Pipeline> {
        let Some(dir) = &self.restart_dir else {
            return Ok(pipeline);
        };
        let io = |e: std::io::Error| SqlError::new(format!("{}: {e}", dir.display()));
        if dir.exists() {
            std::fs::remove_dir_all(dir).map_err(io)?;
        }
        std::fs::create_dir_all(dir).map_err(io)?;
        pipeline.checkpoint(dir)?;
        let program = pipeline.program().clone();
        drop(pipeline);
        let mut fresh = self.pipeline(program)?;
        fresh.restore(dir)?;
        Ok(fresh)
    }

    /// Executes one statement.
    pub fn execute(&mut self, sql: &str) -> SqlResult<()> {
        if let Some(target) = reindex_target(sql) {
            return self.reindex(target.as_deref());
        }
        for statement in parse_statements(sql)? {
            self.execute_statement(statement)?;
        }
        Ok(())
    }

    fn execute_statement(&mut self, statement: Statement) -> SqlResult<()> {
        match statement {
            Statement::CreateTable(ct) => {
                let table = table_def(&ct, &self.program.types)?;
                if ct.if_not_exists && self.program.relation_exists(&table.name) {
                    return Ok(());
                }
                let schema = Arc::clone(&table.schema);
                let name = table.name.clone();
                self.program.add_table(table)?;
                self.data.insert(name, ZSet::empty(&schema));
                Ok(())
            }
            Statement::CreateType { .. } | Statement::CreateFunction(_) => {
                self.program.add_statement(statement)
            }
            Statement::CreateView(cv) => {
                if cv.if_not_exists && self.program.relation_exists(&last_name(&cv.name)) {
                    return Ok(());
                }
                self.program.add_statement(Statement::CreateView(cv))
            }
            Statement::Drop {
                object_type,
                if_exists,
                names,
                ..
            } => {
                use datafusion::sql::sqlparser::ast::ObjectType;
                match object_type {
                    ObjectType::Table | ObjectType::View => {
                        for name in &names {
                            let name = last_name(name);
                            let is_table = self.program.table(&name).is_some();
                            let kind_ok = if object_type == ObjectType::Table {
                                is_table
                            } else {
                                self.program.view(&name).is_some()
                            };
                            if !kind_ok {
                                if if_exists {
                                    continue;
                                }
                                return Err(SqlError::new(format!("'{name}' does not exist")));
                            }
                            self.program.remove(&name);
                            self.data.remove(&name);
                            self.objects.retain(|_, o| o.table != name);
                        }
                        Ok(())
                    }
                    ObjectType::Index => {
                        for name in &names {
                            self.drop_object(ObjectKind::Index, &last_name(name), if_exists)?;
                        }
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            Statement::Insert(insert) => {
                let TableObject::TableName(name) = &insert.table else {
                    return Err(SqlError::new("INSERT into a table function"));
                };
                let name = last_name(name);
                let Some(source) = insert.source else {
                    return Err(SqlError::new("INSERT without rows"));
                };
                let columns: Vec<String> = insert.columns.iter().map(last_name).collect();
                let replace = insert.replace_into
                    || insert.or
                        == Some(datafusion::sql::sqlparser::ast::SqliteOnConflict::Replace);
                let rows = self.evaluate(*source, 1, None)?;
                let rows = self.conform(&name, &columns, rows)?;
                if replace {
                    self.remove_same_keys(&name, &rows)?;
                }
                self.apply(&name, ZSet::with_weight(rows, 1))
            }
            Statement::Delete(delete) => {
                let tables = match &delete.from {
                    FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
                };
                let Some(TableFactor::Table { name, .. }) = tables.first().map(|t| &t.relation)
                else {
                    return Err(SqlError::new("DELETE needs a table"));
                };
                let name = last_name(name);
                let filter = delete
                    .selection
                    .map(|s| format!(" WHERE {s}"))
                    .unwrap_or_default();
                let rows = self.evaluate(
                    single_query(&format!("SELECT * FROM {name}{filter}"))?,
                    1,
                    None,
                )?;
                self.apply(&name, ZSet::with_weight(rows, -1))
            }
            Statement::Update(update) => {
                let TableFactor::Table { name, .. } = &update.table.relation else {
                    return Err(SqlError::new("UPDATE needs a table"));
                };
                let name = last_name(name);
                let table = self.table(&name)?;
                let mut assigned: HashMap<String, String> = HashMap::new();
                for a in &update.assignments {
                    let column = a.target.to_string().to_lowercase();
                    if table.schema.field_with_name(&column).is_err() {
                        return Err(SqlError::new(format!("no column '{column}' in '{name}'")));
                    }
                    assigned.insert(column, a.value.to_string());
                }
                let select: Vec<String> = table
                    .schema
                    .fields()
                    .iter()
                    .map(|f| {
                        assigned
                            .get(f.name())
                            .cloned()
                            .unwrap_or_else(|| format!("\"{}\"", f.name()))
                    })
                    .collect();
                let filter = update
                    .selection
                    .map(|s| format!(" WHERE {s}"))
                    .unwrap_or_default();
                let old = self.evaluate(
                    single_query(&format!("SELECT * FROM {name}{filter}"))?,
                    1,
                    None,
                )?;
                let new = self.evaluate(
                    single_query(&format!("SELECT {} FROM {name}{filter}", select.join(", ")))?,
                    1,
                    None,
                )?;
                let new = self.conform(&name, &[], new)?;
                self.apply(&name, ZSet::with_weight(old, -1))?;
                self.apply(&name, ZSet::with_weight(new, 1))
            }
            Statement::Query(_) => Err(SqlError::new("a query as a statement")),
            Statement::CreateIndex(ci) => {
                let Some(name) = &ci.name else {
                    return Err(SqlError::new("CREATE INDEX needs a name"));
                };
                let table = last_name(&ci.table_name);
                self.create_object(ObjectKind::Index, last_name(name), table, ci.if_not_exists)
            }
            Statement::CreateTrigger(ct) => {
                let table = last_name(&ct.table_name);
                self.create_object(ObjectKind::Trigger, last_name(&ct.name), table, false)
            }
            Statement::DropTrigger(dt) => self.drop_object(
                ObjectKind::Trigger,
                &last_name(&dt.trigger_name),
                dt.if_exists,
            ),
            // No meaning for an incremental view engine.
            Statement::StartTransaction { .. }
            | Statement::Commit { .. }
            | Statement::Rollback { .. } => Ok(()),
            other => Err(SqlError::new(format!("unsupported statement: {other}"))),
        }
    }

    fn create_object(
        &mut self,
        kind: ObjectKind,
        name: String,
        table: String,
        if_not_exists: bool,
    ) -> SqlResult<()> {
        self.table(&table)?;
        if self.objects.contains_key(&name) || self.program.relation_exists(&name) {
            if if_not_exists {
                return Ok(());
            }
            return Err(SqlError::new(format!("'{name}' already exists")));
        }
        self.objects.insert(name, CatalogObject { kind, table });
        Ok(())
    }

    fn drop_object(&mut self, kind: ObjectKind, name: &str, if_exists: bool) -> SqlResult<()> {
        match self.objects.get(name) {
            Some(o) if o.kind == kind => {
                self.objects.remove(name);
                Ok(())
            }
            _ if if_exists => Ok(()),
            _ => Err(SqlError::new(
                format!("no {kind:?} '{name}'").to_lowercase(),
            )),
        }
    }

    /// `REINDEX` (everything) or `REINDEX name` (an index, or a table's
    /// indexes): nothing to rebuild, but the name must exist.
    fn reindex(&self, target: Option<&str>) -> SqlResult<()> {
        match target {
            None => Ok(()),
            Some(name)
                if self.program.table(name).is_some()
                    || self
                        .objects
                        .get(name)
                        .is_some_and(|o| o.kind == ObjectKind::Index) =>
            {
                Ok(())
            }
            Some(name) => Err(SqlError::new(format!("no index or table '{name}'"))),
        }
    }

    /// `INSERT OR REPLACE`/`REPLACE INTO`: removes the rows of `table`
    /// whose primary key equals one of `rows`' (a table without a primary
    /// key keeps everything, as in SQLite without a unique constraint).
    fn remove_same_keys(&mut self, table: &str, rows: &RecordBatch) -> SqlResult<()> {
        use datafusion::arrow::row::{RowConverter, SortField};
        let key = self.table(table)?.primary_key.clone();
        if key.is_empty() {
            return Ok(());
        }
        let current = self
            .data
            .get(table)
            .cloned()
            .ok_or_else(|| SqlError::new(format!("table '{table}' not found")))?;
        let fields: Vec<SortField> = key
            .iter()
            .map(|&i| SortField::new(rows.schema().field(i).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields)?;
        let columns =
            |b: &RecordBatch| key.iter().map(|&i| b.column(i).clone()).collect::<Vec<_>>();
        let new_keys = converter.convert_columns(&columns(rows))?;
        let new_keys: std::collections::HashSet<_> = new_keys.iter().collect();
        let old_keys = converter.convert_columns(&columns(current.batch()))?;
        let gone: Vec<u32> = (0..current.len())
            .filter(|&i| new_keys.contains(&old_keys.row(i)))
            .map(|i| i as u32)
            .collect();
        if gone.is_empty() {
            return Ok(());
        }
        let removed = current.take(&gone)?.negate();
        self.apply(table, removed)
    }

    fn table(&self, name: &str) -> SqlResult<&eddy_sql::TableDef> {
        self.program
            .table(name)
            .ok_or_else(|| SqlError::new(format!("table '{name}' not found")))
    }

    /// Casts rows to the table's columns; `columns` names the target of each
    /// source column (all columns in order when empty), the rest are NULL.
    fn conform(
        &self,
        table: &str,
        columns: &[String],
        rows: RecordBatch,
    ) -> SqlResult<RecordBatch> {
        let schema = self.table(table)?.schema.clone();
        let n = rows.num_rows();
        let width = if columns.is_empty() {
            schema.fields().len()
        } else {
            columns.len()
        };
        if rows.num_columns() != width {
            return Err(SqlError::new(format!(
                "{} values for {width} columns",
                rows.num_columns()
            )));
        }
        let mut out: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
        for (i, field) in schema.fields().iter().enumerate() {
            let source = if columns.is_empty() {
                Some(i)
            } else {
                columns.iter().position(|c| c == field.name())
            };
            let array = match source {
                // A UUID is read from its text (Arrow has no such cast).
                Some(s)
                    if eddy_io::uuid::is_uuid(field.data_type())
                        && !eddy_io::uuid::is_uuid(rows.column(s).data_type()) =>
                {
                    let text = cast(
                        rows.column(s),
                        &datafusion::arrow::datatypes::DataType::Utf8,
                    )?;
                    eddy_io::uuid::from_texts(text.as_ref(), false).map_err(SqlError::new)?
                }
                Some(s) => cast(rows.column(s), field.data_type())?,
                None => new_null_array(field.data_type(), n),
            };
            if !field.is_nullable() && array.null_count() > 0 {
                return Err(SqlError::new(format!(
                    "NULL in NOT NULL column '{}'",
                    field.name()
                )));
            }
            out.push(array);
        }
        Ok(eddy_dbsp::row::batch_with_rows(
            &Arc::new(schema.as_ref().clone()),
            out,
            n,
        )?)
    }

    fn apply(&mut self, table: &str, change: ZSet) -> SqlResult<()> {
        let current = self
            .data
            .get(table)
            .ok_or_else(|| SqlError::new(format!("table '{table}' not found")))?;
        let schema = current.schema();
        let change = change.with_schema(&schema)?;
        let next = ZSet::concat(&schema, &[current.clone(), change])?.consolidate()?;
        self.data.insert(table.to_string(), next);
        Ok(())
    }

    /// Runs `query` as a view of a pipeline over the current contents, fed
    /// in `steps` steps (split at random by `rng` when more than one), and
    /// returns the view's rows.
    pub fn evaluate(
        &self,
        query: Query,
        steps: usize,
        rng: Option<&mut StdRng>,
    ) -> SqlResult<RecordBatch> {
        let mut program = self.program.clone();
        program.add_view_query(QUERY_VIEW, query, &[], false, vec![])?;
        let mut pipeline = self.pipeline(program)?;
        match rng {
            Some(rng) if steps >= 3 => pipeline = self.feed_in_steps(pipeline, rng)?,
            _ => {
                for (name, rows) in &self.data {
                    if !rows.is_empty() {
                        pipeline.push(name, rows.clone())?;
                    }
                }
                pipeline.step()?;
            }
        }
        pipeline.view_rows(QUERY_VIEW)
    }

    /// Three steps: (1) a random part A of every table plus a part C, (2) the
    /// rest B, with C deleted, (3) C inserted again.
    fn feed_in_steps(&self, mut pipeline: Pipeline, rng: &mut StdRng) -> SqlResult<Pipeline> {
        let mut deferred: Vec<(String, ZSet)> = Vec::new();
        let mut second: Vec<(String, ZSet)> = Vec::new();
        for (name, rows) in &self.data {
            if rows.is_empty() {
                continue;
            }
            let expanded = ZSet::with_weight(rows.expand()?, 1);
            let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
            for i in 0..expanded.len() as u32 {
                match rng.gen_range(0..4) {
                    0 | 1 => a.push(i),
                    2 => b.push(i),
                    _ => c.push(i),
                }
            }
            let c = expanded.take(&c)?;
            pipeline.push(name, expanded.take(&a)?)?;
            pipeline.push(name, c.clone())?;
            second.push((name.clone(), expanded.take(&b)?));
            second.push((name.clone(), c.negate()));
            deferred.push((name.clone(), c));
        }
        pipeline.step()?;
        let mut pipeline = self.restart(pipeline)?;
        for (name, z) in second {
            pipeline.push(&name, z)?;
        }
        pipeline.step()?;
        let mut pipeline = self.restart(pipeline)?;
        for (name, z) in deferred {
            pipeline.push(&name, z)?;
        }
        pipeline.step()?;
        self.restart(pipeline)
    }
}

/// The target of a `REINDEX` statement (which the SQL parser does not
/// know): `Some(None)` for a bare `REINDEX`, `Some(Some(name))` for one
/// name, `None` for any other statement.
fn reindex_target(sql: &str) -> Option<Option<String>> {
    let text = sql.trim().trim_end_matches(';').trim();
    let mut words = text.split_whitespace();
    if !words.next()?.eq_ignore_ascii_case("reindex") {
        return None;
    }
    let name = words.next().map(|w| {
        let last = w.rsplit('.').next().unwrap_or(w);
        last.trim_matches(|c| c == '"' || c == '`' || c == '[' || c == ']')
            .to_lowercase()
    });
    Some(name)
}

/// Parses a query's text into one SELECT.
pub fn parse_query(sql: &str) -> SqlResult<Query> {
    single_query(sql)
}

//! Programs: parsing and checking a sequence of `CREATE TABLE` and
//! `CREATE VIEW` statements.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
use datafusion::arrow::datatypes::{Field, Schema, SchemaRef};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, ScalarValue};
use datafusion::execution::context::ExecutionProps;
use datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext;
use datafusion::logical_expr::{LogicalPlan, LogicalPlanBuilder};
use datafusion::physical_expr::create_physical_expr;
use datafusion::sql::planner::PlannerContext;
use datafusion::sql::planner::SqlToRel;
use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_relations, UserDefinedTypeRepresentation,
};
use datafusion::sql::sqlparser::ast::{
    ColumnDef, ColumnOption, ColumnOptionDef, CreateTable, CreateView, Expr as SqlExpr, Ident,
    ObjectName, Query, Statement, TableConstraint,
};
use datafusion::sql::sqlparser::parser::Parser;

use crate::catalog::{Lateness, TableDef, ViewDef};
use crate::dialect::{column_lateness, lateness_statement, recursive_declaration};
use crate::error::{Location, SqlError, SqlResult};
use crate::functions::Functions;
use crate::provider::Provider;
use crate::session::Rules;
use crate::types::Types;
use crate::{decorrelate, session};

use crate::parse::*;
pub(crate) use crate::parse::{nesting_error, parse_recovering, parser_error, RECURSION_LIMIT};
pub use crate::parse::{normalize_ident, parse_located, parse_statements, placed_in, PARSING};

/// A checked program: tables (inputs) and views (outputs), in order.
#[derive(Debug, Clone, Default)]
pub struct Program {
    /// Tables in declaration order.
    pub tables: Vec<TableDef>,
    /// Views in declaration order; each may read tables and earlier views.
    pub views: Vec<ViewDef>,
    /// `LATENESS view.column …` statements naming a view not defined yet.
    pending_lateness: Vec<(String, String, ScalarValue)>,
    /// SQL-bodied functions, inlined where views call them.
    pub functions: Functions,
    /// User-defined types (`CREATE TYPE`).
    pub types: Arc<Types>,
    /// Views declared by `DECLARE RECURSIVE VIEW` and not defined yet.
    declared: Vec<(String, SchemaRef)>,
    /// The recursive group being defined: views declared in it, and views
    /// defined since its first declaration that read a member.
    open: OpenGroup,
    /// Recursive groups closed so far.
    groups: usize,
    /// Whose type rules its views are planned with.
    pub rules: Rules,
    /// Views' keys (`CREATE INDEX`), for keyed output connectors.
    pub indexes: Vec<crate::index::IndexDef>,
}

/// Views of a recursive group whose declarations are not all defined yet.
#[derive(Debug, Clone, Default)]
struct OpenGroup {
    /// Names declared by `DECLARE RECURSIVE VIEW`.
    declared: Vec<String>,
    /// Views defined that read a declared view or another of these.
    defined: Vec<String>,
}

impl Program {
    /// An empty program.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty program whose views are planned with `rules`.
    pub fn with_rules(rules: Rules) -> Self {
        Self {
            rules,
            ..Self::default()
        }
    }

    /// Parses and checks program text, planned with Feldera's rules.
    pub fn parse(text: &str) -> SqlResult<Self> {
        Self::parse_with(text, Rules::Feldera)
    }

    /// Parses and checks program text, planned with `rules`; the first
    /// error when it does not check ([`Program::check_with`] gives all).
    pub fn parse_with(text: &str, rules: Rules) -> SqlResult<Self> {
        Self::check_with(text, rules).map_err(|mut errors| errors.remove(0))
    }

    /// Parses and checks program text with Feldera's rules, reporting
    /// every error; see [`Program::check_with`].
    pub fn check(text: &str) -> Result<Self, Vec<SqlError>> {
        Self::check_with(text, Rules::Feldera)
    }

    /// Parses and checks program text, planned with `rules`, reporting
    /// every independent error in the text's order (never none): a
    /// statement that fails is left out and the next one checked, and an
    /// error in a statement that reads a table or view whose own statement
    /// failed is left unsaid, since it would only repeat that failure.
    pub fn check_with(text: &str, rules: Rules) -> Result<Self, Vec<SqlError>> {
        let mut program = Self::with_rules(rules);
        let parsed = parse_recovering(text);
        let mut failed: Vec<String> = Vec::new();
        let mut errors: Vec<SqlError> = Vec::new();
        for (e, name) in parsed.errors {
            failed.extend(name);
            errors.push(e);
        }
        // Where each statement that a later one must complete starts.
        let mut pending: Vec<(String, Location)> = Vec::new();
        for (statement, at) in parsed.statements {
            let reads_failed = !failed.is_empty() && reads_any(&statement, &failed);
            let defines = defined(&statement);
            if let Some((name, _)) = lateness_statement(&statement) {
                pending.push((format!("LATENESS {}:", object_parts(name).join(".")), at));
            } else if let Some((name, _)) = recursive_declaration(&statement) {
                let name = normalize_ident(name);
                pending.push((format!("DECLARE RECURSIVE VIEW {name}:"), at));
            }
            let kept = (!reads_failed).then(|| statement.clone());
            let (tables, views) = (program.tables.len(), program.views.len());
            let added = program.add_statement(statement);
            for table in program.tables.iter_mut().skip(tables) {
                table.at.get_or_insert(at);
            }
            for view in program.views.iter_mut().skip(views) {
                view.at.get_or_insert(at);
            }
            if let Err(mut e) = added {
                if let Some(statement) = kept {
                    if let Some(own) = &defines {
                        if e.message == format!("Object '{own}' not found") {
                            e.message.push_str(&format!(
                                ". A view that reads itself is declared before it is defined: \
                                 DECLARE RECURSIVE VIEW {own} (column type, …)"
                            ));
                        }
                    }
                    e.message = crate::locate::as_written(&e.message, &statement);
                    let e = match crate::locate::place(&e.message, &statement) {
                        Some(span) => e.or_in(span),
                        None => e,
                    };
                    errors.push(e.or_at(at));
                }
                failed.extend(defines);
            }
        }
        for e in program.incomplete() {
            let at = pending
                .iter()
                .find(|(p, _)| e.message.starts_with(p.as_str()));
            errors.push(match at {
                Some((_, at)) => e.or_at(*at),
                None => e,
            });
        }
        // Syntax errors were found first; say them all in the text's order.
        errors.sort_by_key(|e| e.location.map(|l| (l.line, l.column)));
        match errors.is_empty() {
            true => Ok(program),
            false => Err(errors),
        }
    }

    /// Fails when a `LATENESS` statement names a view that was never
    /// defined, or a view declared recursive is never defined.
    pub fn check_complete(&self) -> SqlResult<()> {
        match self.incomplete().into_iter().next() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// What [`Program::check_complete`] refuses, every case of it.
    fn incomplete(&self) -> Vec<SqlError> {
        let declared = self.declared.iter().map(|(view, _)| {
            SqlError::new(format!(
                "DECLARE RECURSIVE VIEW {view}: the program never defines '{view}'"
            ))
        });
        let lateness = self.pending_lateness.iter().map(|(view, column, _)| {
            SqlError::new(format!(
                "LATENESS {view}.{column}: the program defines no view '{view}'"
            ))
        });
        declared.chain(lateness).collect()
    }

    /// Adds one `CREATE TABLE`, `CREATE VIEW` or `LATENESS` statement.
    pub fn add_statement(&mut self, statement: Statement) -> SqlResult<()> {
        if let Some((name, amount)) = lateness_statement(&statement) {
            return self.add_view_lateness(name, amount);
        }
        if let Some((name, columns)) = recursive_declaration(&statement) {
            return self.declare_recursive_view(&normalize_ident(name), columns);
        }
        match statement {
            Statement::CreateTable(ct) => {
                let table = table_def(&ct, &self.types)?;
                self.add_table(table)
            }
            Statement::CreateType {
                name,
                representation: Some(UserDefinedTypeRepresentation::Composite { attributes }),
            } => Ok(Types::add(
                &mut self.types,
                &object_name(&name),
                &attributes,
            )?),
            Statement::CreateView(cv) => self.add_create_view(cv),
            Statement::CreateFunction(cf) => self.functions.add(&cf, self.rules),
            Statement::CreateIndex(ci) => {
                let index = crate::index::index_def(&ci, &self.views)?;
                if (self.indexes.iter()).any(|i| i.name.eq_ignore_ascii_case(&index.name)) {
                    return Err(SqlError::new(format!(
                        "CREATE INDEX {}: an index of that name is already defined",
                        index.name
                    )));
                }
                self.indexes.push(index);
                Ok(())
            }
            other => Err(SqlError::new(format!(
                "a program holds only CREATE TABLE, CREATE VIEW, CREATE INDEX, CREATE FUNCTION, \
                 CREATE TYPE, DECLARE RECURSIVE VIEW and LATENESS statements, not `{}`",
                first_words(&other.to_string())
            ))),
        }
    }

    fn add_create_view(&mut self, cv: CreateView) -> SqlResult<()> {
        let name = object_name(&cv.name);
        let columns: Vec<String> = cv
            .columns
            .iter()
            .map(|c| normalize_ident(&c.name))
            .collect();
        let options = sql_options(&cv.options);
        self.add_view_query(&name, *cv.query, &columns, cv.materialized, options)
    }

    /// `DECLARE RECURSIVE VIEW name (columns)`: a view that views defined
    /// before it may read, and that may read itself.
    fn declare_recursive_view(&mut self, name: &str, columns: &[ColumnDef]) -> SqlResult<()> {
        if self.relation_exists(name) || self.declared.iter().any(|(n, _)| n == name) {
            return Err(SqlError::new(format!("'{name}' is already defined")));
        }
        let schema = column_schema(columns, &self.types)?;
        let fields: Vec<Field> = schema
            .fields()
            .iter()
            .map(|f| Field::new(f.name(), f.data_type().clone(), true))
            .collect();
        self.declared
            .push((name.to_string(), Arc::new(Schema::new(fields))));
        self.open.declared.push(name.to_string());
        Ok(())
    }

    /// Records a view defined while a recursive group is open, and closes
    /// the group once its last declared view is defined: its members are
    /// the views on a cycle through a declared view; the others only read
    /// the group.
    fn track_recursion(&mut self, name: &str, reads: &[String]) {
        let open = &mut self.open;
        let in_group = |r: &String| open.declared.contains(r) || open.defined.contains(r);
        if open.declared.iter().any(|d| d == name) || reads.iter().any(in_group) {
            open.defined.push(name.to_string());
        }
        if !self.declared.is_empty() || open.defined.is_empty() {
            return;
        }
        let open = std::mem::take(&mut self.open);
        let mut members: Vec<String> = open.declared.clone();
        let mut i = 0;
        while i < members.len() {
            if let Some(view) = self.views.iter().find(|v| v.name == members[i]) {
                for r in scanned(&view.plan) {
                    if open.defined.contains(&r) && !members.contains(&r) {
                        members.push(r);
                    }
                }
            }
            i += 1;
        }
        for view in &mut self.views {
            if members.contains(&view.name) {
                view.recursive = Some(self.groups);
            }
        }
        self.groups += 1;
    }

    /// `LATENESS view.column amount`: for a view defined already, or kept
    /// until the view is.
    fn add_view_lateness(&mut self, name: &ObjectName, amount: &SqlExpr) -> SqlResult<()> {
        let parts: Vec<String> = name
            .0
            .iter()
            .map(|p| p.as_ident().map(normalize_ident).unwrap_or_default())
            .collect();
        let [view, column] = parts.as_slice() else {
            return Err(SqlError::new(format!(
                "LATENESS takes a view's column as view.column, not `{name}`"
            )));
        };
        let amount = constant(amount)?;
        let is_table = self.table(view).is_some();
        match self.views.iter_mut().find(|v| &v.name == view) {
            Some(v) => {
                let l = lateness_of(&v.schema, column, amount)?;
                v.lateness.push(l);
            }
            None if is_table => {
                return Err(SqlError::new(format!(
                    "LATENESS {view}.{column}: '{view}' is a table; declare a table column's \
                     lateness in CREATE TABLE"
                )))
            }
            None => self
                .pending_lateness
                .push((view.clone(), column.clone(), amount)),
        }
        Ok(())
    }

    /// Adds a table.
    pub fn add_table(&mut self, table: TableDef) -> SqlResult<()> {
        if self.relation_exists(&table.name) || self.declared.iter().any(|(n, _)| *n == table.name)
        {
            return Err(SqlError::new(format!(
                "'{}' is already defined",
                table.name
            )));
        }
        self.tables.push(table);
        Ok(())
    }

    /// Removes a table or view by normalized name; false if there is none.
    pub fn remove(&mut self, name: &str) -> bool {
        let before = self.tables.len() + self.views.len();
        self.tables.retain(|t| t.name != name);
        self.views.retain(|v| v.name != name);
        before != self.tables.len() + self.views.len()
    }

    /// Whether a table or view has this normalized name.
    pub fn relation_exists(&self, name: &str) -> bool {
        self.table(name).is_some() || self.view(name).is_some()
    }

    /// A table by normalized name.
    pub fn table(&self, name: &str) -> Option<&TableDef> {
        self.tables.iter().find(|t| t.name == name)
    }

    /// A view by normalized name.
    pub fn view(&self, name: &str) -> Option<&ViewDef> {
        self.views.iter().find(|v| v.name == name)
    }

    /// Plans a query against the program's tables and views: DataFusion's
    /// planner, analyzer and optimizer, then Eddy's decorrelation.
    pub fn plan_query(&self, query: Query) -> SqlResult<LogicalPlan> {
        let written = query.to_string();
        self.plan_query_as_written(query).map_err(|mut e| {
            e.message = crate::error::respelled(&e.message, &written, &self.other_names());
            e.message = crate::error::operators_as_written(&e.message, &written);
            e
        })
    }

    /// The names by which a function may be called besides its own:
    /// DataFusion's aliases and Feldera's spellings that Eddy rewrites,
    /// each paired with the function's own name.
    fn other_names(&self) -> Vec<(String, String)> {
        let state = session::planning(self.rules);
        let scalar = state.scalar_functions().values().flat_map(|f| {
            f.aliases()
                .iter()
                .map(|a| (a.clone(), f.name().to_string()))
        });
        let aggregate = state.aggregate_functions().values().flat_map(|f| {
            f.aliases()
                .iter()
                .map(|a| (a.clone(), f.name().to_string()))
        });
        scalar
            .chain(aggregate)
            .chain(
                crate::functions::RESPELLED
                    .iter()
                    .map(|(a, n)| (a.to_string(), n.to_string())),
            )
            .collect()
    }

    fn plan_query_as_written(&self, mut query: Query) -> SqlResult<LogicalPlan> {
        self.functions.inline(&mut query, self.rules)?;
        crate::setops::minus_as_except(&mut query);
        if self.rules == Rules::Feldera {
            crate::nullorder::nulls_smallest(&mut query);
        }
        crate::names::name_field_reads(&mut query);
        crate::tvf::rewrite(&mut query)?;
        crate::asof::rewrite(&mut query)?;
        if self.rules == Rules::Feldera {
            crate::interval::plan::qualify_literals(&mut query);
        }
        let relations: HashMap<String, SchemaRef> = self
            .tables
            .iter()
            .map(|t| (t.name.clone(), Arc::clone(&t.schema)))
            .chain(
                self.views
                    .iter()
                    .map(|v| (v.name.clone(), Arc::clone(&v.schema))),
            )
            .chain(
                self.declared
                    .iter()
                    .map(|(n, s)| (n.clone(), Arc::clone(s))),
            )
            .collect();
        let state = session::planning(self.rules);
        let provider = Provider::new(state, &relations).with_types(Arc::clone(&self.types));
        let planner = SqlToRel::new_with_options(&provider, session::parser_options());
        crate::unnest::rewrite(&mut query, &mut |text: &str| {
            let probe = Parser::new(&crate::dialect::EddyDialect)
                .try_with_sql(text)
                .and_then(|mut p| p.parse_query())
                .ok()?;
            let plan = planner
                .sql_statement_to_plan(Statement::Query(probe))
                .ok()?;
            Some(
                plan.schema()
                    .fields()
                    .iter()
                    .map(|f| f.data_type().clone())
                    .collect(),
            )
        })?;
        let plan = match planner.sql_statement_to_plan(Statement::Query(Box::new(query.clone()))) {
            Err(e) if crate::names::refused_for_names(&e) => {
                crate::names::disambiguate(&mut query);
                planner.sql_statement_to_plan(Statement::Query(Box::new(query)))?
            }
            planned => planned?,
        };
        let plan = crate::unnest::bind_lateral(plan)?;
        let plan = crate::asof::fence(plan)?;
        let plan = crate::nullif::first_argument_type(plan)?;
        let plan = state.optimize(&plan)?;
        decorrelate::decorrelate(plan)
    }

    /// Adds a view defined by `query`; `columns` renames its output columns.
    pub fn add_view_query(
        &mut self,
        name: &str,
        query: Query,
        columns: &[String],
        materialized: bool,
        options: Vec<(String, String)>,
    ) -> SqlResult<()> {
        if self.relation_exists(name) {
            return Err(SqlError::new(format!("'{name}' is already defined")));
        }
        let plan = self.plan_query(query)?;
        let declared = self.declared.iter().position(|(n, _)| n == name);
        let schema = match declared {
            Some(i) => {
                let (_, schema) = self.declared.remove(i);
                if schema.fields().len() != plan.schema().fields().len() {
                    return Err(SqlError::new(format!(
                        "the recursive view '{name}' is declared with {} columns but its \
                         query has {}",
                        schema.fields().len(),
                        plan.schema().fields().len()
                    )));
                }
                schema
            }
            None => view_schema(&plan, columns)?,
        };
        let reads = scanned(&plan);
        let mut lateness = Vec::new();
        let mut i = 0;
        while i < self.pending_lateness.len() {
            if self.pending_lateness[i].0 == name {
                let (_, column, amount) = self.pending_lateness.remove(i);
                lateness.push(lateness_of(&schema, &column, amount)?);
            } else {
                i += 1;
            }
        }
        self.views.push(ViewDef {
            name: name.to_string(),
            schema,
            plan,
            materialized,
            options,
            lateness,
            recursive: None,
            at: None,
        });
        self.track_recursion(name, &reads);
        Ok(())
    }
}

/// The names of the program's relations a plan scans (a `WITH RECURSIVE`
/// query's scans of its own name are not among them).
pub(crate) fn scanned(plan: &LogicalPlan) -> Vec<String> {
    let mut names = Vec::new();
    let mut ctes = Vec::new();
    let _ = plan.apply(|p| {
        match p {
            LogicalPlan::TableScan(scan) => names.push(scan.table_name.table().to_string()),
            LogicalPlan::RecursiveQuery(rq) => ctes.push(rq.name.clone()),
            _ => {}
        }
        Ok(TreeNodeRecursion::Continue)
    });
    names.retain(|n| !ctes.contains(n));
    names
}

/// The schema of column definitions, with Eddy's type names.
fn column_schema(columns: &[ColumnDef], types: &Arc<Types>) -> SqlResult<Schema> {
    let relations = HashMap::new();
    let provider = Provider::new(session::state(), &relations).with_types(Arc::clone(types));
    let planner = SqlToRel::new_with_options(&provider, session::parser_options());
    Ok(planner.build_schema(columns.to_vec())?)
}

/// The output schema of a view: the plan's columns, renamed by `columns`.
/// Every column is nullable in the view's schema: nullability is a property
/// of the data, and the planner's inference is not exact for every operator.
/// An interval column keeps its qualifier.
fn view_schema(plan: &LogicalPlan, columns: &[String]) -> SqlResult<SchemaRef> {
    let fields = plan.schema().fields();
    if !columns.is_empty() && columns.len() != fields.len() {
        return Err(SqlError::new(format!(
            "the view names {} columns but its query has {}",
            columns.len(),
            fields.len()
        )));
    }
    let fields: Vec<Field> = fields
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let name = columns.get(i).cloned().unwrap_or_else(|| f.name().clone());
            let field = Field::new(name, f.data_type().clone(), true);
            // An interval's type (its qualifier) is the field's metadata.
            match f.metadata().get(crate::interval::METADATA_KEY) {
                Some(q) => field
                    .with_metadata([(crate::interval::METADATA_KEY.to_string(), q.clone())].into()),
                None => field,
            }
        })
        .collect();
    Ok(Arc::new(Schema::new(fields)))
}

fn first_words(s: &str) -> String {
    s.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

/// Refuses a `DECIMAL` column wider than Feldera's 38 digits.
fn check_precision(col: &ColumnDef) -> SqlResult<()> {
    use datafusion::sql::sqlparser::ast::{DataType as SqlType, ExactNumberInfo};
    let (SqlType::Decimal(info) | SqlType::Numeric(info) | SqlType::Dec(info)) = &col.data_type
    else {
        return Ok(());
    };
    let (ExactNumberInfo::Precision(p) | ExactNumberInfo::PrecisionAndScale(p, _)) = info else {
        return Ok(());
    };
    match *p {
        1..=38 => Ok(()),
        _ => Err(SqlError::new(format!(
            "DECIMAL precision {p} of column '{}' is not between 1 and 38",
            normalize_ident(&col.name)
        ))
        .or_in(col.name.span)),
    }
}

/// Converts `CREATE TABLE` into a table definition, with a program's
/// user-defined types.
pub fn table_def(ct: &CreateTable, types: &Arc<Types>) -> SqlResult<TableDef> {
    let name = object_name(&ct.name);
    for col in &ct.columns {
        check_precision(col)?;
    }
    let schema = column_schema(&ct.columns, types)?;
    let mut primary_key: Vec<String> = Vec::new();
    let mut keys = 0;
    let mut second_key = |at: &Ident| {
        keys += 1;
        match keys {
            1 => Ok(()),
            _ => Err(SqlError::new(format!(
                "Table '{name}' has more than one PRIMARY KEY; a key of several columns is \
                 declared as PRIMARY KEY (a, b)"
            ))
            .or_in(at.span)),
        }
    };
    for col in &ct.columns {
        for opt in &col.options {
            if let ColumnOption::PrimaryKey(_) = opt.option {
                second_key(&col.name)?;
                primary_key.push(normalize_ident(&col.name));
            }
        }
    }
    for constraint in &ct.constraints {
        if let TableConstraint::PrimaryKey(pk) = constraint {
            if let Some(first) = pk.columns.first() {
                match &first.column.expr {
                    SqlExpr::Identifier(i) => second_key(i)?,
                    _ => second_key(&Ident::new(""))?,
                }
            }
            for c in &pk.columns {
                primary_key.push(c.column.expr.to_string().to_lowercase());
            }
        }
    }
    let mut pk_idx = Vec::new();
    for col in &primary_key {
        let col = col.trim_matches('"');
        match schema.index_of(col) {
            Ok(i) => pk_idx.push(i),
            Err(_) => {
                return Err(SqlError::new(format!(
                    "PRIMARY KEY column '{col}' is not a column of '{name}'"
                )))
            }
        }
    }
    // Primary key columns are NOT NULL.
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .zip(&ct.columns)
        .enumerate()
        .map(|(i, (f, c))| {
            let key = pk_idx.contains(&i);
            let f = f.as_ref().clone().with_nullable(f.is_nullable() && !key);
            let f = with_default(f, &c.options)?;
            if pk_idx.is_empty() || key {
                Ok(f)
            } else {
                with_placeholder(f)
            }
        })
        .collect::<SqlResult<_>>()?;
    let mut lateness = Vec::new();
    for col in &ct.columns {
        if let Some(amount) = column_lateness(&col.options) {
            let amount = constant(amount)?;
            lateness.push(lateness_of(
                &Arc::new(schema.clone()),
                &normalize_ident(&col.name),
                amount,
            )?);
        }
    }
    let options = sql_options(&ct.table_options);
    let flag = |name: &str| {
        options
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case(name) && v.eq_ignore_ascii_case("true"))
    };
    let materialized = flag("materialized");
    let append_only = flag("append_only");
    Ok(TableDef {
        name,
        schema: Arc::new(Schema::new(fields)),
        primary_key: pk_idx,
        materialized,
        append_only,
        options,
        lateness,
        at: None,
    })
}

/// The value of a constant expression (a lateness: `INTERVAL '4' SECOND`, `10`).
pub(crate) fn constant(expr: &SqlExpr) -> SqlResult<ScalarValue> {
    let value = evaluate(expr)?;
    if value.is_null() {
        return Err(SqlError::new(format!("the lateness `{expr}` is NULL")));
    }
    Ok(value)
}

/// The value of an expression that reads no column, planned with the
/// session's analyzer rules (type coercion, Eddy's casts).
fn evaluate(expr: &SqlExpr) -> SqlResult<ScalarValue> {
    let relations = HashMap::new();
    let state = session::state();
    let provider = Provider::new(state, &relations);
    let planner = SqlToRel::new_with_options(&provider, session::parser_options());
    let empty = DFSchema::empty();
    let logical = planner.sql_to_expr(expr.clone(), &empty, &mut PlannerContext::new())?;
    let plan = LogicalPlanBuilder::empty(true)
        .project(vec![logical])?
        .build()?;
    let plan = state
        .analyzer()
        .execute_and_check(plan, state.config_options(), |_, _| {})?;
    let LogicalPlan::Projection(projection) = &plan else {
        return Err(SqlError::new(format!("`{expr}` is no constant")));
    };
    let physical = create_physical_expr(
        &projection.expr[0],
        projection.input.schema(),
        &ExecutionProps::new(),
        &PhysicalPlanningContext::default(),
    )?;
    let one = RecordBatch::try_new_with_options(
        Arc::new(Schema::empty()),
        vec![],
        &RecordBatchOptions::new().with_row_count(Some(1)),
    )?;
    let value = physical.evaluate(&one)?.into_array(1)?;
    Ok(ScalarValue::try_from_array(&value, 0)?)
}

/// `field` with its `DEFAULT` (grammar.md): the value of a column's
/// constant expression, cast to the column's type, kept as the JSON a row
/// would hold (the field's metadata `eddy.default`), which input gives a
/// row that lacks the column. An expression that reads a column is refused
/// (`Column 'c' not found in any table`).
fn with_default(field: Field, options: &[ColumnOptionDef]) -> SqlResult<Field> {
    let Some(expr) = options.iter().find_map(|o| match &o.option {
        ColumnOption::Default(e) => Some(e),
        _ => None,
    }) else {
        return Ok(field);
    };
    let value = evaluate(expr)?;
    let value = value.cast_to(field.data_type()).map_err(|e| {
        SqlError::new(format!(
            "the DEFAULT `{expr}` of column '{}' is no {}: {e}",
            field.name(),
            crate::castcheck::feldera_type(field.data_type())
        ))
    })?;
    let json = json_of(&field, &value)?;
    let mut metadata = field.metadata().clone();
    metadata.insert(eddy_io::json::DEFAULT_KEY.to_string(), json);
    Ok(field.with_metadata(metadata))
}

/// `field`, a `NOT NULL` column outside the primary key of a table that
/// has one, with a value of its type (the field's metadata
/// `eddy.placeholder`) for a delete that gives only the key: the table
/// deletes by key and ignores the other columns (Feldera's rule), but the
/// row must still be one of the table's types. A column with a `DEFAULT`
/// already has one.
fn with_placeholder(field: Field) -> SqlResult<Field> {
    if field.is_nullable() || field.metadata().contains_key(eddy_io::json::DEFAULT_KEY) {
        return Ok(field);
    }
    // Types without a value to stand in (none known) need the column.
    let Ok(value) = ScalarValue::new_default(field.data_type()) else {
        return Ok(field);
    };
    let json = json_of(&field, &value)?;
    let mut metadata = field.metadata().clone();
    metadata.insert(eddy_io::json::PLACEHOLDER_KEY.to_string(), json);
    Ok(field.with_metadata(metadata))
}

/// The JSON a row holds for `value` in column `field`.
fn json_of(field: &Field, value: &ScalarValue) -> SqlResult<String> {
    let one = Field::new(field.name(), field.data_type().clone(), true);
    let batch = RecordBatch::try_new(
        Arc::new(Schema::new(vec![one])),
        vec![value.to_array_of_size(1)?],
    )?;
    let row = eddy_io::json::encode_rows(&batch).map_err(SqlError::new)?;
    Ok(row
        .first()
        .and_then(|r| r.get(field.name()))
        .map_or_else(|| "null".to_string(), |v| v.to_string()))
}

/// A lateness of `amount` for the column `column` of `schema`, checked:
/// the amount must be subtractable from the column's values.
fn lateness_of(schema: &SchemaRef, column: &str, amount: ScalarValue) -> SqlResult<Lateness> {
    let index = schema
        .index_of(column)
        .map_err(|_| SqlError::new(format!("LATENESS names '{column}', which is not a column")))?;
    let column_type = schema.field(index).data_type();
    let amount = if column_type.is_numeric() && amount.data_type().is_numeric() {
        amount.cast_to(column_type).map_err(|e| {
            SqlError::new(format!(
                "the lateness {amount} does not fit column '{column}': {e}"
            ))
        })?
    } else {
        amount
    };
    let lateness = Lateness {
        column: index,
        amount,
    };
    crate::lower::lateness_bound(schema, &lateness).map_err(|e| {
        SqlError::new(format!(
            "the lateness {} cannot be subtracted from column '{column}' ({column_type}): {e}",
            lateness.amount
        ))
    })?;
    Ok(lateness)
}

/// The table, view, function or type a statement defines, normalized.
fn defined(statement: &Statement) -> Option<String> {
    match statement {
        Statement::CreateTable(ct) => Some(object_name(&ct.name)),
        Statement::CreateView(cv) => Some(object_name(&cv.name)),
        Statement::CreateFunction(cf) => Some(object_name(&cf.name)),
        Statement::CreateType { name, .. } => Some(object_name(name)),
        other => recursive_declaration(other).map(|(name, _)| normalize_ident(name)),
    }
}

/// Whether `statement` reads (or calls, or types a column with) one of
/// `names`.
fn reads_any(statement: &Statement, names: &[String]) -> bool {
    let named = |n: &ObjectName| {
        let n = object_name(n);
        names.contains(&n)
    };
    let reads = visit_relations(statement, |n: &ObjectName| match named(n) {
        true => ControlFlow::Break(()),
        false => ControlFlow::Continue(()),
    });
    let calls = visit_expressions(statement, |e: &SqlExpr| match e {
        SqlExpr::Function(f) if named(&f.name) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    });
    // A column of a user-defined type, a cast to one, a LATENESS or an
    // index of a failed view: any word that names one. (It may leave
    // unsaid an error a column of the same name causes; that error is
    // said once the first one is fixed.)
    let text = statement.to_string().to_lowercase();
    let mentions = names.iter().any(|n| {
        text.split(|c: char| !(c.is_alphanumeric() || c == '_'))
            .any(|w| w == n.to_lowercase())
    });
    reads.is_break() || calls.is_break() || mentions
}

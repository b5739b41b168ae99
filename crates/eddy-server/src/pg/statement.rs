//! What a client's SQL text asks for: parsed as PostgreSQL writes it,
//! measured for depth before anything walks it, and sorted into the few
//! kinds the door serves. Queries are rewritten from PostgreSQL's spellings
//! into DataFusion's (see [`rewrite`]) and then run through the same checked
//! path as `/query`; `INSERT` and `DELETE` become changes ([`super::dml`]);
//! transaction control and `SET` are the session's; everything else is
//! refused with a SQLSTATE.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, DataType as SqlType, Expr, ObjectName, ObjectNamePart, SelectItem,
    SetExpr, Statement as Sql, TableFactor, Value,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use eddy_sql::limits;
use pgwire::error::PgWireError;

use super::dml::{self, Change};
use super::error::{code, user_error};

/// Deepest nesting the parser follows (as `/query`'s parser).
const RECURSION_LIMIT: usize = 256;

/// One statement of a client's text.
#[derive(Debug, Clone)]
pub enum Statement {
    /// A read-only query, rewritten into DataFusion's SQL.
    Query(String),
    /// An `INSERT` or `DELETE`: changes to a table.
    Change(Change),
    /// `BEGIN` / `START TRANSACTION`.
    Begin,
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SET …`, `RESET …`, `DISCARD …`, `DEALLOCATE …`: accepted, without
    /// effect (Eddy's sessions have no settings).
    Ignored(&'static str),
    /// `SHOW name`.
    Show(String),
}

/// Parses `text` into statements, on a thread whose stack fits it.
pub async fn parse(text: String) -> Result<Vec<Statement>, PgWireError> {
    tokio::task::spawn_blocking(move || {
        limits::with_stack(limits::stack_for_text(text.len()), || parse_here(&text))
    })
    .await
    .map_err(|e| user_error(code::INTERNAL, e.to_string()))?
}

fn parse_here(text: &str) -> Result<Vec<Statement>, PgWireError> {
    let statements = Parser::new(&PostgreSqlDialect {})
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(text)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| match e {
            ParserError::RecursionLimitExceeded => user_error(
                code::SYNTAX,
                format!("the statement is nested deeper than {RECURSION_LIMIT} levels"),
            ),
            other => user_error(code::SYNTAX, format!("syntax error: {other}")),
        })?;
    statements.into_iter().map(classify).collect()
}

fn classify(mut s: Sql) -> Result<Statement, PgWireError> {
    limits::check_depth(&s).map_err(|e| user_error(code::SYNTAX, e.to_string()))?;
    Ok(match s {
        Sql::Query(ref q) if is_read(&q.body) => {
            rewrite(&mut s);
            Statement::Query(s.to_string())
        }
        Sql::Explain { .. } | Sql::ExplainTable { .. } | Sql::ShowTables { .. } => {
            rewrite(&mut s);
            Statement::Query(s.to_string())
        }
        Sql::Insert(_) | Sql::Delete(_) => {
            let params = placeholders(&s);
            let mut change = match s {
                Sql::Insert(insert) => dml::insert(insert)?,
                Sql::Delete(delete) => dml::delete(delete)?,
                _ => unreachable!("matched above"),
            };
            change.params = params;
            Statement::Change(change)
        }
        Sql::StartTransaction { .. } => Statement::Begin,
        Sql::Commit { .. } => Statement::Commit,
        Sql::Rollback {
            savepoint: None, ..
        } => Statement::Rollback,
        Sql::Set(_) => Statement::Ignored("SET"),
        Sql::Discard { .. } => Statement::Ignored("DISCARD ALL"),
        Sql::Deallocate { .. } => Statement::Ignored("DEALLOCATE"),
        Sql::ShowVariable { variable } => Statement::Show(
            variable
                .iter()
                .map(|i| i.value.to_lowercase())
                .collect::<Vec<_>>()
                .join(" "),
        ),
        Sql::Copy { .. } => return Err(user_error(
            code::NOT_SUPPORTED,
            "COPY is not supported: query with SELECT, and change tables with INSERT and DELETE",
        )),
        Sql::Update { .. } => {
            return Err(user_error(
                code::NOT_SUPPORTED,
                "UPDATE is not supported: DELETE the row by its key and INSERT it again",
            ))
        }
        other => {
            let kind: String = other
                .to_string()
                .split_whitespace()
                .take(2)
                .collect::<Vec<_>>()
                .join(" ");
            return Err(user_error(
                code::READ_ONLY,
                format!(
                    "`{kind}` is not allowed: a pipeline's program is changed through the REST API; \
                     over PostgreSQL, Eddy runs SELECT, INSERT and DELETE"
                ),
            ));
        }
    })
}

/// The highest `$n` placeholder of a statement.
fn placeholders(s: &Sql) -> usize {
    let mut highest = 0;
    let _ = ast::visit_expressions(s, |e| {
        if let Expr::Value(v) = e {
            if let Value::Placeholder(p) = &v.value {
                if let Some(n) = p.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
                    highest = highest.max(n);
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    highest
}

/// Whether a query body only reads (no `INSERT … RETURNING` in a CTE body).
fn is_read(body: &SetExpr) -> bool {
    match body {
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => false,
        SetExpr::SetOperation { left, right, .. } => is_read(left) && is_read(right),
        SetExpr::Query(q) => is_read(&q.body),
        _ => true,
    }
}

/// Rewrites PostgreSQL's spellings that DataFusion does not read into ones
/// it does, without changing what the query reads:
///
/// * `a OPERATOR(pg_catalog.~) b` → `a ~ b` (for the comparison and regex
///   operators);
/// * `expr COLLATE pg_catalog.default` → `expr`;
/// * `pg_catalog.f(…)` → `f(…)` (DataFusion's functions have no schema);
/// * casts to `pg_catalog.text`, `regclass`, `oid`, … → DataFusion types
///   (a `regclass` or `regtype` is its oid, an integer);
/// * a scalar subquery over `pg_catalog` tables that is not aggregated
///   takes `max(…)` of its one column, since DataFusion decorrelates only
///   aggregated subqueries (the catalog's subqueries match one row at most).
pub fn rewrite(s: &mut Sql) {
    let _ = ast::visit_expressions_mut(s, |e| {
        rewrite_expr(e);
        ControlFlow::<()>::Continue(())
    });
}

/// [`rewrite`] of one expression, as DataFusion's SQL text.
pub fn rewrite_expr_text(mut e: Expr) -> String {
    let _ = ast::visit_expressions_mut(&mut e, |e| {
        rewrite_expr(e);
        ControlFlow::<()>::Continue(())
    });
    e.to_string()
}

fn rewrite_expr(e: &mut Expr) {
    match e {
        Expr::BinaryOp { op, .. } => {
            if let BinaryOperator::PGCustomBinaryOperator(parts) = op {
                if let Some(plain) = parts.last().and_then(|o| plain_operator(o)) {
                    *op = plain;
                }
            }
        }
        Expr::Collate { expr, .. } => {
            let inner = std::mem::replace(expr.as_mut(), Expr::value(Value::Null));
            *e = inner;
        }
        Expr::Function(f) => strip_catalog(&mut f.name),
        Expr::Cast {
            data_type, expr, ..
        } => {
            let name = custom_type(data_type);
            if name.as_deref() == Some("regclass") {
                if let Expr::Value(v) = expr.as_ref() {
                    if let Value::SingleQuotedString(relation) = &v.value {
                        *e = relation_oid(relation);
                        return;
                    }
                }
            }
            if let Some(name) = name {
                match name.as_str() {
                    "regclass" | "regtype" | "regproc" | "regprocedure" | "regnamespace"
                    | "regrole" | "oid" | "xid" | "cid" | "regoper" | "regconfig" => {
                        *data_type = SqlType::Int(None)
                    }
                    "text" | "name" | "char" | "\"char\"" | "bpchar" | "varchar" => {
                        *data_type = SqlType::Text
                    }
                    "int2" => *data_type = SqlType::SmallInt(None),
                    "int4" => *data_type = SqlType::Int(None),
                    "int8" => *data_type = SqlType::BigInt(None),
                    "bool" => *data_type = SqlType::Boolean,
                    "float4" => *data_type = SqlType::Real,
                    "float8" => *data_type = SqlType::DoublePrecision,
                    _ => {}
                }
            }
        }
        Expr::Subquery(q) => {
            if reads_catalog(q) && reads_any(q, &["pg_attrdef", "pg_collation"]) {
                // Column defaults and collations other than the type's:
                // Eddy has none, and DataFusion cannot decorrelate psql's
                // subqueries over them.
                *e = Expr::value(Value::Null);
            } else if reads_catalog(q) {
                if let SetExpr::Select(select) = q.body.as_mut() {
                    if select.group_by == ast::GroupByExpr::Expressions(vec![], vec![])
                        && select.projection.len() == 1
                    {
                        wrap_in_max(&mut select.projection[0]);
                    }
                }
            }
        }
        _ => {}
    }
}

/// `'name'::regclass`: the oid of the relation (the last part of the name,
/// unquoted), or NULL.
fn relation_oid(relation: &str) -> Expr {
    let name = relation.rsplit('.').next().unwrap_or(relation);
    let name = match name.strip_prefix('"').and_then(|n| n.strip_suffix('"')) {
        Some(quoted) => quoted.to_string(),
        None => name.to_lowercase(),
    };
    let text = format!(
        "(SELECT max(oid) FROM pg_catalog.pg_class WHERE relname = '{}')",
        name.replace('\'', "''")
    );
    Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_expr())
        .unwrap_or_else(|_| Expr::value(Value::Null))
}

fn plain_operator(op: &str) -> Option<BinaryOperator> {
    Some(match op {
        "~" => BinaryOperator::PGRegexMatch,
        "~*" => BinaryOperator::PGRegexIMatch,
        "!~" => BinaryOperator::PGRegexNotMatch,
        "!~*" => BinaryOperator::PGRegexNotIMatch,
        "=" => BinaryOperator::Eq,
        "<>" | "!=" => BinaryOperator::NotEq,
        "<" => BinaryOperator::Lt,
        "<=" => BinaryOperator::LtEq,
        ">" => BinaryOperator::Gt,
        ">=" => BinaryOperator::GtEq,
        "||" => BinaryOperator::StringConcat,
        "+" => BinaryOperator::Plus,
        "-" => BinaryOperator::Minus,
        _ => return None,
    })
}

/// Drops a leading `pg_catalog.` from a function's name.
fn strip_catalog(name: &mut ObjectName) {
    if name.0.len() == 2
        && name.0[0]
            .as_ident()
            .is_some_and(|i| i.value.eq_ignore_ascii_case("pg_catalog"))
    {
        name.0.remove(0);
    }
}

/// The name of a type DataFusion does not know (`pg_catalog.text`,
/// `regclass`, `"char"`), lowercase and without its schema.
fn custom_type(t: &SqlType) -> Option<String> {
    match t {
        SqlType::Custom(name, modifiers) if modifiers.is_empty() => {
            let last = name.0.last()?;
            let ident = last.as_ident()?;
            if ident.quote_style.is_some() && ident.value == "char" {
                return Some("\"char\"".into());
            }
            Some(ident.value.to_lowercase())
        }
        SqlType::Regclass => Some("regclass".into()),
        SqlType::Char(None) | SqlType::Character(None) => None,
        _ => None,
    }
}

/// Whether a query reads a `pg_catalog` table in its own `FROM`.
fn reads_catalog(q: &ast::Query) -> bool {
    reads_table(q, |name| {
        name.0.first().is_some_and(|p| {
            matches!(p, ObjectNamePart::Identifier(i) if i.value.eq_ignore_ascii_case("pg_catalog"))
        })
    })
}

/// Whether a query's own `FROM` reads one of `tables` (by last name).
fn reads_any(q: &ast::Query, tables: &[&str]) -> bool {
    reads_table(q, |name| {
        name.0
            .last()
            .and_then(|p| p.as_ident())
            .is_some_and(|i| tables.contains(&i.value.to_lowercase().as_str()))
    })
}

/// Whether a table named in the query's own `FROM` (joins included)
/// satisfies `named`.
fn reads_table(q: &ast::Query, named: impl Fn(&ObjectName) -> bool) -> bool {
    let SetExpr::Select(select) = q.body.as_ref() else {
        return false;
    };
    select.from.iter().any(|t| {
        std::iter::once(&t.relation)
            .chain(t.joins.iter().map(|j| &j.relation))
            .any(|r| matches!(r, TableFactor::Table { name, .. } if named(name)))
    })
}

fn wrap_in_max(item: &mut SelectItem) {
    let expr = match item {
        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => e,
        _ => return,
    };
    if let Expr::Function(f) = expr {
        let name = f.name.to_string().to_lowercase();
        if [
            "count",
            "max",
            "min",
            "sum",
            "avg",
            "array_agg",
            "string_agg",
            "bool_and",
            "bool_or",
        ]
        .contains(&name.as_str())
        {
            return;
        }
    }
    let inner = std::mem::replace(expr, Expr::value(Value::Null));
    let call = format!("max({inner})");
    match Parser::new(&PostgreSqlDialect {})
        .try_with_sql(&call)
        .and_then(|mut p| p.parse_expr())
    {
        Ok(wrapped) => *expr = wrapped,
        Err(_) => *expr = inner,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(text: &str) -> String {
        match parse_here(text).unwrap().pop().unwrap() {
            Statement::Query(q) => q,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn catalog_spellings_become_datafusion_ones() {
        let q = query(
            "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname OPERATOR(pg_catalog.~) '^(t)$' \
             COLLATE pg_catalog.default AND pg_catalog.pg_table_is_visible(c.oid)",
        );
        assert_eq!(
            q,
            "SELECT c.oid FROM pg_catalog.pg_class c WHERE c.relname ~ '^(t)$' AND pg_table_is_visible(c.oid)"
        );
        let q = query(
            "SELECT x::pg_catalog.text, 'r'::regclass, c.reloftype::pg_catalog.regtype FROM t",
        );
        assert_eq!(
            q,
            "SELECT x::TEXT, (SELECT max(oid) FROM pg_catalog.pg_class WHERE relname = 'r'), c.reloftype::INT FROM t"
        );
        let q = query(
            "SELECT (SELECT t.typname FROM pg_catalog.pg_type t WHERE t.oid = a.atttypid) FROM pg_catalog.pg_attribute a",
        );
        assert!(
            q.contains("SELECT max(t.typname) FROM pg_catalog.pg_type"),
            "{q}"
        );
        let q = query(
            "SELECT (SELECT d.adbin FROM pg_catalog.pg_attrdef d WHERE d.adrelid = a.attrelid) FROM pg_catalog.pg_attribute a",
        );
        assert_eq!(q, "SELECT NULL FROM pg_catalog.pg_attribute a");
    }

    #[test]
    fn statements_are_sorted_by_kind() {
        assert!(matches!(
            parse_here("BEGIN").unwrap()[..],
            [Statement::Begin]
        ));
        assert!(matches!(
            parse_here("COMMIT").unwrap()[..],
            [Statement::Commit]
        ));
        assert!(matches!(
            parse_here("SET x = 1").unwrap()[..],
            [Statement::Ignored("SET")]
        ));
        let refused = |t: &str| match parse_here(t) {
            Err(PgWireError::UserError(info)) => info.code,
            other => panic!("{t}: {other:?}"),
        };
        assert_eq!(refused("CREATE TABLE x (a INT)"), code::READ_ONLY);
        assert_eq!(refused("DROP VIEW v"), code::READ_ONLY);
        assert_eq!(refused("COPY t TO '/tmp/x'"), code::NOT_SUPPORTED);
        assert_eq!(refused("SELEC 1"), code::SYNTAX);
        let deep = format!("SELECT {}1{}", "(".repeat(300), ")".repeat(300));
        assert_eq!(refused(&deep), code::SYNTAX);
    }
}

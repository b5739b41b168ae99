//! SQLite's leniency with names, for queries DataFusion's planner refuses
//! only because of them:
//!
//! * a select list whose items would have the same name (`SELECT a, a`,
//!   `SELECT t.a, u.a`, `SELECT *, a`, the same expression twice): every
//!   unnamed item is named as SQLite names it (a column by its name, any
//!   other expression by its text), and a repeated name gets `:1`, `:2`, …
//!   (SQLite's suffixes for a view's repeated column names);
//! * a subquery in `FROM` without an alias, whose columns would clash with
//!   another relation's (DataFusion keeps the inner table's qualifier, or
//!   none): it gets an alias of its own (`_derived_1`, …), a name SQLite
//!   never lets a query refer to;
//! * two aggregates whose arguments differ only by a `CAST` (`SUM(-x) +
//!   SUM(CAST(-x AS BIGINT))`): DataFusion names a cast by its operand, so
//!   both would be called `sum((- x))`, which one plan cannot hold. Each
//!   aggregate of the standard five (`count`, `sum`, `avg`, `min`, `max`)
//!   whose argument holds a cast gets a filter that keeps every row and
//!   is its own: `FILTER (WHERE 1 = 1)`, `FILTER (WHERE 2 = 2)`, …
//!
//! The planner tries the query as written first; only a query refused for
//! one of these reasons is renamed and planned again, so no query that
//! plans as written changes.

use std::collections::HashMap;
use std::ops::ControlFlow;

use datafusion::error::DataFusionError;
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, Query,
    SelectItem, SetExpr, TableAlias, TableFactor, Value, VisitMut, VisitorMut,
};

/// The longest name given to an expression (its text, cut).
const MAX_NAME: usize = 64;

/// Whether the planner refused a query for names SQLite accepts.
pub fn refused_for_names(e: &DataFusionError) -> bool {
    let m = e.to_string();
    m.contains("Projections require unique expression names")
        || (m.contains("Schema contains qualified field name")
            && m.contains("and unqualified field name"))
        || m.contains("Schema contains duplicate qualified field name")
        || m.contains("Schema contains duplicate unqualified field name")
}

/// Names a query's select items and derived tables as SQLite would (see
/// the module's doc).
pub fn disambiguate(query: &mut Query) {
    let _ = query.visit(&mut Namer {
        derived: 0,
        filtered: 0,
    });
}

struct Namer {
    derived: usize,
    filtered: usize,
}

/// Whether `e` holds a `CAST` (or `TRY_CAST`) anywhere.
fn holds_cast(e: &Expr) -> bool {
    use datafusion::sql::sqlparser::ast::Visit;
    struct Finder;
    impl datafusion::sql::sqlparser::ast::Visitor for Finder {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if matches!(e, Expr::Cast { .. }) {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        }
    }
    e.visit(&mut Finder).is_break()
}

impl VisitorMut for Namer {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        name_select_lists(&mut query.body);
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        const AGGREGATES: [&str; 5] = ["count", "sum", "avg", "min", "max"];
        let Expr::Function(f) = e else {
            return ControlFlow::Continue(());
        };
        let is_aggregate = f.name.0.len() == 1
            && f.name.0[0]
                .as_ident()
                .is_some_and(|i| AGGREGATES.contains(&i.value.to_lowercase().as_str()));
        let FunctionArguments::List(list) = &f.args else {
            return ControlFlow::Continue(());
        };
        let cast_argument = list.args.iter().any(|a| match a {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => holds_cast(x),
            _ => false,
        });
        if is_aggregate && cast_argument && f.filter.is_none() && f.over.is_none() {
            self.filtered += 1;
            let n = Expr::value(Value::Number(self.filtered.to_string(), false));
            f.filter = Some(Box::new(Expr::BinaryOp {
                left: Box::new(n.clone()),
                op: BinaryOperator::Eq,
                right: Box::new(n),
            }));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, table: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Derived {
            alias: alias @ None,
            ..
        } = table
        {
            self.derived += 1;
            *alias = Some(TableAlias {
                explicit: true,
                name: Ident::new(format!("_derived_{}", self.derived)),
                columns: Vec::new(),
                at: None,
            });
        }
        ControlFlow::Continue(())
    }
}

fn name_select_lists(body: &mut SetExpr) {
    match body {
        SetExpr::Select(select) => name_items(&mut select.projection),
        SetExpr::SetOperation { left, right, .. } => {
            name_select_lists(left);
            name_select_lists(right);
        }
        // Nested queries are visited on their own.
        _ => {}
    }
}

/// Names an unnamed select item that reads a field through a column,
/// `t.r.f` (three names or more), after the field, as Feldera (and
/// PostgreSQL) name it; DataFusion would call it `t.r[f]`. Two names,
/// `r.f`, are left alone: they may be a table's column, which DataFusion
/// already names `f`, and two of them may come from different tables. A
/// field whose name another item has gets Calcite's suffix (`i1`, `i10`).
pub fn name_field_reads(query: &mut Query) {
    struct Namer;
    impl VisitorMut for Namer {
        type Break = ();
        fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
            name_reads(&mut query.body);
            ControlFlow::Continue(())
        }
    }
    fn name_reads(body: &mut SetExpr) {
        match body {
            SetExpr::Select(select) => {
                // The names the other items have, which a field's name
                // must not repeat: `c1.i1` and `c2.i1` are named `i1` and
                // `i10`, as Calcite makes a derived name unique (the name,
                // then the first of 0, 1, … that makes it unused).
                let mut taken: std::collections::HashSet<String> = select
                    .projection
                    .iter()
                    .filter_map(|item| match item {
                        SelectItem::ExprWithAlias { alias, .. } => Some(alias.value.to_lowercase()),
                        SelectItem::UnnamedExpr(Expr::Identifier(i)) => {
                            Some(i.value.to_lowercase())
                        }
                        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(p)) if p.len() < 3 => {
                            p.last().map(|i| i.value.to_lowercase())
                        }
                        _ => None,
                    })
                    .collect();
                for item in select.projection.iter_mut() {
                    if let SelectItem::UnnamedExpr(Expr::CompoundIdentifier(parts)) = item {
                        if parts.len() >= 3 {
                            let mut alias = parts.last().cloned().expect("three names");
                            let base = alias.value.clone();
                            let mut k = 0;
                            while taken.contains(&alias.value.to_lowercase()) {
                                alias.value = format!("{base}{k}");
                                k += 1;
                            }
                            taken.insert(alias.value.to_lowercase());
                            let expr = Expr::CompoundIdentifier(std::mem::take(parts));
                            *item = SelectItem::ExprWithAlias { expr, alias };
                        }
                    }
                }
            }
            SetExpr::SetOperation { left, right, .. } => {
                name_reads(left);
                name_reads(right);
            }
            _ => {}
        }
    }
    let _ = query.visit(&mut Namer);
}

/// The name SQLite gives an unnamed select item.
fn sqlite_name(e: &Expr) -> String {
    let name = match e {
        Expr::Identifier(i) => i.value.to_lowercase(),
        Expr::CompoundIdentifier(parts) => parts
            .last()
            .map(|i| i.value.to_lowercase())
            .unwrap_or_default(),
        Expr::Nested(inner) => return sqlite_name(inner),
        other => other.to_string(),
    };
    name.chars().take(MAX_NAME).collect()
}

fn name_items(items: &mut [SelectItem]) {
    // After a wildcard any name may be taken: every unnamed item gets a
    // suffix.
    let wildcard = items.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(_, _)
        )
    });
    let mut taken: HashMap<String, usize> = HashMap::new();
    for item in items.iter() {
        if let SelectItem::ExprWithAlias { alias, .. } = item {
            taken.insert(alias.value.to_lowercase(), 1);
        }
    }
    for item in items.iter_mut() {
        let SelectItem::UnnamedExpr(e) = item else {
            continue;
        };
        let base = sqlite_name(e);
        let mut n = *taken.get(&base).unwrap_or(&usize::from(wildcard));
        let name = loop {
            let name = if n == 0 {
                base.clone()
            } else {
                format!("{base}:{n}")
            };
            if !taken.contains_key(&name) {
                break name;
            }
            n += 1;
        };
        taken.insert(base, n + 1);
        taken.insert(name.clone(), 1);
        *item = SelectItem::ExprWithAlias {
            expr: e.clone(),
            alias: Ident::with_quote('"', name),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::sql::sqlparser::ast::Statement;
    use datafusion::sql::sqlparser::parser::Parser;

    fn renamed(sql: &str) -> String {
        let mut statements = Parser::parse_sql(&crate::dialect::EddyDialect, sql).unwrap();
        let Statement::Query(q) = &mut statements[0] else {
            panic!("a query")
        };
        disambiguate(q);
        q.to_string()
    }

    #[test]
    fn repeated_names_get_sqlite_suffixes() {
        assert_eq!(
            renamed("SELECT a, t.a, a + 1, a + 1 AS x, a + 1 FROM t"),
            r#"SELECT a AS "a", t.a AS "a:1", a + 1 AS "a + 1", a + 1 AS x, a + 1 AS "a + 1:1" FROM t"#
        );
        assert_eq!(
            renamed("SELECT *, a, a FROM t"),
            r#"SELECT *, a AS "a:1", a AS "a:2" FROM t"#
        );
        assert_eq!(
            renamed("SELECT x, a AS x FROM t"),
            r#"SELECT x AS "x:1", a AS x FROM t"#
        );
    }

    #[test]
    fn fields_read_through_columns_are_named_after_the_field_uniquely() {
        let mut statements = Parser::parse_sql(
            &crate::dialect::EddyDialect,
            "SELECT id, t.c1.i1, t.c1.i2, t.c2.i1, t.c2.i2, t.c3.i1 FROM t",
        )
        .unwrap();
        let Statement::Query(q) = &mut statements[0] else {
            panic!("a query")
        };
        name_field_reads(q);
        assert_eq!(
            q.to_string(),
            "SELECT id, t.c1.i1 AS i1, t.c1.i2 AS i2, t.c2.i1 AS i10, t.c2.i2 AS i20, \
             t.c3.i1 AS i11 FROM t"
        );
    }

    #[test]
    fn aggregates_of_casts_get_a_filter_of_their_own() {
        assert_eq!(
            renamed(
                "SELECT SUM(-x) + SUM(CAST(-x AS BIGINT)) AS s, \
                 COUNT(CAST(x AS INT)) AS c, f(CAST(x AS INT)) AS g FROM t"
            ),
            "SELECT SUM(-x) + SUM(CAST(-x AS BIGINT)) FILTER (WHERE 1 = 1) AS s, \
             COUNT(CAST(x AS INT)) FILTER (WHERE 2 = 2) AS c, f(CAST(x AS INT)) AS g FROM t"
        );
    }

    #[test]
    fn derived_tables_get_an_alias() {
        assert_eq!(
            renamed(
                "SELECT * FROM t, (SELECT a FROM u) WHERE t.a IN (SELECT b FROM (SELECT b FROM v))"
            ),
            r#"SELECT * FROM t, (SELECT a AS "a" FROM u) AS _derived_1 WHERE t.a IN (SELECT b AS "b" FROM (SELECT b AS "b" FROM v) AS _derived_2)"#
        );
    }
}

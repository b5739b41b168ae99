//! Where in a statement an error points when the planner gave no place:
//! the expression, name or literal its message names.
//!
//! DataFusion attaches a place to some of its errors (an unknown column);
//! most of its refusals (an operator or function refused its argument
//! types, a literal that cannot be converted) carry none, and the
//! statement's first word is a poor answer for a view of forty lines. The
//! message, once in SQL's words ([`crate::error`]), names what it refuses:
//! the operator or function (`Cannot apply '+' to …`), the column, the
//! table or view (`Object 'x' not found`) or the literal. The place is
//! where the statement first writes that thing; when it writes it several
//! times, the first is the best guess this can make without the planner's
//! types.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    visit_expressions, visit_relations, Expr, ObjectName, Query, SetExpr, Spanned, Statement,
    Value, Visit, Visitor,
};
use datafusion::sql::sqlparser::tokenizer::Span;

/// The span in `statement` of what `message` names, when it can be found.
pub fn place(message: &str, statement: &Statement) -> Option<Span> {
    let starts = |p: &str| message.starts_with(p);
    let quoted = first_quoted(message);
    let found = if starts("Cannot apply '")
        || starts("Invalid number of arguments to function '")
        || starts("No function named '")
        || starts("Window function '")
    {
        operator_or_call(statement, quoted?)
    } else if starts("Cannot apply indexing") {
        operator_or_call(statement, "indexing")
    } else if starts("Cannot specify IGNORE NULLS") {
        operator_or_call(statement, last_quoted(message)?)
    } else if starts("Column '") || starts("Expression '") {
        column(statement, quoted?)
    } else if starts("Object '") {
        relation(statement, quoted?)
    } else if starts("Values passed to IN operator") {
        operator_or_call(statement, "IN").or_else(|| operator_or_call(statement, "NOT IN"))
    } else if starts("Values passed to NOT IN operator") {
        operator_or_call(statement, "NOT IN")
    } else if starts("Illegal mixing of types in CASE") {
        first_expr(statement, |e| matches!(e, Expr::Case { .. }))
    } else if starts("Cast function cannot convert") || starts("Cast cannot be used to convert") {
        first_expr(statement, |e| matches!(e, Expr::Cast { .. }))
    } else if starts("A scalar subquery must select exactly one column") {
        first_expr(statement, |e| matches!(e, Expr::Subquery(_)))
    } else if starts("WHERE clause must be a condition") {
        condition(statement)
    } else if starts("Unknown type '") {
        column_of_type(statement, quoted?)
    } else if let Some(rest) = message.strip_prefix("Cannot infer return type for ") {
        operator_or_call(statement, rest.split([';', ' ']).next()?)
    } else if let Some(rest) = message.strip_prefix("Cannot find column with position ") {
        let n = rest.split(' ').next()?;
        first_expr(
            statement,
            |e| matches!(e, Expr::Value(v) if matches!(&v.value, Value::Number(x, _) if x == n)),
        )
    } else if message.contains("NOW()") {
        operator_or_call(statement, "NOW")
    } else {
        None
    };
    found.or_else(|| literal(statement, quoted?))
}

/// `message` with the function it says does not exist named as the
/// statement writes it (`UPPR`, where the planner, which folds unquoted
/// names to lower case, says `uppr`).
pub fn as_written(message: &str, statement: &Statement) -> String {
    const NO_FUNCTION: &str = "No function named '";
    let Some(named) = message
        .strip_prefix(NO_FUNCTION)
        .and_then(|rest| rest.split('\'').next())
    else {
        return message.to_string();
    };
    let mut written = None;
    let _ = visit_expressions(statement, |e: &Expr| {
        if let Expr::Function(f) = e {
            if let Some(ident) = f.name.0.last().and_then(|p| p.as_ident()) {
                if ident.quote_style.is_none() && ident.value.to_lowercase() == named {
                    written = Some(ident.value.clone());
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    });
    match written {
        Some(w) => message.replacen(
            &format!("{NO_FUNCTION}{named}'"),
            &format!("{NO_FUNCTION}{w}'"),
            1,
        ),
        None => message.to_string(),
    }
}

/// The condition of the first `WHERE` of the statement.
fn condition(statement: &Statement) -> Option<Span> {
    struct Where(Option<Span>);
    impl Visitor for Where {
        type Break = ();
        fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<()> {
            if let SetExpr::Select(select) = query.body.as_ref() {
                if let Some(span) = select.selection.as_ref().and_then(|w| known(w.span())) {
                    self.0 = Some(span);
                    return ControlFlow::Break(());
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut found = Where(None);
    let _ = statement.visit(&mut found);
    found.0
}

/// The column a `CREATE TABLE` declares of type `name`.
fn column_of_type(statement: &Statement, name: &str) -> Option<Span> {
    let Statement::CreateTable(ct) = statement else {
        return None;
    };
    ct.columns
        .iter()
        .find(|c| c.data_type.to_string().eq_ignore_ascii_case(name))
        .and_then(|c| known(c.name.span))
}

/// The text between the first pair of single quotes.
fn first_quoted(message: &str) -> Option<&str> {
    let (_, rest) = message.split_once('\'')?;
    rest.split_once('\'').map(|(q, _)| q)
}

/// The text between the last pair of single quotes.
fn last_quoted(message: &str) -> Option<&str> {
    let (before, _) = message.rsplit_once('\'')?;
    before.rsplit_once('\'').map(|(_, q)| q)
}

/// A span that says where it is (sqlparser leaves some empty).
fn known(span: Span) -> Option<Span> {
    (span.start.line > 0).then_some(span)
}

/// The first expression (in the text's order) that `matches`.
fn first_expr(statement: &Statement, matches: impl Fn(&Expr) -> bool) -> Option<Span> {
    let mut found: Vec<Span> = Vec::new();
    let _ = visit_expressions(statement, |e: &Expr| {
        if matches(e) {
            found.extend(known(e.span()));
        }
        ControlFlow::<()>::Continue(())
    });
    found
        .into_iter()
        .min_by_key(|s| (s.start.line, s.start.column))
}

/// The last part of a name, as SQL compares it (quoted parts as written).
fn last_part(name: &ObjectName) -> Option<String> {
    let ident = name.0.last()?.as_ident()?;
    Some(match ident.quote_style {
        Some(_) => ident.value.clone(),
        None => ident.value.to_lowercase(),
    })
}

/// The operator, test or call that a refusal names (`+`, `IS TRUE`,
/// `BETWEEN ASYMMETRIC`, `SUBSTRING`, `indexing`).
fn operator_or_call(statement: &Statement, named: &str) -> Option<Span> {
    let upper = named.to_uppercase();
    first_expr(statement, |e| match e {
        Expr::BinaryOp { op, .. } => {
            let op = op.to_string().to_uppercase();
            op == upper || (op == "<>" && upper == "!=") || (op == "!=" && upper == "<>")
        }
        Expr::Function(f) => last_part(&f.name).is_some_and(|n| n.to_uppercase() == upper),
        Expr::Between { negated, .. } => {
            upper.starts_with("BETWEEN") && !negated || upper.starts_with("NOT BETWEEN") && *negated
        }
        Expr::Like { negated, .. } => upper == if *negated { "NOT LIKE" } else { "LIKE" },
        Expr::IsTrue(_) => upper == "IS TRUE",
        Expr::IsNotTrue(_) => upper == "IS NOT TRUE",
        Expr::IsFalse(_) => upper == "IS FALSE",
        Expr::IsNotFalse(_) => upper == "IS NOT FALSE",
        Expr::IsUnknown(_) => upper == "IS UNKNOWN",
        Expr::IsNotUnknown(_) => upper == "IS NOT UNKNOWN",
        Expr::IsDistinctFrom(..) => upper == "IS DISTINCT FROM",
        Expr::IsNotDistinctFrom(..) => upper == "IS NOT DISTINCT FROM" || upper == "<=>",
        Expr::InList { negated, .. } | Expr::InSubquery { negated, .. } => {
            upper == if *negated { "NOT IN" } else { "IN" }
        }
        Expr::CompoundFieldAccess { .. } => upper == "INDEXING",
        Expr::Substring { .. } => upper == "SUBSTRING" || upper == "SUBSTR",
        Expr::Trim { .. } => upper == "TRIM",
        Expr::Position { .. } => upper == "POSITION",
        Expr::Overlay { .. } => upper == "OVERLAY",
        Expr::Extract { .. } => upper == "EXTRACT",
        Expr::Ceil { .. } => upper == "CEIL" || upper == "CEILING",
        Expr::Floor { .. } => upper == "FLOOR",
        _ => false,
    })
}

/// The first reference to column `name` (`name` or `x.name`).
fn column(statement: &Statement, name: &str) -> Option<Span> {
    let same = |written: &datafusion::sql::sqlparser::ast::Ident| match written.quote_style {
        Some(_) => written.value == name,
        None => written.value.eq_ignore_ascii_case(name),
    };
    first_expr(statement, |e| match e {
        Expr::Identifier(i) => same(i),
        Expr::CompoundIdentifier(parts) => parts.last().is_some_and(same),
        _ => false,
    })
}

/// The first place `statement` reads the table or view `name`.
fn relation(statement: &Statement, name: &str) -> Option<Span> {
    let wanted = name.rsplit('.').next().unwrap_or(name);
    let mut found = None;
    let _ = visit_relations(statement, |n: &ObjectName| {
        if last_part(n).is_some_and(|p| p.eq_ignore_ascii_case(wanted)) {
            found = known(n.span());
            if found.is_some() {
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    });
    found
}

/// The first string literal whose text is `text` (a value that could not
/// be converted).
fn literal(statement: &Statement, text: &str) -> Option<Span> {
    first_expr(statement, |e| match e {
        Expr::Value(v) => matches!(&v.value, Value::SingleQuotedString(s) if s == text),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::program::parse_statements;

    fn at(sql: &str, message: &str) -> Option<(u64, u64, u64, u64)> {
        let statement = parse_statements(sql).unwrap().remove(0);
        place(message, &statement).map(|s| (s.start.line, s.start.column, s.end.line, s.end.column))
    }

    #[test]
    fn an_operator_refused_is_found() {
        let sql = "CREATE VIEW v AS\nSELECT a,\n  b + c AS d FROM t";
        let m = "Cannot apply '+' to arguments of type '<DECIMAL(20, 2)> + <TIMESTAMP>'";
        assert_eq!(at(sql, m), Some((3, 3, 3, 8)));
        let m = "Cannot apply 'UPPER' to arguments of type 'UPPER(<INTEGER>, <INTEGER>)'";
        // sqlparser ends a call's span where its closing parenthesis starts.
        assert_eq!(at("SELECT a, upper(a, 1) FROM t", m), Some((1, 11, 1, 21)));
    }

    #[test]
    fn a_missing_name_is_found() {
        let sql = "CREATE VIEW v AS SELECT a FROM t JOIN\n  by_town ON true";
        assert_eq!(at(sql, "Object 'by_town' not found"), Some((2, 3, 2, 10)));
        assert_eq!(
            at(
                "SELECT a, T.Bee FROM t",
                "Column 'bee' not found in table 't'"
            ),
            Some((1, 11, 1, 16))
        );
    }

    #[test]
    fn a_literal_is_found_and_other_messages_have_no_place() {
        let sql = "SELECT a FROM t WHERE amount = 'abc'";
        assert_eq!(
            at(sql, "Cannot parse 'abc' as DECIMAL(10, 2)"),
            Some((1, 32, 1, 37))
        );
        assert_eq!(at(sql, "something else"), None);
    }
}

//! Window table functions and group windows, rewritten into plain SQL
//! before DataFusion plans a query (DataFusion 55 does not plan
//! `TableFactor::TableFunction`):
//!
//! * `TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), size [, offset]))` becomes
//!   `(SELECT *, tumble_start(ts, size, offset) AS window_start,
//!   tumble_end(ts, size, offset) AS window_end FROM t WHERE ts IS NOT
//!   NULL)` (a NULL time is in no window, table.md);
//! * `TABLE(HOP(TABLE t, DESCRIPTOR(ts), slide, size [, offset]))` becomes
//!   `t` crossed with the numbers `0 .. ceil(size / slide)`, each row's
//!   `k`-th window being `hop_start(ts, slide, size, offset, k)` to
//!   `hop_end(…)`, and the
//!   windows that do not hold the row filtered out (when `size` is a whole
//!   number of slides, from the time's pane `tumble_start(ts, slide,
//!   offset)`, which lies in the same windows: rows that need the time only
//!   for their windows are then equal within a pane);
//! * `TABLE(SESSION(TABLE t, DESCRIPTOR(ts), [DESCRIPTOR(key),] gap))`
//!   becomes `t` with the window functions of [`crate::sessions`]:
//!   `session_start(ts, gap) OVER (PARTITION BY key ORDER BY ts) AS
//!   window_start` and `session_end(…) AS window_end` (a row joins the
//!   session of the key's previous row when it is less than `gap` after
//!   it; a session's window is `[its first time, its last time + gap)`;
//!   a row whose time is NULL is in none);
//! * `GROUP BY TUMBLE(ts, size [, offset])` groups by
//!   `tumble_start(ts, size, offset)`, and `TUMBLE_END(ts, size [, offset])`
//!   in that query becomes `tumble_start(…) + size`, an expression of the
//!   group key (`TUMBLE_START` is the function itself);
//! * `GROUP BY HOP(ts, slide, size [, offset])` and `GROUP BY [key,]
//!   SESSION(ts, gap)` over one table read the table function instead
//!   (keyed by the other grouping column for a session) and group by
//!   `window_start, window_end`, which `HOP_START`/`HOP_END` and
//!   `SESSION_START`/`SESSION_END` then name.
//!
//! Arguments may be positional or named (`DATA =>`, `TIMECOL =>`,
//! `SLIDE =>`, `SIZE =>`, `OFFSET =>`), and `TABLE t` is parsed by
//! [`crate::dialect`] into the expression `TABLE(t)`. The functions are
//! in [`crate::windows`]; generated fragments are parsed from the
//! arguments' own SQL text, never from the program's.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    Expr, Function, FunctionArg, FunctionArgExpr, FunctionArguments, GroupByExpr, Query,
    SelectItem, SetExpr, TableFactor, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

use crate::dialect::EddyDialect;
use crate::error::{SqlError, SqlResult};

/// The most windows one row may fall in (`size / slide` of a hop).
pub const MAX_WINDOWS_PER_ROW: i64 = 1000;

/// Rewrites the window table functions and group windows of a query.
pub fn rewrite(query: &mut Query) -> SqlResult<()> {
    let mut rewriter = Rewriter { error: None };
    let _ = query.visit(&mut rewriter);
    match rewriter.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Rewriter {
    error: Option<SqlError>,
}

fn name_of(f: &Function) -> String {
    f.name.to_string().to_lowercase()
}

/// The arguments of a call, positional ones in order and named ones by name.
fn arguments<'a>(f: &'a Function, names: &[&str]) -> SqlResult<Vec<Option<&'a Expr>>> {
    let mut out: Vec<Option<&Expr>> = vec![None; names.len()];
    let FunctionArguments::List(list) = &f.args else {
        return Err(SqlError::new(format!("{}() needs arguments", f.name)));
    };
    let mut position = 0;
    for arg in &list.args {
        let (slot, value) = match arg {
            FunctionArg::Unnamed(FunctionArgExpr::Expr(e)) => {
                position += 1;
                (position - 1, e)
            }
            FunctionArg::Named {
                name,
                arg: FunctionArgExpr::Expr(e),
                ..
            } => {
                let n = name.value.to_lowercase();
                let slot = names.iter().position(|x| *x == n).ok_or_else(|| {
                    SqlError::new(format!("{}() has no argument named {n}", f.name))
                })?;
                (slot, e)
            }
            other => {
                return Err(SqlError::new(format!(
                    "{}(): unexpected argument {other}",
                    f.name
                )))
            }
        };
        if slot >= names.len() {
            return Err(SqlError::new(format!(
                "{}() takes at most {} arguments",
                f.name,
                names.len()
            )));
        }
        out[slot] = Some(value);
    }
    Ok(out)
}

/// The single argument of `NAME(arg)`, when `e` is such a call.
fn unwrap_call<'a>(e: &'a Expr, name: &str) -> Option<&'a Expr> {
    let Expr::Function(f) = e else { return None };
    if name_of(f) != name {
        return None;
    }
    match &f.args {
        FunctionArguments::List(l) => match l.args.as_slice() {
            [FunctionArg::Unnamed(FunctionArgExpr::Expr(a))] => Some(a),
            _ => None,
        },
        _ => None,
    }
}

fn required<'a>(e: Option<&'a Expr>, f: &str, what: &str) -> SqlResult<&'a Expr> {
    e.ok_or_else(|| SqlError::new(format!("{f}() needs its {what} argument")))
}

/// `size / slide`, rounded up: how many hopping windows hold one row; and
/// whether `size` is a whole number of slides.
fn windows_per_row(slide: &Expr, size: &Expr) -> SqlResult<(i64, bool)> {
    let length = |e: &Expr| -> SqlResult<i128> {
        let v = crate::program::constant(e)?;
        use datafusion::common::ScalarValue as S;
        Ok(match v {
            S::IntervalMonthDayNano(Some(v)) if v.months == 0 => {
                i128::from(v.days) * 86_400_000_000_000 + i128::from(v.nanoseconds)
            }
            S::IntervalDayTime(Some(v)) => {
                i128::from(v.days) * 86_400_000_000_000 + i128::from(v.milliseconds) * 1_000_000
            }
            v if v.data_type().is_integer() => {
                match v.cast_to(&datafusion::arrow::datatypes::DataType::Int64)? {
                    S::Int64(Some(n)) => i128::from(n),
                    _ => return Err(SqlError::new(format!("the window length {e} is NULL"))),
                }
            }
            other => {
                return Err(SqlError::new(format!(
                    "a window length must be an interval without months or an integer, not {other}"
                )))
            }
        })
    };
    let (slide, size) = (length(slide)?, length(size)?);
    if slide <= 0 || size <= 0 {
        return Err(SqlError::new("HOP needs a positive slide and size"));
    }
    let n = (size + slide - 1) / slide;
    if n > i128::from(MAX_WINDOWS_PER_ROW) {
        return Err(SqlError::new(format!(
            "HOP with size / slide = {n} puts each row in more than {MAX_WINDOWS_PER_ROW} windows"
        )));
    }
    Ok((n as i64, size % slide == 0))
}

/// Parses a generated derived table, `(subquery) AS alias`.
fn derived(subquery: &str, alias: &str) -> SqlResult<TableFactor> {
    let text = format!("SELECT 1 FROM ({subquery}) AS {alias}");
    let statement = Parser::new(&EddyDialect)
        .try_with_sql(&text)
        .and_then(|mut p| p.parse_query())
        .map_err(|e| SqlError::new(format!("window table function: {e}")))?;
    match *statement.body {
        SetExpr::Select(mut s) => Ok(s.from.remove(0).relation),
        _ => Err(SqlError::new("window table function: unexpected rewrite")),
    }
}

impl Rewriter {
    fn table_function(&self, factor: &TableFactor) -> SqlResult<Option<TableFactor>> {
        let TableFactor::TableFunction {
            expr: Expr::Function(f),
            alias,
        } = factor
        else {
            return Ok(None);
        };
        let name = name_of(f);
        let args = match name.as_str() {
            "tumble" => arguments(f, &["data", "timecol", "size", "offset"])?,
            "hop" => arguments(f, &["data", "timecol", "slide", "size", "offset"])?,
            "session" => session_arguments(f)?,
            _ => return Ok(None),
        };
        let fname = name.to_uppercase();
        let data = required(args[0], &fname, "DATA")?;
        let table = unwrap_call(data, "table").ok_or_else(|| {
            SqlError::new(format!(
                "{fname}() takes its table as TABLE name, not {data}"
            ))
        })?;
        let timecol = required(args[1], &fname, "TIMECOL")?;
        let column = unwrap_call(timecol, "descriptor").ok_or_else(|| {
            SqlError::new(format!(
                "{fname}() takes its time column as DESCRIPTOR(column), not {timecol}"
            ))
        })?;
        let alias = match alias {
            Some(a) if a.columns.is_empty() => a.name.to_string(),
            Some(a) => {
                let columns: Vec<String> = a.columns.iter().map(|c| c.to_string()).collect();
                format!("{}({})", a.name, columns.join(", "))
            }
            None => match table {
                Expr::Identifier(i) => i.to_string(),
                Expr::CompoundIdentifier(parts) => parts.last().expect("parts").to_string(),
                other => other.to_string(),
            },
        };
        let subquery = if name == "session" {
            let gap = required(args[3], &fname, "SIZE")?;
            let partition = match args[2] {
                None => String::new(),
                Some(d) => {
                    let key = unwrap_call(d, "descriptor").ok_or_else(|| {
                        SqlError::new(format!(
                            "SESSION() takes its key as DESCRIPTOR(column), not {d}"
                        ))
                    })?;
                    format!("PARTITION BY {key} ")
                }
            };
            // One window over the key's rows in time order: the session
            // functions bound each row's run of rows less than the gap apart.
            let over = format!("OVER ({partition}ORDER BY {column})");
            format!(
                "SELECT *, session_start({column}, {gap}) {over} AS window_start, \
                 session_end({column}, {gap}) {over} AS window_end FROM {table} \
                 WHERE {column} IS NOT NULL"
            )
        } else if name == "tumble" {
            let size = required(args[2], &fname, "SIZE")?;
            let offset = args[3].map(|o| format!(", {o}")).unwrap_or_default();
            format!(
                "SELECT *, tumble_start({column}, {size}{offset}) AS window_start, \
                 tumble_end({column}, {size}{offset}) AS window_end FROM {table} \
                 WHERE {column} IS NOT NULL"
            )
        } else {
            let slide = required(args[2], &fname, "SLIDE")?;
            let size = required(args[3], &fname, "SIZE")?;
            let (n, whole) = windows_per_row(slide, size)?;
            let offset = args[4]
                .map(|o| o.to_string())
                .unwrap_or_else(|| zero_like(size));
            let ks: Vec<String> = (0..n).map(|k| format!("({k})")).collect();
            let ks = ks.join(", ");
            let window = |f: &str, time: &str| {
                format!("{f}({time}, {slide}, {size}, {offset}, __eddy_hop.k)")
            };
            if whole {
                // A size that is a whole number of slides puts every time
                // of one slide (its pane) in the same windows: the windows
                // are computed from the pane's start, so that rows which
                // differ only in their time within a pane are equal once
                // the time is not needed, and the product pairs each such
                // group once (it consolidates its input).
                let pane = "__eddy_p.__eddy_pane";
                let (start, end) = (window("hop_start", pane), window("hop_end", pane));
                format!(
                    "SELECT __eddy_p.* EXCLUDE (__eddy_pane), {start} AS window_start, \
                     {end} AS window_end FROM (SELECT *, tumble_start({column}, {slide}, {offset}) \
                     AS __eddy_pane FROM {table}) AS __eddy_p \
                     CROSS JOIN (VALUES {ks}) AS __eddy_hop(k) WHERE {start} IS NOT NULL"
                )
            } else {
                let time = format!("{table}.{column}");
                let (start, end) = (window("hop_start", &time), window("hop_end", &time));
                format!(
                    "SELECT {table}.*, {start} AS window_start, {end} AS window_end \
                     FROM {table} CROSS JOIN (VALUES {ks}) AS __eddy_hop(k) WHERE {start} IS NOT NULL"
                )
            }
        };
        derived(&subquery, &alias).map(Some)
    }
}

/// SESSION's arguments as (data, timecol, key, size): the key descriptor
/// is optional, so three positional arguments are (data, timecol, size).
fn session_arguments(f: &Function) -> SqlResult<Vec<Option<&Expr>>> {
    let mut args = arguments(f, &["data", "timecol", "key", "size"])?;
    let positional = match &f.args {
        FunctionArguments::List(l) => l.args.iter().all(|a| matches!(a, FunctionArg::Unnamed(_))),
        _ => false,
    };
    if positional && args[3].is_none() {
        if let Some(third) = args[2] {
            if unwrap_call(third, "descriptor").is_none() {
                args[3] = Some(third);
                args[2] = None;
            }
        }
    }
    Ok(args)
}

/// A zero of the same kind as a window length.
fn zero_like(length: &Expr) -> String {
    match length {
        Expr::Interval(_) => "INTERVAL '0' SECOND".to_string(),
        _ => "0".to_string(),
    }
}

/// `TUMBLE(args)` in a GROUP BY → `tumble_start(args)`; whether it was one.
fn group_window(e: &mut Expr) -> SqlResult<bool> {
    let Expr::Function(f) = e else {
        return Ok(false);
    };
    if name_of(f) != "tumble" {
        return Ok(false);
    }
    f.name = datafusion::sql::sqlparser::ast::ObjectName::from(vec![
        datafusion::sql::sqlparser::ast::Ident::new("tumble_start"),
    ]);
    Ok(true)
}

/// `GROUP BY HOP(ts, slide, size [, offset])` or `GROUP BY [key,]
/// SESSION(ts, gap)` over one table `t`: the select reads
/// `TABLE(HOP(TABLE t, DESCRIPTOR(ts), …))` (or `SESSION`, keyed by the
/// other grouping column) instead, groups by `window_start, window_end`,
/// and `HOP_START`/`HOP_END` (`SESSION_START`/`SESSION_END`) become those
/// columns. Whether the select had such a group window.
fn hop_or_session_group(select: &mut datafusion::sql::sqlparser::ast::Select) -> SqlResult<bool> {
    use datafusion::sql::sqlparser::ast::{Ident, TableFactor as TF};
    let GroupByExpr::Expressions(exprs, _) = &mut select.group_by else {
        return Ok(false);
    };
    let Some(p) = exprs.iter().position(
        |e| matches!(e, Expr::Function(f) if matches!(name_of(f).as_str(), "hop" | "session")),
    ) else {
        return Ok(false);
    };
    let Expr::Function(f) = &exprs[p] else {
        return Ok(false);
    };
    let kind = name_of(f);
    let FunctionArguments::List(list) = &f.args else {
        return Err(SqlError::new(format!("GROUP BY {kind}() needs arguments")));
    };
    let args: Vec<String> = list.args.iter().map(|a| a.to_string()).collect();
    let arity = if kind == "hop" { 3..=4 } else { 2..=2 };
    if !arity.contains(&args.len()) {
        return Err(SqlError::new(format!(
            "GROUP BY {}: takes (time, {}) ",
            kind.to_uppercase(),
            if kind == "hop" {
                "slide, size [, offset]"
            } else {
                "gap"
            }
        )));
    }
    let time = match &list.args[0] {
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::Identifier(i))) => i.to_string(),
        FunctionArg::Unnamed(FunctionArgExpr::Expr(Expr::CompoundIdentifier(parts))) => {
            parts.last().expect("parts").to_string()
        }
        _ => {
            return Err(SqlError::new(format!(
                "GROUP BY {}: the time must be a column, not {}",
                kind.to_uppercase(),
                args[0]
            )))
        }
    };
    let single = match select.from.as_slice() {
        [t] if t.joins.is_empty() => match &t.relation {
            TF::Table { name, alias, .. } => Some((name.to_string(), alias.clone())),
            _ => None,
        },
        _ => None,
    };
    let Some((table, alias)) = single else {
        return Err(SqlError::new(format!(
            "GROUP BY {}(…) reads one table; over a join or a subquery, define a view and \
             use TABLE({}(TABLE view, DESCRIPTOR(ts), …))",
            kind.to_uppercase(),
            kind.to_uppercase()
        )));
    };
    let call = if kind == "hop" {
        format!(
            "HOP(TABLE {table}, DESCRIPTOR({time}), {})",
            args[1..].join(", ")
        )
    } else {
        let keys: Vec<String> = exprs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != p)
            .map(|(_, e)| match e {
                Expr::Identifier(i) => Ok(i.to_string()),
                Expr::CompoundIdentifier(parts) => Ok(parts.last().expect("parts").to_string()),
                other => Err(SqlError::new(format!(
                    "GROUP BY SESSION: the other grouping keys must be columns, not {other}"
                ))),
            })
            .collect::<SqlResult<_>>()?;
        match keys.as_slice() {
            [] => format!("SESSION(TABLE {table}, DESCRIPTOR({time}), {})", args[1]),
            [key] => format!(
                "SESSION(TABLE {table}, DESCRIPTOR({time}), DESCRIPTOR({key}), {})",
                args[1]
            ),
            _ => {
                return Err(SqlError::new(
                    "GROUP BY SESSION: sessions are keyed by at most one other column",
                ))
            }
        }
    };
    let expr = crate::dialect::generated_expr(&call, &format!("GROUP BY {kind}"))?;
    select.from[0].relation = TF::TableFunction { expr, alias };
    exprs[p] = Expr::Identifier(Ident::new("window_start"));
    exprs.push(Expr::Identifier(Ident::new("window_end")));
    let (start, end) = (format!("{kind}_start"), format!("{kind}_end"));
    let rename = |e: &mut Expr| {
        let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(e, |x: &mut Expr| {
            if let Expr::Function(f) = x {
                let n = name_of(f);
                if n == start {
                    *x = Expr::Identifier(Ident::new("window_start"));
                } else if n == end {
                    *x = Expr::Identifier(Ident::new("window_end"));
                }
            }
            ControlFlow::<()>::Continue(())
        });
    };
    for item in &mut select.projection {
        if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
            rename(e);
        }
    }
    if let Some(h) = &mut select.having {
        rename(h);
    }
    Ok(true)
}

/// Replaces `TUMBLE_END(args)` by `tumble_start(args) + size` everywhere in `e`.
fn tumble_end_of_group(e: &mut Expr) -> SqlResult<()> {
    let mut error = None;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(e, |x: &mut Expr| {
        if let Expr::Function(f) = x {
            if name_of(f) == "tumble_end" {
                if let FunctionArguments::List(list) = &f.args {
                    let args: Vec<String> = list.args.iter().map(|a| a.to_string()).collect();
                    let text = match args.as_slice() {
                        [_, size] | [_, size, _] => {
                            format!("(tumble_start({}) + {size})", args.join(", "))
                        }
                        _ => {
                            error = Some(SqlError::new("TUMBLE_END takes (ts, size [, offset])"));
                            return ControlFlow::Break(());
                        }
                    };
                    match crate::dialect::generated_expr(&text, "TUMBLE_END") {
                        Ok(new) => *x = new,
                        Err(err) => {
                            error = Some(err);
                            return ControlFlow::Break(());
                        }
                    }
                }
            }
        }
        ControlFlow::Continue(())
    });
    error.map_or(Ok(()), Err)
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        match self.table_function(factor) {
            Ok(Some(new)) => {
                *factor = new;
                ControlFlow::Continue(())
            }
            Ok(None) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }

    fn pre_visit_select(
        &mut self,
        select: &mut datafusion::sql::sqlparser::ast::Select,
    ) -> ControlFlow<()> {
        match hop_or_session_group(select) {
            Ok(true) => return ControlFlow::Continue(()),
            Ok(false) => {}
            Err(err) => {
                self.error = Some(err);
                return ControlFlow::Break(());
            }
        }
        let GroupByExpr::Expressions(exprs, _) = &mut select.group_by else {
            return ControlFlow::Continue(());
        };
        let mut grouped = false;
        for e in exprs.iter_mut() {
            match group_window(e) {
                Ok(true) => grouped = true,
                Ok(false) => {}
                Err(err) => {
                    self.error = Some(err);
                    return ControlFlow::Break(());
                }
            }
        }
        if !grouped {
            return ControlFlow::Continue(());
        }
        let mut result = Ok(());
        for item in &mut select.projection {
            if let SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } = item {
                result = result.and(tumble_end_of_group(e));
            }
        }
        if let Some(h) = &mut select.having {
            result = result.and(tumble_end_of_group(h));
        }
        match result {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.error = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

//! `UNNEST` in `FROM`, as Feldera's reference defines it (array.md, map.md):
//! `FROM data, UNNEST(data.cities) [WITH ORDINALITY] AS t (city [, i])`
//! gives a row for each element of each row's array, beside that row's
//! columns (also spelled `CROSS JOIN UNNEST(…)` and `CROSS APPLY
//! UNNEST(…)`); an array of ROWs gives the rows' fields as columns, a MAP
//! gives its keys and values, `WITH ORDINALITY` adds the element's position
//! counting from 1, and a NULL array gives no rows.
//!
//! Two steps, because DataFusion 55 plans neither `WITH ORDINALITY` nor
//! lateral references:
//!
//! 1. [`rewrite`], on the query's text: each `UNNEST(e, …) [WITH
//!    ORDINALITY] AS t (c, …)` becomes the lateral derived table
//!    `LATERAL (SELECT … FROM UNNEST(e', …, ordinals) AS __eddy_unnest(…))
//!    AS t`, whose select list names the columns: an element itself, or
//!    `get_field` of each field of a ROW element, or of a MAP's entries
//!    (`map_entries(e)`, key and value); the ordinals are
//!    `generate_series(1, longest cardinality)`. What an argument holds is
//!    learnt by planning `SELECT e, … FROM <the FROM items before it>`.
//! 2. [`bind_lateral`], on the plan: a join whose right side is a subquery
//!    reading the left side's columns (a lateral join) becomes the
//!    subquery computed over the left side itself: its one-row empty input
//!    is replaced by the left rows, the outer references by their columns,
//!    and each node above carries the left columns along. DataFusion's
//!    `Unnest` node left then is lowered to the circuit's unnest operator
//!    (`eddy_dbsp::operator::Unnest`, linear: a change row yields its
//!    elements with its weight).
//!
//! `LEFT JOIN UNNEST(…) ON TRUE` and `OUTER APPLY` are refused, as in
//! Feldera (unsupported-operations.md).

use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::Column;
use datafusion::logical_expr::{
    Expr, Filter, JoinType, LogicalPlan, Projection, SubqueryAlias, Unnest,
};
use datafusion::sql::sqlparser::ast::{
    visit_expressions_mut, Expr as SqlExpr, Ident, JoinConstraint, JoinOperator, Query, SetExpr,
    TableFactor, TableWithJoins, VisitMut, VisitorMut,
};
use datafusion::sql::sqlparser::parser::Parser;

use crate::dialect::EddyDialect;
use crate::error::{SqlError, SqlResult};

/// The alias of the inner `UNNEST` a rewrite generates; an `UNNEST` under
/// it is not rewritten again.
const INNER: &str = "__eddy_unnest";

/// The column types of a query's text, when it plans: how the rewrite
/// learns what an `UNNEST` argument holds.
pub type Probe<'a> = dyn FnMut(&str) -> Option<Vec<DataType>> + 'a;

/// Rewrites every `UNNEST` table factor of `query` (step 1 above).
pub fn rewrite(query: &mut Query, probe: &mut Probe<'_>) -> SqlResult<()> {
    let mut rewriter = Rewriter { probe, error: None };
    let _ = query.visit(&mut rewriter);
    match rewriter.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Rewriter<'p, 'a> {
    probe: &'p mut Probe<'a>,
    error: Option<SqlError>,
}

impl VisitorMut for Rewriter<'_, '_> {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        if let Err(e) = self.set_expr(&mut query.body) {
            self.error = Some(e);
            return ControlFlow::Break(());
        }
        ControlFlow::Continue(())
    }
}

/// What one `UNNEST` argument yields per element.
enum Yield {
    /// The element itself.
    Element,
    /// The fields of a ROW element, by name.
    Fields(Vec<String>),
    /// A MAP's key and value.
    Entry,
}

impl Rewriter<'_, '_> {
    fn set_expr(&mut self, body: &mut SetExpr) -> SqlResult<()> {
        match body {
            SetExpr::Select(select) => {
                for k in 0..select.from.len() {
                    if is_unnest(&select.from[k].relation) {
                        let before = items(&select.from[..k]);
                        let lateral = (k > 0).then_some(before.as_str());
                        if let Some(f) = self.factor(&select.from[k].relation, lateral)? {
                            select.from[k].relation = f;
                        }
                    }
                    for j in 0..select.from[k].joins.len() {
                        if !is_unnest(&select.from[k].joins[j].relation) {
                            continue;
                        }
                        let join = &select.from[k].joins[j];
                        match &join.join_operator {
                            JoinOperator::CrossApply => {
                                select.from[k].joins[j].join_operator =
                                    JoinOperator::CrossJoin(JoinConstraint::None)
                            }
                            JoinOperator::OuterApply
                            | JoinOperator::Left(_)
                            | JoinOperator::LeftOuter(_)
                            | JoinOperator::Right(_)
                            | JoinOperator::RightOuter(_)
                            | JoinOperator::FullOuter(_) => {
                                return Err(SqlError::new(
                                    "LEFT JOIN UNNEST, OUTER APPLY and other outer joins with \
                                     UNNEST are not supported; to keep the rows whose array is \
                                     NULL, unnest COALESCE(array, ARRAY[NULL])",
                                ))
                            }
                            _ => {}
                        }
                        let mut prefix = select.from[..=k].to_vec();
                        prefix[k].joins.truncate(j);
                        let before = items(&prefix);
                        let relation = &select.from[k].joins[j].relation;
                        if let Some(f) = self.factor(relation, Some(&before))? {
                            select.from[k].joins[j].relation = f;
                        }
                    }
                }
                Ok(())
            }
            SetExpr::SetOperation { left, right, .. } => {
                self.set_expr(left)?;
                self.set_expr(right)
            }
            _ => Ok(()),
        }
    }

    /// The derived table an `UNNEST` factor becomes; `before` is the text
    /// of the FROM items before it, which it may read (none when it comes
    /// first).
    fn factor(
        &mut self,
        factor: &TableFactor,
        before: Option<&str>,
    ) -> SqlResult<Option<TableFactor>> {
        let TableFactor::UNNEST {
            alias,
            array_exprs,
            with_offset,
            with_ordinality,
            ..
        } = factor
        else {
            return Ok(None);
        };
        if alias.as_ref().is_some_and(|a| a.name.value == INNER) {
            return Ok(None);
        }
        if *with_offset {
            return Err(SqlError::new(
                "UNNEST … WITH OFFSET is not supported; use WITH ORDINALITY",
            ));
        }
        if array_exprs.is_empty() {
            return Err(SqlError::new("UNNEST needs an argument"));
        }
        let from = before.map(|b| format!(" FROM {b}")).unwrap_or_default();
        let mut array_exprs = array_exprs.clone();
        if before.is_some() {
            for e in &mut array_exprs {
                self.field_access(e, &from);
            }
        }
        let args: Vec<String> = array_exprs.iter().map(|e| e.to_string()).collect();
        let yields: Vec<Yield> = match (self.probe)(&format!("SELECT {}{from}", args.join(", "))) {
            Some(types) => types.iter().map(yield_of).collect::<SqlResult<_>>()?,
            // An argument that reads an enclosing query's columns cannot be
            // probed on its own; it is taken as an array of scalars.
            None => args.iter().map(|_| Yield::Element).collect(),
        };
        let mut inner_args = Vec::new();
        let mut inner_names = Vec::new();
        let mut columns: Vec<(String, String)> = Vec::new();
        let single = yields.len() == 1;
        for (i, (arg, y)) in args.iter().zip(&yields).enumerate() {
            let x = format!("{INNER}.x{i}");
            inner_names.push(format!("x{i}"));
            match y {
                Yield::Element => {
                    inner_args.push(arg.clone());
                    let name = match alias {
                        Some(a) if single => a.name.value.clone(),
                        _ => format!("EXPR${i}"),
                    };
                    columns.push((x, name));
                }
                Yield::Fields(fields) => {
                    inner_args.push(arg.clone());
                    for f in fields {
                        columns.push((format!("get_field({x}, {})", string(f)), f.clone()));
                    }
                }
                Yield::Entry => {
                    inner_args.push(format!("map_entries({arg})"));
                    for f in ["key", "value"] {
                        columns.push((format!("get_field({x}, '{f}')"), f.to_uppercase()));
                    }
                }
            }
        }
        if *with_ordinality {
            let lengths: Vec<String> = inner_args
                .iter()
                .map(|a| format!("coalesce(CAST(array_length({a}) AS BIGINT), 0)"))
                .collect();
            let longest = if lengths.len() == 1 {
                lengths[0].clone()
            } else {
                format!("greatest({})", lengths.join(", "))
            };
            inner_args.push(format!("generate_series(1, {longest})"));
            inner_names.push("o".into());
            columns.push((format!("CAST({INNER}.o AS INTEGER)"), "ORDINALITY".into()));
        }
        let names: Vec<String> = match alias {
            Some(a) if !a.columns.is_empty() => {
                if a.columns.len() != columns.len() {
                    return Err(SqlError::new(format!(
                        "UNNEST yields {} columns but its alias {} names {}",
                        columns.len(),
                        a.name,
                        a.columns.len()
                    )));
                }
                a.columns.iter().map(|c| c.name.to_string()).collect()
            }
            _ => columns
                .iter()
                .map(|(_, n)| Ident::with_quote('"', n).to_string())
                .collect(),
        };
        let select: Vec<String> = columns
            .iter()
            .zip(&names)
            .map(|((e, _), n)| format!("{e} AS {n}"))
            .collect();
        let text = format!(
            "SELECT 1 FROM {}(SELECT {} FROM UNNEST({}) AS {INNER}({})){}",
            if before.is_some() { "LATERAL " } else { "" },
            select.join(", "),
            inner_args.join(", "),
            inner_names.join(", "),
            alias
                .as_ref()
                .map(|a| format!(" AS {}", a.name))
                .unwrap_or_default(),
        );
        let query = Parser::new(&EddyDialect)
            .try_with_sql(&text)
            .and_then(|mut p| p.parse_query())
            .map_err(|e| SqlError::new(format!("UNNEST: {e}")))?;
        match *query.body {
            SetExpr::Select(mut s) => Ok(Some(s.from.remove(0).relation)),
            _ => Err(SqlError::new("UNNEST: unexpected rewrite")),
        }
    }
}

impl Rewriter<'_, '_> {
    /// Spells the field accesses of `e` that name a row's column and its
    /// fields as one identifier (`t.c1.i1`, `c1.i1`) as `get_field` calls,
    /// which DataFusion resolves where it reads them from the left side of
    /// a lateral join (it refuses nested identifiers there).
    fn field_access(&mut self, e: &mut SqlExpr, from: &str) {
        let _ = visit_expressions_mut(e, |x| {
            if let SqlExpr::CompoundIdentifier(parts) = x {
                let column_first = parts.len() >= 2
                    && (self.probe)(&format!("SELECT {}{from}", parts[0])).is_some();
                let base = if column_first { 1 } else { 2 };
                if parts.len() > base {
                    let mut access = parts[..base]
                        .iter()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(".");
                    for p in &parts[base..] {
                        access = format!("get_field({access}, {})", string(&p.value));
                    }
                    if let Ok(parsed) = Parser::new(&EddyDialect)
                        .try_with_sql(&access)
                        .and_then(|mut p| p.parse_expr())
                    {
                        *x = parsed;
                    }
                }
            }
            ControlFlow::<()>::Continue(())
        });
    }
}

fn is_unnest(f: &TableFactor) -> bool {
    matches!(f, TableFactor::UNNEST { .. })
}

/// FROM items as text.
fn items(from: &[TableWithJoins]) -> String {
    from.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// A SQL string literal.
fn string(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn yield_of(t: &DataType) -> SqlResult<Yield> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Ok(match f.data_type() {
                DataType::Struct(fields) => {
                    Yield::Fields(fields.iter().map(|f| f.name().clone()).collect())
                }
                _ => Yield::Element,
            })
        }
        DataType::Map(..) => Ok(Yield::Entry),
        DataType::Null => Ok(Yield::Element),
        other => Err(SqlError::new(format!(
            "UNNEST needs an ARRAY or a MAP, not {}",
            crate::error::sql_type_name(&other.to_string())
        ))),
    }
}

fn unsupported(what: impl std::fmt::Display) -> datafusion::error::DataFusionError {
    datafusion::error::DataFusionError::Plan(format!("not supported yet: {what}"))
}

/// Rewrites lateral joins into plain operators (step 2 above).
pub fn bind_lateral(plan: LogicalPlan) -> SqlResult<LogicalPlan> {
    Ok(plan
        .transform_up(|node| {
            let LogicalPlan::Join(join) = &node else {
                return Ok(Transformed::no(node));
            };
            let (alias, subquery) = match join.right.as_ref() {
                LogicalPlan::SubqueryAlias(a) => match a.input.as_ref() {
                    LogicalPlan::Subquery(s) => (Some(a.alias.clone()), s),
                    _ => return Ok(Transformed::no(node)),
                },
                LogicalPlan::Subquery(s) => (None, s),
                _ => return Ok(Transformed::no(node)),
            };
            if subquery.outer_ref_columns.is_empty() {
                return Ok(Transformed::no(node));
            }
            if join.join_type != JoinType::Inner || !join.on.is_empty() {
                return Err(unsupported(
                    "an outer join with a LATERAL subquery or UNNEST (LEFT JOIN UNNEST)",
                ));
            }
            let left = join.left.as_ref();
            let mut bound = carry(subquery.subquery.as_ref(), left)?;
            if let Some(alias) = alias {
                bound = LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(bound), alias)?);
            }
            let (nl, nr) = (
                left.schema().fields().len(),
                join.right.schema().fields().len(),
            );
            let at = |i: usize| Expr::Column(Column::from(bound.schema().qualified_field(i)));
            let named = |e: Expr, schema: &datafusion::common::DFSchema, i: usize| {
                let (q, f) = schema.qualified_field(i);
                e.alias_qualified(q.cloned(), f.name())
            };
            let mut exprs: Vec<Expr> = (0..nl)
                .map(|i| named(at(nr + i), left.schema(), i))
                .collect();
            exprs.extend((0..nr).map(|j| named(at(j), join.right.schema(), j)));
            let mut out = LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(bound))?);
            if let Some(filter) = &join.filter {
                out = LogicalPlan::Filter(Filter::try_new(filter.clone(), Arc::new(out))?);
            }
            Ok(Transformed::yes(out))
        })?
        .data)
}

/// `plan` over the rows of `left`, its outer references read from them:
/// its own columns, then `left`'s (named apart, `__eddy_lateral_i`).
fn carry(plan: &LogicalPlan, left: &LogicalPlan) -> datafusion::error::Result<LogicalPlan> {
    let nl = left.schema().fields().len();
    // The left columns, the last `nl` of `input`, and an expression with
    // its outer references turned into them.
    let tail = |input: &LogicalPlan| -> Vec<Expr> {
        let n = input.schema().fields().len();
        (n - nl..n)
            .map(|i| Expr::Column(Column::from(input.schema().qualified_field(i))))
            .collect()
    };
    let resolve = |e: &Expr, carried: &[Expr]| -> datafusion::error::Result<Expr> {
        Ok(e.clone()
            .transform(|x| match &x {
                Expr::OuterReferenceColumn(_, c) => match left.schema().index_of_column(c) {
                    Ok(i) => Ok(Transformed::yes(carried[i].clone())),
                    Err(_) => Err(unsupported(format!(
                        "a LATERAL subquery reading {c}, a column of an enclosing query"
                    ))),
                },
                _ => Ok(Transformed::no(x)),
            })?
            .data)
    };
    Ok(match plan {
        LogicalPlan::EmptyRelation(e) if e.produce_one_row => {
            let exprs = (0..nl)
                .map(|i| {
                    Expr::Column(Column::from(left.schema().qualified_field(i)))
                        .alias(format!("__eddy_lateral_{i}"))
                })
                .collect();
            LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(left.clone()))?)
        }
        LogicalPlan::Projection(p) => {
            let input = carry(&p.input, left)?;
            let carried = tail(&input);
            let mut exprs = Vec::with_capacity(p.expr.len() + nl);
            for (i, e) in p.expr.iter().enumerate() {
                let (q, f) = p.schema.qualified_field(i);
                let e = match resolve(e, &carried)? {
                    Expr::Alias(a) => *a.expr,
                    other => other,
                };
                exprs.push(e.alias_qualified(q.cloned(), f.name()));
            }
            exprs.extend(carried);
            LogicalPlan::Projection(Projection::try_new(exprs, Arc::new(input))?)
        }
        LogicalPlan::Filter(f) => {
            let input = carry(&f.input, left)?;
            let predicate = resolve(&f.predicate, &tail(&input))?;
            LogicalPlan::Filter(Filter::try_new(predicate, Arc::new(input))?)
        }
        // The inner `UNNEST` of a rewritten one reads the same left row.
        LogicalPlan::Subquery(s) => carry(&s.subquery, left)?,
        LogicalPlan::SubqueryAlias(a) => {
            let input = carry(&a.input, left)?;
            LogicalPlan::SubqueryAlias(SubqueryAlias::try_new(Arc::new(input), a.alias.clone())?)
        }
        LogicalPlan::Unnest(u) => {
            let input = carry(&u.input, left)?;
            LogicalPlan::Unnest(Unnest::try_new(
                Arc::new(input),
                u.exec_columns.clone(),
                u.options.clone(),
            )?)
        }
        other => {
            return Err(unsupported(format!(
                "a LATERAL subquery computing {}",
                other.display()
            )))
        }
    })
}

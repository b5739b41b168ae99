//! Planning Feldera's qualified intervals (see [`super`]), under Feldera's
//! rules:
//!
//! * [`qualify_literals`]: `INTERVAL '10 10:30' DAY TO MINUTE`,
//!   `INTERVAL col MONTH` and `CAST(x AS INTERVAL HOUR TO MINUTE)` become
//!   `eddy_interval('10 10:30', 'DAY TO MINUTE')` and the like, read as
//!   Feldera reads them. A literal of one unit that is
//!   a call's argument or a window frame's bound stays DataFusion's
//!   literal: window sizes and frames must be constants when planned.
//! * [`Arithmetic`], an expression planner: `a + b` and `a - b` of
//!   intervals have the span of both types (`DAY TO HOUR` and `HOUR TO
//!   MINUTE` make `DAY TO MINUTE`); an interval times or divided by a
//!   number keeps its type; a DATE moves by whole days, a TIME by a short
//!   interval, wrapping (datetime.md).
//! * [`Casts`], an analyzer rule after type coercion: an interval cast to
//!   text is Feldera's text of its type, cast to a number the count of its
//!   last unit (casts.md).

use std::collections::HashSet;
use std::ops::ControlFlow;

use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{DFSchema, ExprSchema, Result, ScalarValue};
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult, RawBinaryExpr};
use datafusion::logical_expr::{
    BinaryExpr, Cast, Expr, ExprSchemable, LogicalPlan, Operator, TryCast,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::sql::sqlparser::ast::{
    self, BinaryOperator, FunctionArg, FunctionArgExpr, FunctionArguments, NamedWindowExpr,
    SetExpr, Value, ValueWithSpan, VisitMut, VisitorMut, WindowFrameBound, WindowSpec, WindowType,
};

use super::functions::{self, qualify, QUALIFY};
use super::{Qualifier, METADATA_KEY};

/// The qualifier of an interval-valued expression, where its type has one.
pub fn qualifier_of(e: &Expr, schema: &DFSchema) -> Option<Qualifier> {
    let of = |e: &Expr| qualifier_of(e, schema);
    match e {
        Expr::Column(c) => schema
            .field_from_column(c)
            .ok()?
            .metadata()
            .get(METADATA_KEY)
            .and_then(|s| Qualifier::parse(s)),
        Expr::Alias(a) => of(&a.expr),
        Expr::Negative(x) => of(x),
        Expr::Cast(Cast { expr, .. }) | Expr::TryCast(TryCast { expr, .. }) => of(expr),
        Expr::Literal(_, Some(m)) => m
            .inner()
            .get(METADATA_KEY)
            .and_then(|s| Qualifier::parse(s)),
        Expr::ScalarFunction(f) if f.name() == QUALIFY || f.name() == "eddy_interval_scale" => {
            match f.args.last() {
                Some(Expr::Literal(ScalarValue::Utf8(Some(s)), _)) => Qualifier::parse(s),
                _ => None,
            }
        }
        Expr::ScalarFunction(f) => f.args.iter().find_map(of),
        Expr::BinaryExpr(b) => match (of(&b.left), of(&b.right)) {
            (Some(l), Some(r)) => l.span(r),
            (l, r) => l.or(r),
        },
        Expr::Case(c) => c
            .when_then_expr
            .iter()
            .map(|(_, then)| then.as_ref())
            .chain(c.else_expr.as_deref())
            .find_map(of),
        Expr::AggregateFunction(a) => a.params.args.first().and_then(of),
        _ => None,
    }
}

fn is_interval(t: &DataType) -> bool {
    matches!(t, DataType::Interval(_))
}

/// The expression planner of interval arithmetic.
#[derive(Debug, Default)]
pub struct Arithmetic;

impl ExprPlanner for Arithmetic {
    fn plan_binary_op(
        &self,
        expr: RawBinaryExpr,
        schema: &DFSchema,
    ) -> Result<PlannerResult<RawBinaryExpr>> {
        let (Ok(lt), Ok(rt)) = (expr.left.get_type(schema), expr.right.get_type(schema)) else {
            return Ok(PlannerResult::Original(expr));
        };
        let (ql, qr) = (
            qualifier_of(&expr.left, schema),
            qualifier_of(&expr.right, schema),
        );
        let minus = matches!(expr.op, BinaryOperator::Minus);
        let binary = |l: Expr, op: Operator, r: Expr| {
            Expr::BinaryExpr(BinaryExpr::new(Box::new(l), op, Box::new(r)))
        };
        let additive = match expr.op {
            BinaryOperator::Plus => Some(Operator::Plus),
            BinaryOperator::Minus => Some(Operator::Minus),
            _ => None,
        };
        let planned = match (&expr.op, additive) {
            (_, Some(op)) if is_interval(&lt) && is_interval(&rt) => {
                let q = match (ql, qr) {
                    (Some(l), Some(r)) => l.span(r),
                    (l, r) => l.or(r),
                };
                q.map(|q| qualify(binary(expr.left.clone(), op, expr.right.clone()), q))
            }
            (_, Some(op)) if lt == DataType::Date32 && is_interval(&rt) => qr.map(|q| {
                binary(
                    expr.left.clone(),
                    op,
                    functions::whole_days(expr.right.clone(), q),
                )
            }),
            (BinaryOperator::Plus, _) if is_interval(&lt) && rt == DataType::Date32 => {
                ql.map(|q| {
                    binary(
                        expr.right.clone(),
                        Operator::Plus,
                        functions::whole_days(expr.left.clone(), q),
                    )
                })
            }
            (_, Some(_)) if matches!(lt, DataType::Time64(_)) && is_interval(&rt) => {
                qr.map(|q| functions::time_plus(expr.left.clone(), expr.right.clone(), minus, q))
            }
            (BinaryOperator::Plus, _) if is_interval(&lt) && matches!(rt, DataType::Time64(_)) => {
                ql.map(|q| functions::time_plus(expr.right.clone(), expr.left.clone(), false, q))
            }
            (BinaryOperator::Multiply | BinaryOperator::Divide, _)
                if is_interval(&lt) && rt.is_numeric() =>
            {
                let divide = matches!(expr.op, BinaryOperator::Divide);
                ql.map(|q| functions::scale(expr.left.clone(), expr.right.clone(), divide, q))
            }
            (BinaryOperator::Multiply, _) if lt.is_numeric() && is_interval(&rt) => {
                qr.map(|q| functions::scale(expr.right.clone(), expr.left.clone(), false, q))
            }
            _ => None,
        };
        Ok(match planned {
            Some(e) => PlannerResult::Planned(e),
            None => PlannerResult::Original(expr),
        })
    }
}

/// The analyzer rule of casts from intervals.
#[derive(Debug, Default)]
pub struct Casts;

impl AnalyzerRule for Casts {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_exprs(plan, |x, schema| {
            let (inner, to) = match &x {
                Expr::Cast(Cast { expr, field }) => (expr.as_ref(), field.data_type()),
                Expr::TryCast(TryCast { expr, field }) => (expr.as_ref(), field.data_type()),
                _ => return Ok(Transformed::no(x)),
            };
            let from_interval = inner.get_type(schema).is_ok_and(|t| is_interval(&t));
            let Some(q) = from_interval.then(|| qualifier_of(inner, schema)).flatten() else {
                return Ok(Transformed::no(x));
            };
            let cast = |e: Expr, t: &DataType| match t {
                DataType::Utf8 | DataType::Int64 => e,
                t => Expr::Cast(Cast::new(Box::new(e), t.clone())),
            };
            Ok(match to {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                    Transformed::yes(cast(functions::to_text(inner.clone(), q), to))
                }
                t if t.is_numeric() => {
                    Transformed::yes(cast(functions::to_count(inner.clone(), q), t))
                }
                _ => Transformed::no(x),
            })
        })
    }

    fn name(&self) -> &str {
        "eddy_interval_casts"
    }
}

/// Rewrites the interval literals of `query` (see the module's doc).
pub fn qualify_literals(query: &mut ast::Query) {
    let mut v = Literals::default();
    let _ = query.visit(&mut v);
}

#[derive(Default)]
struct Literals {
    /// Literals that must stay DataFusion's, by address (the tree does not
    /// move while it is visited).
    constants: HashSet<*const ast::Expr>,
}

impl Literals {
    fn keep_frame(&mut self, spec: &WindowSpec) {
        let Some(frame) = &spec.window_frame else {
            return;
        };
        for bound in std::iter::once(&frame.start_bound).chain(frame.end_bound.as_ref()) {
            if let WindowFrameBound::Preceding(Some(x)) | WindowFrameBound::Following(Some(x)) =
                bound
            {
                self.constants.insert(x.as_ref() as *const ast::Expr);
            }
        }
    }
}

impl VisitorMut for Literals {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut ast::Query) -> ControlFlow<()> {
        if let SetExpr::Select(select) = query.body.as_ref() {
            for w in &select.named_window {
                if let NamedWindowExpr::WindowSpec(spec) = &w.1 {
                    self.keep_frame(spec);
                }
            }
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
        if let ast::Expr::Function(f) = e {
            if let FunctionArguments::List(list) = &f.args {
                for a in &list.args {
                    if let FunctionArg::Unnamed(FunctionArgExpr::Expr(x))
                    | FunctionArg::Named {
                        arg: FunctionArgExpr::Expr(x),
                        ..
                    } = a
                    {
                        self.constants.insert(x as *const ast::Expr);
                    }
                }
            }
            if let Some(WindowType::WindowSpec(spec)) = &f.over {
                self.keep_frame(spec);
            }
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, e: &mut ast::Expr) -> ControlFlow<()> {
        let at = e as *const ast::Expr;
        if let ast::Expr::Cast {
            expr,
            data_type:
                ast::DataType::Interval {
                    fields: Some(fields),
                    ..
                },
            ..
        } = e
        {
            if let Some(q) = Qualifier::parse(&fields.to_string()) {
                *e = call_qualify(expr.as_ref().clone(), q);
            }
            return ControlFlow::Continue(());
        }
        let ast::Expr::Interval(iv) = e else {
            return ControlFlow::Continue(());
        };
        let Some(leading) = &iv.leading_field else {
            return ControlFlow::Continue(());
        };
        let text = match &iv.last_field {
            Some(last) => format!("{leading} TO {last}"),
            None => leading.to_string(),
        };
        let Some(q) = Qualifier::parse(&text) else {
            return ControlFlow::Continue(());
        };
        let value = match iv.value.as_ref() {
            ast::Expr::Value(ValueWithSpan {
                value: Value::SingleQuotedString(s),
                ..
            }) => Some(s.clone()),
            ast::Expr::Value(ValueWithSpan {
                value: Value::Number(n, _),
                ..
            }) => Some(n.clone()),
            _ => None,
        };
        // DataFusion reads a literal of one unit itself, where a constant
        // is needed.
        let plain = value.is_some() && iv.last_field.is_none();
        if plain && self.constants.contains(&at) {
            return ControlFlow::Continue(());
        }
        let arg = match value {
            Some(s) => ast::Expr::value(Value::SingleQuotedString(s)),
            None => ast::Expr::Cast {
                kind: ast::CastKind::Cast,
                expr: iv.value.clone(),
                data_type: ast::DataType::Varchar(None),
                format: None,
                array: false,
            },
        };
        *e = call_qualify(arg, q);
        ControlFlow::Continue(())
    }
}

/// `eddy_interval(arg, 'Q')` in the syntax tree.
fn call_qualify(arg: ast::Expr, q: Qualifier) -> ast::Expr {
    ast::Expr::Function(ast::Function {
        name: ast::ObjectName::from(vec![ast::Ident::new(QUALIFY)]),
        uses_odbc_syntax: false,
        parameters: FunctionArguments::None,
        args: FunctionArguments::List(ast::FunctionArgumentList {
            duplicate_treatment: None,
            args: vec![
                FunctionArg::Unnamed(FunctionArgExpr::Expr(arg)),
                FunctionArg::Unnamed(FunctionArgExpr::Expr(ast::Expr::value(
                    Value::SingleQuotedString(q.to_string()),
                ))),
            ],
            clauses: vec![],
        }),
        filter: None,
        null_treatment: None,
        over: None,
        within_group: vec![],
    })
}

//! ASOF joins: `l [LEFT] ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) ON
//! l.k = r.k`.
//!
//! sqlparser reads the plain form (the dialect's token pass adds the
//! parentheses Feldera leaves out and folds `LEFT` into the condition as
//! `LEFT_ASOF(cond)`); DataFusion cannot plan it. [`rewrite`] turns it into
//! an inner (or left) join whose `ON` also holds the marker
//! `eddy_asof(a, b, 'op')`, and lowering finds the marker and builds the
//! ASOF join operator ([`eddy_dbsp::operator::AsofJoin`]) instead of a
//! join. The marker, evaluated as a function, is the plain comparison.
//! Before the optimizer runs, each such join gets a fence ([`AsofFence`])
//! so that no condition crosses it; columns that nothing above reads are
//! still projected away below it.

use std::collections::HashSet;
use std::ops::ControlFlow;
use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, BooleanArray};
use datafusion::arrow::compute::kernels::cmp;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, plan_err, DFSchemaRef, Result, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, Expr as LogicalExpr, Extension, LogicalPlan, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, UserDefinedLogicalNodeCore, Volatility,
};
use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, JoinConstraint,
    JoinOperator, Query, SetExpr, VisitMut, VisitorMut,
};

use crate::error::{SqlError, SqlResult};

/// The marker function's name.
pub const MARKER: &str = "eddy_asof";

/// The marker for a LEFT ASOF join's condition, put there by the dialect.
pub const LEFT_MARKER: &str = "left_asof";

/// Rewrites every ASOF join of a query into a join with the marker.
pub fn rewrite(query: &mut Query) -> SqlResult<()> {
    let mut r = Rewriter(None);
    let _ = query.visit(&mut r);
    r.0.map_or(Ok(()), Err)
}

struct Rewriter(Option<SqlError>);

fn unwrap_left(e: &Expr) -> (bool, &Expr) {
    let mut e = e;
    while let Expr::Nested(inner) = e {
        e = inner;
    }
    if let Expr::Function(f) = e {
        if f.name.to_string().eq_ignore_ascii_case(LEFT_MARKER) {
            if let FunctionArguments::List(l) = &f.args {
                if let [FunctionArg::Unnamed(FunctionArgExpr::Expr(inner))] = l.args.as_slice() {
                    return (true, inner);
                }
            }
        }
    }
    (false, e)
}

fn join_operator(op: &JoinOperator) -> SqlResult<Option<JoinOperator>> {
    let JoinOperator::AsOf {
        match_condition,
        constraint,
    } = op
    else {
        return Ok(None);
    };
    let (left, condition) = unwrap_left(match_condition);
    let mut condition = condition;
    while let Expr::Nested(inner) = condition {
        condition = inner;
    }
    let Expr::BinaryOp {
        left: a,
        op,
        right: b,
    } = condition
    else {
        return Err(SqlError::new(format!(
            "ASOF JOIN MATCH_CONDITION must be a comparison between columns from the two \
             inputs (a >= b, a > b, a <= b, a < b), not `{condition}`"
        )));
    };
    let op = match op {
        BinaryOperator::GtEq => ">=",
        BinaryOperator::Gt => ">",
        BinaryOperator::LtEq => "<=",
        BinaryOperator::Lt => "<",
        other => {
            return Err(SqlError::new(format!(
                "ASOF JOIN MATCH_CONDITION must be a comparison between columns from the two \
                 inputs with >=, >, <= or <, not {other}"
            )))
        }
    };
    let JoinConstraint::On(on) = constraint else {
        return Err(SqlError::new(
            "an ASOF join needs ON with its equality keys",
        ));
    };
    let text = format!("({on}) AND {MARKER}({a}, {b}, '{op}')");
    let on = crate::dialect::generated_expr(&text, "ASOF join")?;
    let constraint = JoinConstraint::On(on);
    Ok(Some(if left {
        JoinOperator::LeftOuter(constraint)
    } else {
        JoinOperator::Inner(constraint)
    }))
}

fn rewrite_set(body: &mut SetExpr) -> SqlResult<()> {
    match body {
        SetExpr::Select(s) => {
            for t in &mut s.from {
                for j in &mut t.joins {
                    if let Some(op) = join_operator(&j.join_operator)? {
                        j.join_operator = op;
                    }
                }
            }
            Ok(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            rewrite_set(left)?;
            rewrite_set(right)
        }
        _ => Ok(()),
    }
}

impl VisitorMut for Rewriter {
    type Break = ();

    fn pre_visit_query(&mut self, query: &mut Query) -> ControlFlow<()> {
        match rewrite_set(&mut query.body) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.0 = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

/// The marker function: the plain comparison of its two times.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Marker {
    signature: Signature,
}

/// The marker function, to register in a session.
pub fn marker() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Marker {
        signature: Signature::variadic_any(Volatility::Immutable),
    }))
}

impl ScalarUDFImpl for Marker {
    fn name(&self) -> &str {
        MARKER
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if arg_types.len() != 3 {
            return plan_err!("{MARKER}() takes 3 arguments");
        }
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let a: ArrayRef = args.args[0].clone().into_array(n)?;
        let b: ArrayRef = args.args[1].clone().into_array(n)?;
        let b = datafusion::arrow::compute::cast(&b, a.data_type())?;
        let op = match &args.args[2] {
            ColumnarValue::Scalar(ScalarValue::Utf8(Some(op))) => op.clone(),
            _ => return exec_err!("{MARKER}() needs its operator"),
        };
        let r: BooleanArray = match op.as_str() {
            ">=" => cmp::gt_eq(&a, &b)?,
            ">" => cmp::gt(&a, &b)?,
            "<=" => cmp::lt_eq(&a, &b)?,
            "<" => cmp::lt(&a, &b)?,
            other => return exec_err!("{MARKER}(): unknown operator {other}"),
        };
        Ok(ColumnarValue::Array(Arc::new(r)))
    }
}

/// A fence around an ASOF join in the logical plan: the optimizer may not
/// move conditions from above it into the join or below it (an ordinary
/// join lets a condition on its right side filter the right input, which
/// for an ASOF join would change which row is closest). Lowering passes
/// straight through it.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd)]
pub struct AsofFence {
    input: LogicalPlan,
}

/// The name a fence shows in plans.
pub const FENCE: &str = "AsofJoin";

impl UserDefinedLogicalNodeCore for AsofFence {
    fn name(&self) -> &str {
        FENCE
    }

    fn inputs(&self) -> Vec<&LogicalPlan> {
        vec![&self.input]
    }

    fn schema(&self) -> &DFSchemaRef {
        self.input.schema()
    }

    fn expressions(&self) -> Vec<LogicalExpr> {
        vec![]
    }

    fn prevent_predicate_push_down_columns(&self) -> HashSet<String> {
        self.input
            .schema()
            .columns()
            .iter()
            .map(|c| c.flat_name())
            .chain(
                self.input
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| f.name().clone()),
            )
            .collect()
    }

    fn fmt_for_explain(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{FENCE}")
    }

    /// The fence's columns are its input's, place for place, so the
    /// columns read above it are all it needs below: unused columns are
    /// projected away under the join (no condition moves, so which right
    /// row is closest does not change), and its traces keep only the
    /// columns the query reads.
    fn necessary_children_exprs(&self, output_columns: &[usize]) -> Option<Vec<Vec<usize>>> {
        Some(vec![output_columns.to_vec()])
    }

    fn with_exprs_and_inputs(
        &self,
        _exprs: Vec<LogicalExpr>,
        mut inputs: Vec<LogicalPlan>,
    ) -> Result<Self> {
        Ok(Self {
            input: inputs.swap_remove(0),
        })
    }
}

/// Whether a logical join carries the ASOF marker.
fn is_asof_join(plan: &LogicalPlan) -> bool {
    let LogicalPlan::Join(j) = plan else {
        return false;
    };
    j.filter.as_ref().is_some_and(|f| {
        f.exists(|e| Ok(matches!(e, LogicalExpr::ScalarFunction(s) if s.func.name() == MARKER)))
            .unwrap_or(false)
    })
}

/// Puts a fence around every ASOF join of an unoptimized plan.
pub fn fence(plan: LogicalPlan) -> Result<LogicalPlan> {
    plan.transform_up(|p| {
        Ok(if is_asof_join(&p) {
            Transformed::yes(LogicalPlan::Extension(Extension {
                node: Arc::new(AsofFence { input: p }),
            }))
        } else {
            Transformed::no(p)
        })
    })
    .map(|t| t.data)
}

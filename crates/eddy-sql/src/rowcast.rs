//! Casts between ROW types by position, as SQL (and Feldera) defines them:
//! `CAST(ROW(4, 'cat') AS user_def)` gives the first value to the first
//! field and so on, whatever the fields are named. A cast whose source and
//! target differ in names
//! (a `ROW(…)` literal's `EXPR$0`, `EXPR$1` against a table's `i1`, `v1`;
//! also the casts DataFusion's type coercion inserts to compare, `CASE` or
//! `GREATEST` two such ROWs) is refused by DataFusion, whose casts of ROWs
//! match fields by name. Here such a cast becomes
//! `eddy_row_cast(x, NULL::target)`, which renames the fields by position
//! and casts each value, inside arrays and maps too; a NULL ROW stays NULL.
//!
//! The same function makes every cast that involves a `VARIANT`, at any
//! depth (`CAST(v AS ROW(…))`, a `VARIANT ARRAY` to `INT ARRAY`, a ROW
//! into a ROW of variants): Arrow cannot cast to or from the bytes of a
//! variant, `eddy_io::variant::arrow` can (see [`crate::variant`]).
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, ListArray, MapArray, StructArray};
use datafusion::arrow::compute::kernels::cast::{cast_with_options, CastOptions};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{plan_err, DFSchema, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};

use datafusion::common::config::ConfigOptions;
use datafusion::optimizer::AnalyzerRule;
use eddy_io::variant::arrow::{decode_all, from_variants, to_variants};
use eddy_io::variant::holds_variant;

/// The function's name.
pub const NAME: &str = "eddy_row_cast";

/// `eddy_row_cast(x, NULL::target)`.
pub fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(RowCast {
        signature: Signature::any(2, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RowCast {
    signature: Signature,
}

impl ScalarUDFImpl for RowCast {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[1].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [x, _] = args.args.as_slice() else {
            return plan_err!("{NAME} takes two arguments");
        };
        let to = args.return_field.data_type();
        match x {
            ColumnarValue::Scalar(s) => {
                let cast = by_position(&s.to_array_of_size(1)?, to)?;
                Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(
                    &cast, 0,
                )?))
            }
            ColumnarValue::Array(a) => Ok(ColumnarValue::Array(by_position(a, to)?)),
        }
    }
}

/// `a` cast to `to`, ROW fields matched by position.
pub fn by_position(a: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let variant = |e: eddy_io::variant::VariantError| {
        datafusion::error::DataFusionError::Execution(e.to_string())
    };
    Ok(match (a.data_type(), to) {
        (from, to) if from == to => Arc::clone(a),
        (DataType::LargeBinary, to) => {
            from_variants(&decode_all(a.as_ref()).map_err(variant)?, to).map_err(variant)?
        }
        (_, DataType::LargeBinary) => Arc::new(to_variants(a.as_ref()).map_err(variant)?),
        (DataType::Struct(from), DataType::Struct(fields)) if from.len() == fields.len() => {
            let s = a.as_struct();
            let columns = s
                .columns()
                .iter()
                .zip(fields.iter())
                .map(|(c, f)| by_position(c, f.data_type()))
                .collect::<Result<Vec<_>>>()?;
            Arc::new(StructArray::try_new(
                fields.clone(),
                columns,
                s.nulls().cloned(),
            )?)
        }
        (DataType::List(_), DataType::List(item)) => {
            let l = a.as_list::<i32>();
            Arc::new(ListArray::try_new(
                Arc::clone(item),
                l.offsets().clone(),
                by_position(l.values(), item.data_type())?,
                l.nulls().cloned(),
            )?)
        }
        (DataType::Map(..), DataType::Map(entries, sorted)) => {
            let m = a.as_map();
            let entries_cast = by_position(
                &(Arc::new(m.entries().clone()) as ArrayRef),
                entries.data_type(),
            )?;
            Arc::new(MapArray::try_new(
                Arc::clone(entries),
                m.offsets().clone(),
                entries_cast.as_struct().clone(),
                m.nulls().cloned(),
                *sorted,
            )?)
        }
        (_, to) => cast_with_options(
            a,
            to,
            &CastOptions {
                safe: false,
                ..Default::default()
            },
        )?,
    })
}

/// The field counts of two ROWs at the same place in `from` and `to` that
/// differ: such a cast is refused when the program is planned, not when a
/// step meets a row.
fn mismatched_rows(from: &DataType, to: &DataType) -> Option<(usize, usize)> {
    match (from, to) {
        (DataType::Struct(f), DataType::Struct(t)) if f.len() != t.len() => {
            Some((f.len(), t.len()))
        }
        (DataType::Struct(f), DataType::Struct(t)) => f
            .iter()
            .zip(t.iter())
            .find_map(|(a, b)| mismatched_rows(a.data_type(), b.data_type())),
        (DataType::List(f), DataType::List(t)) => mismatched_rows(f.data_type(), t.data_type()),
        _ => None,
    }
}

/// Whether a ROW appears in `t`.
fn holds_row(t: &DataType) -> bool {
    match t {
        DataType::Struct(_) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_row(f.data_type())
        }
        DataType::Map(f, _) => match f.data_type() {
            DataType::Struct(kv) => kv.iter().any(|f| holds_row(f.data_type())),
            _ => false,
        },
        _ => false,
    }
}

/// The cast of `expr` (of type `from`) to `to` by position, when a ROW is
/// involved (DataFusion's cast matches fields by name), or a `VARIANT`.
fn positional(expr: Expr, from: &DataType, to: &DataType) -> Result<Option<Expr>> {
    if from == to || !(holds_row(to) || holds_variant(from) || holds_variant(to)) {
        return Ok(None);
    }
    if let Some((f, t)) = mismatched_rows(from, to) {
        return plan_err!(
            "Cannot cast a ROW of {f} fields to a ROW of {t} fields: a cast to a ROW type \
             needs a ROW with as many fields"
        );
    }
    let target = Expr::Literal(ScalarValue::try_from(to)?, None);
    Ok(Some(Expr::ScalarFunction(ScalarFunction::new_udf(
        function(),
        vec![expr, target],
    ))))
}

/// The analyzer rule, run after DataFusion's type coercion (which inserts
/// some of the casts).
#[derive(Debug, Default)]
pub struct ByPosition;

impl AnalyzerRule for ByPosition {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        rewrite(plan)
    }

    fn name(&self) -> &str {
        "eddy_row_cast_by_position"
    }
}

/// Rewrites the ROW casts of `plan` that Arrow would refuse (see above).
pub fn rewrite(plan: LogicalPlan) -> Result<LogicalPlan> {
    rewrite_casts(plan, positional)
}

/// Replaces each cast (`CAST` and `SAFE_CAST`, written or inserted by type
/// coercion) in `plan` for which `f(operand, from, to)` gives an
/// expression, keeping the expressions' names.
pub fn rewrite_casts(
    plan: LogicalPlan,
    f: impl Fn(Expr, &DataType, &DataType) -> Result<Option<Expr>>,
) -> Result<LogicalPlan> {
    rewrite_casts_of_kind(plan, |x, from, to, _| f(x, from, to))
}

/// [`rewrite_casts`], `f` also told whether the cast is a `SAFE_CAST`.
pub fn rewrite_casts_of_kind(
    plan: LogicalPlan,
    f: impl Fn(Expr, &DataType, &DataType, bool) -> Result<Option<Expr>>,
) -> Result<LogicalPlan> {
    rewrite_exprs(plan, |x, schema| {
        let (inner, to, safe) = match &x {
            Expr::Cast(Cast { expr, field }) => (expr, field.data_type(), false),
            Expr::TryCast(TryCast { expr, field }) => (expr, field.data_type(), true),
            _ => return Ok(Transformed::no(x)),
        };
        let Ok(from) = inner.get_type(schema) else {
            return Ok(Transformed::no(x));
        };
        match f(inner.as_ref().clone(), &from, to, safe)? {
            Some(e) => Ok(Transformed::yes(e)),
            None => Ok(Transformed::no(x)),
        }
    })
}

/// Rewrites every expression of `plan` (and of its subqueries) bottom up
/// with `f`, given the schema of the node's inputs, keeping the
/// expressions' names; the nodes' schemas are recomputed where anything
/// changed.
pub fn rewrite_exprs(
    plan: LogicalPlan,
    f: impl Fn(Expr, &DFSchema) -> Result<Transformed<Expr>>,
) -> Result<LogicalPlan> {
    Ok(plan
        .transform_up_with_subqueries(|node| {
            let mut schema = DFSchema::empty();
            for input in node.inputs() {
                schema.merge(input.schema());
            }
            let names = NamePreserver::new(&node);
            let rewritten = node.map_expressions(|e| {
                let saved = names.save(&e);
                let out = e.transform_up(|x| f(x, &schema))?;
                Ok(if out.transformed {
                    Transformed::yes(saved.restore(out.data))
                } else {
                    out
                })
            })?;
            if rewritten.transformed {
                Ok(Transformed::yes(rewritten.data.recompute_schema()?))
            } else {
                Ok(rewritten)
            }
        })?
        .data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array, StringArray};
    use datafusion::arrow::buffer::NullBuffer;
    use datafusion::arrow::datatypes::{Field, Fields};

    #[test]
    fn fields_are_matched_by_position_and_a_null_row_stays_null() {
        let from = StructArray::new(
            Fields::from(vec![
                Field::new("EXPR$0", DataType::Int64, true),
                Field::new("EXPR$1", DataType::Utf8, true),
            ]),
            vec![
                Arc::new(Int64Array::from(vec![4, 5])),
                Arc::new(StringArray::from(vec!["cat", "dog"])),
            ],
            Some(NullBuffer::from(vec![true, false])),
        );
        let to = DataType::Struct(Fields::from(vec![
            Field::new("i1", DataType::Int32, true),
            Field::new("v1", DataType::Utf8, true),
        ]));
        let a: ArrayRef = Arc::new(from);
        let cast = by_position(&a, &to).unwrap();
        assert_eq!(cast.data_type(), &to);
        let s = cast.as_struct();
        assert_eq!(
            s.column(0)
                .as_primitive::<datafusion::arrow::datatypes::Int32Type>(),
            &Int32Array::from(vec![4, 5])
        );
        assert!(cast.is_valid(0) && cast.is_null(1));
    }
}

//! `MIN`, `MAX`, `ARG_MIN` and `ARG_MAX` over ROW, ARRAY and MAP values, in
//! the order Feldera's comparisons.md gives them: lexicographic on the
//! structure (a ROW's fields in order, an ARRAY's elements by index, a
//! MAP's entries by increasing key, each its key then its value), a NULL
//! smaller than any value where it occurs.
//!
//! DataFusion's accumulators order such values by its scalar comparison,
//! which cannot compare ROWs inside arrays, puts a NULL element last
//! (PostgreSQL's rule) and compares all of a map's keys before any value.
//! Arrow's row format orders them as the reference does (maps being kept
//! with their entries sorted by key, [`eddy_dbsp::maps`]), so this
//! analyzer rule (after type coercion) makes such an aggregate read
//! `eddy_sort_key(x)`, the bytes of `x` in that format (NULL stays NULL,
//! which the aggregates skip), and turns the bytes it returns back into
//! the value (`eddy_from_sort_key(bytes, NULL::type)`) in a projection
//! above the aggregate, under the names the plan above expects.
//!
//! The aggregates themselves are unchanged: their incremental rules are
//! those of the aggregate operator.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, Array, ArrayRef, AsArray, BinaryArray};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{plan_err, Column, Result, ScalarValue};
use datafusion::logical_expr::expr::{AggregateFunction, ScalarFunction};
use datafusion::logical_expr::{
    Aggregate, ColumnarValue, Expr, ExprSchemable, LogicalPlan, Projection, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;

/// The function that encodes a value as its sort key.
pub const ENCODE: &str = "eddy_sort_key";
/// The function that decodes a sort key back into its value.
pub const DECODE: &str = "eddy_from_sort_key";

/// `eddy_sort_key(x)` or `eddy_from_sort_key(bytes, NULL::type)`.
fn function(encode: bool) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(SortKey {
        encode,
        signature: Signature::any(if encode { 1 } else { 2 }, Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SortKey {
    encode: bool,
    signature: Signature,
}

/// The row format of one column of `t`: ascending, a NULL first.
fn converter(t: &DataType) -> Result<RowConverter> {
    Ok(RowConverter::new(vec![SortField::new_with_options(
        t.clone(),
        SortOptions {
            descending: false,
            nulls_first: true,
        },
    )])?)
}

/// `x`'s values as sort keys; a NULL value has a NULL key.
fn encode(x: &ArrayRef) -> Result<ArrayRef> {
    let rows = converter(x.data_type())?.convert_columns(std::slice::from_ref(x))?;
    Ok(Arc::new(BinaryArray::from_iter((0..x.len()).map(|i| {
        x.is_valid(i).then(|| rows.row(i).as_ref().to_vec())
    }))))
}

/// The values of type `t` whose sort keys `keys` holds.
fn decode(keys: &ArrayRef, t: &DataType) -> Result<ArrayRef> {
    let converter = converter(t)?;
    let null = converter.convert_columns(&[new_null_array(t, 1)])?;
    let parser = converter.parser();
    let keys = keys.as_binary::<i32>();
    let rows: Vec<_> = keys
        .iter()
        .map(|k| match k {
            Some(bytes) => parser.parse(bytes),
            None => null.row(0),
        })
        .collect();
    Ok(converter.convert_rows(rows)?.remove(0))
}

impl ScalarUDFImpl for SortKey {
    fn name(&self) -> &str {
        if self.encode {
            ENCODE
        } else {
            DECODE
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(if self.encode {
            DataType::Binary
        } else {
            args[1].clone()
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let Some(x) = args.args.first() else {
            return plan_err!("{} needs an argument", self.name());
        };
        let array = x.to_array(args.number_rows)?;
        let out = if self.encode {
            encode(&array)?
        } else {
            if array.data_type() != &DataType::Binary {
                return plan_err!("{DECODE} reads sort keys");
            }
            decode(&array, args.return_field.data_type())?
        };
        Ok(match x {
            ColumnarValue::Scalar(_) => {
                ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?)
            }
            ColumnarValue::Array(_) => ColumnarValue::Array(out),
        })
    }
}

/// Whether `t` is ordered here rather than by DataFusion.
fn nested(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Struct(_)
            | DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(..)
            | DataType::Map(..)
    )
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct OrderedNested;

impl AnalyzerRule for OrderedNested {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Aggregate(a) => rewrite(a),
                other => Ok(Transformed::no(other)),
            })?
            .data)
    }

    fn name(&self) -> &str {
        "eddy_ordered_nested_values"
    }
}

/// The aggregates whose answer depends on an order of their arguments,
/// with the position of the argument they return.
fn ordered(name: &str) -> Option<usize> {
    matches!(name, "min" | "max" | "arg_max" | "arg_min").then_some(0)
}

fn rewrite(a: Aggregate) -> Result<Transformed<LogicalPlan>> {
    let schema = a.input.schema();
    let groups = a.group_expr.len();
    let mut back: Vec<Option<DataType>> = vec![None; a.aggr_expr.len()];
    let mut exprs = Vec::with_capacity(a.aggr_expr.len());
    for (i, e) in a.aggr_expr.iter().enumerate() {
        let (q, field) = a.schema.qualified_field(groups + i);
        let inner = match e {
            Expr::Alias(al) => al.expr.as_ref(),
            other => other,
        };
        let Expr::AggregateFunction(AggregateFunction { func, params }) = inner else {
            exprs.push(e.clone());
            continue;
        };
        let Some(returned) = ordered(func.name()) else {
            exprs.push(e.clone());
            continue;
        };
        let types: Vec<DataType> = params
            .args
            .iter()
            .map(|x| x.get_type(schema))
            .collect::<Result<_>>()?;
        if !types.iter().any(nested) {
            exprs.push(e.clone());
            continue;
        }
        let mut params = params.clone();
        for (arg, t) in params.args.iter_mut().zip(&types) {
            if nested(t) {
                *arg = Expr::ScalarFunction(ScalarFunction::new_udf(
                    function(true),
                    vec![arg.clone()],
                ));
            }
        }
        let call = Expr::AggregateFunction(AggregateFunction::new_udf(
            Arc::clone(func),
            params.args,
            params.distinct,
            params.filter,
            params.order_by,
            params.null_treatment,
        ));
        if types.get(returned).is_some_and(nested) {
            back[i] = Some(types[returned].clone());
            // Named apart from the value the projection above restores.
            exprs.push(call.alias(format!("__eddy_sort_key({})", field.name())));
        } else {
            exprs.push(call.alias_qualified(q.cloned(), field.name()));
        }
    }
    if exprs == a.aggr_expr {
        return Ok(Transformed::no(LogicalPlan::Aggregate(a)));
    }
    let aggregate = LogicalPlan::Aggregate(Aggregate::try_new(
        Arc::clone(&a.input),
        a.group_expr.clone(),
        exprs,
    )?);
    let out = aggregate.schema();
    let columns = (0..out.fields().len())
        .map(|j| {
            let (q, field) = out.qualified_field(j);
            let column = Expr::Column(Column::from((q, field)));
            // The name the plan above knows this column by.
            let (q, field) = a.schema.qualified_field(j);
            Ok(match j.checked_sub(groups).and_then(|i| back[i].clone()) {
                Some(t) => Expr::ScalarFunction(ScalarFunction::new_udf(
                    function(false),
                    vec![column, Expr::Literal(ScalarValue::try_from(&t)?, None)],
                ))
                .alias_qualified(q.cloned(), field.name()),
                None => column,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Transformed::yes(LogicalPlan::Projection(
        Projection::try_new(columns, Arc::new(aggregate))?,
    )))
}

//! Functions whose arguments must share one type — `COALESCE`, `GREATEST`,
//! `LEAST` (and their `_IGNORE_NULLS` forms), the `ARRAY(…)`
//! constructor, `POSITION` — refused when planned, in Feldera's words,
//! where the arguments cannot be compared at all or have no common type.
//!
//! SQL's rule (Calcite's, which Feldera follows) is that two values can
//! share a type when they are of one family (numbers, strings, binary
//! strings, dates, times, timestamps, intervals, booleans, arrays, maps,
//! rows field by field), when one is NULL or a VARIANT, or when one is a
//! string and the other a number, boolean or date/time value (which the
//! string is read as). Arguments that fail that rule are refused with
//! `Parameters must be of the same type`; arguments that pass it but for
//! which no common type exists (a VARCHAR and a BOOLEAN for `GREATEST`)
//! with `Cannot infer return type for GREATEST; operand types: [VARCHAR,
//! BOOLEAN]`. DataFusion refuses most such calls while it builds the plan,
//! in its own words, which [`crate::error`] rewords with [`refused_call`];
//! the analyzer rule here refuses those it would accept (a UUID beside a
//! VARBINARY, which it reads both as bytes).
//!
//! Only refusals of calls DataFusion itself refuses, or whose arguments
//! mix an ARRAY, MAP, ROW, binary string or UUID with a value of another
//! family, are made here: everything DataFusion's coercion accepts among
//! scalars is left to it (SQL's families would also refuse a DATE beside a
//! TIMESTAMP, which DataFusion and PostgreSQL accept).
//!
//! The columns of a set operation obey the same rule, with Feldera's
//! message (`Type mismatch in column 1 of INTERSECT`): a `UNION` whose
//! column has no common type across its inputs, an `INTERSECT` or `EXCEPT`
//! (which DataFusion plans as a semi or anti join on every column) whose
//! columns cannot be compared. An `INTERSECT` or `EXCEPT` column that is a
//! string on one side and a number, boolean or date/time value on the
//! other (which SQL compares, and DataFusion cannot) compares the other
//! side's text, as Feldera does.
//!
//! `ARRAY_TO_STRING` (`ARRAY_JOIN`) of an array of ROWs or MAPs is refused
//! when planned as well (DataFusion's kernel fails at the first row).
//!
//! A `BINARY(n)` value beside a `VARBINARY` one in these functions
//! (`COALESCE(bin, X'0B1620')`) is read as a `VARBINARY`, and a NULL
//! beside values of one type takes that type (`COALESCE(NULL, bin,
//! X'0B1620')`): each function is registered wrapped, the wrapper
//! widening the fixed width before the function's own coercion and giving
//! the NULL its type where that coercion finds none (DataFusion's has no
//! common type for these); ROWs whose fields are named otherwise
//! (`COALESCE(roww, (4, 'cat'))`) take a common ROW type by position; and,
//! under Feldera's rules, in `COALESCE`, `ARRAY(…)` and `ARRAY[…]` a
//! string beside numbers, booleans or times makes them all strings, each
//! written as its text (`COALESCE(NULL, str, -1)` is `str`; DataFusion
//! would read the string as a number and fail at run time; PostgreSQL's
//! rules keep DataFusion's choice).
//!
//! Analyzer rules run before type coercion (which would otherwise fail
//! first, in its own words).

use datafusion::arrow::datatypes::{DataType, Field, FieldRef, Fields};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{plan_err, JoinType, NullEquality, Result};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::expr::Cast;
use datafusion::logical_expr::type_coercion::binary::{comparison_coercion, type_union_coercion};
use datafusion::logical_expr::type_coercion::functions::fields_with_udf;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, Join, LogicalPlan, ReturnFieldArgs, ScalarFunctionArgs,
    ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use eddy_io::variant::is_variant;
use std::sync::Arc;

use crate::castcheck::feldera_type;

/// The functions (by their planned names) whose arguments share one type,
/// with the name Feldera's messages give them.
const SAME_TYPE: &[(&str, &str)] = &[
    ("coalesce", "COALESCE"),
    ("nvl", "NVL"),
    ("ifnull", "IFNULL"),
    ("greatest", "GREATEST"),
    ("least", "LEAST"),
    ("make_array", "ARRAY"),
    ("strpos", "POSITION"),
];

/// The wrapped functions of `registry` (those it has, but `POSITION`,
/// which takes strings). With `strings_win` (Feldera's rules), only the
/// functions that pick a value (`COALESCE` and its kind, `ARRAY(…)`), each
/// making a string beside numbers, booleans and times a string for all.
pub fn functions(registry: &dyn FunctionRegistry, strings_win: bool) -> Vec<Arc<ScalarUDF>> {
    SAME_TYPE
        .iter()
        .filter(|(n, _)| *n != "strpos")
        .filter(|(n, _)| !strings_win || !matches!(*n, "greatest" | "least"))
        .filter_map(|(n, _)| registry.udf(n).ok())
        .map(|inner| {
            Arc::new(ScalarUDF::new_from_impl(Widened {
                inner,
                strings_win,
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

/// Plans the array literal `ARRAY[e, …]` with the registry's `make_array`
/// (wrapped as the `ARRAY(e, …)` call is: a string beside numbers makes
/// strings of all, a `BINARY(n)` beside a `VARBINARY` is one), where
/// DataFusion's planner would call its own.
#[derive(Debug)]
pub struct ArrayLiteral(pub Arc<ScalarUDF>);

impl datafusion::logical_expr::planner::ExprPlanner for ArrayLiteral {
    fn plan_array_literal(
        &self,
        exprs: Vec<Expr>,
        _schema: &datafusion::common::DFSchema,
    ) -> Result<datafusion::logical_expr::planner::PlannerResult<Vec<Expr>>> {
        Ok(datafusion::logical_expr::planner::PlannerResult::Planned(
            Expr::ScalarFunction(datafusion::logical_expr::expr::ScalarFunction::new_udf(
                Arc::clone(&self.0),
                exprs,
            )),
        ))
    }
}

/// `types` with each fixed-width binary string read as a `VARBINARY`
/// where a variable-width one is beside it.
fn widened(types: &[DataType]) -> Vec<DataType> {
    let variable = types.iter().any(|t| {
        matches!(
            t,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView
        )
    });
    types
        .iter()
        .map(|t| match t {
            DataType::FixedSizeBinary(_) if variable && !eddy_io::uuid::is_uuid(t) => {
                DataType::Binary
            }
            other => other.clone(),
        })
        .collect()
}

/// The ROW type that ROWs of as many fields take by position: the first
/// one's names, each field of the common type of the fields at its place
/// (DataFusion matches ROWs by name). `None` unless every value is a ROW
/// (or NULL) and the fields have common types.
fn rows_by_position(types: &[DataType]) -> Option<DataType> {
    let rows: Vec<&Fields> = types
        .iter()
        .filter(|t| **t != DataType::Null)
        .map(|t| match t {
            DataType::Struct(f) => Some(f),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let (first, rest) = rows.split_first()?;
    if rest.iter().any(|r| r.len() != first.len()) {
        return None;
    }
    let fields = first
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let t = rest.iter().try_fold(f.data_type().clone(), |t, r| {
                type_union_coercion(&t, r[i].data_type())
            })?;
            Some(Field::new(f.name(), t, true))
        })
        .collect::<Option<Vec<_>>>()?;
    Some(DataType::Struct(Fields::from(fields)))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Widened {
    inner: Arc<ScalarUDF>,
    /// Whether a string beside numbers, booleans and times makes them all
    /// strings (the functions that pick a value, not those that compare).
    strings_win: bool,
    signature: Signature,
}

/// Whether `types` hold a string, and otherwise only values Feldera reads
/// as their text beside one (numbers, booleans, dates and times) or NULL.
fn text_beside_scalars(types: &[DataType]) -> bool {
    let text = |t: &DataType| family(t) == Family::Character;
    types.iter().any(text)
        && types.iter().all(|t| {
            text(t)
                || matches!(
                    family(t),
                    Family::Null
                        | Family::Numeric
                        | Family::Boolean
                        | Family::Date
                        | Family::Time
                        | Family::Timestamp
                )
        })
}

impl ScalarUDFImpl for Widened {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if self.strings_win && text_beside_scalars(arg_types) {
            return Ok(vec![DataType::Utf8; arg_types.len()]);
        }
        let types = widened(arg_types);
        crate::textargs::coerced_by(self.inner.as_ref(), &types).or_else(|e| {
            // DataFusion finds no type for a NULL beside some types (a
            // VARBINARY, a UUID): those values have one.
            let mut values = types.iter().filter(|t| **t != DataType::Null);
            match values.next() {
                Some(first) if values.all(|t| t == first) => Ok(vec![first.clone(); types.len()]),
                _ => match rows_by_position(&types) {
                    Some(row) => Ok(vec![row; types.len()]),
                    None => Err(e),
                },
            }
        })
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }

    fn simplify(
        &self,
        args: Vec<Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> Result<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        // COALESCE becomes a CASE when simplified: keep that.
        self.inner.simplify(args, info)
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn conditional_arguments<'a>(
        &self,
        args: &'a [Expr],
    ) -> Option<(Vec<&'a Expr>, Vec<&'a Expr>)> {
        self.inner.conditional_arguments(args)
    }
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct SameTypeArguments;

impl AnalyzerRule for SameTypeArguments {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_exprs(plan, |x, schema| {
            if let Expr::ScalarFunction(f) = &x {
                let planned = f.func.name();
                if let Some((_, name)) = SAME_TYPE.iter().find(|(n, _)| *n == planned) {
                    // A type not known yet (an argument DataFusion cannot
                    // type before coercion) is left to the coercion.
                    let fields: Option<Vec<FieldRef>> = f
                        .args
                        .iter()
                        .map(|a| a.to_field(schema).ok().map(|(_, f)| f))
                        .collect();
                    if let Some(fields) = fields {
                        let types: Vec<DataType> =
                            fields.iter().map(|f| f.data_type().clone()).collect();
                        let coerces =
                            |_: &[DataType]| fields_with_udf(&fields, f.func.as_ref()).is_ok();
                        if let Some(why) = refusal(name, &types, coerces) {
                            return plan_err!("{why}");
                        }
                    }
                }
                if planned == "array_to_string" {
                    let types: Vec<DataType> = f
                        .args
                        .iter()
                        .filter_map(|a| a.get_type(schema).ok())
                        .collect();
                    if let Some(why) = unjoinable(&types) {
                        return plan_err!("{why}");
                    }
                }
            }
            Ok(Transformed::no(x))
        })
    }

    fn name(&self) -> &str {
        "eddy_same_type_arguments"
    }
}

/// `ARRAY_TO_STRING` (`ARRAY_JOIN`) of an array of ROWs or MAPs, which has
/// no text to join and which DataFusion's kernel refuses only at run time,
/// is refused when planned, in Feldera's words.
fn unjoinable(types: &[DataType]) -> Option<String> {
    let element = match types.first()? {
        DataType::List(e) | DataType::LargeList(e) | DataType::FixedSizeList(e, _) => e,
        _ => return None,
    };
    if !matches!(element.data_type(), DataType::Struct(_) | DataType::Map(..)) {
        return None;
    }
    let listed: Vec<String> = types
        .iter()
        .map(|t| format!("<{}>", feldera_type(t)))
        .collect();
    Some(format!(
        "Cannot apply 'ARRAY_TO_STRING' to arguments of type 'ARRAY_TO_STRING({})'. Supported \
         form(s): 'ARRAY_TO_STRING(<ARRAY>, <VARCHAR>)', 'ARRAY_TO_STRING(<ARRAY>, <VARCHAR>, \
         <VARCHAR>)'",
        listed.join(", ")
    ))
}

/// The analyzer rule for the columns of `UNION`, `INTERSECT` and `EXCEPT`.
#[derive(Debug, Default)]
pub struct SetOperationColumns;

impl AnalyzerRule for SetOperationColumns {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        Ok(plan
            .transform_up_with_subqueries(|node| match node {
                LogicalPlan::Union(u) => {
                    let columns = u.schema.fields().len();
                    for i in 0..columns {
                        let mut common: Option<DataType> = None;
                        for input in &u.inputs {
                            let Some(f) = input.schema().fields().get(i) else {
                                continue;
                            };
                            let t = f.data_type();
                            common = match common {
                                None => Some(t.clone()),
                                Some(c) => match type_union_coercion(&c, t) {
                                    Some(c) => Some(c),
                                    None => return mismatch(i, "UNION"),
                                },
                            };
                        }
                    }
                    Ok(Transformed::no(LogicalPlan::Union(u)))
                }
                LogicalPlan::Join(j) if is_set_operation(&j) => {
                    let name = if j.join_type == JoinType::LeftSemi {
                        "INTERSECT"
                    } else {
                        "EXCEPT"
                    };
                    let (ls, rs) = (j.left.schema().clone(), j.right.schema().clone());
                    let mut on = Vec::with_capacity(j.on.len());
                    let mut changed = false;
                    for (i, (l, r)) in j.on.iter().enumerate() {
                        let (lt, rt) = (l.get_type(&ls)?, r.get_type(&rs)?);
                        if comparison_coercion(&lt, &rt).is_some() {
                            on.push((l.clone(), r.clone()));
                        } else if !comparable(&lt, &rt) {
                            return mismatch(i, name);
                        } else if is_text(&lt) && !is_text(&rt) {
                            on.push((l.clone(), as_text(r)));
                            changed = true;
                        } else if is_text(&rt) && !is_text(&lt) {
                            on.push((as_text(l), r.clone()));
                            changed = true;
                        } else {
                            return mismatch(i, name);
                        }
                    }
                    if !changed {
                        return Ok(Transformed::no(LogicalPlan::Join(j)));
                    }
                    let join = Join::try_new(
                        j.left,
                        j.right,
                        on,
                        j.filter,
                        j.join_type,
                        j.join_constraint,
                        j.null_equality,
                        j.null_aware,
                    )?;
                    Ok(Transformed::yes(LogicalPlan::Join(join)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data)
    }

    fn name(&self) -> &str {
        "eddy_set_operation_columns"
    }
}

/// DataFusion plans `INTERSECT` and `EXCEPT` as a semi or anti join on
/// every column, NULLs equal; nothing else is such a join before the
/// optimizer (which plans `IN` and `EXISTS` subqueries so) runs.
fn is_set_operation(j: &Join) -> bool {
    matches!(j.join_type, JoinType::LeftSemi | JoinType::LeftAnti)
        && j.null_equality == NullEquality::NullEqualsNull
        && j.filter.is_none()
        && !j.null_aware
}

fn mismatch<T>(column: usize, operation: &str) -> Result<T> {
    plan_err!("Type mismatch in column {} of {operation}", column + 1)
}

fn is_text(t: &DataType) -> bool {
    family(t) == Family::Character
}

fn as_text(e: &Expr) -> Expr {
    Expr::Cast(Cast::new(Box::new(e.clone()), DataType::Utf8))
}

/// Feldera's words for DataFusion's refusal of a call of `planned` (its
/// planned name) over arguments whose types Arrow writes as `types`;
/// `None` for a function of another kind or a type that does not read
/// back.
pub fn refused_call(planned: &str, types: &[&str]) -> Option<String> {
    let (_, name) = SAME_TYPE.iter().find(|(n, _)| *n == planned)?;
    let types: Vec<DataType> = types
        .iter()
        .map(|t| t.trim().parse().ok())
        .collect::<Option<_>>()?;
    refusal(name, &types, |_| false)
}

/// Why a call of `name` over arguments of `types` is refused; `None` where
/// it is not. `coerces` says whether DataFusion finds the call's common
/// type.
fn refusal(
    name: &str,
    types: &[DataType],
    coerces: impl Fn(&[DataType]) -> bool,
) -> Option<String> {
    for (i, a) in types.iter().enumerate() {
        for b in &types[i + 1..] {
            if !comparable(a, b) && (is_complex(a) || is_complex(b)) {
                return Some("Parameters must be of the same type".into());
            }
        }
    }
    if types.len() > 1 && !coerces(types) {
        let listed: Vec<String> = types.iter().map(feldera_type).collect();
        return Some(format!(
            "Cannot infer return type for {name}; operand types: [{}]",
            listed.join(", ")
        ));
    }
    None
}

/// SQL's families of types.
#[derive(PartialEq, Eq, Clone, Copy)]
enum Family {
    Null,
    Any,
    Numeric,
    Character,
    Binary,
    Uuid,
    Boolean,
    Date,
    Time,
    Timestamp,
    Interval,
    Array,
    Map,
    Row,
    Other,
}

fn family(t: &DataType) -> Family {
    use DataType as T;
    match t {
        T::Null => Family::Null,
        t if is_variant(t) => Family::Any,
        t if eddy_io::uuid::is_uuid(t) => Family::Uuid,
        t if t.is_numeric() => Family::Numeric,
        T::Utf8 | T::LargeUtf8 | T::Utf8View => Family::Character,
        T::Binary | T::LargeBinary | T::BinaryView | T::FixedSizeBinary(_) => Family::Binary,
        T::Boolean => Family::Boolean,
        T::Date32 | T::Date64 => Family::Date,
        T::Time32(_) | T::Time64(_) => Family::Time,
        T::Timestamp(..) => Family::Timestamp,
        T::Interval(_) | T::Duration(_) => Family::Interval,
        T::List(_) | T::LargeList(_) | T::FixedSizeList(..) => Family::Array,
        T::Map(..) => Family::Map,
        T::Struct(_) => Family::Row,
        T::Dictionary(_, v) => family(v),
        _ => Family::Other,
    }
}

/// Whether values of `a` and `b` can be compared (and so share a type).
fn comparable(a: &DataType, b: &DataType) -> bool {
    use DataType as T;
    let (fa, fb) = (family(a), family(b));
    match (a, b) {
        (T::Struct(x), T::Struct(y)) => {
            return x.len() == y.len()
                && x.iter()
                    .zip(y.iter())
                    .all(|(f, g)| comparable(f.data_type(), g.data_type()));
        }
        (
            T::List(x) | T::LargeList(x) | T::FixedSizeList(x, _),
            T::List(y) | T::LargeList(y) | T::FixedSizeList(y, _),
        ) => return comparable(x.data_type(), y.data_type()),
        _ => {}
    }
    let read_from_text = |f: Family| {
        matches!(
            f,
            Family::Numeric
                | Family::Boolean
                | Family::Date
                | Family::Time
                | Family::Timestamp
                | Family::Interval
                | Family::Uuid
        )
    };
    fa == fb
        || matches!(fa, Family::Null | Family::Any)
        || matches!(fb, Family::Null | Family::Any)
        || (fa == Family::Character && read_from_text(fb))
        || (fb == Family::Character && read_from_text(fa))
}

/// Types whose mixing with another family this rule refuses itself.
fn is_complex(t: &DataType) -> bool {
    matches!(
        family(t),
        Family::Array | Family::Map | Family::Row | Family::Binary | Family::Uuid
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Fields};
    use std::sync::Arc;

    fn list(t: DataType) -> DataType {
        DataType::List(Arc::new(Field::new("item", t, true)))
    }

    fn row(types: &[DataType]) -> DataType {
        DataType::Struct(Fields::from(
            types
                .iter()
                .enumerate()
                .map(|(i, t)| Field::new(format!("f{i}"), t.clone(), true))
                .collect::<Vec<_>>(),
        ))
    }

    #[test]
    fn families_that_cannot_meet_are_refused() {
        let uuid = eddy_io::uuid::DATA_TYPE;
        let refused = |types: &[DataType]| refusal("COALESCE", types, |_| true);
        assert_eq!(
            refused(&[DataType::Null, uuid.clone(), DataType::Binary]).as_deref(),
            Some("Parameters must be of the same type")
        );
        assert!(refused(&[list(DataType::Utf8), uuid.clone()]).is_some());
        assert!(refused(&[row(&[DataType::Int32]), DataType::Utf8]).is_some());
        // Strings are read as numbers, booleans, times and UUIDs.
        assert_eq!(refused(&[DataType::Int32, DataType::Utf8]), None);
        assert_eq!(refused(&[uuid.clone(), DataType::Utf8]), None);
        // ROWs by position, arrays by element.
        assert_eq!(
            refused(&[
                row(&[DataType::Int32, DataType::Utf8]),
                row(&[DataType::Int64, DataType::Utf8])
            ]),
            None
        );
        assert_eq!(
            refused(&[list(DataType::Int32), list(DataType::Float64)]),
            None
        );
        assert!(refused(&[list(DataType::Int32), list(DataType::Binary)]).is_some());
    }

    #[test]
    fn refusals_read_from_arrow_type_names() {
        assert_eq!(
            refused_call("greatest", &["List(Utf8)", "Map(\"entries\": non-null Struct(\"key\": non-null Utf8, \"value\": Int64), unsorted)"])
                .as_deref(),
            Some("Parameters must be of the same type")
        );
        assert_eq!(
            refused_call("greatest", &["Utf8", "Boolean"]).as_deref(),
            Some("Cannot infer return type for GREATEST; operand types: [VARCHAR, BOOLEAN]")
        );
        assert_eq!(refused_call("upper", &["Utf8", "Boolean"]), None);
    }

    #[test]
    fn rows_named_otherwise_meet_by_position() {
        let named = DataType::Struct(Fields::from(vec![
            Field::new("i1", DataType::Int32, true),
            Field::new("v1", DataType::Utf8, true),
        ]));
        let literal = row(&[DataType::Int64, DataType::Utf8]);
        let want = DataType::Struct(Fields::from(vec![
            Field::new("i1", DataType::Int64, true),
            Field::new("v1", DataType::Utf8, true),
        ]));
        assert_eq!(
            rows_by_position(&[DataType::Null, named.clone(), literal]),
            Some(want)
        );
        assert_eq!(rows_by_position(&[named, row(&[DataType::Int32])]), None);
        assert_eq!(rows_by_position(&[DataType::Int32, DataType::Utf8]), None);
    }

    #[test]
    fn comparable_types_without_a_common_one_say_so() {
        let why = refusal("GREATEST", &[DataType::Utf8, DataType::Boolean], |_| false);
        assert_eq!(
            why.as_deref(),
            Some("Cannot infer return type for GREATEST; operand types: [VARCHAR, BOOLEAN]")
        );
        assert_eq!(
            refusal("GREATEST", &[DataType::Utf8, DataType::Boolean], |_| true),
            None
        );
    }
}

//! Casts to and from `UUID` (uuid.md, casts.md), whose values are 16 bytes
//! (`eddy_io::uuid`): a UUID cast to a string is its canonical text
//! (`42b8fec7-c7a3-4531-9611-4bde80f9cb4c`); a string cast to `UUID` is
//! read as one (`Invalid UUID string 'hello'` otherwise, NULL for
//! `SAFE_CAST`); a binary string cast to `UUID` must hold exactly 16 bytes
//! (`Need exactly 16 bytes in BINARY value to create an UUID`); a UUID
//! cast to a binary string is its bytes (Arrow's cast).
//!
//! An analyzer rule of both rule sets, run after type coercion (so that
//! the casts coercion inserts, comparing a UUID with a string, are the
//! same) and before Feldera's text of values. Stateless functions: the
//! incremental rule is that of the projection or filter holding them.

use std::sync::Arc;

use datafusion::arrow::array::{AsArray, FixedSizeBinaryArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::Transformed;
use datafusion::common::{exec_err, Result, ScalarValue};
use datafusion::logical_expr::expr::{Cast, ScalarFunction};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use eddy_io::uuid::{self as uuids, is_uuid};

/// What a function converts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    /// A UUID's text.
    Text,
    /// Text read as a UUID.
    FromText,
    /// 16 bytes as a UUID.
    FromBytes,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct UuidFn {
    op: Op,
    signature: Signature,
}

fn function(op: Op) -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(UuidFn {
        op,
        signature: Signature::any(2, Volatility::Immutable),
    }))
}

/// The functions, to register in a session (plans are serialized by
/// name).
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    [Op::Text, Op::FromText, Op::FromBytes]
        .into_iter()
        .map(function)
        .collect()
}

impl ScalarUDFImpl for UuidFn {
    fn name(&self) -> &str {
        match self.op {
            Op::Text => "eddy_uuid_text",
            Op::FromText => "eddy_uuid_from_text",
            Op::FromBytes => "eddy_uuid_from_bytes",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.op {
            Op::Text => DataType::Utf8,
            Op::FromText | Op::FromBytes => uuids::DATA_TYPE,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let x = args.args[0].to_array(n)?;
        let safe = matches!(
            &args.args[1],
            ColumnarValue::Scalar(ScalarValue::Boolean(Some(true)))
        );
        let out = match self.op {
            Op::Text => uuids::texts(x.as_ref()),
            Op::FromText => {
                let x = datafusion::arrow::compute::cast(&x, &DataType::Utf8)?;
                match uuids::from_texts(x.as_ref(), safe) {
                    Ok(a) => a,
                    Err(e) => return exec_err!("{e}"),
                }
            }
            Op::FromBytes => {
                let x = datafusion::arrow::compute::cast(&x, &DataType::Binary)?;
                let x = x.as_binary::<i32>();
                let mut out = Vec::with_capacity(n);
                for b in x.iter() {
                    out.push(match b {
                        Some(b) if b.len() == 16 => Some(b),
                        Some(_) if !safe => {
                            return exec_err!(
                                "Need exactly 16 bytes in BINARY value to create an UUID"
                            )
                        }
                        _ => None,
                    });
                }
                Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                    out.into_iter(),
                    uuids::BYTES,
                )?)
            }
        };
        Ok(ColumnarValue::Array(out))
    }
}

fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View)
}

/// A binary string (a `VARIANT`, `LargeBinary`, is none).
fn is_binary(t: &DataType) -> bool {
    matches!(t, DataType::Binary | DataType::BinaryView)
        || matches!(t, DataType::FixedSizeBinary(n) if *n != uuids::BYTES)
}

/// Whether Eddy casts `from` to `to` itself (see the module's doc).
pub fn casts(from: &DataType, to: &DataType) -> bool {
    (is_uuid(from) && is_text(to)) || ((is_text(from) || is_binary(from)) && is_uuid(to))
}

/// The analyzer rule.
#[derive(Debug, Default)]
pub struct UuidCasts;

impl AnalyzerRule for UuidCasts {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_casts_of_kind(plan, |inner, from, to, safe| {
            if !casts(from, to) {
                return Ok(None);
            }
            let op = match () {
                _ if is_uuid(from) => Op::Text,
                _ if is_text(from) => Op::FromText,
                _ => Op::FromBytes,
            };
            let call = Expr::ScalarFunction(ScalarFunction::new_udf(
                function(op),
                vec![inner, Expr::Literal(ScalarValue::Boolean(Some(safe)), None)],
            ));
            Ok(Some(match to {
                t if is_text(t) && *t != DataType::Utf8 => {
                    Expr::Cast(Cast::new(Box::new(call), t.clone()))
                }
                _ => call,
            }))
        })
    }

    fn name(&self) -> &str {
        "eddy_uuid_casts"
    }
}

/// The string functions that read a UUID as its text (Feldera's answers:
/// `UPPER(u)`, `CONCAT(u, u)`, `SUBSTR(u, 1, 8)` work on the text).
pub(crate) const TEXT_FUNCTIONS: &[&str] = &[
    "ascii",
    "btrim",
    "character_length",
    "concat",
    "concat_ws",
    "initcap",
    "left",
    "length",
    "lower",
    "lpad",
    "ltrim",
    "md5",
    "regexp_like",
    "regexp_match",
    "regexp_replace",
    "repeat",
    "replace",
    "reverse",
    "right",
    "rpad",
    "rtrim",
    "split_part",
    "string_to_array",
    "strpos",
    "substr",
    "translate",
    "upper",
];

/// Implicit casts of UUIDs, resolved before DataFusion's type coercion
/// (which has no common type for a UUID and a string): comparing a UUID
/// with a string reads the string as a UUID, as SQL's implicit cast does
/// (`u = '42b8fec7-…'`, `CASE u WHEN '…'`, `u IN ('…')`), and a string
/// function reads a UUID argument as its text.
#[derive(Debug, Default)]
pub struct Implicit;

impl AnalyzerRule for Implicit {
    fn analyze(&self, plan: LogicalPlan, _: &ConfigOptions) -> Result<LogicalPlan> {
        crate::rowcast::rewrite_exprs(plan, |x, schema| {
            let is = |e: &Expr, f: fn(&DataType) -> bool| e.get_type(schema).is_ok_and(|t| f(&t));
            let as_uuid = |e: Box<Expr>| Box::new(Expr::Cast(Cast::new(e, uuids::DATA_TYPE)));
            Ok(match x {
                Expr::ScalarFunction(mut f) if TEXT_FUNCTIONS.contains(&f.func.name()) => {
                    let mut changed = false;
                    for a in f.args.iter_mut() {
                        if is(a, is_uuid) {
                            *a = Expr::Cast(Cast::new(Box::new(a.clone()), DataType::Utf8));
                            changed = true;
                        }
                    }
                    Transformed::new_transformed(Expr::ScalarFunction(f), changed)
                }
                Expr::BinaryExpr(mut b) if is_comparison(b.op) => {
                    if is(&b.left, is_uuid) && is(&b.right, is_text) {
                        b.right = as_uuid(b.right);
                    } else if is(&b.right, is_uuid) && is(&b.left, is_text) {
                        b.left = as_uuid(b.left);
                    } else {
                        return Ok(Transformed::no(Expr::BinaryExpr(b)));
                    }
                    Transformed::yes(Expr::BinaryExpr(b))
                }
                Expr::Case(mut c) if c.expr.as_ref().is_some_and(|e| is(e, is_uuid)) => {
                    let mut changed = false;
                    for (when, _) in c.when_then_expr.iter_mut() {
                        if is(when, is_text) {
                            *when = as_uuid(when.clone());
                            changed = true;
                        }
                    }
                    Transformed::new_transformed(Expr::Case(c), changed)
                }
                Expr::InList(mut l) if is(&l.expr, is_uuid) => {
                    let mut changed = false;
                    for item in l.list.iter_mut() {
                        if is(item, is_text) {
                            *item = *as_uuid(Box::new(item.clone()));
                            changed = true;
                        }
                    }
                    Transformed::new_transformed(Expr::InList(l), changed)
                }
                other => Transformed::no(other),
            })
        })
    }

    fn name(&self) -> &str {
        "eddy_uuid_implicit"
    }
}

fn is_comparison(op: datafusion::logical_expr::Operator) -> bool {
    use datafusion::logical_expr::Operator as O;
    matches!(
        op,
        O::Eq
            | O::NotEq
            | O::Lt
            | O::LtEq
            | O::Gt
            | O::GtEq
            | O::IsDistinctFrom
            | O::IsNotDistinctFrom
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eddy_casts_uuids_to_and_from_text_and_from_bytes() {
        let u = uuids::DATA_TYPE;
        assert!(casts(&u, &DataType::Utf8));
        assert!(casts(&DataType::Utf8, &u));
        assert!(casts(&DataType::Binary, &u));
        // To bytes is Arrow's cast; UUID to UUID is none.
        assert!(!casts(&u, &DataType::Binary));
        assert!(!casts(&u, &u));
        assert!(!casts(&DataType::Int32, &u));
    }
}

//! Feldera's string functions take a number, a BOOLEAN, a date or a time
//! where they take a string, and read it as its text (`LOWER(TRUE)` is
//! `'true'`, `SUBSTRING(ts FROM 2 FOR 3)` reads the timestamp's text):
//! under Feldera's rules each such function is registered wrapped, its
//! string argument's type coerced to VARCHAR before the function's own
//! coercion. The cast that coercion inserts writes Feldera's text
//! ([`crate::tostring`]). Arrays, maps, ROWs and binary strings are not
//! read as text: the function refuses them as before.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::Result;
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::type_coercion::functions::{fields_with_udf, UDFCoercionExt};
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// The functions (DataFusion's names) whose first argument is a string
/// that Feldera reads any scalar's text into.
const TEXT_FIRST: &[&str] = &[
    "ascii",
    "lower",
    "upper",
    "initcap",
    "btrim",
    "ltrim",
    "rtrim",
    "regexp_like",
    "string_to_array",
    "split_part",
    "left",
    "right",
    "repeat",
    "replace",
    "reverse",
    "character_length",
    "lpad",
    "rpad",
    "substr",
    "strpos",
];

/// The wrapped functions of `registry` (those it has): the functions of
/// [`TEXT_FIRST`], and the string functions that read a UUID as its text
/// (see [`crate::uuid`]; the cast is inserted before type coercion, and
/// here a UUID argument is let through planning as a string).
pub fn functions(registry: &dyn FunctionRegistry) -> Vec<Arc<ScalarUDF>> {
    let names: std::collections::BTreeSet<&str> = TEXT_FIRST
        .iter()
        .chain(crate::uuid::TEXT_FUNCTIONS)
        .copied()
        .collect();
    names
        .into_iter()
        .filter_map(|name| Some((name, registry.udf(name).ok()?)))
        .map(|(name, inner)| {
            Arc::new(ScalarUDF::new_from_impl(TextArgs {
                inner,
                scalars_first: TEXT_FIRST.contains(&name),
                signature: Signature::user_defined(Volatility::Immutable),
            }))
        })
        .collect()
}

/// `types` with each UUID read as a string.
fn uuids_as_text(types: &[DataType]) -> Vec<DataType> {
    types
        .iter()
        .map(|t| match eddy_io::uuid::is_uuid(t) {
            true => DataType::Utf8,
            false => t.clone(),
        })
        .collect()
}

/// Whether Feldera reads a value of `t` as its text where a string goes.
fn read_as_text(t: &DataType) -> bool {
    t.is_numeric()
        || matches!(
            t,
            DataType::Boolean
                | DataType::Date32
                | DataType::Date64
                | DataType::Time32(_)
                | DataType::Time64(_)
                | DataType::Timestamp(..)
        )
}

/// The argument types that `f`'s own coercion makes of `types` (for a
/// wrapper that adjusts them first, or passes them on).
pub(crate) fn coerced_by<F: UDFCoercionExt>(f: &F, types: &[DataType]) -> Result<Vec<DataType>> {
    let fields: Vec<FieldRef> = types
        .iter()
        .map(|t| Arc::new(Field::new("arg", t.clone(), true)))
        .collect();
    Ok(fields_with_udf(&fields, f)?
        .iter()
        .map(|f| f.data_type().clone())
        .collect())
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct TextArgs {
    inner: Arc<ScalarUDF>,
    /// Whether the first argument reads any scalar as its text.
    scalars_first: bool,
    signature: Signature,
}

impl ScalarUDFImpl for TextArgs {
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
        let types: Vec<DataType> = uuids_as_text(arg_types)
            .into_iter()
            .enumerate()
            .map(
                |(i, t)| match self.scalars_first && i == 0 && read_as_text(&t) {
                    true => DataType::Utf8,
                    false => t,
                },
            )
            .collect();
        let mut coerced = coerced_by(self.inner.as_ref(), &types)?;
        // A UUID stays one until its cast to text is inserted.
        for (c, t) in coerced.iter_mut().zip(arg_types) {
            if eddy_io::uuid::is_uuid(t) {
                *c = t.clone();
            }
        }
        Ok(coerced)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(&uuids_as_text(arg_types))
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let fields: Vec<FieldRef> = args
            .arg_fields
            .iter()
            .map(|f| match eddy_io::uuid::is_uuid(f.data_type()) {
                true => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8)),
                false => Arc::clone(f),
            })
            .collect();
        self.inner.return_field_from_args(ReturnFieldArgs {
            arg_fields: &fields,
            scalar_arguments: args.scalar_arguments,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.inner.invoke_with_args(args)
    }
}

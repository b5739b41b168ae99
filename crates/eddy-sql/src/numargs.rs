//! Feldera's numeric functions take a string where they take a number and
//! read the number it holds, as SQL's implicit conversions (Calcite's,
//! which casts.md follows) do for a function's arguments: `ABS(a[1])` of
//! a `VARCHAR ARRAY` is the absolute value of the DECIMAL its element
//! holds, `SIN('1.5')` the sine of the DOUBLE 1.5. Under Feldera's rules
//! each such function is registered wrapped, its string arguments' types
//! coerced first to `DECIMAL(38, 19)` (the functions of exact numbers:
//! `ABS`, `CEIL`, `FLOOR`, `ROUND`, `TRUNCATE`) or to `DOUBLE` (the
//! others), then by the function's own coercion. A string that holds no
//! number fails the cast, and so the step, naming the string.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::textargs::coerced_by;

/// The functions (DataFusion's names) of exact numbers.
const EXACT: &[&str] = &["abs", "ceil", "floor", "round", "trunc"];

/// The functions (DataFusion's names) of floating-point numbers.
const FLOATING: &[&str] = &[
    "sqrt", "cbrt", "exp", "ln", "log10", "log2", "power", "sin", "cos", "tan", "cot", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "degrees",
    "radians",
];

/// The type a string argument of the exact functions is read as (the
/// widest DECIMAL Feldera reads strings into).
const EXACT_TYPE: DataType = DataType::Decimal128(38, 19);

/// The wrapped functions of `registry` (those it has).
pub fn functions(registry: &dyn FunctionRegistry) -> Vec<Arc<ScalarUDF>> {
    EXACT
        .iter()
        .map(|n| (n, EXACT_TYPE))
        .chain(FLOATING.iter().map(|n| (n, DataType::Float64)))
        .filter_map(|(name, number)| {
            let inner = registry.udf(name).ok()?;
            Some(Arc::new(ScalarUDF::new_from_impl(NumberArgs {
                inner,
                number,
                signature: Signature::user_defined(Volatility::Immutable),
            })))
        })
        .collect()
}

/// `types` with each string read as `number`.
fn strings_as(types: &[DataType], number: &DataType) -> Vec<DataType> {
    types
        .iter()
        .map(|t| match t {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => number.clone(),
            other => other.clone(),
        })
        .collect()
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct NumberArgs {
    inner: Arc<ScalarUDF>,
    /// The type a string argument is read as.
    number: DataType,
    signature: Signature,
}

impl ScalarUDFImpl for NumberArgs {
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
        coerced_by(self.inner.as_ref(), &strings_as(arg_types, &self.number))
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
        args: Vec<datafusion::logical_expr::Expr>,
        info: &datafusion::logical_expr::simplify::SimplifyContext,
    ) -> Result<datafusion::logical_expr::simplify::ExprSimplifyResult> {
        self.inner.simplify(args, info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_read_as_the_functions_numbers() {
        assert_eq!(
            strings_as(&[DataType::Utf8, DataType::Int64], &EXACT_TYPE),
            vec![EXACT_TYPE, DataType::Int64]
        );
        assert_eq!(
            strings_as(&[DataType::Utf8View], &DataType::Float64),
            vec![DataType::Float64]
        );
    }
}

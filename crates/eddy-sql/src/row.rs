//! The `ROW(…)` constructor under Feldera's rules: an anonymous structure
//! whose fields are named `EXPR$0`, `EXPR$1`, … as Feldera (after Calcite)
//! names them, where DataFusion's `struct` names them `c0`, `c1`, …. The
//! names show in a view's output (`{"EXPR$0": 3, "EXPR$1": "ola"}`).
//!
//! A stateless function: its incremental rule is that of the projection
//! holding it.

use std::sync::Arc;

use datafusion::arrow::array::StructArray;
use datafusion::arrow::datatypes::{DataType, Field, Fields};
use datafusion::common::{exec_err, internal_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// `ROW(…)` with Feldera's field names.
pub fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(Row {
        signature: Signature::variadic_any(Volatility::Immutable),
    }))
}

/// The name Feldera gives the field at `position` of an anonymous row.
pub fn field_name(position: usize) -> String {
    format!("EXPR${position}")
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Row {
    signature: Signature,
}

impl ScalarUDFImpl for Row {
    fn name(&self) -> &str {
        "row"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if args.is_empty() {
            return exec_err!("ROW needs at least one value");
        }
        let fields: Fields = args
            .iter()
            .enumerate()
            .map(|(i, t)| Field::new(field_name(i), t.clone(), true))
            .collect();
        Ok(DataType::Struct(fields))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let DataType::Struct(fields) = args.return_field.data_type() else {
            return internal_err!("ROW returns a structure");
        };
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        Ok(ColumnarValue::Array(Arc::new(StructArray::try_new(
            fields.clone(),
            arrays,
            None,
        )?)))
    }
}

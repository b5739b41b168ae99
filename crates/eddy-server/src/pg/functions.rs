//! The functions `psql`'s and BI tools' catalog queries call
//! (`pg_table_is_visible`, `format_type`, `current_database`, …), as
//! DataFusion scalar functions registered with the catalog tables
//! ([`super::catalog`]). Most answer a constant: every relation is
//! visible, every privilege held, no object has a comment.

use std::hash::{Hash, Hasher};

use datafusion::arrow::array::new_null_array;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};

use super::catalog::format_type;

/// What a catalog function computes from one row's arguments.
type Eval = Box<dyn Fn(&[ScalarValue]) -> ScalarValue + Send + Sync>;

/// A catalog function: a name, a result type, and what it computes from
/// its arguments (evaluated once per row).
struct PgFunction {
    name: &'static str,
    returns: DataType,
    signature: Signature,
    eval: Eval,
}

impl std::fmt::Debug for PgFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

impl PartialEq for PgFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for PgFunction {}

impl Hash for PgFunction {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for PgFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(self.returns.clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let rows = if scalar { 1 } else { args.number_rows };
        let mut out = Vec::with_capacity(rows);
        for row in 0..rows {
            let values = args
                .args
                .iter()
                .map(|a| match a {
                    ColumnarValue::Scalar(s) => Ok(s.clone()),
                    ColumnarValue::Array(a) => ScalarValue::try_from_array(a.as_ref(), row),
                })
                .collect::<Result<Vec<_>>>()?;
            out.push((self.eval)(&values));
        }
        if scalar {
            Ok(ColumnarValue::Scalar(
                out.pop().unwrap_or(ScalarValue::try_from(&self.returns)?),
            ))
        } else if out.is_empty() {
            Ok(ColumnarValue::Array(new_null_array(&self.returns, 0)))
        } else {
            let array = ScalarValue::iter_to_array(out)?;
            Ok(ColumnarValue::Array(
                if array.data_type() == &self.returns {
                    array
                } else {
                    datafusion::arrow::compute::cast(&array, &self.returns)?
                },
            ))
        }
    }
}

fn function(
    name: &'static str,
    returns: DataType,
    eval: impl Fn(&[ScalarValue]) -> ScalarValue + Send + Sync + 'static,
) -> ScalarUDF {
    ScalarUDF::new_from_impl(PgFunction {
        name,
        returns,
        signature: Signature::one_of(
            vec![TypeSignature::Nullary, TypeSignature::VariadicAny],
            Volatility::Stable,
        ),
        eval: Box::new(eval),
    })
}

fn int_arg(args: &[ScalarValue], i: usize) -> Option<i64> {
    match args.get(i)? {
        ScalarValue::Int8(v) => v.map(i64::from),
        ScalarValue::Int16(v) => v.map(i64::from),
        ScalarValue::Int32(v) => v.map(i64::from),
        ScalarValue::Int64(v) => *v,
        ScalarValue::UInt32(v) => v.map(i64::from),
        ScalarValue::Utf8(Some(s)) => s.parse().ok(),
        _ => None,
    }
}

fn text(s: impl Into<String>) -> ScalarValue {
    ScalarValue::Utf8(Some(s.into()))
}

/// The functions catalog queries call.
pub(super) fn functions(database: &str) -> Vec<ScalarUDF> {
    let null_text = |_: &[ScalarValue]| ScalarValue::Utf8(None);
    let yes = |_: &[ScalarValue]| ScalarValue::Boolean(Some(true));
    let database = database.to_string();
    let mut fs = vec![
        function("pg_table_is_visible", DataType::Boolean, yes),
        function("pg_type_is_visible", DataType::Boolean, yes),
        function("pg_function_is_visible", DataType::Boolean, yes),
        function("has_table_privilege", DataType::Boolean, yes),
        function("has_schema_privilege", DataType::Boolean, yes),
        function("has_database_privilege", DataType::Boolean, yes),
        function("has_column_privilege", DataType::Boolean, yes),
        function("pg_is_in_recovery", DataType::Boolean, |_| {
            ScalarValue::Boolean(Some(false))
        }),
        function("pg_relation_is_publishable", DataType::Boolean, |_| {
            ScalarValue::Boolean(Some(false))
        }),
        function("pg_get_userbyid", DataType::Utf8, |_| text("eddy")),
        function("current_database", DataType::Utf8, move |_| {
            text(database.clone())
        }),
        function("current_schema", DataType::Utf8, |_| text("public")),
        function("current_user", DataType::Utf8, |_| text("eddy")),
        function("session_user", DataType::Utf8, |_| text("eddy")),
        function("pg_encoding_to_char", DataType::Utf8, |_| text("UTF8")),
        function("version", DataType::Utf8, |_| {
            text(format!(
                "PostgreSQL 16.6 (Eddy {}, an incremental SQL view engine)",
                env!("CARGO_PKG_VERSION")
            ))
        }),
        function("pg_backend_pid", DataType::Int32, |_| {
            ScalarValue::Int32(Some(0))
        }),
        function("pg_total_relation_size", DataType::Int64, |_| {
            ScalarValue::Int64(Some(0))
        }),
        function("pg_relation_size", DataType::Int64, |_| {
            ScalarValue::Int64(Some(0))
        }),
        function("format_type", DataType::Utf8, |args| {
            let oid = int_arg(args, 0).and_then(|o| u32::try_from(o).ok());
            let typmod = int_arg(args, 1)
                .and_then(|m| i32::try_from(m).ok())
                .unwrap_or(-1);
            ScalarValue::Utf8(oid.and_then(|o| format_type(o, typmod)))
        }),
        function("quote_ident", DataType::Utf8, |args| match args.first() {
            Some(ScalarValue::Utf8(Some(s))) => {
                let plain = s
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                    && s.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
                text(if plain {
                    s.clone()
                } else {
                    format!("\"{}\"", s.replace('"', "\"\""))
                })
            }
            _ => ScalarValue::Utf8(None),
        }),
    ];
    for name in [
        "pg_get_expr",
        "pg_get_constraintdef",
        "pg_get_indexdef",
        "pg_get_viewdef",
        "pg_get_triggerdef",
        "pg_get_ruledef",
        "pg_get_partkeydef",
        "pg_get_statisticsobjdef_columns",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_serial_sequence",
    ] {
        fs.push(function(name, DataType::Utf8, null_text));
    }
    fs
}

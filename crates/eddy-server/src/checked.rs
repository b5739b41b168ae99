//! A program checked the way a start would build it (parsed, planned,
//! lowered, connectors validated), and what clients see of it: the schema
//! of its tables and views and its SQL errors, in Feldera's shapes.

use axum::http::StatusCode;
use datafusion::arrow::datatypes::{DataType, Schema};
use eddy_sql::{limits, Pipeline, Program, SqlError};
use serde_json::{json, Value};

use crate::connector::{self, ConnectorSpec, FileAccess};
use crate::error::ApiError;

/// A checked program: what clients see of it, and its connectors.
pub struct Checked {
    /// `program_info`: the schema in Feldera's shape and the connectors.
    pub info: Value,
    /// The connectors, checked.
    pub connectors: Vec<ConnectorSpec>,
}

/// The SQL type name of an Arrow type, as Feldera's schemas write it.
pub fn sql_type(t: &DataType) -> Value {
    let name = match t {
        DataType::Boolean => "BOOLEAN",
        DataType::Int8 => "TINYINT",
        DataType::Int16 | DataType::UInt8 => "SMALLINT",
        DataType::Int32 | DataType::UInt16 => "INTEGER",
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "BIGINT",
        DataType::Float16 | DataType::Float32 => "REAL",
        DataType::Float64 => "DOUBLE",
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            return json!({"type": "DECIMAL", "precision": p, "scale": s});
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR",
        // A VARIANT's Arrow type (see eddy_io::variant).
        DataType::LargeBinary => "VARIANT",
        t if eddy_io::uuid::is_uuid(t) => "UUID",
        DataType::Binary | DataType::BinaryView | DataType::FixedSizeBinary(_) => "VARBINARY",
        DataType::Date32 | DataType::Date64 => "DATE",
        DataType::Timestamp(_, _) => "TIMESTAMP",
        DataType::Time32(_) | DataType::Time64(_) => "TIME",
        DataType::Interval(_) | DataType::Duration(_) => "INTERVAL",
        DataType::List(_) | DataType::LargeList(_) | DataType::FixedSizeList(_, _) => "ARRAY",
        DataType::Struct(_) => "STRUCT",
        DataType::Map(_, _) => "MAP",
        DataType::Null => "NULL",
        _ => "VARIANT",
    };
    json!({ "type": name })
}

fn relation_json(name: &str, schema: &Schema, materialized: bool) -> Value {
    let fields: Vec<Value> = schema
        .fields()
        .iter()
        .map(|f| {
            let mut columntype = sql_type(f.data_type());
            columntype["nullable"] = f.is_nullable().into();
            json!({
                "name": f.name(),
                "case_sensitive": f.name() != &f.name().to_lowercase(),
                "columntype": columntype,
            })
        })
        .collect();
    json!({
        "name": name,
        "case_sensitive": name != name.to_lowercase(),
        "materialized": materialized,
        "fields": fields,
    })
}

/// Checks a program the way a start would build it, on a thread whose
/// stack fits the text (see [`eddy_sql::limits`]).
pub fn check(code: &str, files: &FileAccess) -> Result<Checked, SqlError> {
    limits::with_stack(limits::stack_for_text(code.len()), || {
        check_here(code, files)
    })
}

fn check_here(code: &str, files: &FileAccess) -> Result<Checked, SqlError> {
    let program = Program::parse(code)?;
    let connectors = connector::specs(&program, files).map_err(SqlError::new)?;
    let inputs: Vec<Value> = program
        .tables
        .iter()
        .map(|t| relation_json(&t.name, &t.schema, t.keeps_rows()))
        .collect();
    let outputs: Vec<Value> = program
        .views
        .iter()
        .map(|v| relation_json(&v.name, &v.schema, v.materialized))
        .collect();
    Pipeline::new(program)?;
    Ok(Checked {
        info: json!({
            "schema": {"inputs": inputs, "outputs": outputs},
            "input_connectors": connectors.iter().filter(|c| c.input).map(|c| (c.name.clone(), c.to_json())).collect::<serde_json::Map<_, _>>(),
            "output_connectors": connectors.iter().filter(|c| !c.input).map(|c| (c.name.clone(), c.to_json())).collect::<serde_json::Map<_, _>>(),
        }),
        connectors,
    })
}

/// The 400 answer for starting a pipeline whose program does not check:
/// the message, and the line and column in `details`.
pub fn program_error(e: &SqlError) -> ApiError {
    let (line, column) = e
        .location
        .map(|l| (Value::from(l.line), Value::from(l.column)))
        .unwrap_or((Value::Null, Value::Null));
    ApiError::new(StatusCode::BAD_REQUEST, "ProgramError", e.to_string()).with_details(json!({
        "line": line,
        "column": column,
        "sql_compilation": sql_messages(e),
    }))
}

/// A SQL error as Feldera's `sql_compilation` messages.
pub fn sql_messages(e: &SqlError) -> Value {
    let (line, column) = e.location.map(|l| (l.line, l.column)).unwrap_or((0, 0));
    json!({
        "exit_code": 1,
        "messages": [{
            "error_type": "Error",
            "message": e.message,
            "snippet": e.to_string(),
            "start_line_number": line,
            "start_column": column,
            "end_line_number": line,
            "end_column": column,
            "warning": false,
        }],
    })
}

//! A program checked the way a start would build it (parsed, planned,
//! lowered, connectors validated), and what clients see of it: the schema
//! of its tables and views and its SQL errors, in Feldera's shapes.

use axum::http::StatusCode;
use datafusion::arrow::datatypes::{DataType, Schema};
use eddy_sql::{limits, Pipeline, Program, SqlError};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use utoipa::ToSchema;

use crate::connector::{self, ConnectorSpec, FileAccess};
use crate::error::ApiError;

/// A checked program: what clients see of it, and its connectors.
pub struct Checked {
    /// `program_info`: the schema in Feldera's shape and the connectors.
    pub info: ProgramInfo,
    /// The connectors, checked.
    pub connectors: Vec<ConnectorSpec>,
}

/// The schema of every table and view, and the connectors.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProgramInfo {
    /// The tables (`inputs`) and views (`outputs`).
    pub schema: ProgramSchema,
    /// Each input connector by its name.
    #[schema(value_type = BTreeMap<String, Connector>)]
    pub input_connectors: BTreeMap<String, Value>,
    /// Each output connector by its name.
    #[schema(value_type = BTreeMap<String, Connector>)]
    pub output_connectors: BTreeMap<String, Value>,
}

/// A program's tables and views.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProgramSchema {
    /// The tables.
    pub inputs: Vec<Relation>,
    /// The views.
    pub outputs: Vec<Relation>,
}

/// A table or view.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Relation {
    /// Its name (lower case unless it was quoted).
    pub name: String,
    /// Whether the name was quoted with capitals.
    pub case_sensitive: bool,
    /// Whether its rows are kept (ad-hoc queries read only those).
    pub materialized: bool,
    /// Its columns.
    pub fields: Vec<Field>,
}

/// A column.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Field {
    /// Its name.
    pub name: String,
    /// Whether the name was quoted with capitals.
    pub case_sensitive: bool,
    /// Its SQL type.
    pub columntype: ColumnType,
}

/// A column's SQL type, as Feldera's schemas write it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ColumnType {
    /// `BOOLEAN`, `INTEGER`, `DECIMAL`, `VARCHAR`, `TIMESTAMP`, `ARRAY`, …
    #[serde(rename = "type")]
    pub name: &'static str,
    /// Whether it takes NULL.
    pub nullable: bool,
    /// A DECIMAL's precision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub precision: Option<u8>,
    /// A DECIMAL's scale.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scale: Option<i8>,
}

/// A connector of the program, as declared.
#[derive(ToSchema)]
#[allow(dead_code)]
struct Connector {
    /// The table or view.
    stream: String,
    /// `{"name", "config"}`.
    #[schema(value_type = Object)]
    transport: Value,
    /// The format, if any.
    #[schema(value_type = Option<Object>)]
    format: Option<Value>,
}

impl ProgramInfo {
    /// The tables, or (`views`) the views.
    pub fn relations(&self, views: bool) -> &[Relation] {
        if views {
            &self.schema.outputs
        } else {
            &self.schema.inputs
        }
    }
}

/// The SQL type of an Arrow type, as Feldera's schemas write it.
pub fn sql_type(t: &DataType, nullable: bool) -> ColumnType {
    let mut decimal = None;
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
            decimal = Some((*p, *s));
            "DECIMAL"
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
    ColumnType {
        name,
        nullable,
        precision: decimal.map(|(p, _)| p),
        scale: decimal.map(|(_, s)| s),
    }
}

fn relation(name: &str, schema: &Schema, materialized: bool) -> Relation {
    let fields = schema
        .fields()
        .iter()
        .map(|f| Field {
            name: f.name().clone(),
            case_sensitive: f.name() != &f.name().to_lowercase(),
            columntype: sql_type(f.data_type(), f.is_nullable()),
        })
        .collect();
    Relation {
        name: name.to_string(),
        case_sensitive: name != name.to_lowercase(),
        materialized,
        fields,
    }
}

/// A program that does not check: its errors, in the text's order.
#[derive(Debug, Clone)]
pub struct Refused {
    /// Each error (never none).
    pub errors: Vec<SqlError>,
    /// Each error as a compiler prints it, with the line it points at.
    pub snippets: Vec<String>,
}

impl Refused {
    fn new(errors: Vec<SqlError>, code: &str) -> Self {
        let snippets = errors.iter().map(|e| e.snippet(code)).collect();
        Self { errors, snippets }
    }

    /// The first error, and how many more there are.
    pub fn summary(&self) -> String {
        let first = self
            .errors
            .first()
            .map(|e| e.to_string())
            .unwrap_or_default();
        match self.errors.len() {
            0 | 1 => first,
            2 => format!("{first} (and 1 more error)"),
            n => format!("{first} (and {} more errors)", n - 1),
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.summary())
    }
}

/// Checks a program the way a start would build it, on a thread whose
/// stack fits the text (see [`eddy_sql::limits`]).
pub fn check(code: &str, files: &FileAccess) -> Result<Checked, Refused> {
    limits::with_stack(limits::stack_for_text(code.len()), || {
        check_here(code, files).map_err(|errors| Refused::new(errors, code))
    })
}

fn check_here(code: &str, files: &FileAccess) -> Result<Checked, Vec<SqlError>> {
    let program = Program::check(code)?;
    let connectors = connector::specs_placed(&program, files)?;
    let inputs = program
        .tables
        .iter()
        .map(|t| relation(&t.name, &t.schema, t.keeps_rows()))
        .collect();
    let outputs = program
        .views
        .iter()
        .map(|v| relation(&v.name, &v.schema, v.materialized))
        .collect();
    Pipeline::new(program).map_err(|e| vec![eddy_sql::program::placed_in(code, e)])?;
    let by_name = |input: bool| {
        connectors
            .iter()
            .filter(|c| c.input == input)
            .map(|c| (c.name.clone(), c.to_json()))
            .collect()
    };
    Ok(Checked {
        info: ProgramInfo {
            schema: ProgramSchema { inputs, outputs },
            input_connectors: by_name(true),
            output_connectors: by_name(false),
        },
        connectors,
    })
}

/// `details` of a 400 `ProgramError`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ProgramErrorDetails {
    /// The line of the error, from 1.
    pub line: Option<u64>,
    /// Its column, from 1.
    pub column: Option<u64>,
    /// The same as Feldera's compiler says it.
    pub sql_compilation: SqlCompilation,
}

/// A program's errors as Feldera's SQL compiler reports them.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SqlCompilation {
    /// 0 when the program checked, 1 when not.
    pub exit_code: i32,
    /// The errors.
    pub messages: Vec<SqlMessage>,
}

/// One error of a program.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SqlMessage {
    /// `Error`.
    pub error_type: &'static str,
    /// What is wrong.
    pub message: String,
    /// The message with the program's lines around the place.
    pub snippet: String,
    /// Where it starts, from 1 (0: no place).
    pub start_line_number: u64,
    pub start_column: u64,
    /// Where what it names ends: the column after its last character (the
    /// start again when only the start is known).
    pub end_line_number: u64,
    pub end_column: u64,
    /// Always false.
    pub warning: bool,
}

/// The 400 answer for starting a pipeline whose program does not check:
/// the first error, and the line and column in `details`.
pub fn program_error(refused: &Refused) -> ApiError {
    let first = refused.errors.first();
    let details = ProgramErrorDetails {
        line: first.and_then(|e| e.location).map(|l| l.line),
        column: first.and_then(|e| e.location).map(|l| l.column),
        sql_compilation: sql_messages(refused),
    };
    ApiError::new(StatusCode::BAD_REQUEST, "ProgramError", refused.summary())
        .with_details(serde_json::to_value(details).expect("details are JSON"))
}

impl SqlCompilation {
    /// A program that checked.
    pub fn success() -> Self {
        Self {
            exit_code: 0,
            messages: Vec::new(),
        }
    }
}

/// A program's errors as Feldera's `sql_compilation` messages.
pub fn sql_messages(refused: &Refused) -> SqlCompilation {
    let messages = refused
        .errors
        .iter()
        .zip(&refused.snippets)
        .map(|(e, snippet)| {
            let (line, column) = e.location.map(|l| (l.line, l.column)).unwrap_or((0, 0));
            let (end_line, end_column) =
                e.end.map(|l| (l.line, l.column)).unwrap_or((line, column));
            SqlMessage {
                error_type: "Error",
                message: e.message.clone(),
                snippet: snippet.clone(),
                start_line_number: line,
                start_column: column,
                end_line_number: end_line,
                end_column,
                warning: false,
            }
        })
        .collect();
    SqlCompilation {
        exit_code: 1,
        messages,
    }
}

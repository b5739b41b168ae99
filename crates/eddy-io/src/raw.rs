//! The `raw` format (input only, as Feldera's): bytes as they arrive, each
//! chunk a row (`mode: blob`, the default: a Kafka message, an HTTP
//! request's body, a whole file or object) or each line a row (`mode:
//! lines`, split at `\n`; a last line without one is a row, the empty
//! end after a final `\n` is not). The value goes to one column
//! (`column_name`, needed when the table has more than one), a `VARCHAR`
//! (the bytes must be UTF-8, else the row is rejected) or a `VARBINARY`
//! (any bytes); the other columns are NULL, so they must be nullable.
//! Rows are only inserted: raw bytes say nothing of deletions.

use std::sync::Arc;

use datafusion::arrow::array::{new_null_array, ArrayRef, BinaryArray, RecordBatch, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Fields, SchemaRef};
use eddy_dbsp::ZSet;
use serde::Deserialize;

use crate::format::FormatError;
use crate::{Parsed, RowError};

/// `raw`'s configuration.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    /// A row per chunk or per line.
    #[serde(default)]
    pub mode: RawMode,
    /// The column the value goes to.
    #[serde(default)]
    pub column_name: Option<String>,
}

/// `raw`'s `mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RawMode {
    /// A row per chunk of input.
    #[default]
    Blob,
    /// A row per line.
    Lines,
}

/// What a column holds the bytes as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Holds {
    Text,
    Bytes,
}

impl RawConfig {
    /// The column a table with `fields` takes the value in, and what it
    /// holds it as; a table it does not fit is refused.
    fn column(&self, fields: &Fields) -> Result<(usize, Holds), FormatError> {
        let refuse = |reason: String| FormatError::Unsupported {
            format: "raw",
            reason,
        };
        let index = match &self.column_name {
            Some(name) => fields
                .iter()
                .position(|f| f.name() == name)
                .or_else(|| {
                    fields
                        .iter()
                        .position(|f| f.name().eq_ignore_ascii_case(name))
                })
                .ok_or_else(|| {
                    refuse(format!("'column_name': the table has no column '{name}'"))
                })?,
            None if fields.len() == 1 => 0,
            None => {
                return Err(refuse(format!(
                    "the table has {} columns: 'column_name' names the one that takes the value",
                    fields.len()
                )))
            }
        };
        let field = &fields[index];
        let holds = match field.data_type() {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Holds::Text,
            DataType::Binary | DataType::LargeBinary | DataType::BinaryView => Holds::Bytes,
            _ => {
                return Err(refuse(format!(
                    "column '{}' takes the value: it must be VARCHAR or VARBINARY",
                    field.name()
                )))
            }
        };
        if let Some(other) = fields
            .iter()
            .enumerate()
            .find(|(i, f)| *i != index && !f.is_nullable())
        {
            return Err(refuse(format!(
                "column '{}' is NOT NULL, and raw input leaves every column but '{}' NULL",
                other.1.name(),
                field.name()
            )));
        }
        Ok((index, holds))
    }

    /// Checks that a table with `fields` can take this input.
    pub fn check(&self, fields: &Fields) -> Result<(), FormatError> {
        self.column(fields).map(|_| ())
    }

    /// Whether input may be cut at line ends.
    pub fn line_oriented(&self) -> bool {
        self.mode == RawMode::Lines
    }

    /// The rows of a chunk of input (whole lines, in mode `lines`) for a
    /// table with `schema`; a rejected row's line counts from 1 in the
    /// chunk.
    pub fn parse(&self, bytes: &[u8], schema: &SchemaRef) -> Parsed {
        let (index, holds) = match self.column(schema.fields()) {
            Ok(c) => c,
            Err(e) => {
                return Parsed {
                    changes: ZSet::empty(schema),
                    errors: vec![RowError {
                        line: 1,
                        reason: e.to_string(),
                    }],
                }
            }
        };
        let values: Vec<&[u8]> = match self.mode {
            RawMode::Blob => vec![bytes],
            RawMode::Lines => {
                let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
                if bytes.is_empty() {
                    Vec::new()
                } else {
                    body.split(|&b| b == b'\n').collect()
                }
            }
        };
        let mut errors = Vec::new();
        let column: ArrayRef = match holds {
            Holds::Bytes => Arc::new(BinaryArray::from_iter_values(values.iter().copied())),
            Holds::Text => {
                let mut kept = Vec::with_capacity(values.len());
                for (i, v) in values.iter().enumerate() {
                    match std::str::from_utf8(v) {
                        Ok(s) => kept.push(s),
                        Err(e) => errors.push(RowError {
                            line: i + 1,
                            reason: format!(
                                "not valid UTF-8 (byte {}) for VARCHAR column '{}'",
                                e.valid_up_to(),
                                schema.field(index).name()
                            ),
                        }),
                    }
                }
                Arc::new(StringArray::from_iter_values(kept))
            }
        };
        let n = column.len();
        let built = schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                if i == index {
                    cast(&column, f.data_type()).map_err(|e| e.to_string())
                } else {
                    Ok(new_null_array(f.data_type(), n))
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|columns| {
                RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| e.to_string())
            });
        match built {
            Ok(batch) => Parsed {
                changes: ZSet::with_weight(batch, 1),
                errors,
            },
            Err(reason) => Parsed {
                changes: ZSet::empty(schema),
                errors: vec![RowError { line: 1, reason }],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Array, AsArray};
    use datafusion::arrow::datatypes::{Field, Schema};

    fn schema(fields: Vec<Field>) -> SchemaRef {
        Arc::new(Schema::new(fields))
    }

    #[test]
    fn chunks_and_lines_become_rows() {
        let text = schema(vec![Field::new("data", DataType::Utf8, false)]);
        let blob = RawConfig::default();
        let p = blob.parse(b"a\nb\n", &text);
        assert_eq!(p.changes.len(), 1);
        assert_eq!(
            p.changes.batch().column(0).as_string::<i32>().value(0),
            "a\nb\n"
        );
        let lines = RawConfig {
            mode: RawMode::Lines,
            column_name: None,
        };
        let p = lines.parse(b"a\n\nb\n", &text);
        let values: Vec<_> = p
            .changes
            .batch()
            .column(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect();
        assert_eq!(values, ["a", "", "b"]);
        assert_eq!(lines.parse(b"x", &text).changes.len(), 1);
        assert_eq!(lines.parse(b"", &text).changes.len(), 0);
        // A line that is not UTF-8 is rejected, the others kept.
        let p = lines.parse(b"ok\n\xff\xfe\nfine", &text);
        assert_eq!(p.changes.len(), 2);
        assert_eq!(p.errors.len(), 1);
        assert_eq!(p.errors[0].line, 2);
        assert!(p.errors[0].reason.contains("UTF-8"), "{:?}", p.errors);
    }

    #[test]
    fn bytes_go_to_the_named_column() {
        let table = schema(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("payload", DataType::Binary, false),
        ]);
        let config = RawConfig {
            mode: RawMode::Blob,
            column_name: Some("PAYLOAD".into()),
        };
        config.check(table.fields()).unwrap();
        let p = config.parse(b"\x00\xff", &table);
        assert!(p.errors.is_empty());
        let batch = p.changes.batch();
        assert!(batch.column(0).is_null(0));
        assert_eq!(batch.column(1).as_binary::<i32>().value(0), b"\x00\xff");
        assert_eq!(p.changes.weights(), &[1]);
    }

    #[test]
    fn tables_that_do_not_fit_are_refused() {
        let two = schema(vec![
            Field::new("a", DataType::Utf8, true),
            Field::new("b", DataType::Utf8, false),
        ]);
        let e = RawConfig::default().check(two.fields()).unwrap_err();
        assert!(e.to_string().contains("'column_name'"), "{e}");
        let named = |c: &str| RawConfig {
            mode: RawMode::Blob,
            column_name: Some(c.into()),
        };
        assert!(named("a")
            .check(two.fields())
            .unwrap_err()
            .to_string()
            .contains("NOT NULL"));
        named("b").check(two.fields()).unwrap();
        assert!(named("c").check(two.fields()).is_err());
        let number = schema(vec![Field::new("n", DataType::Int64, false)]);
        assert!(RawConfig::default()
            .check(number.fields())
            .unwrap_err()
            .to_string()
            .contains("VARCHAR or VARBINARY"));
    }
}

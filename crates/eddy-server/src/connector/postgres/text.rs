//! PostgreSQL's text output of a value, as the JSON the table's column
//! reads (Feldera's PostgreSQL connectors go through JSON too): booleans
//! `t`/`f` become `true`/`false`; integers and floats stay numbers;
//! decimals travel as text, so no digit is lost on the way; `bytea`'s
//! `\x…` becomes the hexadecimal text binary columns read; `json` and
//! `jsonb` are themselves in a `VARIANT`; arrays `{…}` become JSON arrays
//! of their elements, each read the same way; everything else (text, dates,
//! times, timestamps, UUIDs) is a string the column parses.

use datafusion::arrow::datatypes::DataType;
use serde_json::Value;

/// PostgreSQL's type OIDs this module tells apart.
mod oid {
    pub const JSON: u32 = 114;
    pub const JSONB: u32 = 3802;
}

/// `text`, PostgreSQL's output of a value of type `pg_type`, as JSON for
/// a column of type `column`.
pub fn to_json(text: &str, pg_type: u32, column: &DataType) -> Result<Value, String> {
    Ok(match column {
        DataType::Boolean => match text {
            "t" | "true" => Value::Bool(true),
            "f" | "false" => Value::Bool(false),
            _ => return Err(format!("'{text}' is not a boolean")),
        },
        t if t.is_integer() || t.is_floating() => {
            match serde_json::from_str::<serde_json::Number>(text) {
                Ok(n) => Value::Number(n),
                // NaN and the infinities: the column reads their names.
                Err(_) => Value::String(text.to_string()),
            }
        }
        DataType::LargeBinary if matches!(pg_type, oid::JSON | oid::JSONB) => {
            serde_json::from_str(text).map_err(|e| format!("json value: {e}"))?
        }
        DataType::Binary | DataType::BinaryView => match text.strip_prefix("\\x") {
            Some(hex) => Value::String(hex.to_string()),
            None => {
                return Err(
                    "a bytea value in PostgreSQL's escape format (set bytea_output = 'hex')".into(),
                )
            }
        },
        DataType::List(_) | DataType::LargeList(_) => array(text)?.into_json(column)?,
        _ => Value::String(text.to_string()),
    })
}

/// An element of an array literal.
#[derive(Debug, PartialEq)]
enum Element {
    Null,
    Text(String),
    Array(Vec<Element>),
}

impl Element {
    /// The element as JSON for a place of type `column`.
    fn into_json(self, column: &DataType) -> Result<Value, String> {
        Ok(match (self, column) {
            (Element::Null, _) => Value::Null,
            (Element::Text(t), _) => to_json(&t, 0, column)?,
            (Element::Array(items), DataType::List(f) | DataType::LargeList(f)) => Value::Array(
                items
                    .into_iter()
                    .map(|i| i.into_json(f.data_type()))
                    .collect::<Result<_, _>>()?,
            ),
            (Element::Array(_), _) => return Err(format!("an array where a {column} goes")),
        })
    }
}

/// Reads an array literal, `{1,2,NULL}`, `{"a b","c\"d"}`, `{{1,2},{3,4}}`.
fn array(text: &str) -> Result<Element, String> {
    let bad = || format!("'{text}' is not an array literal");
    let mut chars = text.chars().peekable();
    let parsed = array_at(&mut chars).ok_or_else(bad)?;
    if chars.next().is_some() {
        return Err(bad());
    }
    Ok(parsed)
}

fn array_at(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<Element> {
    if chars.next()? != '{' {
        return None;
    }
    let mut items = Vec::new();
    if chars.peek() == Some(&'}') {
        chars.next();
        return Some(Element::Array(items));
    }
    loop {
        let item = match chars.peek()? {
            '{' => array_at(chars)?,
            '"' => {
                chars.next();
                let mut s = String::new();
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => s.push(chars.next()?),
                        c => s.push(c),
                    }
                }
                Element::Text(s)
            }
            _ => {
                let mut s = String::new();
                while let Some(&c) = chars.peek() {
                    if c == ',' || c == '}' {
                        break;
                    }
                    s.push(c);
                    chars.next();
                }
                if s.eq_ignore_ascii_case("NULL") {
                    Element::Null
                } else {
                    Element::Text(s)
                }
            }
        };
        items.push(item);
        match chars.next()? {
            ',' => continue,
            '}' => return Some(Element::Array(items)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use datafusion::arrow::datatypes::Field;
    use serde_json::json;

    use super::*;

    #[test]
    fn values_become_the_json_their_column_reads() {
        let j = |text, column: DataType| to_json(text, 0, &column).unwrap();
        assert_eq!(j("t", DataType::Boolean), json!(true));
        assert_eq!(j("-42", DataType::Int64), json!(-42));
        assert_eq!(j("1.5e3", DataType::Float64), json!(1500.0));
        assert_eq!(j("NaN", DataType::Float64), json!("NaN"));
        assert_eq!(
            j("12345678901234567890.12", DataType::Decimal128(22, 2)),
            json!("12345678901234567890.12")
        );
        assert_eq!(j("\\x0aff", DataType::Binary), json!("0aff"));
        assert_eq!(
            j("2024-01-02 03:04:05.5", DataType::Utf8),
            json!("2024-01-02 03:04:05.5")
        );
        assert_eq!(
            to_json(r#"{"a": [1]}"#, oid::JSONB, &DataType::LargeBinary).unwrap(),
            json!({"a": [1]})
        );
        assert!(to_json("yes", 0, &DataType::Boolean).is_err());
    }

    #[test]
    fn arrays_are_read_element_by_element() {
        let ints = DataType::List(Arc::new(Field::new("item", DataType::Int32, true)));
        assert_eq!(
            to_json("{1,NULL,3}", 0, &ints).unwrap(),
            json!([1, null, 3])
        );
        assert_eq!(to_json("{}", 0, &ints).unwrap(), json!([]));
        let texts = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
        assert_eq!(
            to_json(r#"{"a b","c\"d",NULL,"NULL",x}"#, 0, &texts).unwrap(),
            json!(["a b", "c\"d", null, "NULL", "x"])
        );
        let nested = DataType::List(Arc::new(Field::new("item", ints, true)));
        assert_eq!(
            to_json("{{1,2},{3}}", 0, &nested).unwrap(),
            json!([[1, 2], [3]])
        );
        for bad in ["{1,2", "1,2}", "{1}x", "{\"a}"] {
            assert!(to_json(bad, 0, &texts).is_err(), "{bad}");
        }
    }
}

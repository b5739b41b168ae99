//! Formatting of result values the way sqllogictest expects them.
//!
//! Each value is printed according to its column's declared type, as the
//! reference runner does: `I` prints an integer (a real is truncated toward
//! zero, text reads its leading integer), `R` prints a real with three
//! decimals, `T` prints text (an empty string is `(empty)`, control
//! characters become `@`). NULL is `NULL` in every type.

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::common::ScalarValue;
use md5::{Digest, Md5};

/// Formats every value of a batch, row by row, by the type letters.
pub fn format_batch(batch: &RecordBatch, types: &[char]) -> Vec<Vec<String>> {
    // A VARIANT is shown as its JSON text, as Eddy's outputs show it.
    let shown = eddy_io::variant::arrow::batch_as_text(batch);
    let batch = shown.as_ref().unwrap_or(batch);
    let mut rows = Vec::with_capacity(batch.num_rows());
    for r in 0..batch.num_rows() {
        let row = batch
            .columns()
            .iter()
            .enumerate()
            .map(|(c, col)| format_value(col.as_ref(), r, types.get(c).copied().unwrap_or('T')))
            .collect();
        rows.push(row);
    }
    rows
}

fn format_value(col: &dyn Array, row: usize, ty: char) -> String {
    if col.is_null(row) {
        return "NULL".to_string();
    }
    let Ok(value) = ScalarValue::try_from_array(col, row) else {
        return "?".to_string();
    };
    match ty {
        'I' => format_integer(&value),
        'R' => match as_f64(&value) {
            Some(f) => format!("{f:.3}"),
            None => value.to_string(),
        },
        _ => format_text(&value),
    }
}

fn format_integer(value: &ScalarValue) -> String {
    match value {
        ScalarValue::Boolean(Some(b)) => i64::from(*b).to_string(),
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => leading_integer(s).to_string(),
        v if v.data_type().is_integer() => v.to_string(),
        v => match as_f64(v) {
            Some(f) => (f.trunc() as i64).to_string(),
            None => v.to_string(),
        },
    }
}

fn leading_integer(s: &str) -> i64 {
    let s = s.trim_start();
    let mut end = 0;
    for (i, c) in s.char_indices() {
        if c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+')) {
            end = i + c.len_utf8();
        } else {
            break;
        }
    }
    s[..end].parse().unwrap_or(0)
}

fn as_f64(value: &ScalarValue) -> Option<f64> {
    match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => Some(s.trim().parse().unwrap_or(0.0)),
        ScalarValue::Boolean(Some(b)) => Some(f64::from(u8::from(*b))),
        v => v
            .cast_to(&datafusion::arrow::datatypes::DataType::Float64)
            .ok()
            .and_then(|f| match f {
                ScalarValue::Float64(f) => f,
                _ => None,
            }),
    }
}

fn format_text(value: &ScalarValue) -> String {
    let s = match value {
        ScalarValue::Utf8(Some(s))
        | ScalarValue::LargeUtf8(Some(s))
        | ScalarValue::Utf8View(Some(s)) => s.clone(),
        ScalarValue::Boolean(Some(b)) => i64::from(*b).to_string(),
        v => v.to_string(),
    };
    if s.is_empty() {
        return "(empty)".to_string();
    }
    s.chars()
        .map(|c| if (' '..='~').contains(&c) { c } else { '@' })
        .collect()
}

/// The md5 of values, each followed by a newline, in lowercase hex.
pub fn hash_values(values: &[String]) -> String {
    let mut h = Md5::new();
    for v in values {
        h.update(v.as_bytes());
        h.update(b"\n");
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_read_leading_digits() {
        assert_eq!(leading_integer("12abc"), 12);
        assert_eq!(leading_integer("-7"), -7);
        assert_eq!(leading_integer("abc"), 0);
    }

    #[test]
    fn hash_matches_reference() {
        assert_eq!(hash_values(&[]), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(
            hash_values(&["a".into()]),
            "60b725f10c9c85c70d97880dfe8191b3"
        );
    }
}

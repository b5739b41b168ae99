//! Change input as it arrives over HTTP or from a connector: JSON in every
//! update format (lines or one array), CSV, and random bytes, with rows
//! that fit, rows that do not, and bytes that are not even text.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::json;

use datafusion::arrow::datatypes::SchemaRef;

use crate::values;

/// One body for an ingress endpoint.
#[derive(Debug, Clone)]
pub struct Body {
    /// `format`: json or csv.
    pub format: &'static str,
    /// `update_format` for JSON.
    pub update_format: &'static str,
    /// JSON array instead of lines.
    pub array: bool,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Where the body is cut into the pieces that arrive (sorted offsets).
    pub cuts: Vec<usize>,
}

impl std::fmt::Display for Body {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "format={} update_format={} array={} cuts={:?}",
            self.format, self.update_format, self.array, self.cuts
        )?;
        f.write_str(&String::from_utf8_lossy(&self.bytes))
    }
}

fn csv_field(rng: &mut StdRng, v: &serde_json::Value) -> String {
    let text = match v {
        serde_json::Value::Null => String::new(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match rng.gen_range(0..10) {
        0 => format!("\"{}", text),    // unterminated
        1 => format!("\"{}\"x", text), // junk after the quote
        2..=4 => format!("\"{}\"", text.replace('"', "\"\"")),
        _ => text,
    }
}

/// A random body for a table with `schema`.
pub fn body(rng: &mut StdRng, schema: &SchemaRef) -> Body {
    let lines = rng.gen_range(0..40);
    let wrong = *[0.0, 0.05, 0.5].choose(rng).unwrap();
    let (format, update_format, array, mut bytes) = match rng.gen_range(0..10) {
        0..=3 => {
            let uf = *["insert_delete", "raw", "weighted"].choose(rng).unwrap();
            let array = rng.gen_bool(0.2);
            let items: Vec<serde_json::Value> = (0..lines)
                .map(|_| {
                    let row = values::row(rng, schema, wrong);
                    match (uf, rng.gen_range(0..20)) {
                        (_, 0) => values::any_json(rng, 0),
                        ("insert_delete", n) => {
                            json!({ if n % 2 == 0 { "insert" } else { "delete" }: row })
                        }
                        ("weighted", n) => {
                            let weight = [1, -1, 5, i64::MAX, i64::MIN][n % 5];
                            json!({"weight": weight, "data": row})
                        }
                        _ => row,
                    }
                })
                .collect();
            let text = if array {
                serde_json::Value::Array(items).to_string()
            } else {
                items.iter().map(|i| format!("{i}\n")).collect()
            };
            ("json", uf, array, text.into_bytes())
        }
        4..=7 => {
            let mut text = String::new();
            if rng.gen_bool(0.2) {
                let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
                text.push_str(&names.join(","));
                text.push('\n');
            }
            for _ in 0..lines {
                let row = values::row(rng, schema, wrong);
                let mut fields: Vec<String> = schema
                    .fields()
                    .iter()
                    .map(|f| csv_field(rng, &row[f.name()]))
                    .collect();
                if rng.gen_bool(wrong / 2.0) {
                    if rng.gen_bool(0.5) {
                        fields.pop();
                    } else {
                        fields.push("extra".into());
                    }
                }
                text.push_str(&fields.join(","));
                text.push_str(if rng.gen_bool(0.1) { "\r\n" } else { "\n" });
            }
            ("csv", "insert_delete", false, text.into_bytes())
        }
        _ => {
            let n = rng.gen_range(0..2000);
            let bytes: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            let format = if rng.gen_bool(0.5) { "json" } else { "csv" };
            (format, "insert_delete", rng.gen_bool(0.2), bytes)
        }
    };
    // Stray bytes: invalid UTF-8, NULs, deep nesting.
    if !bytes.is_empty() && rng.gen_bool(0.2) {
        let at = rng.gen_range(0..bytes.len());
        let stray: &[u8] = [
            &b"\xff\xfe"[..],
            &b"\x00"[..],
            &b"\xc3"[..],
            b"[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
            &b"\n\n\n"[..],
        ]
        .choose(rng)
        .unwrap();
        bytes.splice(at..at, stray.iter().copied());
    }
    let mut cuts: Vec<usize> = (0..rng.gen_range(0..5))
        .map(|_| rng.gen_range(0..=bytes.len()))
        .collect();
    cuts.sort_unstable();
    Body {
        format,
        update_format,
        array,
        bytes,
        cuts,
    }
}

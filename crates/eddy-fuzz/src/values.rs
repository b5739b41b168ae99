//! Random values and rows for a schema: typical ones, edge ones, and ones
//! of the wrong type.

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use eddy_dbsp::ZSet;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{json, Map, Value};

/// A value that fits `t` (or NULL).
pub fn fitting(rng: &mut StdRng, t: &DataType) -> Value {
    if rng.gen_bool(0.1) {
        return Value::Null;
    }
    match t {
        DataType::Int8 => json!(rng.gen::<i8>()),
        DataType::Int16 => json!(rng.gen::<i16>()),
        DataType::Int32 => json!(*[0, 1, -1, i32::MAX, i32::MIN, rng.gen_range(-100..100)]
            .choose(rng)
            .unwrap()),
        DataType::Int64 => json!(*[0, 1, -1, i64::MAX, i64::MIN, rng.gen_range(-100..100)]
            .choose(rng)
            .unwrap()),
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
            json!(rng.gen_range(0..1000))
        }
        DataType::Float32 | DataType::Float64 => {
            json!(*[0.0, -0.0, 1.5, 1e300, -1e-300, rng.gen_range(-1e3..1e3)]
                .choose(rng)
                .unwrap())
        }
        DataType::Boolean => json!(rng.gen_bool(0.5)),
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            json!(*[
                "",
                "a",
                "b",
                "ÿ",
                "a,b",
                "x\"y",
                "line\nbreak",
                "\u{10FFFF}"
            ]
            .choose(rng)
            .unwrap())
        }
        DataType::Date32 | DataType::Date64 => json!(*["2024-02-29", "1970-01-01", "9999-12-31"]
            .choose(rng)
            .unwrap()),
        DataType::Timestamp(_, _) => json!(*[
            "2024-02-29T12:00:00",
            "1970-01-01T00:00:00",
            "2262-04-11T23:47:16"
        ]
        .choose(rng)
        .unwrap()),
        DataType::Decimal128(p, s) => {
            let digits = (*p as i32 - *s as i32).clamp(1, 18) as u32;
            let max = 10i64.saturating_pow(digits) - 1;
            json!(format!(
                "{}.{}",
                rng.gen_range(-max..=max),
                "5".repeat(*s as usize)
            ))
        }
        _ => Value::Null,
    }
}

/// A JSON value of any type, sometimes deeply nested or huge.
pub fn any_json(rng: &mut StdRng, depth: u32) -> Value {
    match rng.gen_range(0..12) {
        0 => Value::Null,
        1 => json!(rng.gen::<bool>()),
        2 => json!(rng.gen::<i64>()),
        3 => json!(rng.gen::<f64>() * 1e300),
        4 => json!(u64::MAX),
        5 => json!("x".repeat(rng.gen_range(0..50))),
        6 => json!("2024-13-45T99:99:99"),
        7 => json!("1e999999"),
        8 if depth < 4 => Value::Array(
            (0..rng.gen_range(0..4))
                .map(|_| any_json(rng, depth + 1))
                .collect(),
        ),
        9 if depth < 4 => {
            let mut m = Map::new();
            for i in 0..rng.gen_range(0..4) {
                m.insert(format!("k{i}"), any_json(rng, depth + 1));
            }
            Value::Object(m)
        }
        _ => json!(rng.gen_range(-1000..1000)),
    }
}

/// A row object of `schema`: fitting values, sometimes a wrong one, a
/// missing column or an unknown one.
pub fn row(rng: &mut StdRng, schema: &SchemaRef, wrong: f64) -> Value {
    let mut m = Map::new();
    for f in schema.fields() {
        if rng.gen_bool(0.05) {
            continue;
        }
        let v = if rng.gen_bool(wrong) {
            any_json(rng, 0)
        } else {
            fitting(rng, f.data_type())
        };
        m.insert(f.name().clone(), v);
    }
    if rng.gen_bool(wrong / 4.0) {
        m.insert("no_such_column".into(), json!(1));
    }
    Value::Object(m)
}

/// A Z-set of `n` fitting rows of `schema` (weight 1 each).
pub fn rows(rng: &mut StdRng, schema: &SchemaRef, n: usize) -> ZSet {
    let text: String = (0..n)
        .map(|_| format!("{}\n", row(rng, schema, 0.0)))
        .collect();
    eddy_io::json::parse(&text, schema, eddy_io::json::UpdateFormat::Raw, false).changes
}

//! Fuzzing Avro input as a Kafka connector decodes it: datums of a table's
//! generated schema with random values, then mutated (bytes flipped, cut,
//! appended, or replaced by noise), through `AvroDecoder` and the table's
//! JSON parser. Every message is decoded or rejected with a reason, and
//! every decoded row is accepted or rejected with one; nothing panics and
//! no decoded value asks for more than the decoder's allocation bound.

use std::sync::Arc;

use apache_avro::types::Value as A;
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use eddy_fuzz::runner::fuzz;
use eddy_io::avro::{schema_of, AvroDecoder};
use eddy_io::format::FormatConfig;
use eddy_io::json::UpdateFormat;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::json;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("small", DataType::Int8, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
        Field::new("amount", DataType::Decimal128(12, 2), true),
    ]))
}

/// One message (and whether it was left intact), shown as hex.
struct Message(Vec<u8>, bool);

impl std::fmt::Display for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "intact={} ", self.1)?;
        for b in &self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

fn some(v: A) -> A {
    A::Union(1, Box::new(v))
}

fn random_row(rng: &mut StdRng) -> A {
    let null = || A::Union(0, Box::new(A::Null));
    let pick = |v: A, rng: &mut StdRng| if rng.gen_bool(0.2) { null() } else { some(v) };
    let small = A::Int(rng.gen_range(-300..300)); // may not fit TINYINT
    let f = A::Double(rng.gen_range(-1e6..1e6));
    let s = A::String(
        (0..rng.gen_range(0..8))
            .map(|_| rng.gen_range('a'..='z'))
            .collect(),
    );
    let d = A::Date(rng.gen_range(-1_000_000..3_000_000)); // some out of range
    let ts = A::TimestampMicros(rng.gen::<i64>() >> rng.gen_range(0..20));
    let amount = A::Decimal(apache_avro::Decimal::from(
        rng.gen_range(-10_000_000i64..10_000_000).to_be_bytes(),
    ));
    A::Record(vec![
        ("id".into(), A::Long(rng.gen())),
        ("small".into(), pick(small, rng)),
        ("f".into(), pick(f, rng)),
        ("s".into(), pick(s, rng)),
        ("d".into(), pick(d, rng)),
        ("ts".into(), pick(ts, rng)),
        ("amount".into(), pick(amount, rng)),
    ])
}

#[test]
fn avro_input() {
    let schema = schema();
    let (avro_schema, text) = schema_of(schema.fields()).unwrap();
    let written = json!({"name": "avro", "config": {"schema": text, "skip_schema_id": true}});
    let FormatConfig::Avro(avro) = FormatConfig::from_value(&written).unwrap() else {
        panic!("an Avro format");
    };
    let config = avro.checked(true).unwrap();
    fuzz(
        "avro_input",
        |rng| {
            let mut bytes = apache_avro::to_avro_datum(&avro_schema, random_row(rng)).unwrap();
            let how = rng.gen_range(0..6);
            match how {
                0 => {} // intact
                1 => {
                    for _ in 0..rng.gen_range(1..4) {
                        if !bytes.is_empty() {
                            let i = rng.gen_range(0..bytes.len());
                            bytes[i] ^= 1 << rng.gen_range(0..8);
                        }
                    }
                }
                2 => bytes.truncate(rng.gen_range(0..=bytes.len())),
                3 => bytes.extend((0..rng.gen_range(1..10)).map(|_| rng.gen::<u8>())),
                4 => {
                    // A huge length where a string's length goes.
                    let i = rng.gen_range(0..=bytes.len());
                    bytes.splice(i..i, [0xfe, 0xff, 0xff, 0xff, 0x0f]);
                }
                _ => bytes = (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect(),
            }
            Message(bytes, how == 0)
        },
        |Message(bytes, intact)| {
            let mut decoder = AvroDecoder::new(config.clone(), None);
            match decoder.decode(bytes, schema.fields()) {
                Ok(Some(line)) => {
                    let parsed =
                        eddy_io::json::parse(&line, &schema, UpdateFormat::InsertDelete, false);
                    assert!(parsed.changes.len() + parsed.errors.len() <= 1, "{line}");
                    for e in &parsed.errors {
                        assert!(!e.reason.is_empty());
                    }
                }
                Ok(None) => panic!("only Debezium tombstones decode to nothing"),
                // An intact datum fails only on a value beyond SQL's range.
                Err(e) => assert!(!*intact || e.contains("out of range"), "{e}"),
            }
        },
    );
}

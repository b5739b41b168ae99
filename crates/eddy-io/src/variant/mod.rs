//! Feldera's `VARIANT`: a dynamically typed value that holds its SQL type
//! with its value (json.md). JSON parses into it, any SQL value casts into
//! it, and it casts back to any type, giving NULL where the value does not
//! fit.
//!
//! A `VARIANT` column is Arrow `LargeBinary`, a type no other SQL type
//! maps to, holding one [`Variant`] per row in the encoding of
//! [`codec`]. The encoding is canonical (map entries sorted by key, one
//! entry per key), so two variants are equal exactly when their bytes are:
//! grouping, `DISTINCT`, joins and the engine's Z-set consolidation work on
//! the bytes unchanged, and they order by type, then value.
//!
//! Output writes a variant as its JSON text (see [`arrow::as_text`]), as
//! Feldera does.

pub mod arrow;
pub mod codec;
pub mod json;

use datafusion::arrow::datatypes::DataType;

/// The Arrow type of a `VARIANT` column.
pub const DATA_TYPE: DataType = DataType::LargeBinary;

/// Whether `t` is the `VARIANT` type.
pub fn is_variant(t: &DataType) -> bool {
    *t == DATA_TYPE
}

/// Whether a `VARIANT` appears anywhere in `t`.
pub fn holds_variant(t: &DataType) -> bool {
    match t {
        DataType::LargeBinary => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_variant(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_variant(f.data_type())),
        DataType::Map(f, _) => holds_variant(f.data_type()),
        _ => false,
    }
}

/// One `VARIANT` value.
#[derive(Debug, Clone, PartialEq)]
pub enum Variant {
    /// A SQL NULL held in a variant (`CAST(NULL AS VARIANT)`, a NULL
    /// element of an array cast to `VARIANT`); `TYPEOF` says `NULL`.
    SqlNull,
    /// The `VARIANT` null (JSON's `null`, `VARIANTNULL()`): equal to
    /// itself, unlike SQL's NULL; `TYPEOF` says `VARIANT`.
    Null,
    Boolean(bool),
    TinyInt(i8),
    SmallInt(i16),
    Int(i32),
    BigInt(i64),
    UTinyInt(u8),
    USmallInt(u16),
    UInt(u32),
    UBigInt(u64),
    Real(f32),
    Double(f64),
    /// A DECIMAL: `value` × 10^-`scale`, as declared `DECIMAL(precision, scale)`.
    Decimal {
        value: i128,
        precision: u8,
        scale: i8,
    },
    Varchar(String),
    Varbinary(Vec<u8>),
    /// Days since 1970-01-01.
    Date(i32),
    /// Nanoseconds since midnight.
    Time(i64),
    /// Nanoseconds since 1970-01-01 00:00:00.
    Timestamp(i64),
    /// Nanoseconds since 1970-01-01 00:00:00 UTC.
    TimestampTz(i64),
    Array(Vec<Variant>),
    /// Entries sorted by their keys' encodings, one per key: build with
    /// [`Variant::map`].
    Map(Vec<(Variant, Variant)>),
}

impl Variant {
    /// A map of `entries`, in canonical form: sorted by key, and where a
    /// key repeats, its last entry kept (as a JSON object's last field
    /// wins).
    pub fn map(entries: Vec<(Variant, Variant)>) -> Variant {
        let mut keyed: Vec<(Vec<u8>, (Variant, Variant))> = entries
            .into_iter()
            .map(|(k, v)| (codec::encode(&k), (k, v)))
            .collect();
        // Stable: of equal keys the last is last, and kept below.
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut out: Vec<(Vec<u8>, (Variant, Variant))> = Vec::with_capacity(keyed.len());
        for e in keyed {
            match out.last_mut() {
                Some(last) if last.0 == e.0 => *last = e,
                _ => out.push(e),
            }
        }
        Variant::Map(out.into_iter().map(|(_, kv)| kv).collect())
    }

    /// The runtime type's name, as `TYPEOF` gives it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Variant::SqlNull => "NULL",
            Variant::Null => "VARIANT",
            Variant::Boolean(_) => "BOOLEAN",
            Variant::TinyInt(_) => "TINYINT",
            Variant::SmallInt(_) => "SMALLINT",
            Variant::Int(_) => "INTEGER",
            Variant::BigInt(_) => "BIGINT",
            Variant::UTinyInt(_) => "TINYINT UNSIGNED",
            Variant::USmallInt(_) => "SMALLINT UNSIGNED",
            Variant::UInt(_) => "INTEGER UNSIGNED",
            Variant::UBigInt(_) => "BIGINT UNSIGNED",
            Variant::Real(_) => "REAL",
            Variant::Double(_) => "DOUBLE",
            Variant::Decimal { .. } => "DECIMAL",
            Variant::Varchar(_) => "VARCHAR",
            Variant::Varbinary(_) => "VARBINARY",
            Variant::Date(_) => "DATE",
            Variant::Time(_) => "TIME",
            Variant::Timestamp(_) => "TIMESTAMP",
            Variant::TimestampTz(_) => "TIMESTAMP WITH TIME ZONE",
            Variant::Array(_) => "ARRAY",
            Variant::Map(_) => "MAP",
        }
    }

    /// The value of an integer variant, of any width and sign.
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Variant::TinyInt(v) => v.into(),
            Variant::SmallInt(v) => v.into(),
            Variant::Int(v) => v.into(),
            Variant::BigInt(v) => v.into(),
            Variant::UTinyInt(v) => v.into(),
            Variant::USmallInt(v) => v.into(),
            Variant::UInt(v) => v.into(),
            Variant::UBigInt(v) => v.into(),
            _ => return None,
        })
    }

    /// The element at 1-based `index` of an array variant, or the value of
    /// the entry whose key is `key` in a map variant (integer keys match
    /// whatever their width, since `1` is written without one).
    pub fn index(&self, key: &Variant) -> Option<&Variant> {
        match self {
            Variant::Array(items) => {
                let i = key.as_integer()?;
                if i < 1 {
                    return None;
                }
                items.get(usize::try_from(i - 1).ok()?)
            }
            Variant::Map(entries) => {
                let wanted = key.as_integer();
                entries
                    .iter()
                    .find(|(k, _)| match (wanted, k.as_integer()) {
                        (Some(a), Some(b)) => a == b,
                        _ => k == key,
                    })
                    .map(|(_, v)| v)
            }
            _ => None,
        }
    }
}

/// A value that cannot become a variant (a type `VARIANT` cannot hold), or
/// bytes that are not a variant's encoding (which a program's own values
/// never produce: damaged state).
#[derive(Debug, thiserror::Error)]
#[error("VARIANT: {0}")]
pub struct VariantError(pub String);

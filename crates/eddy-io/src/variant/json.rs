//! `VARIANT` and JSON text, both ways (json.md, `PARSE_JSON` and
//! `TO_JSON`):
//!
//! * JSON `null` is the `VARIANT` null; integers are `BIGINT UNSIGNED` when
//!   not negative and `BIGINT` otherwise; other numbers are `DECIMAL` (a
//!   `DOUBLE` beyond DECIMAL's 38 digits); strings `VARCHAR`; arrays arrays
//!   of variants; objects maps from `VARCHAR` variants to variants.
//! * Back to text: numbers as a cast to `VARCHAR` writes them, strings
//!   quoted and escaped, `VARBINARY` as an array of bytes (Feldera's JSON
//!   for binary), dates and times as quoted strings, maps as objects.

use std::fmt::Write;

use chrono::{DateTime, NaiveDate, NaiveTime};
use serde_json::Value;

use super::Variant;

/// The variant of a parsed JSON value.
pub fn from_json(v: &Value) -> Variant {
    match v {
        Value::Null => Variant::Null,
        Value::Bool(b) => Variant::Boolean(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Variant::UBigInt(u)
            } else if let Some(i) = n.as_i64() {
                Variant::BigInt(i)
            } else {
                decimal_of(&n.to_string())
                    .unwrap_or_else(|| Variant::Double(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => Variant::Varchar(s.clone()),
        Value::Array(items) => Variant::Array(items.iter().map(from_json).collect()),
        Value::Object(fields) => Variant::map(
            fields
                .iter()
                .map(|(k, v)| (Variant::Varchar(k.clone()), from_json(v)))
                .collect(),
        ),
    }
}

/// The variant of JSON text, or `None` when it is not JSON.
pub fn parse(text: &str) -> Option<Variant> {
    serde_json::from_str::<Value>(text)
        .ok()
        .map(|v| from_json(&v))
}

/// A JSON number's text (`-1.25`, `3e-2`) as a DECIMAL, when it has at
/// most 38 digits.
fn decimal_of(text: &str) -> Option<Variant> {
    let (mantissa, exponent) = match text.find(['e', 'E']) {
        Some(i) => (&text[..i], text[i + 1..].parse::<i32>().ok()?),
        None => (text, 0),
    };
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{whole}{fraction}");
    let mut scale = i32::try_from(fraction.len()).ok()? - exponent;
    if scale < 0 {
        digits.extend(std::iter::repeat_n('0', usize::try_from(-scale).ok()?));
        scale = 0;
    }
    let digits = digits.trim_start_matches('0');
    let shown = digits.len().max(usize::try_from(scale).ok()? + 1);
    if shown > 38 || scale > 38 {
        return None;
    }
    let magnitude: i128 = if digits.is_empty() {
        0
    } else {
        digits.parse().ok()?
    };
    Some(Variant::Decimal {
        value: if negative { -magnitude } else { magnitude },
        precision: u8::try_from(shown).ok()?,
        scale: i8::try_from(scale).ok()?,
    })
}

/// The JSON text of `v`, as `TO_JSON` gives it: `None` where JSON cannot
/// say it (a map key that is not a string, a NaN or infinite number).
pub fn to_json(v: &Variant) -> Option<String> {
    let mut out = String::new();
    write_json(v, &mut out, false).then_some(out)
}

/// The JSON text of `v` as output shows it: like [`to_json`], but a map
/// key that is not a string is written as its JSON text in a string, and
/// a NaN or infinite number as a string, so that every value is shown.
pub fn to_json_lenient(v: &Variant) -> String {
    let mut out = String::new();
    write_json(v, &mut out, true);
    out
}

/// Writes `v` to `out`; false where strict JSON cannot say it.
fn write_json(v: &Variant, out: &mut String, lenient: bool) -> bool {
    match v {
        Variant::SqlNull | Variant::Null => out.push_str("null"),
        Variant::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        Variant::Real(f) if !f.is_finite() => {
            return lenient && write_string(&f.to_string(), out);
        }
        Variant::Double(f) if !f.is_finite() => {
            return lenient && write_string(&f.to_string(), out);
        }
        Variant::Varchar(s) => return write_string(s, out),
        Variant::Varbinary(b) => {
            out.push('[');
            for (i, byte) in b.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{byte}");
            }
            out.push(']');
        }
        Variant::Date(_) | Variant::Time(_) | Variant::Timestamp(_) | Variant::TimestampTz(_) => {
            return write_string(&scalar_text(v).unwrap_or_default(), out);
        }
        Variant::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                if !write_json(item, out, lenient) {
                    return false;
                }
            }
            out.push(']');
        }
        Variant::Map(entries) => {
            out.push('{');
            for (i, (k, value)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let key_ok = match k {
                    Variant::Varchar(s) => write_string(s, out),
                    other if lenient => write_string(&to_json_lenient(other), out),
                    _ => false,
                };
                out.push(':');
                if !key_ok || !write_json(value, out, lenient) {
                    return false;
                }
            }
            out.push('}');
        }
        scalar => out.push_str(&scalar_text(scalar).unwrap_or_default()),
    }
    true
}

fn write_string(s: &str, out: &mut String) -> bool {
    out.push_str(&Value::String(s.to_string()).to_string());
    true
}

/// The text of a scalar variant as a cast to `VARCHAR` writes it (numbers
/// without quotes, `2020-06-21 14:23:44.5` for a timestamp); `None` for
/// nulls, arrays and maps.
pub fn scalar_text(v: &Variant) -> Option<String> {
    Some(match v {
        Variant::SqlNull | Variant::Null | Variant::Array(_) | Variant::Map(_) => return None,
        Variant::Boolean(b) => b.to_string(),
        Variant::TinyInt(x) => x.to_string(),
        Variant::SmallInt(x) => x.to_string(),
        Variant::Int(x) => x.to_string(),
        Variant::BigInt(x) => x.to_string(),
        Variant::UTinyInt(x) => x.to_string(),
        Variant::USmallInt(x) => x.to_string(),
        Variant::UInt(x) => x.to_string(),
        Variant::UBigInt(x) => x.to_string(),
        Variant::Real(f) => f.to_string(),
        Variant::Double(f) => f.to_string(),
        Variant::Decimal { value, scale, .. } => decimal_text(*value, *scale),
        Variant::Varchar(s) => s.clone(),
        Variant::Varbinary(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
        Variant::Date(d) => date_text(*d)?,
        Variant::Time(ns) => {
            let secs = u32::try_from(ns.div_euclid(1_000_000_000)).ok()?;
            let nanos = u32::try_from(ns.rem_euclid(1_000_000_000)).ok()?;
            let t = NaiveTime::from_num_seconds_from_midnight_opt(secs, nanos)?;
            format!("{}{}", t.format("%H:%M:%S"), fraction(nanos))
        }
        Variant::Timestamp(ns) => timestamp_text(*ns)?,
        Variant::TimestampTz(ns) => format!("{}+00:00", timestamp_text(*ns)?),
    })
}

fn date_text(days: i32) -> Option<String> {
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1)?;
    Some(
        epoch
            .checked_add_signed(chrono::Duration::days(days.into()))?
            .format("%Y-%m-%d")
            .to_string(),
    )
}

fn timestamp_text(ns: i64) -> Option<String> {
    let nanos = u32::try_from(ns.rem_euclid(1_000_000_000)).ok()?;
    let t = DateTime::from_timestamp(ns.div_euclid(1_000_000_000), nanos)?.naive_utc();
    Some(format!(
        "{}{}",
        t.format("%Y-%m-%d %H:%M:%S"),
        fraction(nanos)
    ))
}

/// `.123654` for 123,654,000 ns; nothing for none.
fn fraction(nanos: u32) -> String {
    if nanos == 0 {
        return String::new();
    }
    let digits = format!("{nanos:09}");
    format!(".{}", digits.trim_end_matches('0'))
}

/// `value` × 10^-`scale` written out (`-1111.52`).
pub fn decimal_text(value: i128, scale: i8) -> String {
    if scale <= 0 {
        let zeros = "0".repeat(usize::from(scale.unsigned_abs()));
        return if value == 0 {
            "0".into()
        } else {
            format!("{value}{zeros}")
        };
    }
    let scale = usize::from(scale.unsigned_abs());
    let digits = format!("{:0>width$}", value.unsigned_abs(), width = scale + 1);
    let (whole, frac) = digits.split_at(digits.len() - scale);
    let sign = if value < 0 { "-" } else { "" };
    format!("{sign}{whole}.{frac}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_values_take_the_types_the_reference_gives() {
        let v = parse(r#"{"b": [2.5, -3, 4, null], "a": "x"}"#).unwrap();
        assert_eq!(
            v,
            Variant::Map(vec![
                (Variant::Varchar("a".into()), Variant::Varchar("x".into())),
                (
                    Variant::Varchar("b".into()),
                    Variant::Array(vec![
                        Variant::Decimal {
                            value: 25,
                            precision: 2,
                            scale: 1
                        },
                        Variant::BigInt(-3),
                        Variant::UBigInt(4),
                        Variant::Null,
                    ])
                ),
            ])
        );
        assert_eq!(to_json(&v).unwrap(), r#"{"a":"x","b":[2.5,-3,4,null]}"#);
        assert_eq!(parse("{oops"), None);
    }

    #[test]
    fn decimals_from_json_numbers() {
        let d = |t: &str| match decimal_of(t).unwrap() {
            Variant::Decimal { value, scale, .. } => decimal_text(value, scale),
            other => panic!("{other:?}"),
        };
        assert_eq!(d("1.25"), "1.25");
        assert_eq!(d("-0.5"), "-0.5");
        assert_eq!(d("1e3"), "1000");
        assert_eq!(d("2.5e-3"), "0.0025");
        assert_eq!(decimal_of("1e300"), None);
    }

    #[test]
    fn scalars_are_written_as_casts_to_varchar_write_them() {
        assert_eq!(
            scalar_text(&Variant::Timestamp(1_592_749_424_123_654_000)).unwrap(),
            "2020-06-21 14:23:44.123654"
        );
        assert_eq!(
            to_json(&Variant::TimestampTz(1_592_749_424_000_000_000)).unwrap(),
            r#""2020-06-21 14:23:44+00:00""#
        );
        assert_eq!(to_json(&Variant::Date(20062)).unwrap(), r#""2024-12-05""#);
        assert_eq!(
            to_json(&Variant::Time(66_645_000_000_000)).unwrap(),
            r#""18:30:45""#
        );
        assert_eq!(to_json(&Variant::Real(57681.18)).unwrap(), "57681.18");
        assert_eq!(
            to_json(&Variant::Varbinary(vec![12, 22])).unwrap(),
            "[12,22]"
        );
        assert_eq!(decimal_text(-111152, 2), "-1111.52");
        assert_eq!(decimal_text(5, 3), "0.005");
    }

    #[test]
    fn a_map_with_other_keys_is_not_json_but_is_shown() {
        let m = Variant::map(vec![(Variant::Int(1), Variant::Varchar("a".into()))]);
        assert_eq!(to_json(&m), None);
        assert_eq!(to_json_lenient(&m), r#"{"1":"a"}"#);
    }
}

//! The byte encoding of a [`Variant`]: a tag byte for the runtime type,
//! then the value, written so that the bytes of two variants compare as
//! the variants order (by type, then value; DECIMALs of different scales
//! aside, which compare by scale first):
//!
//! * integers big-endian, signed ones with the sign bit flipped;
//! * floating point as its bits, flipped so that negatives sort first;
//! * text and bytes with each `0x00` written `0x00 0xFF` and a `0x00 0x00`
//!   terminator, so a prefix sorts first;
//! * arrays and maps as their elements (or keys and values) in order, then
//!   a `0x00`, which no tag is.

use super::{Variant, VariantError};

const SQL_NULL: u8 = 0x01;
const NULL: u8 = 0x02;
const FALSE: u8 = 0x03;
const TRUE: u8 = 0x04;
const TINYINT: u8 = 0x10;
const SMALLINT: u8 = 0x11;
const INT: u8 = 0x12;
const BIGINT: u8 = 0x13;
const UTINYINT: u8 = 0x14;
const USMALLINT: u8 = 0x15;
const UINT: u8 = 0x16;
const UBIGINT: u8 = 0x17;
const REAL: u8 = 0x18;
const DOUBLE: u8 = 0x19;
const DECIMAL: u8 = 0x1A;
const VARCHAR: u8 = 0x20;
const VARBINARY: u8 = 0x21;
const DATE: u8 = 0x30;
const TIME: u8 = 0x31;
const TIMESTAMP: u8 = 0x32;
const TIMESTAMP_TZ: u8 = 0x33;
const ARRAY: u8 = 0x40;
const MAP: u8 = 0x41;
const END: u8 = 0x00;

/// The encoding of `v`.
pub fn encode(v: &Variant) -> Vec<u8> {
    let mut out = Vec::new();
    write(v, &mut out);
    out
}

/// Appends the encoding of `v` to `out`.
pub fn write(v: &Variant, out: &mut Vec<u8>) {
    match v {
        Variant::SqlNull => out.push(SQL_NULL),
        Variant::Null => out.push(NULL),
        Variant::Boolean(b) => out.push(if *b { TRUE } else { FALSE }),
        Variant::TinyInt(x) => {
            out.push(TINYINT);
            out.push((*x as u8) ^ 0x80);
        }
        Variant::SmallInt(x) => {
            out.push(SMALLINT);
            out.extend(((*x as u16) ^ 0x8000).to_be_bytes());
        }
        Variant::Int(x) => {
            out.push(INT);
            out.extend(((*x as u32) ^ 0x8000_0000).to_be_bytes());
        }
        Variant::BigInt(x) => {
            out.push(BIGINT);
            out.extend(flip64(*x));
        }
        Variant::UTinyInt(x) => {
            out.push(UTINYINT);
            out.push(*x);
        }
        Variant::USmallInt(x) => {
            out.push(USMALLINT);
            out.extend(x.to_be_bytes());
        }
        Variant::UInt(x) => {
            out.push(UINT);
            out.extend(x.to_be_bytes());
        }
        Variant::UBigInt(x) => {
            out.push(UBIGINT);
            out.extend(x.to_be_bytes());
        }
        Variant::Real(f) => {
            out.push(REAL);
            let bits = f.to_bits();
            let key = if bits >> 31 == 1 {
                !bits
            } else {
                bits | (1 << 31)
            };
            out.extend(key.to_be_bytes());
        }
        Variant::Double(f) => {
            out.push(DOUBLE);
            let bits = f.to_bits();
            let key = if bits >> 63 == 1 {
                !bits
            } else {
                bits | (1 << 63)
            };
            out.extend(key.to_be_bytes());
        }
        Variant::Decimal {
            value,
            precision,
            scale,
        } => {
            out.push(DECIMAL);
            out.push(*precision);
            out.push(*scale as u8);
            out.extend(((*value as u128) ^ (1 << 127)).to_be_bytes());
        }
        Variant::Varchar(s) => {
            out.push(VARCHAR);
            escaped(s.as_bytes(), out);
        }
        Variant::Varbinary(b) => {
            out.push(VARBINARY);
            escaped(b, out);
        }
        Variant::Date(d) => {
            out.push(DATE);
            out.extend(((*d as u32) ^ 0x8000_0000).to_be_bytes());
        }
        Variant::Time(t) => {
            out.push(TIME);
            out.extend(flip64(*t));
        }
        Variant::Timestamp(t) => {
            out.push(TIMESTAMP);
            out.extend(flip64(*t));
        }
        Variant::TimestampTz(t) => {
            out.push(TIMESTAMP_TZ);
            out.extend(flip64(*t));
        }
        Variant::Array(items) => {
            out.push(ARRAY);
            for i in items {
                write(i, out);
            }
            out.push(END);
        }
        Variant::Map(entries) => {
            out.push(MAP);
            for (k, v) in entries {
                write(k, out);
                write(v, out);
            }
            out.push(END);
        }
    }
}

fn flip64(x: i64) -> [u8; 8] {
    ((x as u64) ^ (1 << 63)).to_be_bytes()
}

fn escaped(bytes: &[u8], out: &mut Vec<u8>) {
    for &b in bytes {
        out.push(b);
        if b == 0 {
            out.push(0xFF);
        }
    }
    out.extend([0, 0]);
}

/// The variant encoded in `bytes`.
pub fn decode(bytes: &[u8]) -> Result<Variant, VariantError> {
    let mut r = Reader { bytes, at: 0 };
    let v = r.value();
    let v = match v {
        Ok(_) if r.at != bytes.len() => Err(VariantError(format!(
            "{} bytes after the value",
            bytes.len() - r.at
        ))),
        v => v,
    };
    v.map_err(|e| VariantError(format!("damaged value ({})", e.0)))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], VariantError> {
        let end = self.at + N;
        let Some(s) = self.bytes.get(self.at..end) else {
            return Err(VariantError("cut short".into()));
        };
        self.at = end;
        Ok(s.try_into().expect("N bytes"))
    }

    fn byte(&mut self) -> Result<u8, VariantError> {
        Ok(self.take::<1>()?[0])
    }

    fn peek(&self) -> Result<u8, VariantError> {
        self.bytes
            .get(self.at)
            .copied()
            .ok_or_else(|| VariantError("cut short".into()))
    }

    fn i64(&mut self) -> Result<i64, VariantError> {
        Ok((u64::from_be_bytes(self.take()?) ^ (1 << 63)) as i64)
    }

    fn unescaped(&mut self) -> Result<Vec<u8>, VariantError> {
        let mut out = Vec::new();
        loop {
            let b = self.byte()?;
            if b != 0 {
                out.push(b);
                continue;
            }
            match self.byte()? {
                0 => return Ok(out),
                0xFF => out.push(0),
                x => return Err(VariantError(format!("byte {x:#x} after 0x00 in text"))),
            }
        }
    }

    fn value(&mut self) -> Result<Variant, VariantError> {
        Ok(match self.byte()? {
            SQL_NULL => Variant::SqlNull,
            NULL => Variant::Null,
            FALSE => Variant::Boolean(false),
            TRUE => Variant::Boolean(true),
            TINYINT => Variant::TinyInt((self.byte()? ^ 0x80) as i8),
            SMALLINT => Variant::SmallInt((u16::from_be_bytes(self.take()?) ^ 0x8000) as i16),
            INT => Variant::Int((u32::from_be_bytes(self.take()?) ^ 0x8000_0000) as i32),
            BIGINT => Variant::BigInt(self.i64()?),
            UTINYINT => Variant::UTinyInt(self.byte()?),
            USMALLINT => Variant::USmallInt(u16::from_be_bytes(self.take()?)),
            UINT => Variant::UInt(u32::from_be_bytes(self.take()?)),
            UBIGINT => Variant::UBigInt(u64::from_be_bytes(self.take()?)),
            REAL => {
                let key = u32::from_be_bytes(self.take()?);
                let bits = if key >> 31 == 1 {
                    key & !(1 << 31)
                } else {
                    !key
                };
                Variant::Real(f32::from_bits(bits))
            }
            DOUBLE => {
                let key = u64::from_be_bytes(self.take()?);
                let bits = if key >> 63 == 1 {
                    key & !(1 << 63)
                } else {
                    !key
                };
                Variant::Double(f64::from_bits(bits))
            }
            DECIMAL => {
                let precision = self.byte()?;
                let scale = self.byte()? as i8;
                let value = (u128::from_be_bytes(self.take()?) ^ (1 << 127)) as i128;
                Variant::Decimal {
                    value,
                    precision,
                    scale,
                }
            }
            VARCHAR => Variant::Varchar(
                String::from_utf8(self.unescaped()?)
                    .map_err(|_| VariantError("text that is not UTF-8".into()))?,
            ),
            VARBINARY => Variant::Varbinary(self.unescaped()?),
            DATE => Variant::Date((u32::from_be_bytes(self.take()?) ^ 0x8000_0000) as i32),
            TIME => Variant::Time(self.i64()?),
            TIMESTAMP => Variant::Timestamp(self.i64()?),
            TIMESTAMP_TZ => Variant::TimestampTz(self.i64()?),
            ARRAY => {
                let mut items = Vec::new();
                while self.peek()? != END {
                    items.push(self.value()?);
                }
                self.at += 1;
                Variant::Array(items)
            }
            MAP => {
                let mut entries = Vec::new();
                while self.peek()? != END {
                    let k = self.value()?;
                    let v = self.value()?;
                    entries.push((k, v));
                }
                self.at += 1;
                Variant::Map(entries)
            }
            tag => return Err(VariantError(format!("unknown tag {tag:#x}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Variant> {
        vec![
            Variant::SqlNull,
            Variant::Null,
            Variant::Boolean(false),
            Variant::Boolean(true),
            Variant::TinyInt(-3),
            Variant::SmallInt(300),
            Variant::Int(-70000),
            Variant::BigInt(i64::MIN),
            Variant::UTinyInt(200),
            Variant::USmallInt(65535),
            Variant::UInt(7),
            Variant::UBigInt(u64::MAX),
            Variant::Real(-1.5),
            Variant::Double(2.25),
            Variant::Decimal {
                value: -111152,
                precision: 6,
                scale: 2,
            },
            Variant::Varchar("a\0b".into()),
            Variant::Varbinary(vec![0, 255, 0]),
            Variant::Date(-5),
            Variant::Time(3_600_000_000_000),
            Variant::Timestamp(-1),
            Variant::TimestampTz(1),
            Variant::Array(vec![Variant::Int(1), Variant::SqlNull]),
            Variant::map(vec![
                (Variant::Varchar("b".into()), Variant::Int(2)),
                (Variant::Varchar("a".into()), Variant::Array(vec![])),
            ]),
        ]
    }

    #[test]
    fn every_value_round_trips() {
        for v in all() {
            assert_eq!(decode(&encode(&v)).unwrap(), v, "{v:?}");
        }
    }

    #[test]
    fn bytes_order_as_values() {
        let order = |xs: Vec<Variant>| {
            let bytes: Vec<Vec<u8>> = xs.iter().map(encode).collect();
            assert!(bytes.windows(2).all(|w| w[0] < w[1]), "{xs:?}");
        };
        order(vec![
            Variant::BigInt(-5),
            Variant::BigInt(-1),
            Variant::BigInt(0),
            Variant::BigInt(9),
        ]);
        order(vec![
            Variant::Double(-2.0),
            Variant::Double(-0.5),
            Variant::Double(0.0),
            Variant::Double(3.0),
        ]);
        order(vec![
            Variant::Varchar("".into()),
            Variant::Varchar("a".into()),
            Variant::Varchar("a\0".into()),
            Variant::Varchar("ab".into()),
            Variant::Varchar("b".into()),
        ]);
        order(vec![
            Variant::Array(vec![]),
            Variant::Array(vec![Variant::Int(1)]),
            Variant::Array(vec![Variant::Int(1), Variant::Int(0)]),
            Variant::Array(vec![Variant::Int(2)]),
        ]);
    }

    #[test]
    fn a_map_is_sorted_and_keeps_the_last_of_a_repeated_key() {
        let m = Variant::map(vec![
            (Variant::Varchar("b".into()), Variant::Int(1)),
            (Variant::Varchar("a".into()), Variant::Int(2)),
            (Variant::Varchar("b".into()), Variant::Int(3)),
        ]);
        assert_eq!(
            m,
            Variant::Map(vec![
                (Variant::Varchar("a".into()), Variant::Int(2)),
                (Variant::Varchar("b".into()), Variant::Int(3)),
            ])
        );
    }

    #[test]
    fn damaged_bytes_are_an_error() {
        assert!(decode(&[]).is_err());
        assert!(decode(&[0x7F]).is_err());
        assert!(decode(&[INT, 0]).is_err());
        assert!(decode(&[VARCHAR, b'a']).is_err());
        assert!(decode(&[NULL, NULL]).is_err());
    }
}

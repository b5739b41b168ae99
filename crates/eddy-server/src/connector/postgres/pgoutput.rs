//! PostgreSQL's logical replication messages (`pgoutput`, protocol version
//! 1), decoded from the bytes `pg_logical_slot_peek_binary_changes` gives,
//! one message per row. Values arrive as PostgreSQL's text output.
//!
//! Every byte comes from the network: a message that is short or
//! malformed is an error, never a panic.

use std::fmt;

/// A log sequence number, written `X/Y` (two hexadecimal halves).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

impl serde::Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for Lsn {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not an LSN");
        let (hi, lo) = s.split_once('/').ok_or_else(bad)?;
        let hi = u32::from_str_radix(hi, 16).map_err(|_| bad())?;
        let lo = u32::from_str_radix(lo, 16).map_err(|_| bad())?;
        Ok(Self(((hi as u64) << 32) | lo as u64))
    }
}

/// One column's value in a tuple.
#[derive(Debug, Clone, PartialEq)]
pub enum Datum {
    /// NULL.
    Null,
    /// A TOASTed value the change left as it was (not sent).
    Unchanged,
    /// The value as PostgreSQL's output function writes it.
    Text(String),
}

/// A relation's description, sent before its first change in a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Relation {
    /// The table's OID.
    pub id: u32,
    /// Its schema.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its columns: name and type OID, in the tuples' order.
    pub columns: Vec<(String, u32)>,
}

/// A message of the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A transaction begins; its commit record is at `final_lsn`.
    Begin { final_lsn: Lsn, xid: u32 },
    /// A transaction ends; the stream after it starts at `end_lsn`.
    Commit { commit_lsn: Lsn, end_lsn: Lsn },
    /// A relation's columns.
    Relation(Relation),
    /// A row inserted.
    Insert { relation: u32, new: Vec<Datum> },
    /// A row updated: the old row (all of it under `REPLICA IDENTITY
    /// FULL`, its key when the key changed, else absent) and the new.
    Update {
        relation: u32,
        old: Option<Vec<Datum>>,
        key_only: bool,
        new: Vec<Datum>,
    },
    /// A row deleted: the old row, or only its key.
    Delete {
        relation: u32,
        old: Vec<Datum>,
        key_only: bool,
    },
    /// Tables truncated.
    Truncate { relations: Vec<u32> },
    /// Anything else (origin, type, logical message): not needed.
    Other,
}

/// Reads a message's fields in order.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err("a replication message ends early".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2")))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }

    /// A NUL-terminated string.
    fn string(&mut self) -> Result<String, String> {
        let end = self
            .bytes
            .iter()
            .position(|&b| b == 0)
            .ok_or("a replication message's name is not terminated")?;
        let s = String::from_utf8(self.take(end)?.to_vec())
            .map_err(|_| "a replication message's name is not UTF-8")?;
        self.take(1)?;
        Ok(s)
    }

    fn tuple(&mut self) -> Result<Vec<Datum>, String> {
        let n = self.u16()?;
        let mut values = Vec::with_capacity(n as usize);
        for _ in 0..n {
            values.push(match self.u8()? {
                b'n' => Datum::Null,
                b'u' => Datum::Unchanged,
                b't' => {
                    let len = self.u32()? as usize;
                    let text = std::str::from_utf8(self.take(len)?)
                        .map_err(|_| "a replicated value is not UTF-8")?;
                    Datum::Text(text.to_string())
                }
                other => {
                    return Err(format!(
                        "a replicated value of kind '{}' (text values only)",
                        other as char
                    ))
                }
            });
        }
        Ok(values)
    }
}

/// Decodes one message.
pub fn decode(bytes: &[u8]) -> Result<Message, String> {
    let mut r = Reader { bytes };
    Ok(match r.u8()? {
        b'B' => {
            let final_lsn = Lsn(r.u64()?);
            let _timestamp = r.u64()?;
            Message::Begin {
                final_lsn,
                xid: r.u32()?,
            }
        }
        b'C' => {
            let _flags = r.u8()?;
            let commit_lsn = Lsn(r.u64()?);
            let end_lsn = Lsn(r.u64()?);
            Message::Commit {
                commit_lsn,
                end_lsn,
            }
        }
        b'R' => {
            let id = r.u32()?;
            let namespace = r.string()?;
            let name = r.string()?;
            let _identity = r.u8()?;
            let n = r.u16()?;
            let mut columns = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let _flags = r.u8()?;
                let column = r.string()?;
                let type_oid = r.u32()?;
                let _modifier = r.u32()?;
                columns.push((column, type_oid));
            }
            Message::Relation(Relation {
                id,
                namespace,
                name,
                columns,
            })
        }
        b'I' => {
            let relation = r.u32()?;
            if r.u8()? != b'N' {
                return Err("an insert without its new row".into());
            }
            Message::Insert {
                relation,
                new: r.tuple()?,
            }
        }
        b'U' => {
            let relation = r.u32()?;
            let (old, key_only) = match r.u8()? {
                b'O' => (Some(r.tuple()?), false),
                b'K' => (Some(r.tuple()?), true),
                b'N' => {
                    return Ok(Message::Update {
                        relation,
                        old: None,
                        key_only: false,
                        new: r.tuple()?,
                    })
                }
                other => return Err(format!("an update's part '{}'", other as char)),
            };
            if r.u8()? != b'N' {
                return Err("an update without its new row".into());
            }
            Message::Update {
                relation,
                old,
                key_only,
                new: r.tuple()?,
            }
        }
        b'D' => {
            let relation = r.u32()?;
            let key_only = match r.u8()? {
                b'O' => false,
                b'K' => true,
                other => return Err(format!("a delete's part '{}'", other as char)),
            };
            Message::Delete {
                relation,
                old: r.tuple()?,
                key_only,
            }
        }
        b'T' => {
            let n = r.u32()?;
            let _options = r.u8()?;
            let relations = (0..n.min(1 << 16))
                .map(|_| r.u32())
                .collect::<Result<_, _>>()?;
            Message::Truncate { relations }
        }
        _ => Message::Other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(values: &[Option<&str>]) -> Vec<u8> {
        let mut b = (values.len() as u16).to_be_bytes().to_vec();
        for v in values {
            match v {
                None => b.push(b'n'),
                Some(t) => {
                    b.push(b't');
                    b.extend((t.len() as u32).to_be_bytes());
                    b.extend(t.as_bytes());
                }
            }
        }
        b
    }

    #[test]
    fn lsns_read_and_write_as_postgres_does() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l.0, 0x16_B374_D848);
        assert_eq!(l.to_string(), "16/B374D848");
        assert!("16".parse::<Lsn>().is_err());
        assert!("x/1".parse::<Lsn>().is_err());
    }

    #[test]
    fn messages_decode() {
        let mut begin = vec![b'B'];
        begin.extend(0x100u64.to_be_bytes());
        begin.extend(0u64.to_be_bytes());
        begin.extend(742u32.to_be_bytes());
        assert_eq!(
            decode(&begin).unwrap(),
            Message::Begin {
                final_lsn: Lsn(0x100),
                xid: 742
            }
        );
        let mut rel = vec![b'R'];
        rel.extend(16384u32.to_be_bytes());
        rel.extend(b"public\0orders\0f");
        rel.extend(2u16.to_be_bytes());
        rel.extend(b"\x01id\0");
        rel.extend(20u32.to_be_bytes());
        rel.extend((-1i32).to_be_bytes());
        rel.extend(b"\x00name\0");
        rel.extend(25u32.to_be_bytes());
        rel.extend((-1i32).to_be_bytes());
        let Message::Relation(r) = decode(&rel).unwrap() else {
            panic!()
        };
        assert_eq!(r.name, "orders");
        assert_eq!(r.columns, vec![("id".into(), 20), ("name".into(), 25)]);
        let mut update = vec![b'U'];
        update.extend(16384u32.to_be_bytes());
        update.push(b'O');
        update.extend(tuple(&[Some("1"), Some("a")]));
        update.push(b'N');
        update.extend(tuple(&[Some("1"), None]));
        assert_eq!(
            decode(&update).unwrap(),
            Message::Update {
                relation: 16384,
                old: Some(vec![Datum::Text("1".into()), Datum::Text("a".into())]),
                key_only: false,
                new: vec![Datum::Text("1".into()), Datum::Null],
            }
        );
    }

    #[test]
    fn broken_messages_are_errors() {
        for bytes in [
            &b"B\0\0"[..],
            b"R\0\0\0\x01public",
            b"I\0\0\0\x01N\0\x01t\0\0\0\x09ab",
            b"",
        ] {
            assert!(decode(bytes).is_err(), "{bytes:?}");
        }
        assert!(decode(b"I\0\0\0\x01N\0\x01b\0").is_err());
    }
}

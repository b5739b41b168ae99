//! `UUID` values (uuid.md): Arrow's fixed-size binary of 16 bytes (the
//! storage of Arrow's canonical `arrow.uuid` extension), so that they take
//! 16 bytes, order and compare as their bytes (which is the order of their
//! text) and cast to `BINARY` as their bytes. Every door that writes text
//! (JSON, CSV, Arrow and Parquet query results, the console) writes the
//! canonical form `42b8fec7-c7a3-4531-9611-4bde80f9cb4c`; JSON and CSV
//! read it (hyphenated or 32 hexadecimal digits, either case), and refuse
//! text that is no UUID with the text named.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, FixedSizeBinaryArray, StringArray};
use datafusion::arrow::datatypes::DataType;

/// The number of bytes of a UUID.
pub const BYTES: i32 = 16;

/// The Arrow type of a `UUID`.
pub const DATA_TYPE: DataType = DataType::FixedSizeBinary(BYTES);

/// Whether `t` is a `UUID`.
pub fn is_uuid(t: &DataType) -> bool {
    *t == DATA_TYPE
}

/// Whether `t` is or holds (in arrays, structures and maps) a `UUID`.
pub fn holds_uuid(t: &DataType) -> bool {
    match t {
        DataType::FixedSizeBinary(BYTES) => true,
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            holds_uuid(f.data_type())
        }
        DataType::Struct(fields) => fields.iter().any(|f| holds_uuid(f.data_type())),
        DataType::Map(f, _) => holds_uuid(f.data_type()),
        _ => false,
    }
}

/// The canonical text of a UUID's 16 bytes.
pub fn text(bytes: &[u8]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// The bytes of a UUID's text: hyphenated (8-4-4-4-12) or 32 hexadecimal
/// digits, in either case; `None` for any other text.
pub fn parse(s: &str) -> Option<[u8; 16]> {
    let digits: Vec<u8> = match s.len() {
        36 => {
            let b = s.as_bytes();
            if [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
                return None;
            }
            b.iter().copied().filter(|&c| c != b'-').collect()
        }
        32 => s.as_bytes().to_vec(),
        _ => return None,
    };
    if digits.len() != 32 {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, pair) in digits.chunks(2).enumerate() {
        let hex = std::str::from_utf8(pair).ok()?;
        out[i] = u8::from_str_radix(hex, 16).ok()?;
    }
    Some(out)
}

/// The message for text that is no UUID, in Feldera's words.
pub fn invalid(s: &str) -> String {
    format!("Invalid UUID string '{s}'")
}

/// A UUID column as its texts.
pub fn texts(a: &dyn Array) -> ArrayRef {
    let a = a.as_fixed_size_binary();
    Arc::new(
        (0..a.len())
            .map(|i| a.is_valid(i).then(|| text(a.value(i))))
            .collect::<StringArray>(),
    )
}

/// A column of texts as UUIDs: NULL stays NULL; text that is no UUID is
/// an error naming it, or NULL when `safe`.
pub fn from_texts(a: &dyn Array, safe: bool) -> Result<ArrayRef, String> {
    let a = a.as_string::<i32>();
    let mut out = Vec::with_capacity(a.len());
    for s in a.iter() {
        out.push(match s {
            None => None,
            Some(s) => match parse(s) {
                Some(b) => Some(b),
                None if safe => None,
                None => return Err(invalid(s)),
            },
        });
    }
    let array = FixedSizeBinaryArray::try_from_sparse_iter_with_size(
        out.iter().map(|b| b.as_ref().map(|b| b.as_slice())),
        BYTES,
    )
    .map_err(|e| e.to_string())?;
    Ok(Arc::new(array))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_bytes_round_trip() {
        let t = "42b8fec7-c7a3-4531-9611-4bde80f9cb4c";
        let b = parse(t).unwrap();
        assert_eq!(b[0], 0x42);
        assert_eq!(text(&b), t);
        assert_eq!(parse("42B8FEC7C7A3453196114BDE80F9CB4C"), Some(b));
        for bad in [
            "hello ",
            "42b8fec7-c7a3-4531-9611-4bde80f9cb4",
            "42b8fec7xc7a3-4531-9611-4bde80f9cb4c",
        ] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn columns_convert_and_refuse_what_is_no_uuid() {
        let texts_in = StringArray::from(vec![Some("42b8fec7-c7a3-4531-9611-4bde80f9cb4c"), None]);
        let uuids = from_texts(&texts_in, false).unwrap();
        assert_eq!(uuids.data_type(), &DATA_TYPE);
        let back = texts(uuids.as_ref());
        assert_eq!(back.as_string::<i32>(), &texts_in);
        let bad = StringArray::from(vec!["nope"]);
        assert_eq!(
            from_texts(&bad, false).unwrap_err(),
            "Invalid UUID string 'nope'"
        );
        assert!(from_texts(&bad, true).unwrap().is_null(0));
    }
}

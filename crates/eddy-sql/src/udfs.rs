//! Feldera's scalar functions that DataFusion has no function for, as
//! DataFusion UDFs (so that ad-hoc queries have them too):
//!
//! * `ELEMENT(array)` (array.md): the single element of an array; NULL for
//!   an empty (or NULL) array, an error for more than one element.
//! * `INITCAP_SPACES(s)` (string.md): the first letter of each word upper
//!   case and the rest lower case, words being separated by spaces only
//!   (`'hi THOMAS-SON'` is `'Hi Thomas-son'`; `INITCAP` also splits at
//!   other non-alphanumeric characters).
//! * `XXHASH(x, seed)` (string.md, binary.md): the XXH64 hash of a
//!   string's UTF-8 bytes or of a binary string, with a seed, as a
//!   `BIGINT`.
//! * `CONNECTOR_METADATA()` (grammar.md): the metadata of the connector
//!   that brought a row, a `VARIANT`, for a column's `DEFAULT`. Eddy's
//!   connectors attach none yet, so it is NULL (Feldera's Kafka connector
//!   gives the topic, partition and offset).
//! * `BROUND(decimal, digits)` (decimal.md): banker's rounding (a half
//!   goes to the even neighbour) to `digits` places after the point, a
//!   negative count rounding to tens, hundreds…; the DECIMAL type stays.
//!
//! Stateless functions: their incremental rule is that of the projection
//! or filter holding them.

use std::sync::Arc;

use datafusion::arrow::array::{
    new_null_array, Array, AsArray, Decimal128Array, Int64Array, StringArray, UInt64Array,
};
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::datatypes::{Decimal128Type, DecimalType, Int64Type};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The functions, to register in a session.
pub fn functions() -> Vec<Arc<ScalarUDF>> {
    vec![
        Arc::new(ScalarUDF::new_from_impl(Element {
            signature: Signature::any(1, Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::new_from_impl(InitcapSpaces {
            signature: Signature::exact(vec![DataType::Utf8], Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::new_from_impl(Xxhash {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::new_from_impl(Bround {
            signature: Signature::user_defined(Volatility::Immutable),
        })),
        Arc::new(ScalarUDF::new_from_impl(ConnectorMetadata {
            signature: Signature::nullary(Volatility::Immutable),
        })),
    ]
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Element {
    signature: Signature,
}

impl ScalarUDFImpl for Element {
    fn name(&self) -> &str {
        "element"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        match &args[0] {
            DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
                Ok(f.data_type().clone())
            }
            DataType::Null => Ok(DataType::Null),
            other => plan_err!(
                "Cannot apply 'ELEMENT' to arguments of type 'ELEMENT(<{}>)'. Supported form(s): \
                 'ELEMENT(<ARRAY>)'",
                crate::castcheck::feldera_type(other)
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let a = args.args[0].to_array(args.number_rows)?;
        let to = args.return_field.data_type().clone();
        if a.data_type() == &DataType::Null {
            return Ok(ColumnarValue::Array(new_null_array(&to, a.len())));
        }
        let list = cast(&a, &DataType::LargeList(element_field(a.data_type())))?;
        let list = list.as_list::<i64>();
        let mut picks = Vec::with_capacity(list.len());
        for row in 0..list.len() {
            if list.is_null(row) {
                picks.push(None);
                continue;
            }
            let (start, end) = (list.offsets()[row], list.offsets()[row + 1]);
            match end - start {
                0 => picks.push(None),
                1 => picks.push(Some(start as u64)),
                n => {
                    return exec_err!(
                        "ELEMENT of an array of {n} elements: it must have at most one"
                    )
                }
            }
        }
        let values = take(list.values().as_ref(), &UInt64Array::from(picks), None)?;
        Ok(ColumnarValue::Array(values))
    }
}

fn element_field(t: &DataType) -> datafusion::arrow::datatypes::FieldRef {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Arc::clone(f),
        _ => unreachable!("ELEMENT's argument is an array (checked when planned)"),
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct InitcapSpaces {
    signature: Signature,
}

impl ScalarUDFImpl for InitcapSpaces {
    fn name(&self) -> &str {
        "initcap_spaces"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let a = args.args[0].to_array(args.number_rows)?;
        let out: StringArray = a
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(initcap_spaces))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

fn initcap_spaces(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut start = true;
    for c in s.chars() {
        if start {
            out.extend(c.to_uppercase());
        } else {
            out.extend(c.to_lowercase());
        }
        start = c == ' ';
    }
    out
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Xxhash {
    signature: Signature,
}

impl ScalarUDFImpl for Xxhash {
    fn name(&self) -> &str {
        "xxhash"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [x, seed]
                if (x.is_null() || is_text_or_bytes(x))
                    && (seed.is_null() || seed.is_integer()) =>
            {
                Ok(vec![DataType::Binary, DataType::Int64])
            }
            _ => plan_err!(
                "Cannot apply 'XXHASH' to arguments of type 'XXHASH({})'. Supported form(s): \
                 'XXHASH(<VARCHAR>, <INTEGER>)', 'XXHASH(<VARBINARY>, <INTEGER>)'",
                args.iter()
                    .map(|t| format!("<{}>", crate::castcheck::feldera_type(t)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let x = args.args[0].to_array(n)?;
        let seed = args.args[1].to_array(n)?;
        let (x, seed) = (x.as_binary::<i32>(), seed.as_primitive::<Int64Type>());
        let out: Int64Array = (0..n)
            .map(|row| {
                (x.is_valid(row) && seed.is_valid(row))
                    .then(|| xxhash(x.value(row), seed.value(row)))
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

fn is_text_or_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::BinaryView
            | DataType::FixedSizeBinary(_)
    )
}

/// XXH64 of `bytes` with `seed` (the seed's bits), as a signed BIGINT.
fn xxhash(bytes: &[u8], seed: i64) -> i64 {
    twox_hash::XxHash64::oneshot(seed as u64, bytes) as i64
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct Bround {
    signature: Signature,
}

impl ScalarUDFImpl for Bround {
    fn name(&self) -> &str {
        "bround"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [x @ DataType::Decimal128(..), d] if d.is_null() || d.is_integer() => {
                Ok(vec![x.clone(), DataType::Int64])
            }
            [x, d] if (x.is_null() || x.is_integer()) && (d.is_null() || d.is_integer()) => {
                Ok(vec![DataType::Decimal128(38, 0), DataType::Int64])
            }
            _ => plan_err!(
                "Cannot apply 'BROUND' to arguments of type 'BROUND({})'. Supported form(s): \
                 'BROUND(<DECIMAL>, <INTEGER>)'",
                args.iter()
                    .map(|t| format!("<{}>", crate::castcheck::feldera_type(t)))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        Ok(args[0].clone())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = args.number_rows;
        let DataType::Decimal128(precision, scale) = *args.return_field.data_type() else {
            return exec_err!("BROUND of a {}", args.return_field.data_type());
        };
        let x = args.args[0].to_array(n)?;
        let digits = args.args[1].to_array(n)?;
        let (x, digits) = (
            x.as_primitive::<Decimal128Type>(),
            digits.as_primitive::<Int64Type>(),
        );
        let mut out = Vec::with_capacity(n);
        for row in 0..n {
            if x.is_null(row) || digits.is_null(row) {
                out.push(None);
                continue;
            }
            let v = bankers(x.value(row), i64::from(scale) - digits.value(row));
            match v {
                Some(v) if Decimal128Type::is_valid_decimal_precision(v, precision) => {
                    out.push(Some(v))
                }
                _ => {
                    return exec_err!(
                        "BROUND: the result does not fit DECIMAL({precision}, {scale})"
                    )
                }
            }
        }
        let out = Decimal128Array::from(out).with_precision_and_scale(precision, scale)?;
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ConnectorMetadata {
    signature: Signature,
}

impl ScalarUDFImpl for ConnectorMetadata {
    fn name(&self) -> &str {
        "connector_metadata"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::LargeBinary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        Ok(ColumnarValue::Array(new_null_array(
            &DataType::LargeBinary,
            args.number_rows,
        )))
    }
}

/// `v` with its last `dropped` digits rounded away, a half to the even
/// neighbour (the digits stay, as zeros).
fn bankers(v: i128, dropped: i64) -> Option<i128> {
    if dropped <= 0 {
        return Some(v);
    }
    let Some(factor) = u32::try_from(dropped)
        .ok()
        .and_then(|d| 10i128.checked_pow(d))
    else {
        return Some(0);
    };
    let (q, r) = (v / factor, (v % factor).abs());
    let half = factor / 2;
    let away = r > half || (r == half && q % 2 != 0);
    let q = if away { q + v.signum() } else { q };
    q.checked_mul(factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bankers_rounding_takes_a_half_to_the_even_neighbour() {
        // 12.25 -> 12.2, 12.35 -> 12.4, -12.25 -> -12.2, 12.26 -> 12.3 at
        // scale 2, one digit dropped.
        assert_eq!(bankers(1225, 1), Some(1220));
        assert_eq!(bankers(1235, 1), Some(1240));
        assert_eq!(bankers(-1225, 1), Some(-1220));
        assert_eq!(bankers(1226, 1), Some(1230));
        // 250 to hundreds: 200; 350: 400; nothing dropped: unchanged.
        assert_eq!(bankers(250, 2), Some(200));
        assert_eq!(bankers(350, 2), Some(400));
        assert_eq!(bankers(1225, 0), Some(1225));
        assert_eq!(bankers(1225, 60), Some(0));
    }

    #[test]
    fn xxhash_gives_the_reference_s_examples() {
        assert_eq!(xxhash(&[1, 2, 3], 2), 2397937360598948438);
        assert_eq!(xxhash(b"abc", 2), 6026019377950218999);
    }

    #[test]
    fn words_are_split_at_spaces_only() {
        assert_eq!(initcap_spaces("hi THOMAS-SON"), "Hi Thomas-son");
        assert_eq!(initcap_spaces("  two  spaces"), "  Two  Spaces");
        assert_eq!(initcap_spaces(""), "");
    }
}

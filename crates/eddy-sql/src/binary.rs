//! Feldera's functions over binary strings (binary.md), where they share a
//! name with a function over text: `LEFT`, `RIGHT`, `SUBSTRING`/`SUBSTR`,
//! `POSITION(b1 IN b2)`, `OVERLAY(b1 PLACING b2 FROM i [FOR n])`,
//! `OCTET_LENGTH` and `TO_HEX` count and cut bytes and give `VARBINARY`
//! (positions and lengths `INTEGER`, `TO_HEX` text) when their first
//! argument is binary, and are DataFusion's text functions otherwise
//! ([`Overload`] wraps DataFusion's function and chooses by the argument's
//! type). Also `TO_INT(b)` (the first four bytes, most significant first),
//! `GUNZIP(b)` (the text a gzip stream holds; an error where the bytes are
//! not one) and `BIN2UTF8(b)` (the bytes as UTF-8 text, NULL where they are
//! not).
//!
//! Stateless functions: their incremental rule is that of the projection
//! or filter holding them.

use std::io::Read;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int32Array, StringArray};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::{DataType, Field, FieldRef};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::planner::{ExprPlanner, PlannerResult};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

/// What a function does over bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    Left,
    Right,
    Substr,
    /// `strpos(haystack, needle)`, as DataFusion plans `POSITION`.
    Position,
    Overlay,
    OctetLength,
    ToHex,
}

impl Op {
    /// DataFusion's name of the function over text.
    fn name(self) -> &'static str {
        match self {
            Op::Left => "left",
            Op::Right => "right",
            Op::Substr => "substr",
            Op::Position => "strpos",
            Op::Overlay => "overlay",
            Op::OctetLength => "octet_length",
            Op::ToHex => "to_hex",
        }
    }

    /// The types the arguments are coerced to over bytes.
    fn coerced(self, n: usize) -> Vec<DataType> {
        let bytes = DataType::Binary;
        match self {
            Op::Position => vec![bytes.clone(), bytes],
            Op::Overlay => {
                let mut v = vec![bytes.clone(), bytes];
                v.resize(n, DataType::Int64);
                v
            }
            _ => {
                let mut v = vec![bytes];
                v.resize(n, DataType::Int64);
                v
            }
        }
    }

    fn result(self) -> DataType {
        match self {
            Op::Left | Op::Right | Op::Substr | Op::Overlay => DataType::Binary,
            Op::Position | Op::OctetLength => DataType::Int32,
            Op::ToHex => DataType::Utf8,
        }
    }
}

/// A binary string; a `UUID` (16 fixed bytes) is not one.
fn is_bytes(t: &DataType) -> bool {
    matches!(
        t,
        DataType::Binary | DataType::BinaryView | DataType::FixedSizeBinary(_)
    ) && !eddy_io::uuid::is_uuid(t)
}

/// DataFusion's text function, or Feldera's over bytes when the first
/// argument is binary.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Overload {
    inner: Arc<ScalarUDF>,
    op: Op,
    signature: Signature,
}

impl Overload {
    /// Whether the call is over bytes: a binary first argument (or, for
    /// `TO_HEX`, text, whose bytes it writes, as Feldera casts text to
    /// binary there).
    fn over_bytes(&self, types: &[DataType]) -> bool {
        types.first().is_some_and(|t| {
            is_bytes(t)
                || (self.op == Op::ToHex
                    && matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View))
        })
    }
}

impl ScalarUDFImpl for Overload {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        if self.over_bytes(arg_types) {
            if self.op == Op::Position && !arg_types.get(1).is_some_and(is_bytes) {
                return plan_err!("POSITION of a binary string needs a binary string to find");
            }
            return Ok(self.op.coerced(arg_types.len()));
        }
        crate::textargs::coerced_by(self.inner.as_ref(), arg_types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        if self.over_bytes(arg_types) {
            return Ok(self.op.result());
        }
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        let types: Vec<DataType> = args
            .arg_fields
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        if self.over_bytes(&types) {
            return Ok(Arc::new(Field::new(self.name(), self.op.result(), true)));
        }
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let types: Vec<DataType> = args.args.iter().map(|a| a.data_type()).collect();
        if !self.over_bytes(&types) {
            return self.inner.invoke_with_args(args);
        }
        let n = args.number_rows;
        let arrays = args
            .args
            .iter()
            .map(|a| {
                a.to_array(n)
                    .and_then(|a| Ok(cast(&a, &bytes_or_int(a.data_type()))?))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ColumnarValue::Array(over_bytes(self.op, &arrays, n)?))
    }
}

/// The type an argument is read as over bytes.
fn bytes_or_int(t: &DataType) -> DataType {
    if is_bytes(t) || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) {
        DataType::Binary
    } else {
        DataType::Int64
    }
}

/// `op` over binary `arrays` (and Int64 counts).
fn over_bytes(op: Op, arrays: &[ArrayRef], n: usize) -> Result<ArrayRef> {
    let bytes = |i: usize, row: usize| -> Option<&[u8]> {
        let a = arrays[i].as_binary::<i32>();
        a.is_valid(row).then(|| a.value(row))
    };
    let int = |i: usize, row: usize| -> Option<i64> {
        let a = arrays
            .get(i)?
            .as_primitive::<datafusion::arrow::datatypes::Int64Type>();
        a.is_valid(row).then(|| a.value(row))
    };
    Ok(match op {
        Op::Left | Op::Right | Op::Substr | Op::Overlay => {
            let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);
            for row in 0..n {
                out.push(cut(op, arrays.len(), row, &bytes, &int));
            }
            Arc::new(BinaryArray::from_iter(out))
        }
        Op::Position => Arc::new(Int32Array::from_iter((0..n).map(|row| {
            let (hay, needle) = (bytes(0, row)?, bytes(1, row)?);
            let at = match needle.is_empty() {
                true => Some(0),
                false => hay.windows(needle.len()).position(|w| w == needle),
            };
            Some(at.map_or(0, |i| i32::try_from(i + 1).unwrap_or(i32::MAX)))
        }))),
        Op::OctetLength => {
            Arc::new(Int32Array::from_iter((0..n).map(|row| {
                bytes(0, row).map(|b| i32::try_from(b.len()).unwrap_or(i32::MAX))
            })))
        }
        Op::ToHex => Arc::new(StringArray::from_iter((0..n).map(|row| {
            bytes(0, row).map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        }))),
    })
}

/// `LEFT`, `RIGHT`, `SUBSTRING` and `OVERLAY` of one row; NULL when an
/// argument is.
fn cut<'a>(
    op: Op,
    arity: usize,
    row: usize,
    bytes: &impl Fn(usize, usize) -> Option<&'a [u8]>,
    int: &impl Fn(usize, usize) -> Option<i64>,
) -> Option<Vec<u8>> {
    let b = bytes(0, row)?;
    let len = b.len() as i64;
    let clamp = |x: i64| x.clamp(0, len) as usize;
    Some(match op {
        Op::Left => {
            let k = int(1, row)?;
            let end = if k < 0 { len + k } else { k };
            b[..clamp(end)].to_vec()
        }
        Op::Right => {
            let k = int(1, row)?;
            let start = if k < 0 { -k } else { len - k };
            b[clamp(start)..].to_vec()
        }
        Op::Substr => {
            // From 1; a start below 1 counts as 1, a negative length is empty.
            let start = int(1, row)?.max(1) - 1;
            let end = match arity {
                3 => {
                    let count = int(2, row)?;
                    if count < 0 {
                        return Some(Vec::new());
                    }
                    start.saturating_add(count)
                }
                _ => len,
            };
            b[clamp(start)..clamp(end).max(clamp(start))].to_vec()
        }
        Op::Overlay => {
            let with = bytes(1, row)?;
            let start = int(2, row)?.max(1) - 1;
            let count = match arity {
                4 => int(3, row)?,
                _ => with.len() as i64,
            };
            let mut out = b[..clamp(start)].to_vec();
            out.extend_from_slice(with);
            out.extend_from_slice(&b[clamp(start.saturating_add(count.max(0)))..]);
            out
        }
        _ => return None,
    })
}

/// `TO_INT(b)`, `GUNZIP(b)` and `BIN2UTF8(b)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Own {
    ToInt,
    Gunzip,
    Bin2Utf8,
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct OwnFn {
    own: Own,
    signature: Signature,
}

impl ScalarUDFImpl for OwnFn {
    fn name(&self) -> &str {
        match self.own {
            Own::ToInt => "to_int",
            Own::Gunzip => "gunzip",
            Own::Bin2Utf8 => "bin2utf8",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    /// A binary string, or text as its UTF-8 bytes (Feldera's cast).
    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        match arg_types {
            [t] if is_bytes(t)
                || matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) =>
            {
                Ok(vec![DataType::Binary])
            }
            _ => plan_err!(
                "Cannot apply '{}' to arguments of type '{}({})'",
                self.name().to_uppercase(),
                self.name().to_uppercase(),
                arg_types
                    .iter()
                    .map(|t| format!("<{t}>"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(match self.own {
            Own::ToInt => DataType::Int32,
            Own::Gunzip | Own::Bin2Utf8 => DataType::Utf8,
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let a = args.args[0].to_array(args.number_rows)?;
        let a = cast(&a, &DataType::Binary)?;
        let b = a.as_binary::<i32>();
        Ok(ColumnarValue::Array(match self.own {
            Own::ToInt => Arc::new(Int32Array::from_iter(b.iter().map(|v| {
                v.map(|v| {
                    v.iter()
                        .take(4)
                        .fold(0u32, |acc, &x| (acc << 8) | u32::from(x)) as i32
                })
            }))),
            Own::Gunzip => {
                let mut out = Vec::with_capacity(b.len());
                for v in b.iter() {
                    out.push(match v {
                        None => None,
                        Some(v) => Some(gunzip(v)?),
                    });
                }
                Arc::new(StringArray::from(out))
            }
            // The bytes as UTF-8 text; NULL where they are not.
            Own::Bin2Utf8 => {
                Arc::new(StringArray::from_iter(b.iter().map(|v| {
                    v.and_then(|v| std::str::from_utf8(v).ok().map(str::to_string))
                })))
            }
        }))
    }
}

/// The text a gzip stream holds.
fn gunzip(bytes: &[u8]) -> Result<String> {
    let mut text = String::new();
    match flate2::read::GzDecoder::new(bytes).read_to_string(&mut text) {
        Ok(_) => Ok(text),
        Err(e) => exec_err!("GUNZIP: the bytes are not gzip-compressed text: {e}"),
    }
}

/// The functions to register in place of DataFusion's text ones, and the
/// new ones.
pub fn functions(registry: &dyn FunctionRegistry) -> Vec<Arc<ScalarUDF>> {
    let mut out: Vec<Arc<ScalarUDF>> =
        [Op::Left, Op::Right, Op::Substr, Op::OctetLength, Op::ToHex]
            .into_iter()
            .filter_map(|op| overload(registry, op))
            .collect();
    out.push(Arc::new(ScalarUDF::new_from_impl(Width {
        signature: Signature::exact(
            vec![DataType::Binary, DataType::Int64],
            Volatility::Immutable,
        ),
    })));
    out.extend([Own::ToInt, Own::Gunzip, Own::Bin2Utf8].map(|own| {
        Arc::new(ScalarUDF::new_from_impl(OwnFn {
            own,
            signature: Signature::user_defined(Volatility::Immutable),
        }))
    }));
    out
}

/// The name of `CAST(b AS BINARY(n))`'s function.
pub const WIDTH: &str = "eddy_binary_width";

/// `eddy_binary_width(b, n)`: `b` padded with zero bytes to `n` bytes, or
/// cut at `n` (a `BINARY(n)` holds exactly `n`).
#[derive(Debug, PartialEq, Eq, Hash)]
struct Width {
    signature: Signature,
}

impl ScalarUDFImpl for Width {
    fn name(&self) -> &str {
        WIDTH
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Binary)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let n = match &args.args[1] {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::Int64(Some(n))) => *n,
            _ => return exec_err!("{WIDTH} takes a constant width"),
        };
        let Ok(n) = usize::try_from(n) else {
            return exec_err!("BINARY({n}) has no such width");
        };
        let a = args.args[0].to_array(args.number_rows)?;
        let out = BinaryArray::from_iter(a.as_binary::<i32>().iter().map(|v| {
            v.map(|v| {
                let mut b = v[..v.len().min(n)].to_vec();
                b.resize(n, 0);
                b
            })
        }));
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

fn overload(registry: &dyn FunctionRegistry, op: Op) -> Option<Arc<ScalarUDF>> {
    let inner = registry.udf(op.name()).ok()?;
    Some(Arc::new(ScalarUDF::new_from_impl(Overload {
        inner,
        op,
        signature: Signature::user_defined(Volatility::Immutable),
    })))
}

/// Plans `SUBSTRING(… FROM …)`, `POSITION(… IN …)` and `OVERLAY(…)` as the
/// overloaded functions (DataFusion's planners name its text functions).
#[derive(Debug)]
pub struct Forms {
    substr: Option<Arc<ScalarUDF>>,
    position: Option<Arc<ScalarUDF>>,
    overlay: Option<Arc<ScalarUDF>>,
}

impl Forms {
    /// The planner over `registry`'s functions.
    pub fn new(registry: &dyn FunctionRegistry) -> Self {
        Self {
            substr: overload(registry, Op::Substr),
            position: overload(registry, Op::Position),
            overlay: overload(registry, Op::Overlay),
        }
    }
}

fn call(f: &Option<Arc<ScalarUDF>>, args: Vec<Expr>) -> PlannerResult<Vec<Expr>> {
    match f {
        Some(f) => PlannerResult::Planned(Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::clone(f),
            args,
        ))),
        None => PlannerResult::Original(args),
    }
}

impl ExprPlanner for Forms {
    fn plan_substring(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(call(&self.substr, args))
    }

    fn plan_position(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(call(&self.position, args))
    }

    fn plan_overlay(&self, args: Vec<Expr>) -> Result<PlannerResult<Vec<Expr>>> {
        Ok(call(&self.overlay, args))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;

    fn run(op: Op, b: &[u8], ints: &[i64]) -> Vec<u8> {
        let mut arrays: Vec<ArrayRef> = vec![Arc::new(BinaryArray::from(vec![b]))];
        for i in ints {
            arrays.push(Arc::new(Int64Array::from(vec![*i])));
        }
        let out = over_bytes(op, &arrays, 1).unwrap();
        out.as_binary::<i32>().value(0).to_vec()
    }

    #[test]
    fn bytes_are_cut_as_binary_md_says() {
        let abcdef = [0xab, 0xcd, 0xef];
        assert_eq!(run(Op::Left, &abcdef, &[2]), vec![0xab, 0xcd]);
        assert_eq!(run(Op::Right, &abcdef, &[2]), vec![0xcd, 0xef]);
        assert_eq!(run(Op::Substr, &[0x12, 0x34, 0x56], &[3]), vec![0x56]);
        assert_eq!(
            run(Op::Substr, &[0x12, 0x34, 0x56, 0x78, 0x90], &[3, 2]),
            vec![0x56, 0x78]
        );
        assert_eq!(run(Op::Substr, &[0x12, 0x34], &[0, 1]), vec![0x12]);
        assert_eq!(run(Op::Substr, &[0x12, 0x34], &[1, -1]), Vec::<u8>::new());
        let with: ArrayRef = Arc::new(BinaryArray::from(vec![&[0x02u8, 0x03][..]]));
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(BinaryArray::from(vec![
                &[0x12u8, 0x34, 0x56, 0x78, 0x90][..],
            ])),
            with,
            Arc::new(Int64Array::from(vec![2])),
            Arc::new(Int64Array::from(vec![3])),
        ];
        let out = over_bytes(Op::Overlay, &arrays, 1).unwrap();
        assert_eq!(out.as_binary::<i32>().value(0), &[0x12, 0x02, 0x03, 0x90]);
    }

    #[test]
    fn positions_lengths_hex_and_integers() {
        let arrays: Vec<ArrayRef> = vec![
            Arc::new(BinaryArray::from(vec![&[0x10u8, 0x20, 0x23][..]])),
            Arc::new(BinaryArray::from(vec![&[0x20u8][..]])),
        ];
        let at = over_bytes(Op::Position, &arrays, 1).unwrap();
        assert_eq!(
            at.as_primitive::<datafusion::arrow::datatypes::Int32Type>()
                .value(0),
            2
        );
        let hex = over_bytes(Op::ToHex, &arrays[1..], 1).unwrap();
        assert_eq!(hex.as_string::<i32>().value(0), "20");
        assert_eq!(
            gunzip(&[
                0x1f, 0x8b, 0x08, 0, 0, 0, 0, 0, 0, 0xff, 0x4b, 0x4b, 0xcd, 0x49, 0x49, 0x2d, 0x4a,
                0x04, 0, 0x21, 0x81, 0x15, 0xac, 0x07, 0, 0, 0
            ])
            .unwrap(),
            "feldera"
        );
        assert!(gunzip(b"plain").is_err());
    }
}

//! `ARRAY_INSERT(array, pos, element)` (array.md): the array with the
//! element inserted at position `pos`, counted from 1; past the end, the
//! array is padded with NULLs up to it. A negative `pos` counts from the
//! end (`-1` inserts after the last element); before the start, the
//! element comes first and NULLs pad up to the array. The array's elements
//! and the new one take their common type. NULL when the array or the
//! position is NULL; a position of 0, or one beyond 2^24, fails the step.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::array::{make_array, Array, ArrayRef, AsArray, ListArray, MutableArrayData};
use datafusion::arrow::buffer::{NullBuffer, OffsetBuffer};
use datafusion::arrow::datatypes::{DataType, Field, Int64Type};
use datafusion::common::{exec_err, plan_err, Result};
use datafusion::logical_expr::type_coercion::binary::type_union_coercion;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// The longest array an insertion may make: a position further than this
/// fails the step rather than padding an array the process could not hold
/// (Feldera's bound is `i32::MAX - 15`).
const LONGEST: i64 = 1 << 24;

/// The function, to register in a session.
pub fn function() -> Arc<ScalarUDF> {
    Arc::new(ScalarUDF::new_from_impl(ArrayInsert {
        signature: Signature::user_defined(Volatility::Immutable),
    }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayInsert {
    signature: Signature,
}

/// The element type of a list type.
fn element(t: &DataType) -> Option<&DataType> {
    match t {
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            Some(f.data_type())
        }
        _ => None,
    }
}

impl ScalarUDFImpl for ArrayInsert {
    fn name(&self) -> &str {
        "array_insert"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        match args {
            [a, p, v] if (p.is_integer() || p.is_null()) => {
                let e = match element(a) {
                    Some(e) => e.clone(),
                    None if a.is_null() => DataType::Null,
                    None => return self.refuse(args),
                };
                // The array's elements and the new one take their common
                // type (`ARRAY_INSERT(ARRAY[1], 1, 2.5)` holds 2.5).
                let common = if v.is_null() || *v == e {
                    e
                } else if e.is_null() {
                    v.clone()
                } else {
                    match type_union_coercion(&e, v) {
                        Some(c) => c,
                        None => return self.refuse(args),
                    }
                };
                let list = DataType::List(Arc::new(Field::new("item", common.clone(), true)));
                Ok(vec![list, DataType::Int64, common])
            }
            _ => self.refuse(args),
        }
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        let e = args
            .first()
            .and_then(element)
            .cloned()
            .unwrap_or(DataType::Null);
        Ok(DataType::List(Arc::new(Field::new("item", e, true))))
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let [lists, positions, values] = arrays.as_slice() else {
            return exec_err!("ARRAY_INSERT takes an array, a position and an element");
        };
        if lists.data_type().is_null() {
            return Ok(ColumnarValue::Array(Arc::clone(lists)));
        }
        Ok(ColumnarValue::Array(insert(
            lists.as_list::<i32>(),
            positions.as_primitive::<Int64Type>(),
            values,
        )?))
    }
}

impl ArrayInsert {
    fn refuse<T>(&self, args: &[DataType]) -> Result<T> {
        let types: Vec<String> = args
            .iter()
            .map(|t| format!("<{}>", crate::castcheck::feldera_type(t)))
            .collect();
        plan_err!(
            "Cannot apply 'ARRAY_INSERT' to arguments of type 'ARRAY_INSERT({})'. Supported \
             form(s): 'ARRAY_INSERT(<ARRAY>, <INTEGER>, <ELEMENT>)'",
            types.join(", ")
        )
    }
}

/// Where a row's new array takes its values from.
enum Piece {
    /// Values of the old array, `start..end` of the values array.
    Old(usize, usize),
    /// The inserted element.
    New,
    /// This many NULLs.
    Nulls(usize),
}

/// The pieces of one row's array of `len` values starting at `start` with
/// the element inserted at `pos`.
fn pieces(start: usize, len: usize, pos: i64) -> Result<Vec<Piece>> {
    if pos == 0 {
        return exec_err!("Index of 0 for 'ARRAY_INSERT'");
    }
    if pos.unsigned_abs() > LONGEST as u64 {
        return exec_err!("Index {pos} too large for 'ARRAY_INSERT'");
    }
    let n = len as i64;
    // The 0-based place of the element in the old array, when inside it.
    let at = if pos > 0 {
        if pos > n {
            return Ok(vec![
                Piece::Old(start, start + len),
                Piece::Nulls((pos - n - 1) as usize),
                Piece::New,
            ]);
        }
        pos - 1
    } else {
        let back = -pos;
        if back > n {
            return Ok(vec![
                Piece::New,
                Piece::Nulls((back - n - 1) as usize),
                Piece::Old(start, start + len),
            ]);
        }
        n - back + 1
    } as usize;
    Ok(vec![
        Piece::Old(start, start + at),
        Piece::New,
        Piece::Old(start + at, start + len),
    ])
}

fn insert(
    lists: &ListArray,
    positions: &datafusion::arrow::array::Int64Array,
    values: &ArrayRef,
) -> Result<ArrayRef> {
    let old = lists.values().to_data();
    let new = values.to_data();
    let mut out = MutableArrayData::new(vec![&old, &new], true, old.len() + values.len());
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    offsets.push(0i32);
    let mut valid = Vec::with_capacity(lists.len());
    let mut length = 0usize;
    let mut padded = 0usize;
    for i in 0..lists.len() {
        if lists.is_null(i) || positions.is_null(i) {
            valid.push(false);
            offsets.push(length as i32);
            continue;
        }
        let start = lists.value_offsets()[i] as usize;
        let len = lists.value_length(i) as usize;
        let row = pieces(start, len, positions.value(i))?;
        padded += row
            .iter()
            .map(|p| match p {
                Piece::Nulls(n) => *n,
                _ => 0,
            })
            .sum::<usize>();
        if padded > LONGEST as usize {
            return exec_err!("ARRAY_INSERT pads more than {LONGEST} NULLs in one step");
        }
        for piece in row {
            match piece {
                Piece::Old(from, to) => {
                    out.try_extend(0, from, to)?;
                    length += to - from;
                }
                Piece::New => {
                    out.try_extend(1, i, i + 1)?;
                    length += 1;
                }
                Piece::Nulls(n) => {
                    out.try_extend_nulls(n)?;
                    length += n;
                }
            }
        }
        if length > i32::MAX as usize {
            return exec_err!("ARRAY_INSERT makes an array too long");
        }
        valid.push(true);
        offsets.push(length as i32);
    }
    let field = Arc::new(Field::new("item", values.data_type().clone(), true));
    Ok(Arc::new(ListArray::try_new(
        field,
        OffsetBuffer::new(offsets.into()),
        make_array(out.freeze()),
        Some(NullBuffer::from(valid)),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, Int64Array};

    fn run(list: &[Option<i32>], pos: i64) -> Result<Vec<Option<i32>>> {
        let lists = ListArray::new(
            Arc::new(Field::new("item", DataType::Int32, true)),
            OffsetBuffer::new(vec![0, list.len() as i32].into()),
            Arc::new(Int32Array::from(list.to_vec())),
            None,
        );
        let values: ArrayRef = Arc::new(Int32Array::from(vec![9]));
        let out = insert(&lists, &Int64Array::from(vec![pos]), &values)?;
        let out = out.as_list::<i32>().value(0);
        Ok(out
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .iter()
            .collect())
    }

    #[test]
    fn inserts_inside_past_the_end_and_from_the_back() {
        let a = [Some(1), Some(2), Some(3)];
        assert_eq!(
            run(&a, 3).unwrap(),
            vec![Some(1), Some(2), Some(9), Some(3)]
        );
        assert_eq!(
            run(&a, 1).unwrap(),
            vec![Some(9), Some(1), Some(2), Some(3)]
        );
        assert_eq!(
            run(&a, 5).unwrap(),
            vec![Some(1), Some(2), Some(3), None, Some(9)]
        );
        assert_eq!(
            run(&a, -1).unwrap(),
            vec![Some(1), Some(2), Some(3), Some(9)]
        );
        assert_eq!(
            run(&a, -3).unwrap(),
            vec![Some(1), Some(9), Some(2), Some(3)]
        );
        assert_eq!(
            run(&a, -5).unwrap(),
            vec![Some(9), None, Some(1), Some(2), Some(3)]
        );
        assert!(run(&a, 0).unwrap_err().to_string().contains("Index of 0"));
    }
}

//! A ROW given to an array function beside an array of ROWs is read by
//! position as the array's element, as Feldera does:
//! `ARRAY_CONTAINS(ARRAY[udt], (4, 'cat'))` compares the literal, whose
//! fields are named `EXPR$0`, `EXPR$1`, with `udt`'s `i1`, `v1`.
//! DataFusion matches ROWs by field name and refuses such a call while it
//! builds the plan, so each such function is registered wrapped: the
//! wrapper's coercion gives the ROW (or the array of ROWs) the array's
//! element type, and the cast that type coercion inserts is made by
//! position ([`crate::rowcast`]). Other arguments are coerced by the
//! function itself, as before.
//!
//! A string given beside an array of other scalars (or another scalar
//! beside an array of strings) is refused when planned, as Feldera
//! refuses it: `ARRAY_APPEND(arr, intt)` of a `VARCHAR ARRAY` says
//! `VARCHAR is not comparable to INTEGER` (DataFusion would cast the
//! string and fail at the first row).
//!
//! `ARRAY_REMOVE` of a ROW, an array or a map (which DataFusion's kernel
//! cannot compare) compares the elements' row encodings: an element is
//! removed when it is not distinct from the one given, as for scalars.
//!
//! A stateless function: its incremental rule is that of the projection
//! or filter holding it.

use std::sync::Arc;

use datafusion::arrow::array::BooleanBufferBuilder;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray, ListArray};
use datafusion::arrow::buffer::OffsetBuffer;
use datafusion::arrow::compute::filter;
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{plan_err, Result};
use datafusion::execution::registry::FunctionRegistry;
use datafusion::logical_expr::{
    ColumnarValue, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};

use crate::textargs::coerced_by;

/// The array functions (DataFusion's names) and which of their arguments
/// is the array and which the element (or second array).
const ARRAY_AND_ELEMENT: &[(&str, usize, usize)] = &[
    ("array_has", 0, 1),
    ("array_remove", 0, 1),
    ("array_remove_all", 0, 1),
    ("array_remove_n", 0, 1),
    ("array_append", 0, 1),
    ("array_prepend", 1, 0),
    ("array_position", 0, 1),
    ("array_positions", 0, 1),
    ("array_except", 0, 1),
    ("array_union", 0, 1),
    ("array_intersect", 0, 1),
    ("array_has_any", 0, 1),
    ("array_has_all", 0, 1),
    ("array_insert", 0, 2),
];

/// The functions whose second argument is one element (not an array).
const ELEMENT_OF: &[&str] = &[
    "array_has",
    "array_remove",
    "array_remove_all",
    "array_remove_n",
    "array_append",
    "array_prepend",
    "array_position",
    "array_positions",
    "array_insert",
];

/// Why an element of type `element` cannot go with an array of type
/// `array`: a string beside an array of other scalars, or the reverse, in
/// Feldera's words (`VARCHAR is not comparable to INTEGER`), which does
/// not read one as the other there (DataFusion would cast the string and
/// fail at run time).
fn incomparable(array: &DataType, element: &DataType) -> Option<String> {
    let inner = match array {
        DataType::List(e) | DataType::LargeList(e) | DataType::FixedSizeList(e, _) => e.data_type(),
        _ => return None,
    };
    let text =
        |t: &DataType| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View);
    let scalar =
        |t: &DataType| !t.is_nested() && *t != DataType::Null && !eddy_io::variant::is_variant(t);
    (scalar(inner) && scalar(element) && text(inner) != text(element)).then(|| {
        format!(
            "{} is not comparable to {}",
            crate::error::sql_type_name(&inner.to_string()),
            crate::error::sql_type_name(&element.to_string())
        )
    })
}

/// The wrapped functions of `registry` (those it has).
pub fn functions(registry: &dyn FunctionRegistry) -> Vec<Arc<ScalarUDF>> {
    ARRAY_AND_ELEMENT
        .iter()
        .filter_map(|&(name, array, element)| {
            let inner = registry.udf(name).ok()?;
            Some(Arc::new(ScalarUDF::new_from_impl(RowArgs {
                inner,
                array,
                element,
                signature: Signature::user_defined(Volatility::Immutable),
            })))
        })
        .collect()
}

/// The type `other` is read as beside an array of `array`'s type: the
/// array's element type where `other` is a ROW of as many fields named
/// otherwise, an array of it where `other` is an array of such ROWs.
fn by_position(array: &DataType, other: &DataType) -> Option<DataType> {
    let element = match array {
        DataType::List(e) | DataType::LargeList(e) | DataType::FixedSizeList(e, _) => e,
        _ => return None,
    };
    let DataType::Struct(want) = element.data_type() else {
        return None;
    };
    let (have, target) = match other {
        DataType::Struct(have) => (have, element.data_type().clone()),
        DataType::List(e) | DataType::LargeList(e) | DataType::FixedSizeList(e, _) => {
            match e.data_type() {
                DataType::Struct(have) => (have, DataType::List(Arc::clone(element))),
                _ => return None,
            }
        }
        _ => return None,
    };
    let renamed = want.len() == have.len()
        && want
            .iter()
            .zip(have.iter())
            .any(|(w, h)| w.name() != h.name());
    renamed.then_some(target)
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct RowArgs {
    inner: Arc<ScalarUDF>,
    array: usize,
    element: usize,
    signature: Signature,
}

impl ScalarUDFImpl for RowArgs {
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
        if let (Some(a), Some(e)) = (arg_types.get(self.array), arg_types.get(self.element)) {
            if ELEMENT_OF.contains(&self.inner.name()) {
                if let Some(why) = incomparable(a, e) {
                    return plan_err!("{why}");
                }
            }
        }
        let mut types = arg_types.to_vec();
        if let (Some(a), Some(e)) = (types.get(self.array), types.get(self.element)) {
            if let Some(t) = by_position(a, e) {
                types[self.element] = t;
            }
        }
        coerced_by(self.inner.as_ref(), &types)
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let nested = |t: &DataType| t.is_nested();
        if self.inner.name() == "array_remove_all"
            && args.arg_fields.len() == 2
            && nested(args.arg_fields[1].data_type())
            && matches!(args.arg_fields[0].data_type(), DataType::List(_))
        {
            let arrays = ColumnarValue::values_to_arrays(&args.args)?;
            return Ok(ColumnarValue::Array(remove_nested(
                arrays[0].as_list::<i32>(),
                &arrays[1],
            )?));
        }
        self.inner.invoke_with_args(args)
    }
}

/// Each list of `lists` without the values not distinct from the row's
/// `element`.
fn remove_nested(lists: &ListArray, element: &ArrayRef) -> Result<ArrayRef> {
    let values = lists.values();
    let converter = RowConverter::new(vec![SortField::new(values.data_type().clone())])?;
    let rows = converter.convert_columns(&[Arc::clone(values)])?;
    let wanted = converter.convert_columns(&[Arc::clone(element)])?;
    let mut keep = BooleanBufferBuilder::new(values.len());
    let mut offsets = Vec::with_capacity(lists.len() + 1);
    offsets.push(0i32);
    let mut kept = 0i32;
    for (i, w) in lists.offsets().windows(2).enumerate() {
        let (start, end) = (w[0] as usize, w[1] as usize);
        // Values before the first list, or of a NULL list, are dropped.
        if i == 0 {
            keep.append_n(start, false);
        }
        for j in start..end {
            let k = lists.is_valid(i) && rows.row(j) != wanted.row(i);
            keep.append(k);
            kept += i32::from(k);
        }
        offsets.push(kept);
    }
    keep.append_n(values.len() - keep.len(), false);
    let mask = BooleanArray::new(keep.finish(), None);
    let values = filter(values.as_ref(), &mask)?;
    let field = match lists.data_type() {
        DataType::List(f) => Arc::clone(f),
        _ => unreachable!("a list array"),
    };
    Ok(Arc::new(ListArray::try_new(
        field,
        OffsetBuffer::new(offsets.into()),
        values,
        lists.nulls().cloned(),
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{Field, Fields};

    fn row(names: &[&str]) -> DataType {
        DataType::Struct(Fields::from(
            names
                .iter()
                .map(|n| Field::new(*n, DataType::Int32, true))
                .collect::<Vec<_>>(),
        ))
    }

    fn list(t: DataType) -> DataType {
        DataType::List(Arc::new(Field::new("item", t, true)))
    }

    #[test]
    fn removing_a_row_keeps_the_others() {
        use datafusion::arrow::array::{Int32Array, StructArray};
        let fields = Fields::from(vec![Field::new("i", DataType::Int32, true)]);
        let values = StructArray::new(
            fields.clone(),
            vec![Arc::new(Int32Array::from(vec![1, 2, 1, 3, 1]))],
            None,
        );
        let item = Arc::new(Field::new("item", DataType::Struct(fields.clone()), true));
        // [[1, 2, 1], NULL, [1]]; the NULL list holds the value 3.
        let lists = ListArray::new(
            item,
            OffsetBuffer::new(vec![0, 3, 4, 5].into()),
            Arc::new(values),
            Some(vec![true, false, true].into()),
        );
        let element: ArrayRef = Arc::new(StructArray::new(
            fields,
            vec![Arc::new(Int32Array::from(vec![1, 1, 2]))],
            None,
        ));
        let out = remove_nested(&lists, &element).unwrap();
        let out = out.as_list::<i32>();
        assert_eq!(out.value_offsets(), &[0, 1, 1, 2]);
        assert!(out.is_null(1));
        let ints = out
            .values()
            .as_struct()
            .column(0)
            .as_primitive::<datafusion::arrow::datatypes::Int32Type>()
            .values()
            .to_vec();
        assert_eq!(ints, vec![2, 1]);
    }

    #[test]
    fn strings_and_other_scalars_do_not_meet() {
        assert_eq!(
            incomparable(&list(DataType::Utf8), &DataType::Int32).as_deref(),
            Some("VARCHAR is not comparable to INTEGER")
        );
        assert_eq!(incomparable(&list(DataType::Int64), &DataType::Int32), None);
        assert_eq!(incomparable(&list(DataType::Utf8), &DataType::Null), None);
    }

    #[test]
    fn a_row_named_otherwise_is_read_as_the_element() {
        let udt = row(&["i1", "v1"]);
        let literal = row(&["EXPR$0", "EXPR$1"]);
        assert_eq!(by_position(&list(udt.clone()), &literal), Some(udt.clone()));
        assert_eq!(
            by_position(&list(udt.clone()), &list(literal)),
            Some(list(udt.clone()))
        );
        // Same names, or another number of fields: the function decides.
        assert_eq!(by_position(&list(udt.clone()), &udt), None);
        assert_eq!(by_position(&list(udt), &row(&["a"])), None);
    }
}

//! `ARRAY_AGG` under Feldera's rules: DataFusion's aggregate, whose result
//! over no rows is an empty array rather than NULL, and whose
//! `ARRAY_AGG(DISTINCT …)` without an `ORDER BY` lists the distinct values
//! in ascending order, NULL first (DataFusion lists them in the order of a
//! hash set, which depends on the step the rows came in).
//!
//! Incrementally, it is evaluated like DataFusion's (the aggregate operator
//! recomputes a touched group from its rows).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, ListArray};
use datafusion::arrow::compute::{take, SortOptions};
use datafusion::arrow::datatypes::{DataType, FieldRef};
use datafusion::arrow::row::{RowConverter, SortField};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::function::{AccumulatorArgs, StateFieldsArgs};
use datafusion::logical_expr::{Accumulator, AggregateUDF, AggregateUDFImpl, Signature};

/// `ARRAY_AGG` under Feldera's rules.
pub fn function() -> Arc<AggregateUDF> {
    let inner = datafusion::functions_aggregate::array_agg::array_agg_udaf();
    Arc::new(AggregateUDF::new_from_impl(ArrayAgg { inner }))
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct ArrayAgg {
    /// DataFusion's `ARRAY_AGG`, which computes the values.
    inner: Arc<AggregateUDF>,
}

impl AggregateUDFImpl for ArrayAgg {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn coerce_types(&self, args: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(args)
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        self.inner.return_type(args)
    }

    fn supports_null_handling_clause(&self) -> bool {
        self.inner.inner().supports_null_handling_clause()
    }

    fn state_fields(&self, args: StateFieldsArgs) -> Result<Vec<FieldRef>> {
        self.inner.state_fields(args)
    }

    fn accumulator(&self, args: AccumulatorArgs) -> Result<Box<dyn Accumulator>> {
        let sort = args.is_distinct && args.order_bys.is_empty();
        let element = match args.return_field.data_type() {
            DataType::List(f) => f.data_type().clone(),
            other => other.clone(),
        };
        Ok(Box::new(Feldera {
            inner: self.inner.accumulator(args)?,
            sort,
            element,
        }))
    }
}

/// DataFusion's accumulator, with Feldera's empty array and order.
#[derive(Debug)]
struct Feldera {
    inner: Box<dyn Accumulator>,
    /// `DISTINCT` without `ORDER BY`: the values are sorted.
    sort: bool,
    /// The type of the array's elements.
    element: DataType,
}

impl Accumulator for Feldera {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.update_batch(values)
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.inner.merge_batch(states)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.inner.state()
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.inner.retract_batch(values)
    }

    fn supports_retract_batch(&self) -> bool {
        self.inner.supports_retract_batch()
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        let list = match self.inner.evaluate()? {
            ScalarValue::List(list) => list,
            other => return Ok(other),
        };
        if list.is_null(0) {
            return Ok(ScalarValue::List(ScalarValue::new_list_nullable(
                &[],
                &self.element,
            )));
        }
        if !self.sort {
            return Ok(ScalarValue::List(list));
        }
        Ok(ScalarValue::List(Arc::new(sorted(&list)?)))
    }

    fn size(&self) -> usize {
        self.inner.size() + std::mem::size_of_val(self)
    }
}

/// The one array of `list` with its elements in ascending order, NULL
/// first, as the row format orders them (which every type has, nested
/// ones included); an element type the row format lacks keeps the order.
fn sorted(list: &ListArray) -> Result<ListArray> {
    let field = match list.data_type() {
        DataType::List(f) => Arc::clone(f),
        _ => return Ok(list.clone()),
    };
    let values = list.value(0);
    let order = SortOptions {
        descending: false,
        nulls_first: true,
    };
    let Ok(converter) = RowConverter::new(vec![SortField::new_with_options(
        values.data_type().clone(),
        order,
    )]) else {
        return Ok(list.clone());
    };
    let rows = converter.convert_columns(&[Arc::clone(&values)])?;
    let mut indices: Vec<u32> = (0..values.len() as u32).collect();
    indices.sort_by(|&a, &b| rows.row(a as usize).cmp(&rows.row(b as usize)));
    let taken = take(
        &values,
        &datafusion::arrow::array::UInt32Array::from(indices),
        None,
    )?;
    let offsets =
        datafusion::arrow::buffer::OffsetBuffer::from_lengths(std::iter::once(taken.len()));
    Ok(ListArray::try_new(field, offsets, taken, None)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{AsArray, Int32Array};

    #[test]
    fn distinct_values_are_sorted_null_first() {
        let values: ArrayRef = Arc::new(Int32Array::from(vec![Some(5), None, Some(2), Some(9)]));
        let list = ScalarValue::new_list_nullable(
            &(0..values.len())
                .map(|i| ScalarValue::try_from_array(&values, i).unwrap())
                .collect::<Vec<_>>(),
            &DataType::Int32,
        );
        let out = sorted(&list).unwrap();
        let got = out.value(0);
        let got = got.as_primitive::<datafusion::arrow::datatypes::Int32Type>();
        assert_eq!(
            got.iter().collect::<Vec<_>>(),
            vec![None, Some(2), Some(5), Some(9)]
        );
    }
}

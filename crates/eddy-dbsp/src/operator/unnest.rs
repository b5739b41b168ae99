//! Unnest (flat map): each row becomes one row per element of its array
//! columns.
//!
//! Incremental rule: unnest is linear, `unnest(ΔR)` is the change of
//! `unnest(R)`; every row a change row yields carries that row's weight.
//! Several array columns of one row are read side by side: the row yields
//! as many rows as its longest array has elements, and a shorter array
//! gives NULL past its end. A NULL array has no elements, so a row whose
//! arrays are all NULL or empty yields nothing (SQL's `UNNEST(NULL)` is the
//! empty table). A ROW column may be unnested too: its fields become
//! columns of the same row.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, StructArray, UInt32Array};
use datafusion::arrow::buffer::NullBuffer;
use datafusion::arrow::compute::{cast, take};
use datafusion::arrow::datatypes::{DataType, Field, SchemaRef};

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Error, Result, ZSet};

/// Where an output column of an unnest comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnnestColumn {
    /// Input column `i`, repeated for each row the input row yields.
    Repeat(usize),
    /// The elements of input array column `i`.
    Element(usize),
    /// Field `field` of input ROW column `column`.
    Field {
        /// The ROW column.
        column: usize,
        /// The field's position.
        field: usize,
    },
}

/// Turns each row into one row per element of its array columns.
pub struct Unnest {
    columns: Vec<UnnestColumn>,
    schema: SchemaRef,
}

impl Unnest {
    /// An unnest producing rows of `schema`, one column per entry of
    /// `columns`.
    pub fn new(columns: Vec<UnnestColumn>, schema: SchemaRef) -> Self {
        Self { columns, schema }
    }
}

/// An array column as a `List`, whatever list type it has.
fn as_list(array: &ArrayRef) -> Result<ArrayRef> {
    match array.data_type() {
        DataType::List(_) => Ok(Arc::clone(array)),
        DataType::LargeList(f) | DataType::FixedSizeList(f, _) => Ok(cast(
            array,
            &DataType::List(Arc::new(Field::new("item", f.data_type().clone(), true))),
        )?),
        other => Err(Error::Circuit(format!(
            "UNNEST of a value of type {other}, which is not an array"
        ))),
    }
}

impl Operator for Unnest {
    fn name(&self) -> &str {
        "unnest"
    }

    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let input = inputs[0];
        let batch = input.batch();
        let rows = batch.num_rows();
        let mut lists: Vec<(usize, ArrayRef)> = Vec::new();
        for c in &self.columns {
            if let UnnestColumn::Element(i) = *c {
                if !lists.iter().any(|(j, _)| *j == i) {
                    lists.push((i, as_list(batch.column(i))?));
                }
            }
        }
        // How many rows each input row yields: its longest array's length,
        // or one row when only ROW columns are unnested.
        let length = |list: &ArrayRef, r: usize| -> usize {
            let list = list.as_list::<i32>();
            if list.is_null(r) {
                0
            } else {
                list.value_length(r) as usize
            }
        };
        let yields: Vec<usize> = (0..rows)
            .map(|r| {
                if lists.is_empty() {
                    1
                } else {
                    lists.iter().map(|(_, l)| length(l, r)).max().unwrap_or(0)
                }
            })
            .collect();
        let total: usize = yields.iter().sum();
        let mut repeat = Vec::with_capacity(total);
        let mut weights = Vec::with_capacity(total);
        for (r, &n) in yields.iter().enumerate() {
            repeat.extend(std::iter::repeat_n(r as u32, n));
            weights.extend(std::iter::repeat_n(input.weights()[r], n));
        }
        let repeat = UInt32Array::from(repeat);
        let columns = self
            .columns
            .iter()
            .map(|c| -> Result<ArrayRef> {
                match *c {
                    UnnestColumn::Repeat(i) => Ok(take(batch.column(i), &repeat, None)?),
                    UnnestColumn::Element(i) => {
                        let list = &lists.iter().find(|(j, _)| *j == i).expect("collected").1;
                        let offsets = list.as_list::<i32>().value_offsets();
                        let mut at: Vec<Option<u32>> = Vec::with_capacity(total);
                        for (r, &n) in yields.iter().enumerate() {
                            let len = length(list, r);
                            let start = offsets[r] as u32;
                            at.extend((0..n).map(|k| (k < len).then(|| start + k as u32)));
                        }
                        let values = list.as_list::<i32>().values();
                        Ok(take(values, &UInt32Array::from(at), None)?)
                    }
                    UnnestColumn::Field { column, field } => {
                        let row = take(batch.column(column), &repeat, None)?;
                        let row: &StructArray = row.as_struct_opt().ok_or_else(|| {
                            Error::Circuit("UNNEST of fields of a value that is not a ROW".into())
                        })?;
                        let value = row.column(field);
                        let nulls = NullBuffer::union(row.nulls(), value.nulls());
                        Ok(datafusion::arrow::array::make_array(
                            value.to_data().into_builder().nulls(nulls).build()?,
                        ))
                    }
                }
            })
            .collect::<Result<Vec<_>>>()?;
        ZSet::from_columns(&self.schema, columns, weights)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::{Int32Array, ListArray, StringArray};
    use datafusion::arrow::datatypes::{Int32Type, Schema};
    use datafusion::arrow::record_batch::RecordBatch;

    #[test]
    fn rows_yield_their_elements_side_by_side_and_null_arrays_nothing() {
        let ids = Int32Array::from(vec![1, 2, 3, 4]);
        let a = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(10), Some(20), None]),
            None,
            Some(vec![]),
            Some(vec![Some(40)]),
        ]);
        let b = ListArray::from_iter_primitive::<Int32Type, _, _>(vec![
            Some(vec![Some(1)]),
            Some(vec![Some(2)]),
            None,
            Some(vec![Some(4), Some(5)]),
        ]);
        let input = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("a", a.data_type().clone(), true),
            Field::new("b", b.data_type().clone(), true),
        ]));
        let batch =
            RecordBatch::try_new(input, vec![Arc::new(ids), Arc::new(a), Arc::new(b)]).unwrap();
        let change = ZSet::new(batch, vec![1, 1, -1, 2]);
        let output = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int32, true),
            Field::new("a", DataType::Int32, true),
            Field::new("b", DataType::Int32, true),
        ]));
        let mut op = Unnest::new(
            vec![
                UnnestColumn::Repeat(0),
                UnnestColumn::Element(1),
                UnnestColumn::Element(2),
            ],
            output,
        );
        let out = op.eval(&[&change]).unwrap();
        let col = |i: usize| out.batch().column(i).as_primitive::<Int32Type>().clone();
        let ids: Vec<_> = col(0).iter().collect();
        let a: Vec<_> = col(1).iter().collect();
        let b: Vec<_> = col(2).iter().collect();
        assert_eq!(ids, [Some(1), Some(1), Some(1), Some(2), Some(4), Some(4)]);
        assert_eq!(a, [Some(10), Some(20), None, None, Some(40), None]);
        assert_eq!(b, [Some(1), None, None, Some(2), Some(4), Some(5)]);
        assert_eq!(out.weights(), [1, 1, 1, 1, 2, 2]);
    }

    #[test]
    fn a_row_column_becomes_its_fields() {
        let s = StructArray::from(vec![
            (
                Arc::new(Field::new("x", DataType::Int32, true)),
                Arc::new(Int32Array::from(vec![Some(1), Some(2)])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("y", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec![Some("a"), Some("b")])) as ArrayRef,
            ),
        ]);
        let s = StructArray::new(
            s.fields().clone(),
            s.columns().to_vec(),
            Some(NullBuffer::from(vec![true, false])),
        );
        let schema = Arc::new(Schema::new(vec![Field::new(
            "s",
            s.data_type().clone(),
            true,
        )]));
        let batch = RecordBatch::try_new(schema, vec![Arc::new(s)]).unwrap();
        let output = Arc::new(Schema::new(vec![
            Field::new("x", DataType::Int32, true),
            Field::new("y", DataType::Utf8, true),
        ]));
        let mut op = Unnest::new(
            vec![
                UnnestColumn::Field {
                    column: 0,
                    field: 0,
                },
                UnnestColumn::Field {
                    column: 0,
                    field: 1,
                },
            ],
            output,
        );
        let out = op.eval(&[&ZSet::new(batch, vec![1, 1])]).unwrap();
        let x: Vec<_> = out
            .batch()
            .column(0)
            .as_primitive::<Int32Type>()
            .iter()
            .collect();
        assert_eq!(x, [Some(1), None]);
        assert!(out.batch().column(1).is_null(1));
    }
}

//! Memcomparable row encodings.
//!
//! [`RowCodec`] wraps Arrow's [`RowConverter`]: a row of any schema becomes a
//! byte string whose byte order is the row order (NULLs first), so that keys of
//! indexed state are compared, hashed and sorted as plain bytes. Equal rows
//! encode to equal bytes; NULL is equal to NULL in this encoding, so operators
//! that need SQL's `NULL <> NULL` check null masks themselves.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, RecordBatch, RecordBatchOptions};
use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};

use crate::Result;

/// Encodes columns of fixed types to memcomparable bytes and back.
#[derive(Debug)]
pub struct RowCodec {
    /// `None` when there are no columns: every row is then the empty key.
    converter: Option<RowConverter>,
    /// The columns' types and orders.
    fields: Vec<(DataType, SortOptions)>,
}

/// The bytes that the empty row (no columns) encodes to.
const EMPTY_ROW: &[u8] = &[];

impl RowCodec {
    /// A codec for columns of these types, in ascending order.
    pub fn new(types: &[DataType]) -> Result<Self> {
        Self::with_options(types.iter().map(|t| (t.clone(), SortOptions::default())))
    }

    /// A codec for the columns of a schema.
    pub fn for_schema(schema: &SchemaRef) -> Result<Self> {
        let types: Vec<DataType> = schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect();
        Self::new(&types)
    }

    /// A codec whose byte order follows the given sort options per column.
    pub fn with_options(fields: impl IntoIterator<Item = (DataType, SortOptions)>) -> Result<Self> {
        let fields: Vec<(DataType, SortOptions)> = fields.into_iter().collect();
        let sort_fields: Vec<SortField> = fields
            .iter()
            .map(|(t, o)| SortField::new_with_options(t.clone(), *o))
            .collect();
        let converter = if sort_fields.is_empty() {
            None
        } else {
            Some(RowConverter::new(sort_fields)?)
        };
        Ok(Self { converter, fields })
    }

    /// Where column `column` lies in every encoded row, when every column
    /// up to it has a fixed width: its first byte's offset, and its type
    /// and order. A fixed-width value encodes to a validity byte and the
    /// value's bytes, so that the slice compares as the value does.
    pub fn fixed_place(&self, column: usize) -> Option<(usize, &DataType, SortOptions)> {
        let width = |t: &DataType| match t {
            DataType::Boolean => Some(2),
            t if t.is_integer()
                || matches!(
                    t,
                    DataType::Timestamp(..)
                        | DataType::Date32
                        | DataType::Date64
                        | DataType::Time32(_)
                        | DataType::Time64(_)
                        | DataType::Duration(_)
                        | DataType::Decimal128(..)
                        | DataType::Decimal256(..)
                ) =>
            {
                t.primitive_width().map(|w| w + 1)
            }
            _ => None,
        };
        let mut offset = 0;
        for (t, _) in self.fields.get(..column)? {
            offset += width(t)?;
        }
        let (t, options) = self.fields.get(column)?;
        width(t)?;
        Some((offset, t, *options))
    }

    /// Encodes `num_rows` rows of `columns`.
    pub fn encode(&self, columns: &[ArrayRef], num_rows: usize) -> Result<EncodedRows> {
        Ok(match &self.converter {
            Some(c) => EncodedRows::Rows(c.convert_columns(columns)?),
            None => EncodedRows::Empty(num_rows),
        })
    }

    /// Decodes encoded rows back into columns.
    pub fn decode<'a>(&self, rows: impl IntoIterator<Item = &'a [u8]>) -> Result<Vec<ArrayRef>> {
        match &self.converter {
            Some(c) => {
                let parser = c.parser();
                Ok(c.convert_rows(rows.into_iter().map(|b| parser.parse(b)))?)
            }
            None => Ok(vec![]),
        }
    }

    /// The encoding by `prefix` (a codec of this one's first columns) of
    /// the first columns of `key`, encoded by this codec: the partition of
    /// a key of partition and order.
    pub fn prefix_of(&self, key: &[u8], prefix: &RowCodec) -> Result<Vec<u8>> {
        let n = prefix.fields.len();
        if self.fields.get(..n) != Some(&prefix.fields[..]) {
            return Err(crate::Error::Circuit(
                "a key's prefix asked of a codec of other columns".into(),
            ));
        }
        let columns = self.decode([key])?;
        Ok(prefix.encode(&columns[..n], 1)?.row(0).to_vec())
    }

    /// Decodes encoded rows into a batch of `schema` (which must match the codec).
    pub fn decode_batch<'a>(
        &self,
        schema: &SchemaRef,
        rows: impl IntoIterator<Item = &'a [u8]>,
    ) -> Result<RecordBatch> {
        let rows: Vec<&[u8]> = rows.into_iter().collect();
        let n = rows.len();
        let columns = self.decode(rows)?;
        batch_with_rows(schema, columns, n)
    }
}

/// Builds a batch, allowing batches without columns (that still have rows).
pub fn batch_with_rows(
    schema: &SchemaRef,
    columns: Vec<ArrayRef>,
    num_rows: usize,
) -> Result<RecordBatch> {
    let options = RecordBatchOptions::new().with_row_count(Some(num_rows));
    Ok(RecordBatch::try_new_with_options(
        Arc::clone(schema),
        columns,
        &options,
    )?)
}

/// Rows `indices` of a batch, allowing batches without columns.
pub fn take_rows(batch: &RecordBatch, indices: &[u32]) -> Result<RecordBatch> {
    if batch.num_columns() == 0 {
        return batch_with_rows(&batch.schema(), vec![], indices.len());
    }
    let idx = datafusion::arrow::array::UInt32Array::from(indices.to_vec());
    Ok(datafusion::arrow::compute::take_record_batch(batch, &idx)?)
}

/// The rows of a batch where `mask` is true, allowing batches without columns.
pub fn filter_rows(
    batch: &RecordBatch,
    mask: &datafusion::arrow::array::BooleanArray,
) -> Result<RecordBatch> {
    if batch.num_columns() == 0 {
        let n = (0..mask.len())
            .filter(|&i| mask.is_valid(i) && mask.value(i))
            .count();
        return batch_with_rows(&batch.schema(), vec![], n);
    }
    Ok(datafusion::arrow::compute::filter_record_batch(
        batch, mask,
    )?)
}

/// The encoded rows of one batch.
#[derive(Debug)]
pub enum EncodedRows {
    /// Rows of at least one column.
    Rows(Rows),
    /// `n` rows of no columns.
    Empty(usize),
}

impl EncodedRows {
    /// The bytes of row `i`.
    pub fn row(&self, i: usize) -> &[u8] {
        match self {
            EncodedRows::Rows(r) => r.row(i).data(),
            EncodedRows::Empty(_) => EMPTY_ROW,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            EncodedRows::Rows(r) => r.num_rows(),
            EncodedRows::Empty(n) => *n,
        }
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

//! Integrate: the running sum of a stream of changes, `I(x)[t] = Σ_{s≤t} x[s]`.
//!
//! Incremental rule: the change of `I(x)` is `x` itself (`D ∘ I = id`); the
//! operator nevertheless outputs the whole integrated Z-set each step, which
//! is what a consumer of a full snapshot needs. The accumulated rows are kept
//! consolidated, indexed by their memcomparable bytes.

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::row::RowCodec;
use crate::{Result, Trace, ZSet};

/// Accumulates changes into a consolidated relation.
pub struct Integrate {
    schema: SchemaRef,
    codec: RowCodec,
    trace: Trace,
}

impl Integrate {
    /// An integrator of rows of `schema`.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let codec = RowCodec::for_schema(&schema)?;
        Ok(Self {
            schema,
            codec,
            trace: Trace::new(),
        })
    }

    /// Adds a change to the accumulated contents.
    pub fn add(&mut self, change: &ZSet) -> Result<()> {
        let rows = self.codec.encode(change.batch().columns(), change.len())?;
        for (i, &w) in change.weights().iter().enumerate() {
            self.trace.update(&[], rows.row(i), w);
        }
        self.trace.seal();
        Ok(())
    }

    /// The accumulated contents, in row order.
    pub fn contents(&self) -> Result<ZSet> {
        // Scanned, not looked up: a lookup would keep a copy of the rows
        // it read from files in the trace until the next step.
        let (mut bytes, mut ends, mut weights) = (Vec::new(), Vec::new(), Vec::new());
        self.trace.for_each(|_, r, w| {
            bytes.extend_from_slice(r);
            ends.push(bytes.len());
            weights.push(w);
        });
        let rows = ends.iter().scan(0, |start, &end| {
            let row = &bytes[*start..end];
            *start = end;
            Some(row)
        });
        let columns = self.codec.decode(rows)?;
        ZSet::from_columns(&self.schema, columns, weights)
    }

    /// Entries, bytes in memory and bytes in storage files of the
    /// accumulated contents (see [`Operator::state_entries`],
    /// [`Operator::state_bytes`] and [`Operator::state_storage_bytes`]).
    pub fn footprint(&self) -> (usize, usize, usize) {
        (
            self.trace.entries(),
            self.trace.bytes(),
            self.trace.storage_bytes(),
        )
    }

    /// The schema of the rows.
    pub fn schema(&self) -> SchemaRef {
        std::sync::Arc::clone(&self.schema)
    }

    /// Number of distinct rows held.
    pub fn len(&self) -> usize {
        self.trace.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.trace.is_empty()
    }
}

impl Operator for Integrate {
    fn name(&self) -> &str {
        "integrate"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        self.trace.save(w)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        self.trace.restore(r)
    }

    fn state_entries(&self) -> usize {
        self.trace.entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.trace.storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.trace.bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        self.add(inputs[0])?;
        self.contents()
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

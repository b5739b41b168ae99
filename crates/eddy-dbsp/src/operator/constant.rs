//! A constant relation, such as `VALUES (1), (2)` or the single row of a
//! `SELECT` without `FROM`.
//!
//! Incremental rule: a constant relation C is the stream C, C, C, …; its
//! change is C in the first step and empty ever after.

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Emits its rows in the first step only.
pub struct Constant {
    schema: SchemaRef,
    rows: Option<ZSet>,
}

impl Constant {
    /// A constant relation with these rows.
    pub fn new(rows: ZSet) -> Self {
        Self {
            schema: rows.schema(),
            rows: Some(rows),
        }
    }
}

impl Operator for Constant {
    fn name(&self) -> &str {
        "constant"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        // Whether the rows are still to be emitted.
        w.put(&self.rows.is_some())
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        if !r.get::<bool>()? {
            self.rows = None;
        }
        Ok(())
    }

    fn eval(&mut self, _inputs: &[&ZSet]) -> Result<ZSet> {
        Ok(self
            .rows
            .take()
            .unwrap_or_else(|| ZSet::empty(&self.schema)))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

//! The input of a stream: the changes pushed through an
//! [`InputHandle`](crate::InputHandle) since the previous step.
//!
//! Incremental rule: an input's output is exactly the change that was pushed.

use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Result, ZSet};

/// Releases buffered changes once per step.
pub struct Input {
    schema: SchemaRef,
    buffer: Arc<Mutex<Vec<ZSet>>>,
}

impl Input {
    /// An input reading from `buffer`.
    pub fn new(schema: SchemaRef, buffer: Arc<Mutex<Vec<ZSet>>>) -> Self {
        Self { schema, buffer }
    }
}

impl Operator for Input {
    fn name(&self) -> &str {
        "input"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&*self.buffer.lock().expect("input buffer poisoned"))
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        *self.buffer.lock().expect("input buffer poisoned") = r.get()?;
        Ok(())
    }

    fn eval(&mut self, _inputs: &[&ZSet]) -> Result<ZSet> {
        let parts = std::mem::take(&mut *self.buffer.lock().expect("input buffer poisoned"));
        ZSet::concat(&self.schema, &parts)
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

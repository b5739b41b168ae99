//! Fixed points: recursive relations computed by a nested circuit that
//! iterates inside one outer step (DBSP's recursion, §6 of the paper).
//!
//! A group of mutually recursive relations `R = F(I, R)` is a nested
//! [`Circuit`] whose inputs are the outer streams `I` (imports) and one
//! *feedback* input per relation, carrying the relation's value of the
//! previous iteration. Iteration `i` computes `R[i] = F(I, R[i − 1])` from
//! `R[−1] = ∅`, so for a monotone `F` the iterations climb to the least
//! fixed point.
//!
//! Incremental rule: time is two-dimensional, (outer step `t`, iteration
//! `i`). Every stream of the nested circuit carries the changes
//! `δx[t][i] = x[t][i] − x[t−1][i] − x[t][i−1] + x[t−1][i−1]`; linear
//! operators work on them unchanged, and the stateful ones ([`NestedJoin`],
//! [`NestedDistinct`]) keep their input changes of earlier outer steps
//! indexed by iteration. An import's change enters at iteration 0 only.
//! The fixed point's change in step `t` is `Σᵢ δR[t][i]`: an edge added to
//! a large graph touches only the iterations and rows it changes, so the
//! work is proportional to the change of the closure, not to its size.
//!
//! One outer step iterates until every feedback change is empty at an
//! iteration past the deepest iteration that earlier steps stored (past
//! it, the stored state can contribute nothing new). A recursion that
//! never converges (a `UNION ALL` over a cycle) stops with an error after
//! [`MAX_ITERATIONS`], or once its iterations have produced
//! [`MAX_STEP_BYTES`] of changes in one step.
//!
//! [`NestedJoin`]: super::NestedJoin
//! [`NestedDistinct`]: super::NestedDistinct

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use datafusion::arrow::datatypes::SchemaRef;

use super::Operator;
use crate::checkpoint::{StateReader, StateWriter};
use crate::{Circuit, Error, InputHandle, NodeId, Result, ZSet};

/// Iterations one outer step may take before the recursion is declared
/// divergent.
pub const MAX_ITERATIONS: u32 = 100_000;

/// Bytes of changes the iterations of one outer step may produce before
/// the recursion is declared divergent (a `UNION ALL` that builds ever
/// longer strings over a cycle grows without repeating a row).
pub const MAX_STEP_BYTES: usize = 512 << 20;

/// The position of a nested circuit in two-dimensional time, shared by the
/// fixed point that drives it and the nested operators that read it.
#[derive(Debug, Clone, Default)]
pub struct Iteration(Arc<IterationState>);

#[derive(Debug, Default)]
struct IterationState {
    /// Outer steps started.
    epoch: AtomicU64,
    /// The iteration being evaluated.
    iteration: AtomicU32,
    /// The deepest iteration at which some nested operator stored a change
    /// of an earlier outer step.
    horizon: AtomicU32,
}

impl Iteration {
    /// A fresh context: epoch 0, iteration 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The outer step being evaluated.
    pub fn epoch(&self) -> u64 {
        self.0.epoch.load(Ordering::Relaxed)
    }

    /// The iteration being evaluated.
    pub fn iteration(&self) -> u32 {
        self.0.iteration.load(Ordering::Relaxed)
    }

    /// Records that an operator stored changes of earlier steps up to
    /// iteration `deepest`.
    pub fn reach(&self, deepest: u32) {
        self.0.horizon.fetch_max(deepest, Ordering::Relaxed);
    }

    fn horizon(&self) -> u32 {
        self.0.horizon.load(Ordering::Relaxed)
    }

    fn start_step(&self) {
        self.0.epoch.fetch_add(1, Ordering::Relaxed);
        self.0.iteration.store(0, Ordering::Relaxed);
    }

    fn set_iteration(&self, i: u32) {
        self.0.iteration.store(i, Ordering::Relaxed);
    }
}

/// The per-relation changes of the last outer step, read by [`FixpointOutput`].
type Slots = Arc<Mutex<Vec<ZSet>>>;

/// Drives a nested circuit to its fixed point once per outer step.
///
/// Its own output is empty (of an empty schema); each recursive relation's
/// change is read by a [`FixpointOutput`] node placed after it.
pub struct Fixpoint {
    circuit: Circuit,
    ctx: Iteration,
    imports: Vec<InputHandle>,
    feedback: Vec<(InputHandle, NodeId)>,
    slots: Slots,
    schema: SchemaRef,
}

impl Fixpoint {
    /// A fixed point over `circuit`, whose nested operators read `ctx`.
    /// `imports[k]` receives the outer circuit's `k`-th input of this node;
    /// each `(handle, node)` of `feedback` feeds `node`'s change of one
    /// iteration into `handle` for the next.
    pub fn new(
        circuit: Circuit,
        ctx: Iteration,
        imports: Vec<InputHandle>,
        feedback: Vec<(InputHandle, NodeId)>,
    ) -> Self {
        let slots = feedback
            .iter()
            .map(|&(_, node)| ZSet::empty(circuit.schema(node)))
            .collect();
        Self {
            circuit,
            ctx,
            imports,
            feedback,
            slots: Arc::new(Mutex::new(slots)),
            schema: Arc::new(datafusion::arrow::datatypes::Schema::empty()),
        }
    }

    /// The output node that reads relation `k`'s change (the `k`-th feedback).
    pub fn output(&self, k: usize) -> FixpointOutput {
        FixpointOutput {
            slots: Arc::clone(&self.slots),
            k,
        }
    }

    fn set_slots(&self, changes: Vec<ZSet>) {
        *self.slots.lock().expect("fixpoint slots poisoned") = changes;
    }
}

impl Operator for Fixpoint {
    fn name(&self) -> &str {
        "fixpoint"
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        let state = &self.ctx.0;
        w.put(&state.epoch.load(Ordering::Relaxed))?;
        w.put(&state.iteration.load(Ordering::Relaxed))?;
        w.put(&state.horizon.load(Ordering::Relaxed))?;
        self.circuit.save(w)
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let state = &self.ctx.0;
        state.epoch.store(r.get()?, Ordering::Relaxed);
        state.iteration.store(r.get()?, Ordering::Relaxed);
        state.horizon.store(r.get()?, Ordering::Relaxed);
        self.circuit.restore(r)
    }

    fn state_entries(&self) -> usize {
        self.circuit.state_entries()
    }

    fn state_storage_bytes(&self) -> usize {
        self.circuit.state_storage_bytes()
    }

    fn state_bytes(&self) -> usize {
        self.circuit.state_bytes()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let empty = || {
            self.feedback
                .iter()
                .map(|&(_, node)| ZSet::empty(self.circuit.schema(node)))
                .collect::<Vec<_>>()
        };
        if inputs.iter().all(|z| z.is_empty()) {
            // No import changed: no iterate changes at any iteration.
            self.set_slots(empty());
            return Ok(ZSet::empty(&self.schema));
        }
        self.ctx.start_step();
        for (handle, change) in self.imports.iter().zip(inputs) {
            handle.push((*change).clone())?;
        }
        let mut changes: Vec<Vec<ZSet>> = vec![Vec::new(); self.feedback.len()];
        let mut produced = 0usize;
        let mut i: u32 = 0;
        loop {
            self.ctx.set_iteration(i);
            self.circuit.step()?;
            let mut moved = false;
            for (k, (handle, node)) in self.feedback.iter().enumerate() {
                let change = self
                    .circuit
                    .output(*node)
                    .expect("the nested circuit was stepped");
                if !change.is_empty() {
                    moved = true;
                    produced += change.batch().get_array_memory_size();
                    handle.push(change.clone())?;
                    changes[k].push(change.clone());
                }
            }
            if produced > MAX_STEP_BYTES {
                return Err(Error::Circuit(format!(
                    "a recursive view produced more than {} MiB of changes in one step \
                     ({} iterations) without reaching a fixed point",
                    MAX_STEP_BYTES >> 20,
                    i + 1
                )));
            }
            if !moved && i >= self.ctx.horizon() {
                break;
            }
            i += 1;
            if i >= MAX_ITERATIONS {
                return Err(Error::Circuit(format!(
                    "a recursive view did not reach a fixed point after {MAX_ITERATIONS} \
                     iterations (a UNION ALL over a cycle grows forever; UNION stops)"
                )));
            }
        }
        let mut out = Vec::with_capacity(changes.len());
        for (parts, &(_, node)) in changes.iter().zip(&self.feedback) {
            out.push(ZSet::concat(self.circuit.schema(node), parts)?.consolidate()?);
        }
        self.set_slots(out);
        Ok(ZSet::empty(&self.schema))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

/// The change of one recursive relation in the last outer step.
pub struct FixpointOutput {
    slots: Slots,
    k: usize,
}

impl Operator for FixpointOutput {
    fn name(&self) -> &str {
        "fixpoint output"
    }

    // The slot is filled and emptied within one step.
    fn save(&self, _w: &mut StateWriter) -> Result<()> {
        Ok(())
    }

    fn restore(&mut self, _r: &mut StateReader) -> Result<()> {
        Ok(())
    }

    fn eval(&mut self, _inputs: &[&ZSet]) -> Result<ZSet> {
        let mut slots = self.slots.lock().expect("fixpoint slots poisoned");
        let schema = slots[self.k].schema();
        Ok(std::mem::replace(&mut slots[self.k], ZSet::empty(&schema)))
    }

    fn quiet_on_empty(&self) -> bool {
        false
    }
}

//! Circuits: operators wired into a graph and evaluated step by step.
//!
//! A [`Circuit`] is built by adding nodes; a node may only read nodes added
//! before it, so insertion order is a topological order fixed at build time.
//! [`Circuit::step`] evaluates every node once, in that order: inputs release
//! the changes buffered since the previous step, and each operator turns its
//! inputs' changes of this step into its own change. After a step,
//! [`Circuit::output`] gives any node's change for that step.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use datafusion::arrow::datatypes::SchemaRef;

use crate::checkpoint::{StateReader, StateWriter};
use crate::operator::input::Input;
use crate::operator::{Operator, Sharded};
use crate::profile::{NodeInfo, NodeProfile};
use crate::{Error, Result, ZSet};

/// Index of a node in its circuit.
pub type NodeId = usize;

struct Node {
    op: Box<dyn Operator>,
    inputs: Vec<NodeId>,
    schema: SchemaRef,
    profile: NodeProfile,
}

/// A dataflow graph of operators over Z-set streams.
#[derive(Default)]
pub struct Circuit {
    nodes: Vec<Node>,
    last: Vec<ZSet>,
    steps: u64,
    /// Shards of each partitioned operator added by
    /// [`add_keyed`](Circuit::add_keyed) (0 and 1 alike mean one).
    workers: usize,
}

impl Circuit {
    /// An empty circuit.
    pub fn new() -> Self {
        Self::default()
    }

    /// A circuit whose partitioned operators, added by
    /// [`add_keyed`](Self::add_keyed), are split into `workers` shards
    /// evaluated in parallel.
    pub fn with_workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// The shards of each partitioned operator (at least 1).
    pub fn workers(&self) -> usize {
        self.workers.max(1)
    }

    /// Adds an operator built by `make`. When the circuit has several
    /// workers and the operator is [`partitioned`](Operator::partitioned),
    /// `make` builds one copy per worker and they are added as one
    /// [`Sharded`] node; otherwise the operator is added alone.
    pub fn add_keyed<O, E>(
        &mut self,
        mut make: impl FnMut() -> std::result::Result<O, E>,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> std::result::Result<NodeId, E>
    where
        O: Operator + 'static,
        E: From<Error>,
    {
        let first = make()?;
        let workers = self.workers();
        if workers == 1 || !first.partitioned() {
            return Ok(self.add(first, inputs, schema)?);
        }
        let mut shards: Vec<Box<dyn Operator>> = vec![Box::new(first)];
        for _ in 1..workers {
            shards.push(Box::new(make()?));
        }
        let sharded = Sharded::new(shards, Arc::clone(&schema))?;
        Ok(self.add(sharded, inputs, schema)?)
    }

    /// Adds an operator reading `inputs`; its output rows have `schema`.
    pub fn add(
        &mut self,
        op: impl Operator + 'static,
        inputs: &[NodeId],
        schema: SchemaRef,
    ) -> Result<NodeId> {
        if let Some(&bad) = inputs.iter().find(|&&i| i >= self.nodes.len()) {
            return Err(Error::Circuit(format!("node {bad} does not exist yet")));
        }
        self.nodes.push(Node {
            op: Box::new(op),
            inputs: inputs.to_vec(),
            schema,
            profile: NodeProfile::default(),
        });
        Ok(self.nodes.len() - 1)
    }

    /// Adds an input stream of rows of `schema` and returns the handle that feeds it.
    pub fn add_input(&mut self, schema: SchemaRef) -> Result<(NodeId, InputHandle)> {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let id = self.add(
            Input::new(Arc::clone(&schema), Arc::clone(&buffer)),
            &[],
            Arc::clone(&schema),
        )?;
        Ok((id, InputHandle { schema, buffer }))
    }

    /// The schema of a node's rows.
    pub fn schema(&self, node: NodeId) -> &SchemaRef {
        &self.nodes[node].schema
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the circuit has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The state entries of every operator (see
    /// [`Operator::state_entries`]).
    pub fn state_entries(&self) -> usize {
        self.nodes.iter().map(|n| n.op.state_entries()).sum()
    }

    /// Every operator that keeps state: its node, name, entries and bytes.
    pub fn operator_states(&self) -> Vec<OperatorState> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(node, n)| OperatorState {
                node,
                operator: n.op.name().to_string(),
                entries: n.op.state_entries(),
                bytes: n.op.state_bytes(),
                storage_bytes: n.op.state_storage_bytes(),
                shards: n.op.shards(),
            })
            .filter(|s| s.entries > 0 || s.bytes > 0 || s.storage_bytes > 0)
            .collect()
    }

    /// The bytes of every operator's state.
    pub fn state_bytes(&self) -> usize {
        self.nodes.iter().map(|n| n.op.state_bytes()).sum()
    }

    /// The bytes of every operator's state in storage files.
    pub fn state_storage_bytes(&self) -> usize {
        self.nodes.iter().map(|n| n.op.state_storage_bytes()).sum()
    }

    /// Steps evaluated so far.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Evaluates every node once.
    pub fn step(&mut self) -> Result<()> {
        let mut out: Vec<ZSet> = Vec::with_capacity(self.nodes.len());
        for node in &mut self.nodes {
            let inputs: Vec<&ZSet> = node.inputs.iter().map(|&i| &out[i]).collect();
            let z = if inputs.iter().all(|z| z.is_empty())
                && node.op.quiet_on_empty()
                && !inputs.is_empty()
            {
                ZSet::empty(&node.schema)
            } else {
                let started = Instant::now();
                let z = node.op.eval(&inputs)?;
                let rows_in = inputs.iter().map(|z| z.len()).sum();
                node.profile.add(started.elapsed(), rows_in, z.len());
                z
            };
            drop(inputs);
            out.push(z.with_schema(&node.schema)?);
        }
        self.last = out;
        self.steps += 1;
        Ok(())
    }

    /// A first step after a program change (bootstrapping): only the
    /// nodes marked in `fresh` are evaluated, the others' state being
    /// already up to date (taken over with
    /// [`restore_nodes`](Self::restore_nodes)) and their change empty. A
    /// fresh node sees, for each input that is not fresh, that input's
    /// whole contents (`contents`) as its change, so that it computes its
    /// whole result; its output is that result, as a change.
    pub fn step_bootstrap(
        &mut self,
        fresh: &[bool],
        contents: &std::collections::HashMap<NodeId, ZSet>,
    ) -> Result<()> {
        if fresh.len() != self.nodes.len() {
            return Err(Error::Circuit(format!(
                "a bootstrap of {} nodes in a circuit of {}",
                fresh.len(),
                self.nodes.len()
            )));
        }
        let mut out: Vec<ZSet> = Vec::with_capacity(self.nodes.len());
        for (i, node) in self.nodes.iter_mut().enumerate() {
            if !fresh[i] {
                out.push(ZSet::empty(&node.schema));
                continue;
            }
            let mut inputs: Vec<&ZSet> = Vec::with_capacity(node.inputs.len());
            for &input in &node.inputs {
                inputs.push(if fresh[input] {
                    &out[input]
                } else {
                    contents.get(&input).ok_or_else(|| {
                        Error::Circuit(format!(
                            "node {i} is computed afresh from node {input}, whose contents were not kept"
                        ))
                    })?
                });
            }
            let started = Instant::now();
            let z = node.op.eval(&inputs)?;
            let rows_in = inputs.iter().map(|z| z.len()).sum();
            node.profile.add(started.elapsed(), rows_in, z.len());
            drop(inputs);
            out.push(z.with_schema(&node.schema)?);
        }
        self.last = out;
        self.steps += 1;
        Ok(())
    }

    /// Writes the state of `nodes`, in that order, each under its
    /// operator's name, with the steps taken (for
    /// [`restore_nodes`](Self::restore_nodes) into another circuit).
    pub fn save_nodes(&self, nodes: &[NodeId], w: &mut StateWriter) -> Result<()> {
        w.put(&self.steps)?;
        w.put(&nodes.len())?;
        for &i in nodes {
            save_node(self.node(i)?.op.as_ref(), w)?;
        }
        Ok(())
    }

    /// Reads the state [`save_nodes`](Self::save_nodes) wrote (maybe by
    /// another circuit) into `nodes`, which must be operators of the same
    /// kinds built the same way.
    pub fn restore_nodes(&mut self, nodes: &[NodeId], r: &mut StateReader) -> Result<()> {
        let map: Vec<Option<NodeId>> = nodes.iter().map(|&n| Some(n)).collect();
        self.restore_mapped(&map, r)
    }

    fn node(&self, i: NodeId) -> Result<&Node> {
        self.nodes
            .get(i)
            .ok_or_else(|| Error::Circuit(format!("no node {i}")))
    }

    /// Writes every operator's state to a checkpoint, node by node, each
    /// under its operator's name.
    pub fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.steps)?;
        w.put(&self.nodes.len())?;
        for node in &self.nodes {
            save_node(node.op.as_ref(), w)?;
        }
        Ok(())
    }

    /// Reads every operator's state back from a checkpoint written by
    /// [`save`](Self::save) from a circuit built the same way; a
    /// checkpoint of another circuit is an error.
    pub fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let steps: u64 = r.get()?;
        let n: usize = r.get()?;
        if n != self.nodes.len() {
            return Err(r.corrupt(&format!(
                "a checkpoint of a circuit of {n} nodes, not {}",
                self.nodes.len()
            )));
        }
        for (i, node) in self.nodes.iter_mut().enumerate() {
            let name: String = r.get()?;
            r.section(|r| restore_node(node.op.as_mut(), &name, r))
                .map_err(|e| match e {
                    NodeRestore::Mismatch(expected) => r.corrupt(&format!(
                        "node {i} was a {name} operator, not a {expected} (a checkpoint of \
                     another program)"
                    )),
                    NodeRestore::Failed(e) => e,
                })?;
        }
        self.steps = steps;
        self.last.clear();
        Ok(())
    }

    /// Reads back the nodes of a checkpoint written by [`save`](Self::save)
    /// from another circuit: saved node `i` restores node `map[i]` of this
    /// one (which must be an operator of the same kind, built the same
    /// way), or is passed over where `map[i]` is `None`. The nodes of this
    /// circuit that nothing restores keep their fresh state. Needs a state
    /// file with [sections](StateReader::sectioned).
    pub fn restore_mapped(&mut self, map: &[Option<NodeId>], r: &mut StateReader) -> Result<()> {
        if !r.sectioned() {
            return Err(
                r.corrupt("a state of an earlier layout, which is read whole or not at all")
            );
        }
        let steps: u64 = r.get()?;
        let n: usize = r.get()?;
        if n != map.len() {
            return Err(r.corrupt(&format!("the state of {n} nodes, not {}", map.len())));
        }
        for (i, to) in map.iter().enumerate() {
            let name: String = r.get()?;
            let Some(to) = *to else {
                r.skip_section()?;
                continue;
            };
            let node = self
                .nodes
                .get_mut(to)
                .ok_or_else(|| Error::Circuit(format!("no node {to}")))?;
            r.section(|r| restore_node(node.op.as_mut(), &name, r))
                .map_err(|e| match e {
                    NodeRestore::Mismatch(expected) => r.corrupt(&format!(
                        "saved node {i} is a {name} operator, and node {to} a {expected}"
                    )),
                    NodeRestore::Failed(e) => e,
                })?;
        }
        self.steps = steps;
        self.last.clear();
        Ok(())
    }

    /// Forgets what the last step produced: every node's
    /// [`output`](Self::output) is then none.
    pub fn forget_outputs(&mut self) {
        self.last.clear();
    }

    /// The whole relation that `node`'s state holds, if it holds one, to
    /// read now or later (see [`Operator::contents`]).
    pub fn contents(&self, node: NodeId) -> Option<crate::operator::Contents> {
        self.nodes.get(node)?.op.contents()
    }

    /// The change that `node` produced in the last step.
    pub fn output(&self, node: NodeId) -> Option<&ZSet> {
        self.last.get(node)
    }

    /// The nodes that `node` reads.
    pub fn inputs_of(&self, node: NodeId) -> &[NodeId] {
        self.nodes.get(node).map_or(&[], |n| n.inputs.as_slice())
    }

    /// Every node: its operator, inputs and costs so far.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(id, n)| NodeInfo {
                id,
                operator: saved_name(n.op.as_ref()),
                inputs: n.inputs.clone(),
                profile: n.profile,
            })
            .collect()
    }

    /// One line per node: its id, operator (with its shards, `join×4`,
    /// when it has several) and inputs.
    pub fn describe(&self) -> Vec<String> {
        self.nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{i}: {} {:?}", saved_name(n.op.as_ref()), n.inputs))
            .collect()
    }
}

/// The name a node's state is saved under: its operator's, with the
/// number of shards when it has more than one (`join×4`), so that a
/// checkpoint is never read into a circuit split otherwise.
fn saved_name(op: &dyn Operator) -> String {
    match op.shards() {
        1 => op.name().to_string(),
        n => format!("{}×{n}", op.name()),
    }
}

/// Writes one node's state: its [`saved_name`], then the state as one
/// section (which a reader may pass over).
fn save_node(op: &dyn Operator, w: &mut StateWriter) -> Result<()> {
    w.put(&saved_name(op))?;
    w.section(|w| op.save(w))
}

/// Why a node's state was not restored.
enum NodeRestore {
    /// The state is of another operator (the one expected is named).
    Mismatch(String),
    /// Reading it failed.
    Failed(Error),
}

impl From<Error> for NodeRestore {
    fn from(e: Error) -> Self {
        NodeRestore::Failed(e)
    }
}

/// Restores `op` from the state saved under `name` ([`saved_name`]): as
/// it is when the shards agree, re-split when the same partitioned
/// operator was saved over another number of shards.
fn restore_node(
    op: &mut dyn Operator,
    name: &str,
    r: &mut StateReader,
) -> std::result::Result<(), NodeRestore> {
    let expected = saved_name(op);
    if name == expected {
        return op.restore(r).map_err(NodeRestore::Failed);
    }
    let (base, saved) = match name.rsplit_once('×') {
        Some((base, n)) => match n.parse::<usize>() {
            Ok(n) if n > 1 => (base, n),
            _ => return Err(NodeRestore::Mismatch(expected)),
        },
        None => (name, 1),
    };
    if base != op.name() || !op.partitioned() {
        return Err(NodeRestore::Mismatch(expected));
    }
    op.restore_resharded(saved, r).map_err(NodeRestore::Failed)
}

/// The state one operator keeps (see [`Circuit::operator_states`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperatorState {
    /// The node.
    pub node: NodeId,
    /// The operator's name.
    pub operator: String,
    /// Entries kept (rows, keys, groups).
    pub entries: usize,
    /// Bytes kept in memory.
    pub bytes: usize,
    /// Bytes kept in storage files.
    pub storage_bytes: usize,
    /// The workers its state is split over (1 unless it is sharded).
    pub shards: usize,
}

/// Feeds changes into one input of a circuit; they wait for the next step.
#[derive(Clone)]
pub struct InputHandle {
    schema: SchemaRef,
    buffer: Arc<Mutex<Vec<ZSet>>>,
}

impl InputHandle {
    /// The schema rows must have.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Buffers a change until the next step.
    pub fn push(&self, change: ZSet) -> Result<()> {
        let change = change.with_schema(&self.schema)?;
        self.buffer
            .lock()
            .expect("input buffer poisoned")
            .push(change);
        Ok(())
    }

    /// Rows buffered for the next step.
    pub fn buffered(&self) -> usize {
        self.buffer
            .lock()
            .expect("input buffer poisoned")
            .iter()
            .map(ZSet::len)
            .sum()
    }
}

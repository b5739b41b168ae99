//! What each node of a circuit has cost: the time its evaluations took and
//! the rows that went in and came out, summed over the steps since the
//! circuit was built. [`Circuit::step`](crate::Circuit::step) adds to them
//! (two clock reads per evaluated node); a node left quiet by a step whose
//! inputs were empty costs nothing and counts nothing.

use std::time::Duration;

use crate::circuit::NodeId;

/// One node's costs, summed over its evaluations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeProfile {
    /// Steps in which it was evaluated.
    pub evaluations: u64,
    /// Time its evaluations took.
    pub time: Duration,
    /// Rows (Z-set entries) of its inputs' changes it read.
    pub rows_in: u64,
    /// Rows (Z-set entries) of the changes it produced.
    pub rows_out: u64,
}

impl NodeProfile {
    /// Adds one evaluation.
    pub(crate) fn add(&mut self, time: Duration, rows_in: usize, rows_out: usize) {
        self.evaluations += 1;
        self.time += time;
        self.rows_in += rows_in as u64;
        self.rows_out += rows_out as u64;
    }
}

/// A node as a graph shows it: its operator, the nodes it reads, its costs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    /// The node.
    pub id: NodeId,
    /// Its operator's name (with its shards, `join×4`, when it has several).
    pub operator: String,
    /// The nodes it reads.
    pub inputs: Vec<NodeId>,
    /// Its costs so far.
    pub profile: NodeProfile,
}

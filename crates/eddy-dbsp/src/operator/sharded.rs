//! Sharded: one keyed operator split over workers.
//!
//! A partitioned operator (a join, a grouped aggregate, a distinct, a
//! window or top-k by partition, an upsert) never lets rows of different
//! keys meet: its state and its output split by the key of each input row.
//! [`Sharded`] holds `n` copies of such an operator (the shards), routes
//! every input row to the shard `hash(key) mod n` (the key as the operator
//! itself encodes it, so that equal keys take the same route whatever
//! their Arrow types), evaluates the shards in parallel on the rayon pool,
//! and concatenates their outputs.
//!
//! Incremental rule: the inner operator's. With `ΔA = Σᵢ ΔAᵢ` split by key
//! and the state split the same way, `op(ΔA) = Σᵢ opᵢ(ΔAᵢ)`, because each
//! key's rows, before and after the step, are all in one shard. The hash is
//! XXH64 with a fixed seed, stable across processes and machines, so a
//! checkpoint restores each key into the shard that later changes of it
//! reach. A checkpoint records its number of shards; a circuit of another
//! number (a pipeline resumed with more or fewer workers) re-splits the
//! state by the same hash as it reads it
//! ([`Operator::restore_resharded`]).

use std::sync::Arc;

use datafusion::arrow::datatypes::SchemaRef;
use rayon::prelude::*;

use super::{Contents, Operator};
use crate::checkpoint::{Route, StateReader, StateWriter};
use crate::row::EncodedRows;
use crate::{Error, Result, ZSet};

/// Seed of the routing hash; changing it would scatter the keys of every
/// sharded checkpoint.
const ROUTE_SEED: u64 = 0x6564_6479; // "eddy"

/// A partitioned operator split into shards evaluated in parallel.
pub struct Sharded {
    shards: Vec<Box<dyn Operator>>,
    schema: SchemaRef,
}

impl Sharded {
    /// Shards built alike (the same operator, the same settings, no
    /// state yet), each [`partitioned`](Operator::partitioned), producing
    /// rows of `schema`.
    pub fn new(shards: Vec<Box<dyn Operator>>, schema: SchemaRef) -> Result<Self> {
        match shards.first() {
            None => return Err(Error::Circuit("a sharded operator needs a shard".into())),
            Some(first) if !shards.iter().all(|s| s.partitioned()) => {
                return Err(Error::Circuit(format!(
                    "{} is not partitioned by a key: it cannot be sharded",
                    first.name()
                )))
            }
            Some(_) => {}
        }
        Ok(Self { shards, schema })
    }

    /// Splits each input change by the route of its rows' keys: the
    /// changes of shard `s` are `routed[s]`.
    fn route(&self, inputs: &[&ZSet]) -> Result<Vec<Vec<ZSet>>> {
        let n = self.shards.len();
        let mut routed: Vec<Vec<ZSet>> = (0..n).map(|_| Vec::with_capacity(inputs.len())).collect();
        for (input, change) in inputs.iter().enumerate() {
            if change.is_empty() {
                for parts in &mut routed {
                    parts.push(ZSet::empty(&change.schema()));
                }
                continue;
            }
            let keys = self.shards[0].partition_keys(input, change)?;
            let mut indices: Vec<Vec<u32>> = vec![Vec::new(); n];
            for i in 0..change.len() {
                indices[shard_of(keys.row(i), n)].push(i as u32);
            }
            for (parts, idx) in routed.iter_mut().zip(&indices) {
                parts.push(if idx.len() == change.len() {
                    (*change).clone()
                } else {
                    change.take(idx)?
                });
            }
        }
        Ok(routed)
    }
}

/// The shard (of `n`) that a key's rows go to.
pub fn shard_of(key: &[u8], n: usize) -> usize {
    (twox_hash::XxHash64::oneshot(ROUTE_SEED, key) % n as u64) as usize
}

impl Operator for Sharded {
    fn name(&self) -> &str {
        self.shards[0].name()
    }

    fn shards(&self) -> usize {
        self.shards.len()
    }

    fn eval(&mut self, inputs: &[&ZSet]) -> Result<ZSet> {
        let routed = self.route(inputs)?;
        let outputs = self
            .shards
            .par_iter_mut()
            .zip(routed)
            .map(|(shard, parts)| {
                if parts.iter().all(ZSet::is_empty) && shard.quiet_on_empty() {
                    return Ok(ZSet::empty(&self.schema));
                }
                let parts: Vec<&ZSet> = parts.iter().collect();
                shard.eval(&parts)
            })
            .collect::<Result<Vec<ZSet>>>()?;
        ZSet::concat(&self.schema, &outputs)
    }

    fn quiet_on_empty(&self) -> bool {
        self.shards.iter().all(|s| s.quiet_on_empty())
    }

    fn state_entries(&self) -> usize {
        self.shards.iter().map(|s| s.state_entries()).sum()
    }

    fn state_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.state_bytes()).sum()
    }

    fn state_storage_bytes(&self) -> usize {
        self.shards.iter().map(|s| s.state_storage_bytes()).sum()
    }

    fn save(&self, w: &mut StateWriter) -> Result<()> {
        w.put(&self.shards.len())?;
        self.shards.iter().try_for_each(|s| s.save(w))
    }

    fn restore(&mut self, r: &mut StateReader) -> Result<()> {
        let n: usize = r.get()?;
        if n != self.shards.len() {
            return Err(r.corrupt(&format!(
                "the state of {n} workers, not {}",
                self.shards.len()
            )));
        }
        self.shards.iter_mut().try_for_each(|s| s.restore(r))
    }

    fn partitioned(&self) -> bool {
        true
    }

    fn contents(&self) -> Option<Contents> {
        let parts: Vec<Contents> = self
            .shards
            .iter()
            .map(|s| s.contents())
            .collect::<Option<_>>()?;
        Some(Arc::new(move |sink| {
            for read in &parts {
                let mut more = true;
                read(&mut |z| {
                    more = sink(z);
                    more
                })?;
                if !more {
                    break;
                }
            }
            Ok(())
        }))
    }

    fn partition_keys(&self, input: usize, change: &ZSet) -> Result<EncodedRows> {
        self.shards[0].partition_keys(input, change)
    }

    /// Each shard reads every saved shard's state in turn, keeping the
    /// keys routed to it: the state is read once per shard (a one-time
    /// cost when a pipeline resumes with another number of workers), the
    /// shards in parallel, each with its own reader.
    fn restore_resharded(&mut self, saved: usize, r: &mut StateReader) -> Result<()> {
        if saved > 1 {
            let n: usize = r.get()?;
            if n != saved {
                return Err(r.corrupt(&format!("the state of {n} shards, not {saved}")));
            }
        }
        let of = self.shards.len();
        let ends = self
            .shards
            .par_iter_mut()
            .enumerate()
            .map(|(shard, op)| {
                let mut r = r.clone();
                for part in 0..saved {
                    r.set_route(Some(Route {
                        keep: Some((shard, of)),
                        merge: part > 0,
                    }));
                    op.restore(&mut r)?;
                }
                Ok(r.position())
            })
            .collect::<Result<Vec<usize>>>()?;
        // Every shard read the same parts: the reader goes on after them.
        match ends.split_first() {
            Some((&end, rest)) if rest.iter().all(|&e| e == end) => {
                r.skip_to(end);
                Ok(())
            }
            _ => Err(r.corrupt("shards that read their state to different ends")),
        }
    }
}

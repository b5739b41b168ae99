//! Program changes that keep state: the pipeline of a changed program
//! takes over, from the pipeline of the program a checkpoint was written
//! by, the state of every table and view that did not change, and its next
//! step computes only the others.
//!
//! Each table and each view owns the nodes that its lowering added: views
//! are lowered one at a time and never share nodes, a view reading another
//! only through that view's last node. An unchanged relation (same
//! definition, reading only unchanged relations) is therefore built the
//! same way in both circuits, and its nodes' states move over one by one,
//! through a state file, so that batch files are linked rather than
//! copied. The next step runs only the nodes of new and changed relations
//! ([`Circuit::step_bootstrap`](eddy_dbsp::Circuit::step_bootstrap)):
//! where one of them reads a kept table or view, it reads that relation's
//! whole contents (a materialized table's, or the view's integrated
//! output), so that it comes out whole; kept relations' changes in that
//! step are empty, since their outputs already hold what they computed.

use std::collections::HashMap;
use std::path::Path;

use eddy_dbsp::checkpoint::{StateReader, StateWriter};
use eddy_dbsp::operator::{Integrate, Operator};
use eddy_dbsp::{NodeId, ZSet};

use super::checkpoint::Kept;
use super::Pipeline;
use crate::error::{SqlError, SqlResult};

/// The state file written into the scratch folder.
const TRANSFER_FILE: &str = "bootstrap.bin";

/// Where a relation's whole contents are kept.
enum Whole<'a> {
    /// A materialized table's contents.
    Table(&'a Integrate),
    /// A keyed table's upsert's state.
    Keyed,
    /// A kept view's contents.
    View(&'a Integrate),
}

impl Kept {
    /// The table or view the contents belong to.
    fn relation(&self) -> &str {
        match self {
            Kept::View(v) | Kept::Ordered(v) => v,
            Kept::Table(t) => t,
        }
    }
}

impl Pipeline {
    /// Takes over from `old`, the pipeline of an earlier program restored
    /// from its checkpoint, the state of the tables and views named in
    /// `kept` (those whose definitions, and everything they read, did not
    /// change): their operators' states, the contents kept for reading,
    /// the late counts and the clock. The next step computes every other
    /// relation from the kept ones' contents. `scratch` is an empty folder
    /// for the state on its way; the caller removes it.
    pub fn take_state(&mut self, old: &Pipeline, kept: &[String], scratch: &Path) -> SqlResult<()> {
        let mut names: Vec<&str> = kept.iter().map(String::as_str).collect();
        names.sort_unstable();
        names.dedup();
        let (mut from, mut to): (Vec<NodeId>, Vec<NodeId>) = (Vec::new(), Vec::new());
        // The members of a recursive group share their nodes: once each.
        let mut taken = std::collections::HashSet::new();
        for name in &names {
            let (Some(a), Some(b)) = (old.owned.get(*name), self.owned.get(*name)) else {
                return Err(SqlError::new(format!(
                    "'{name}' is not a relation of both programs"
                )));
            };
            if a.len() != b.len() {
                return Err(SqlError::new(format!(
                    "'{name}' was built of {} operators and is now built of {}",
                    a.len(),
                    b.len()
                )));
            }
            // A recursive group's members share their nodes: all or none.
            if let Some((other, _)) = self
                .owned
                .iter()
                .find(|(n, r)| *r == b && !names.contains(&n.as_str()))
            {
                return Err(SqlError::new(format!(
                    "'{name}' and '{other}' are computed together: one cannot be kept without the other"
                )));
            }
            if taken.insert(b.start) {
                from.extend(a.clone());
                to.extend(b.clone());
            }
        }
        let contents: Vec<Kept> = self
            .kept_contents()
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| names.contains(&k.relation()))
            .collect();
        let old_contents = old.kept_contents();
        let mut w = StateWriter::create_named(scratch, TRANSFER_FILE)?;
        old.circuit.save_nodes(&from, &mut w)?;
        for k in &contents {
            let Some((_, c)) = old_contents.iter().find(|(o, _)| o == k) else {
                return Err(SqlError::new(format!(
                    "the earlier program kept no contents of '{}'",
                    k.relation()
                )));
            };
            w.section(|w| c.save(w))?;
        }
        w.put(&old.clock.now())?;
        w.finish()?;
        let mut r = StateReader::open_named(scratch, TRANSFER_FILE)?;
        self.circuit.restore_nodes(&to, &mut r)?;
        for k in &contents {
            let kept = self.kept_contents_mut(k);
            r.section(|r| kept.restore(r))?;
        }
        self.clock.advance(r.get()?);
        r.finish()?;
        let mut fresh = vec![true; self.circuit.len()];
        for n in to {
            fresh[n] = false;
        }
        self.fresh = Some(fresh);
        // A kept upsert holds its table's rows if the old one did.
        self.partial = old
            .partial
            .iter()
            .filter(|t| names.contains(&t.as_str()))
            .cloned()
            .collect();
        Ok(())
    }

    /// The first step after [`take_state`](Self::take_state): only the
    /// nodes in `fresh` run, each kept node they read giving its whole
    /// contents.
    pub(super) fn step_bootstrap(&mut self, fresh: &[bool]) -> SqlResult<()> {
        let mut contents: HashMap<NodeId, ZSet> = HashMap::new();
        for (node, _) in fresh.iter().enumerate().filter(|(_, f)| **f) {
            for &input in self.circuit.inputs_of(node) {
                if fresh[input] || contents.contains_key(&input) {
                    continue;
                }
                let whole = self.whole(input)?.ok_or_else(|| {
                    SqlError::new(format!(
                        "{} is computed afresh from {}, whose contents are not kept (it must be materialized for that)",
                        self.owner(node),
                        self.owner(input)
                    ))
                })?;
                contents.insert(input, whole);
            }
        }
        self.circuit.step_bootstrap(fresh, &contents)?;
        Ok(())
    }

    /// The whole contents of a kept table's or view's last node, if they
    /// are kept (a table with a primary key's are its upsert's state).
    fn whole(&self, node: NodeId) -> SqlResult<Option<ZSet>> {
        let schema = self.circuit.schema(node);
        let whole = match self.kept_whole(node) {
            Some(Whole::Table(c) | Whole::View(c)) => c.contents()?,
            Some(Whole::Keyed) => match self.circuit.contents(node) {
                Some(read) => eddy_dbsp::operator::read_contents(&read, schema)?,
                None => return Ok(None),
            },
            None => return Ok(None),
        };
        Ok(Some(whole.with_schema(schema)?))
    }

    /// Whether [`whole`](Self::whole) has the contents of `node`.
    pub(super) fn reads_whole(&self, node: NodeId) -> bool {
        match self.kept_whole(node) {
            Some(Whole::Keyed) => self.circuit.contents(node).is_some(),
            found => found.is_some(),
        }
    }

    /// Where the whole contents of `node` are kept, if they are.
    fn kept_whole(&self, node: NodeId) -> Option<Whole<'_>> {
        if let Some((_, c)) = self.tables.values().find(|(n, _)| *n == node) {
            return Some(Whole::Table(c));
        }
        if self
            .keyed
            .iter()
            .any(|(t, &n)| n == node && !self.partial.contains(t))
        {
            return Some(Whole::Keyed);
        }
        let v = self.views.values().find(|v| v.node == node)?;
        v.contents.as_ref().map(Whole::View)
    }

    /// The table or view that added `node`, for messages.
    pub(super) fn owner(&self, node: NodeId) -> String {
        let name = self
            .owned
            .iter()
            .find(|(_, r)| r.contains(&node))
            .map(|(n, _)| n.as_str());
        match name {
            Some(n) if self.inputs.contains_key(n) => format!("table '{n}'"),
            Some(n) => format!("view '{n}'"),
            None => format!("node {node}"),
        }
    }
}

//! A pipeline's checkpoints: its whole state written into a folder (the
//! circuit's shape, every operator's state, the contents kept for reading
//! and the clock) and read back into a pipeline built from the same
//! program, on any number of workers (see
//! [`eddy_dbsp::operator::Operator::restore_resharded`]).

use std::ops::Range;
use std::path::Path;

use eddy_dbsp::checkpoint::{PendingState, StateReader, StateWriter};
use eddy_dbsp::operator::{Integrate, Operator};
use eddy_dbsp::{NodeId, ZSet};

use super::Pipeline;
use crate::error::{SqlError, SqlResult};

/// Contents a pipeline keeps for reading, besides its circuit.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kept {
    View(String),
    Ordered(String),
    Table(String),
}

/// A checkpoint whose cut is taken ([`Pipeline::checkpoint_cut`]): what is
/// left to write.
pub struct PendingCheckpoint {
    state: PendingState,
}

impl PendingCheckpoint {
    /// Writes the rest of the checkpoint and syncs it. Returns the bytes
    /// written and the bytes of batch files linked rather than written.
    pub fn finish(self) -> SqlResult<(u64, u64)> {
        Ok(self.state.finish()?)
    }
}

impl Pipeline {
    /// Writes the pipeline's whole state into the folder `dir` (which
    /// must exist): the circuit's shape, every operator's state, the
    /// contents kept for reading and the clock. Returns the bytes written
    /// and the bytes of batch files linked rather than written (see
    /// [`eddy_dbsp::checkpoint`]).
    pub fn checkpoint(&self, dir: &Path) -> SqlResult<(u64, u64)> {
        self.checkpoint_cut(dir)?.finish()
    }

    /// The part of [`checkpoint`](Self::checkpoint) that needs the
    /// pipeline: the state is cut (values copied, batch files linked,
    /// in-memory batches shared); the returned rest writes them, and may
    /// run on another thread while the pipeline steps on.
    pub fn checkpoint_cut(&self, dir: &Path) -> SqlResult<PendingCheckpoint> {
        let mut w = StateWriter::create(dir)?;
        w.put(&self.shape())?;
        self.circuit.save(&mut w)?;
        for (_, contents) in self.kept_contents() {
            w.section(|w| contents.save(w))?;
        }
        w.put(&self.clock.now())?;
        Ok(PendingCheckpoint { state: w.pending() })
    }

    /// Replaces the state of a freshly built pipeline with the one
    /// [`checkpoint`](Self::checkpoint) wrote into `dir`, from a pipeline
    /// built the same way (on any number of workers). A checkpoint of
    /// another circuit (another program, or the same one planned otherwise
    /// by another build) is refused, naming the first node that differs;
    /// see [`resume`](Self::resume) for the latter.
    pub fn restore(&mut self, dir: &Path) -> SqlResult<()> {
        self.restore_from(dir, false)
    }

    /// [`restore`](Self::restore) for a checkpoint that the caller knows
    /// was written by this very program (the same text, or one that
    /// differs in connectors or comments only), maybe by an earlier
    /// build of Eddy that plans some of its views otherwise: those views
    /// are computed again from what they read, and every other table and
    /// view keeps its state (see
    /// [`restore_replanned`](Self::restore_replanned)).
    pub fn resume(&mut self, dir: &Path) -> SqlResult<()> {
        self.restore_from(dir, true)
    }

    fn restore_from(&mut self, dir: &Path, same_program: bool) -> SqlResult<()> {
        let mut r = StateReader::open(dir)?;
        // Shard counts may differ: the circuit re-splits the state.
        let saved = r.get::<String>()?;
        let here = self.shape();
        // Columns are compared where the checkpoint gives them (earlier
        // layouts do not).
        let columns = |shape: &str| -> Vec<String> {
            (shape.lines())
                .filter(|l| l.starts_with(FIELDS))
                .map(str::to_string)
                .collect()
        };
        let saved_columns = columns(&saved);
        let other_columns = !saved_columns.is_empty() && saved_columns != columns(&here);
        let same_nodes = compared(&saved) == compared(&here);
        if other_columns || !same_nodes {
            if same_program {
                return self.restore_replanned(&saved, &here, &mut r, dir);
            }
            let why = match same_nodes {
                true => "nodes that yield other columns".to_string(),
                false => first_difference(&saved, &here),
            };
            return Err(another_circuit(dir, &why));
        }
        self.circuit.restore(&mut r)?;
        let kept: Vec<Kept> = self.kept_contents().into_iter().map(|(k, _)| k).collect();
        for k in &kept {
            let contents = self.kept_contents_mut(k);
            r.section(|r| contents.restore(r))?;
        }
        self.clock.advance(r.get()?);
        r.finish()?;
        self.partial = self.partial_keyed(&saved);
        Ok(())
    }

    /// Restores a checkpoint whose circuit differs from this one's, table
    /// by table and view by view, when both hold the same relations:
    /// - a relation built of the same operators in the same way (what its
    ///   nodes read named by relation, so that a view before it being
    ///   built of more or fewer nodes does not matter) takes its nodes'
    ///   states and its kept contents;
    /// - a table built otherwise is refused, since its state may be all
    ///   there is of its rows;
    /// - a view built otherwise is computed again, here, from the whole
    ///   contents of what it reads (which must be kept), and what it
    ///   yields is forgotten: its query is the same, so its rows are, and
    ///   the views reading it and its outputs hold them already. Its kept
    ///   contents take the recomputed rows, and a view whose rows differ
    ///   is named ([`recomputed_differently`](Self::recomputed_differently));
    ///   one with a `LATENESS` or `emit_final` is refused, since its
    ///   progress would start over.
    ///
    /// Checkpoints of layouts without sections, or without the nodes each
    /// relation owns, are refused as another circuit. Refusals come before
    /// anything is restored; a restore that fails later (a corrupt
    /// section) leaves the pipeline to be dropped.
    fn restore_replanned(
        &mut self,
        saved: &str,
        here_text: &str,
        r: &mut StateReader,
        dir: &Path,
    ) -> SqlResult<()> {
        let refuse = |why: String| another_circuit(dir, &why);
        let (Some(there), Some(here)) = (Shape::parse(saved), Shape::parse(here_text)) else {
            return Err(refuse(first_difference(saved, here_text)));
        };
        if !r.sectioned() || there.owners.is_empty() {
            return Err(refuse(first_difference(saved, here_text)));
        }
        let mut names: Vec<&String> = self.owned.keys().collect();
        names.sort();
        let mut theirs: Vec<&str> = there.owners.iter().map(|(n, _)| n.as_str()).collect();
        theirs.sort_unstable();
        theirs.dedup();
        let mut ours: Vec<String> = names.iter().map(|n| format!("{n:?}")).collect();
        ours.sort_unstable();
        if theirs != ours {
            return Err(refuse("other tables and views".to_string()));
        }
        let mut map: Vec<Option<NodeId>> = vec![None; there.nodes.len()];
        let mut fresh = vec![false; self.circuit.len()];
        let mut recomputed: Vec<String> = Vec::new();
        for name in names {
            let ours = &self.owned[name];
            let quoted = format!("{name:?}");
            let theirs = there.range(&quoted).expect("the same names");
            if there.signature(&theirs) == here.signature(ours) {
                for (a, b) in theirs.zip(ours.clone()) {
                    map[a] = Some(b);
                }
            } else if self.inputs.contains_key(name) {
                return Err(refuse(format!("table '{name}' is built otherwise")));
            } else {
                fresh[ours.clone()].fill(true);
                recomputed.push(name.clone());
            }
        }
        // What cannot be computed again is refused before anything is
        // restored: a view whose lateness or `emit_final` has progress
        // that its rows do not tell, and one reading rows not kept.
        for name in &recomputed {
            let def = self.program.views.iter().find(|v| v.name == *name);
            let timed = def.is_some_and(|v| {
                !v.lateness.is_empty()
                    || v.options
                        .iter()
                        .any(|(k, _)| k.eq_ignore_ascii_case("emit_final"))
            });
            if timed {
                return Err(refuse(format!(
                    "view '{name}' is built otherwise, and its LATENESS or emit_final \
                     would start over if it were computed again"
                )));
            }
        }
        self.partial = self.partial_keyed(saved);
        for node in (0..fresh.len()).filter(|&n| fresh[n]) {
            for &input in self.circuit.inputs_of(node) {
                if !fresh[input] && !self.reads_whole(input) {
                    return Err(SqlError::new(format!(
                        "{} is planned otherwise by this Eddy than by the one that wrote the \
                         checkpoint in {}, so it is computed again from {}, whose rows are not \
                         kept (declare it materialized, or clear the pipeline's storage)",
                        self.owner(node),
                        dir.display(),
                        self.owner(input)
                    )));
                }
            }
        }
        self.circuit.restore_mapped(&map, r)?;
        let kept: Vec<Kept> = self.kept_contents().into_iter().map(|(k, _)| k).collect();
        let mut restored = 0;
        for line in &there.kept {
            match kept.iter().find(|k| format!("{k:?}") == *line) {
                // A recomputed view's ordered core is built otherwise too
                // (and maybe of other columns): it is taken from the
                // recomputation.
                Some(Kept::Ordered(v)) if recomputed.contains(v) => {
                    r.skip_section()?;
                    restored += 1;
                }
                Some(k) => {
                    let contents = self.kept_contents_mut(k);
                    r.section(|r| contents.restore(r))?;
                    restored += 1;
                }
                None => r.skip_section()?,
            }
        }
        if restored != kept.len() {
            return Err(refuse(
                "contents kept here and not in the checkpoint".to_string(),
            ));
        }
        self.clock.advance(r.get()?);
        r.finish()?;
        if !recomputed.is_empty() {
            // The same query gives the same rows, which outputs and
            // readers hold already: what the views yield is not a change.
            self.step_bootstrap(&fresh)?;
            self.differing = self.take_recomputed_rows(&recomputed)?;
            self.circuit.forget_outputs();
        }
        self.recomputed = recomputed;
        Ok(())
    }

    /// After the step that computed `views` again: their kept contents
    /// become what they yielded (an ordered core's, which was not
    /// restored, whole). Returns the views whose rows then differ from
    /// the restored ones (a plan that corrects an earlier build's answer,
    /// or sums of floats in another order).
    fn take_recomputed_rows(&mut self, views: &[String]) -> SqlResult<Vec<String>> {
        let mut differing = Vec::new();
        for name in views {
            let Some(view) = self.views.get_mut(name) else {
                continue;
            };
            if let Some(contents) = &mut view.contents {
                let now = match self.circuit.output(view.node) {
                    Some(z) => z.clone().with_schema(&view.schema)?,
                    None => ZSet::empty(&view.schema),
                };
                let before = contents.contents()?.negate();
                let change = ZSet::concat(&view.schema, &[now, before])?.consolidate()?;
                if !change.is_empty() {
                    contents.add(&change)?;
                    differing.push(name.clone());
                }
            }
            if let Some(p) = &mut view.presentation {
                if let Some(core) = self.circuit.output(p.core) {
                    p.core_contents.add(core)?;
                }
            }
        }
        Ok(differing)
    }

    /// The views among [`recomputed_views`](Self::recomputed_views) whose
    /// kept rows differ from those the checkpoint held: their contents are
    /// the recomputed rows, and their outputs were not told the difference.
    pub fn recomputed_differently(&self) -> &[String] {
        &self.differing
    }

    /// The views that the last [`restore`](Self::restore) computed again
    /// from what they read, because this build plans them otherwise than
    /// the one that wrote the checkpoint.
    pub fn recomputed_views(&self) -> &[String] {
        &self.recomputed
    }

    /// The keyed tables whose upserts do not hold their rows after a
    /// restore from a checkpoint of shape `saved`: those saved by a build
    /// that dropped their unread columns.
    fn partial_keyed(&self, saved: &str) -> std::collections::HashSet<String> {
        self.keyed
            .keys()
            .filter(|t| !saved.lines().any(|l| l == keyed_rows(t)))
            .cloned()
            .collect()
    }

    /// What a checkpoint must match to be restored as it is: the
    /// circuit's operators and the contents kept for reading (compared
    /// [`unsharded`]); and, not compared, the tables whose upserts hold
    /// their rows (see [`keyed_rows`]) and the nodes each table and view
    /// owns (see [`owner_line`]).
    fn shape(&self) -> String {
        let mut shape = self.circuit.describe();
        shape.extend(self.kept_contents().iter().map(|(k, _)| format!("{k:?}")));
        let mut keyed: Vec<&String> = self
            .keyed
            .keys()
            .filter(|t| !self.partial.contains(*t))
            .collect();
        keyed.sort();
        shape.extend(keyed.into_iter().map(|t| keyed_rows(t)));
        let mut owned: Vec<(&String, &Range<NodeId>)> = self.owned.iter().collect();
        owned.sort_by(|a, b| a.0.cmp(b.0));
        shape.extend(owned.into_iter().map(|(n, r)| owner_line(n, r)));
        shape.extend((0..self.circuit.len()).map(|n| {
            let fields: Vec<String> = (self.circuit.schema(n).fields().iter())
                .map(|f| format!("{} {}", f.data_type(), f.is_nullable()))
                .collect();
            format!("{FIELDS}{n} {}", fields.join(", "))
        }));
        shape.join("\n")
    }

    /// The contents kept for reading, in a fixed order: each kept view's
    /// (and its ordered core's), then each materialized table's.
    pub(super) fn kept_contents(&self) -> Vec<(Kept, &Integrate)> {
        let mut out: Vec<(Kept, &Integrate)> = Vec::new();
        for (name, v) in &self.views {
            if let Some(contents) = &v.contents {
                out.push((Kept::View(name.clone()), contents));
            }
            if let Some(p) = &v.presentation {
                out.push((Kept::Ordered(name.clone()), &p.core_contents));
            }
        }
        for (name, (_, contents)) in &self.tables {
            out.push((Kept::Table(name.clone()), contents));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// One of [`kept_contents`](Self::kept_contents), to change.
    pub(super) fn kept_contents_mut(&mut self, kept: &Kept) -> &mut Integrate {
        match kept {
            Kept::View(v) => {
                let view = self.views.get_mut(v).expect("a view");
                view.contents.as_mut().expect("a kept view")
            }
            Kept::Ordered(v) => {
                let p = self.views.get_mut(v).and_then(|v| v.presentation.as_mut());
                &mut p.expect("an ordered view").core_contents
            }
            Kept::Table(t) => &mut self.tables.get_mut(t).expect("a table").1,
        }
    }
}

/// The line of a checkpoint's shape saying that table `table`'s upsert
/// holds its whole rows. Builds before it dropped a keyed table's unread
/// columns on arrival, so a checkpoint without the line is restored with
/// the table's rows not to be read (a view added over it then cannot be
/// computed, rather than computed from nulls).
fn keyed_rows(table: &str) -> String {
    format!("KeyedRows({table:?})")
}

/// The line of a checkpoint's shape saying that relation `name` owns
/// `nodes` (see [`Shape::signature`]).
fn owner_line(name: &str, nodes: &Range<NodeId>) -> String {
    format!("{OWNER}{name:?} {}..{}", nodes.start, nodes.end)
}

/// How an [`owner_line`] starts.
const OWNER: &str = "Owner ";

/// How a line of a shape giving a node's output columns starts (their
/// types and nullability: a node of the same operator yielding other
/// columns keeps another state). Not their names, some of which the
/// planner numbers by the programs a process has planned.
const FIELDS: &str = "Fields ";

/// A shape as it is compared: [`unsharded`], without its [`keyed_rows`]
/// and [`owner_line`] lines.
fn compared(shape: &str) -> String {
    let lines: Vec<&str> = shape
        .lines()
        .filter(|l| {
            !l.starts_with("KeyedRows(\"") && !l.starts_with(OWNER) && !l.starts_with(FIELDS)
        })
        .collect();
    unsharded(&lines.join("\n"))
}

/// The refusal of the checkpoint in `dir`, with why.
fn another_circuit(dir: &Path, why: &str) -> SqlError {
    SqlError::new(format!(
        "the checkpoint in {} is of another circuit ({why}): another program, or an Eddy \
         that plans this program otherwise and cannot keep its state; clear the pipeline's \
         storage to start from nothing",
        dir.display()
    ))
}

/// Where two shapes first differ, as each describes it.
fn first_difference(there: &str, here: &str) -> String {
    let (a, b) = (compared(there), compared(here));
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let (there, here) = (0..a.len().max(b.len()))
        .find(|&i| a.get(i) != b.get(i))
        .map_or((None, None), |i| (a.get(i).copied(), b.get(i).copied()));
    format!(
        "{} in the checkpoint, {} here",
        there.unwrap_or("nothing"),
        here.unwrap_or("nothing")
    )
}

/// A checkpoint's shape, read back: each node's operator (without its
/// shard count) and inputs, the nodes each relation owns, and the
/// contents kept, in the order they were saved.
struct Shape {
    nodes: Vec<(String, Vec<NodeId>)>,
    /// Each node's output columns, as its [`FIELDS`] line gives them.
    fields: Vec<Option<String>>,
    /// Each relation's name, as `{:?}` writes it, and nodes.
    owners: Vec<(String, Range<NodeId>)>,
    kept: Vec<String>,
}

impl Shape {
    /// Reads a shape, or `None` where a line is not as [`Pipeline::shape`]
    /// writes them.
    fn parse(shape: &str) -> Option<Shape> {
        let mut out = Shape {
            nodes: Vec::new(),
            fields: Vec::new(),
            owners: Vec::new(),
            kept: Vec::new(),
        };
        let mut fields: Vec<(NodeId, String)> = Vec::new();
        for line in unsharded(shape).lines() {
            if let Some(rest) = line.strip_prefix(FIELDS) {
                let (node, columns) = rest.split_once(' ').unwrap_or((rest, ""));
                fields.push((node.parse().ok()?, columns.to_string()));
            } else if let Some(rest) = line.strip_prefix(OWNER) {
                let (name, range) = rest.rsplit_once(' ')?;
                let (start, end) = range.split_once("..")?;
                let (start, end) = (start.parse().ok()?, end.parse().ok()?);
                if start > end {
                    return None;
                }
                out.owners.push((name.to_string(), start..end));
            } else if line.starts_with("KeyedRows(\"") {
                continue;
            } else if line.starts_with(|c: char| c.is_ascii_digit()) {
                let (index, rest) = line.split_once(": ")?;
                let (operator, inputs) = rest.rsplit_once(" [")?;
                let inputs = inputs.strip_suffix(']')?;
                let inputs = match inputs {
                    "" => Vec::new(),
                    list => list
                        .split(", ")
                        .map(|i| i.parse().ok())
                        .collect::<Option<Vec<NodeId>>>()?,
                };
                if index.parse::<NodeId>().ok()? != out.nodes.len() {
                    return None;
                }
                out.nodes.push((operator.to_string(), inputs));
            } else {
                out.kept.push(line.to_string());
            }
        }
        let n = out.nodes.len();
        out.fields = vec![None; n];
        for (node, columns) in fields {
            *out.fields.get_mut(node)? = Some(columns);
        }
        out.owners.iter().all(|(_, r)| r.end <= n).then_some(out)
    }

    /// The nodes of the relation named `quoted` (as `{:?}` writes it).
    fn range(&self, quoted: &str) -> Option<Range<NodeId>> {
        self.owners
            .iter()
            .find(|(n, _)| n == quoted)
            .map(|(_, r)| r.clone())
    }

    /// How the relation owning `nodes` is built, comparable across
    /// circuits: each node's operator, output columns and what it reads (a
    /// node of the
    /// relation by its place in it, another relation's by that
    /// relation's name and its place counted from the relation's last
    /// node, which is what views read of each other).
    fn signature(&self, nodes: &Range<NodeId>) -> Vec<String> {
        let named = |input: NodeId| -> String {
            if nodes.contains(&input) {
                return format!("#{}", input - nodes.start);
            }
            match self.owners.iter().find(|(_, r)| r.contains(&input)) {
                Some((name, r)) => format!("{name}-{}", r.end - 1 - input),
                None => format!("?{input}"),
            }
        };
        nodes
            .clone()
            .map(|i| {
                let (operator, inputs) = &self.nodes[i];
                let inputs: Vec<String> = inputs.iter().map(|&i| named(i)).collect();
                let fields = self.fields[i].as_deref().unwrap_or("?");
                format!("{operator} [{}] ({fields})", inputs.join(", "))
            })
            .collect()
    }
}

/// A circuit's shape without the shard counts of its nodes (`3: join×4
/// [1, 2]` is `3: join [1, 2]`): a pipeline restored with another number
/// of workers re-splits each partitioned operator's state. Only a node
/// line's operator loses its count; other lines are left as they are.
fn unsharded(shape: &str) -> String {
    let node = |line: &str| -> Option<String> {
        let (index, rest) = line.split_once(": ")?;
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (operator, inputs) = rest.rsplit_once(" [")?;
        let (name, count) = operator.rsplit_once('×')?;
        if count.is_empty() || !count.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(format!("{index}: {name} [{inputs}"))
    };
    shape
        .lines()
        .map(|line| node(line).unwrap_or_else(|| line.to_string()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Program;

    /// A keyed table's upsert holds its rows after a restore from a
    /// checkpoint that says so, and not from one of an earlier build,
    /// which does not (and may have dropped its unread columns).
    #[test]
    fn keyed_rows_are_known_only_from_checkpoints_that_say_so() {
        let text = "CREATE TABLE k (id BIGINT PRIMARY KEY, a VARCHAR);\n\
                    CREATE VIEW n AS SELECT COUNT(*) AS c FROM k;";
        let build = || Pipeline::new(Program::parse(text).unwrap()).unwrap();
        let p = build();
        assert!(p.keyed.contains_key("k"));
        assert!(p.shape().lines().any(|l| l == keyed_rows("k")));
        let dir = std::env::temp_dir().join(format!("eddy-keyed-{}", std::process::id()));
        let (now, before) = (dir.join("now"), dir.join("before"));
        for d in [&now, &before] {
            std::fs::create_dir_all(d).unwrap();
        }
        p.checkpoint(&now).unwrap();
        // As an earlier build wrote it: no line for the keyed table.
        let mut w = StateWriter::create(&before).unwrap();
        let shape = p.shape();
        let lines: Vec<&str> = shape
            .lines()
            .filter(|l| !l.starts_with("KeyedRows"))
            .collect();
        w.put(&lines.join("\n")).unwrap();
        p.circuit.save(&mut w).unwrap();
        for (_, contents) in p.kept_contents() {
            w.section(|w| contents.save(w)).unwrap();
        }
        w.put(&p.clock.now()).unwrap();
        w.finish().unwrap();
        let mut restored = build();
        restored.restore(&now).unwrap();
        assert!(restored.partial.is_empty());
        assert!((restored.keyed_rows("k").unwrap().1)(&mut |_| true).is_ok());
        let mut restored = build();
        restored.restore(&before).unwrap();
        assert!(restored.partial.contains("k"));
        let err = (restored.keyed_rows("k").unwrap().1)(&mut |_| true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("clear the pipeline's storage"), "{err}");
        // And its next checkpoint says so too.
        assert!(!restored.shape().contains("KeyedRows"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_shape_loses_only_its_operators_shard_counts() {
        let shape = "0: input []\n3: join×4 [1, 2]\n4: aggregate×12 [3]\nView(\"a×2\")";
        assert_eq!(
            unsharded(shape),
            "0: input []\n3: join [1, 2]\n4: aggregate [3]\nView(\"a×2\")"
        );
    }
}

//! A pipeline's checkpoints: its whole state written into a folder (the
//! circuit's shape, every operator's state, the contents kept for reading
//! and the clock) and read back into a pipeline built from the same
//! program, on any number of workers (see
//! [`eddy_dbsp::operator::Operator::restore_resharded`]).

use std::path::Path;

use eddy_dbsp::checkpoint::{PendingState, StateReader, StateWriter};
use eddy_dbsp::operator::{Integrate, Operator};

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
            contents.save(&mut w)?;
        }
        w.put(&self.clock.now())?;
        Ok(PendingCheckpoint { state: w.pending() })
    }

    /// Replaces the state of a freshly built pipeline with the one
    /// [`checkpoint`](Self::checkpoint) wrote into `dir`. A checkpoint of
    /// another circuit (another program, or the same one planned otherwise
    /// by another build) is refused, naming the first node that differs.
    pub fn restore(&mut self, dir: &Path) -> SqlResult<()> {
        let mut r = StateReader::open(dir)?;
        // Shard counts may differ: the circuit re-splits the state.
        let saved = r.get::<String>()?;
        let shape = unsharded(&without_keyed_rows(&saved));
        let here = unsharded(&without_keyed_rows(&self.shape()));
        if shape != here {
            // The first node that differs, as both circuits describe it.
            let (a, b): (Vec<&str>, Vec<&str>) = (shape.lines().collect(), here.lines().collect());
            let (there, here) = (0..a.len().max(b.len()))
                .find(|&i| a.get(i) != b.get(i))
                .map_or((None, None), |i| (a.get(i).copied(), b.get(i).copied()));
            return Err(SqlError::new(format!(
                "the checkpoint in {} is of another circuit ({} in the checkpoint, {} here): \
                 another program, or an Eddy that plans this program otherwise; \
                 clear the pipeline's storage to start from nothing",
                dir.display(),
                there.unwrap_or("nothing"),
                here.unwrap_or("nothing"),
            )));
        }
        self.circuit.restore(&mut r)?;
        let kept: Vec<Kept> = self.kept_contents().into_iter().map(|(k, _)| k).collect();
        for k in &kept {
            self.kept_contents_mut(k).restore(&mut r)?;
        }
        self.clock.advance(r.get()?);
        r.finish()?;
        // Upserts saved by a build that dropped their unread columns do
        // not hold their tables' rows.
        self.partial = self
            .keyed
            .keys()
            .filter(|t| !saved.lines().any(|l| l == keyed_rows(t)))
            .cloned()
            .collect();
        Ok(())
    }

    /// What a checkpoint must match to be restored: the circuit's
    /// operators and the contents kept for reading (compared
    /// [`unsharded`]), and the tables whose upserts hold their rows
    /// (not compared: see [`keyed_rows`]).
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

/// A shape without its [`keyed_rows`] lines.
fn without_keyed_rows(shape: &str) -> String {
    shape
        .lines()
        .filter(|l| !l.starts_with("KeyedRows(\""))
        .collect::<Vec<_>>()
        .join("\n")
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
        w.put(&without_keyed_rows(&p.shape())).unwrap();
        p.circuit.save(&mut w).unwrap();
        for (_, contents) in p.kept_contents() {
            contents.save(&mut w).unwrap();
        }
        w.put(&p.clock.now()).unwrap();
        w.finish().unwrap();
        let mut restored = build();
        restored.restore(&now).unwrap();
        assert!(restored.partial.is_empty());
        assert!(restored.keyed_rows("k").unwrap().1().is_ok());
        let mut restored = build();
        restored.restore(&before).unwrap();
        assert!(restored.partial.contains("k"));
        let err = restored.keyed_rows("k").unwrap().1()
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

//! Checkpoints of operator state: what a circuit keeps between two steps,
//! written to a folder and read back into a circuit built from the same
//! program.
//!
//! A checkpoint folder holds one state file (`state.bin`) and the batch
//! files of every trace. Each operator writes its state in turn through a
//! [`StateWriter`] ([`Operator::save`](crate::operator::Operator::save)) and
//! reads it back in the same order through a [`StateReader`]; values
//! implement [`Persist`]. The state file is a little-endian byte stream
//! followed by its CRC-32 and an end marker, written under a temporary name,
//! synced and renamed, so a half-written file is never read as a whole one.
//!
//! Trace batches are not copied into the state file. A batch already in a
//! file (see [`crate::storage`]) is immutable, so the checkpoint takes a hard
//! link to it: checkpointing a trace on disk costs no I/O however large it
//! is, and the link keeps the data after the trace merges the batch away. A
//! batch in memory is written to a new batch file. On restore, a large batch
//! file is adopted by the circuit's storage (linked again, checksums
//! verified) and small ones are read back into memory.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::storage::{FileBatch, Storage};
use crate::{Error, Result};

mod persist;

pub use persist::Persist;

/// The state file of a checkpoint folder.
pub const STATE_FILE: &str = "state.bin";
/// The state layout's version is the magic's last byte: 2 since keyed
/// state (DISTINCT weights, aggregates' sums and outputs) is a hot map and
/// a trace rather than one map; 3 since a server's pipeline keeps the
/// contents of materialized views only (and says which in its shape); 4
/// since the recursion's nested DISTINCT keeps earlier steps' changes in a
/// state map. Layout 3 is still read (the nested DISTINCT tells its two
/// forms apart); a build that reads only 3 refuses a file of layout 4 by
/// its magic rather than misreading it; 5 since each node's state (and
/// each kept relation's contents) is a [section](StateWriter::section)
/// that a reader can skip, so that a build that plans some views
/// otherwise restores the rest. Layouts 3 and 4 are still read, as one
/// stream.
const MAGIC: &[u8; 8] = b"EDDYCKP5";
/// Earlier layouts this build still reads.
const READABLE: &[&[u8; 8]] = &[MAGIC, b"EDDYCKP4", b"EDDYCKP3"];
/// The first layout with sections.
const SECTIONED: u8 = b'5';
/// What state files of every layout start with.
const MAGIC_PREFIX: &[u8; 7] = b"EDDYCKP";
const END: &[u8; 8] = b"EDDYEND1";

fn io_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Storage(format!("{}: {e}", path.display()))
}

/// A batch file written after the cut (its data is immutable, so the
/// circuit may step on meanwhile): writes the file at the path given and
/// returns its size.
type Deferred = Box<dyn FnOnce(&Path) -> Result<u64> + Send>;

/// Writes the state of a circuit into a checkpoint folder.
///
/// Taking a checkpoint has two parts: the *cut*, while the circuit waits,
/// in which every operator writes its state (values copied, batch files
/// linked) and hands over its immutable in-memory batches; and the rest
/// ([`PendingState::finish`]), which writes those batches to files and
/// syncs everything, and may run on another thread while the circuit steps.
pub struct StateWriter {
    dir: PathBuf,
    /// The file's name in `dir`.
    name: String,
    out: BufWriter<File>,
    temporary: PathBuf,
    crc: crc32fast::Hasher,
    /// Batch files written or linked so far.
    batches: u64,
    /// Bytes of batch files linked (not written).
    linked_bytes: u64,
    /// Bytes written (state file and batch files).
    written_bytes: u64,
    /// Batch files to write after the cut.
    deferred: Vec<(PathBuf, Deferred)>,
    /// The bytes of the outermost section being written, which wait here
    /// until its length is known; nested sections are written into it.
    staged: Vec<u8>,
    /// Where each open section's length lies in `staged`, innermost last.
    sections: Vec<usize>,
}

/// A checkpoint's state whose cut is taken: what is left to write.
pub struct PendingState(StateWriter);

impl PendingState {
    /// Writes the batch files handed over at the cut, then completes the
    /// state file (checksum, sync, rename) and syncs the folder. Returns
    /// (bytes written, bytes of batch files linked).
    pub fn finish(self) -> Result<(u64, u64)> {
        let mut w = self.0;
        for (path, job) in std::mem::take(&mut w.deferred) {
            w.written_bytes += job(&path)?;
        }
        w.complete()
    }
}

impl StateWriter {
    /// A writer of the state file of `dir`, which must exist.
    pub fn create(dir: &Path) -> Result<Self> {
        Self::create_named(dir, STATE_FILE)
    }

    /// A writer of state file `name` of `dir` (a checkpoint may hold
    /// several, each read alone).
    pub fn create_named(dir: &Path, name: &str) -> Result<Self> {
        let temporary = dir.join(format!("{name}.tmp"));
        let file = File::create(&temporary).map_err(|e| io_error(&temporary, e))?;
        let mut w = Self {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            out: BufWriter::with_capacity(1 << 20, file),
            temporary,
            crc: crc32fast::Hasher::new(),
            batches: 0,
            linked_bytes: 0,
            written_bytes: 0,
            deferred: Vec::new(),
            staged: Vec::new(),
            sections: Vec::new(),
        };
        w.raw(MAGIC)?;
        Ok(w)
    }

    /// Appends bytes as they are.
    pub fn raw(&mut self, bytes: &[u8]) -> Result<()> {
        if !self.sections.is_empty() {
            self.staged.extend_from_slice(bytes);
            return Ok(());
        }
        self.emit(bytes)
    }

    /// Writes bytes to the file.
    fn emit(&mut self, bytes: &[u8]) -> Result<()> {
        self.crc.update(bytes);
        self.written_bytes += bytes.len() as u64;
        self.out
            .write_all(bytes)
            .map_err(|e| io_error(&self.temporary, e))
    }

    /// Appends a value.
    pub fn put<T: Persist>(&mut self, value: &T) -> Result<()> {
        value.save(self)
    }

    /// Writes what `write` writes as one section: its length, then its
    /// bytes, so that a reader may [skip](StateReader::skip_section) it
    /// unread. Sections nest.
    pub fn section(&mut self, write: impl FnOnce(&mut Self) -> Result<()>) -> Result<()> {
        // The length (a u64, as `put` writes it) is written over its
        // place once the section's bytes are staged after it: each byte
        // is copied once, however deep the nesting.
        let at = self.staged.len();
        self.staged.extend_from_slice(&0u64.to_le_bytes());
        self.sections.push(at);
        let written = write(self);
        self.sections.pop();
        if let Err(e) = written {
            self.staged.truncate(at);
            return Err(e);
        }
        let length = (self.staged.len() - at - 8) as u64;
        self.staged[at..at + 8].copy_from_slice(&length.to_le_bytes());
        if self.sections.is_empty() {
            let staged = std::mem::take(&mut self.staged);
            self.emit(&staged)?;
        }
        Ok(())
    }

    /// Keeps a batch file in the checkpoint: a hard link to it (a copy
    /// where links fail). Returns the name it has there.
    pub(crate) fn link_batch(&mut self, batch: &FileBatch) -> Result<String> {
        let name = self.batch_name();
        let target = self.dir.join(&name);
        if std::fs::hard_link(batch.path(), &target).is_err() {
            std::fs::copy(batch.path(), &target).map_err(|e| io_error(batch.path(), e))?;
            self.written_bytes += batch.size();
        } else {
            self.linked_bytes += batch.size();
        }
        Ok(name)
    }

    /// Names a batch file of the checkpoint that `write` writes after the
    /// cut ([`PendingState::finish`]) from data that does not change.
    pub(crate) fn defer_batch(
        &mut self,
        write: impl FnOnce(&Path) -> Result<u64> + Send + 'static,
    ) -> Result<String> {
        let name = self.batch_name();
        self.deferred.push((self.dir.join(&name), Box::new(write)));
        Ok(name)
    }

    /// Ends the cut: what is left to write.
    pub fn pending(self) -> PendingState {
        PendingState(self)
    }

    fn batch_name(&mut self) -> String {
        self.batches += 1;
        if self.name == STATE_FILE {
            format!("{:08}.batch", self.batches)
        } else {
            format!("{}-{:08}.batch", self.name, self.batches)
        }
    }

    /// Ends the cut and writes the rest at once (see [`PendingState`]).
    /// Returns (bytes written, bytes of batch files linked).
    pub fn finish(self) -> Result<(u64, u64)> {
        self.pending().finish()
    }

    fn complete(mut self) -> Result<(u64, u64)> {
        debug_assert!(self.sections.is_empty(), "a section left open");
        let crc = std::mem::take(&mut self.crc).finalize();
        let mut out = self.out;
        out.write_all(&crc.to_le_bytes())
            .and_then(|_| out.write_all(END))
            .map_err(|e| io_error(&self.temporary, e))?;
        let file = out.into_inner().map_err(|e| io_error(&self.temporary, e))?;
        file.sync_all().map_err(|e| io_error(&self.temporary, e))?;
        let path = self.dir.join(&self.name);
        std::fs::rename(&self.temporary, &path).map_err(|e| io_error(&path, e))?;
        sync_dir(&self.dir)?;
        Ok((self.written_bytes + 12, self.linked_bytes))
    }
}

/// Syncs a folder, so that the names created in it are durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io_error(dir, e))
}

/// What a restore keeps of the state it reads, while a partitioned
/// operator's state saved over one number of shards is read into another
/// (see [`Operator::restore_resharded`](crate::operator::Operator::restore_resharded)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    /// Keep only the keys routed to shard `.0` of `.1`
    /// ([`shard_of`](crate::operator::shard_of)); `None` keeps every key.
    pub keep: Option<(usize, usize)>,
    /// Add what is read to the state restored so far (a later saved
    /// shard) instead of replacing it.
    pub merge: bool,
}

/// Reads the state of a circuit back from a checkpoint folder.
#[derive(Clone)]
pub struct StateReader {
    dir: PathBuf,
    /// The file's name in `dir`.
    name: String,
    /// The state, shared by the copies that read a re-split state's
    /// parts in parallel.
    data: Arc<[u8]>,
    pos: usize,
    /// Set while a partitioned operator's state is re-split.
    route: Option<Route>,
    /// The layout's digit (see [`MAGIC`]).
    layout: u8,
}

impl StateReader {
    /// Reads the state file of `dir` and verifies its checksum.
    pub fn open(dir: &Path) -> Result<Self> {
        Self::open_named(dir, STATE_FILE)
    }

    /// Reads state file `name` of `dir` and verifies its checksum.
    pub fn open_named(dir: &Path, name: &str) -> Result<Self> {
        let path = dir.join(name);
        let data = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
        let bad = |what: &str| Error::Storage(format!("{}: {what}", path.display()));
        let n = data.len();
        let readable = n >= 20 && READABLE.iter().any(|m| data[..8] == m[..]);
        if n >= 20 && data.starts_with(MAGIC_PREFIX) && !readable {
            let layout = String::from_utf8_lossy(&data[7..8]).into_owned();
            let remedy = match data[7] > MAGIC[7] {
                true => "run a newer Eddy, or clear the pipeline's storage",
                false => "clear the pipeline's storage",
            };
            return Err(bad(&format!(
                "a checkpoint of state layout {layout}, which this Eddy (layout {}) cannot read: {remedy}",
                MAGIC[7] as char
            )));
        }
        if !readable || &data[n - 8..] != END {
            return Err(bad("not a checkpoint state file (bad magic)"));
        }
        let expected = u32::from_le_bytes(data[n - 12..n - 8].try_into().expect("4 bytes"));
        if crc32fast::hash(&data[..n - 12]) != expected {
            return Err(bad("checksum mismatch"));
        }
        let layout = data[7];
        let mut data = data;
        data.truncate(n - 12);
        let data: Arc<[u8]> = data.into();
        Ok(Self {
            dir: dir.to_path_buf(),
            name: name.to_string(),
            data,
            pos: 8,
            route: None,
            layout,
        })
    }

    /// Whether the file's layout has [sections](StateWriter::section)
    /// (files of earlier layouts are one stream, read in order).
    pub fn sectioned(&self) -> bool {
        self.layout >= SECTIONED
    }

    /// Reads one section with `read`, which must read all of it. In a file
    /// of an earlier layout, which has no sections, `read` reads on.
    pub fn section<T, E: From<Error>>(
        &mut self,
        read: impl FnOnce(&mut Self) -> std::result::Result<T, E>,
    ) -> std::result::Result<T, E> {
        if !self.sectioned() {
            return read(self);
        }
        let end = self.section_end()?;
        let value = read(self)?;
        if self.pos != end {
            return Err(self
                .corrupt(&format!("a section read to byte {}, not {end}", self.pos))
                .into());
        }
        Ok(value)
    }

    /// Passes over one section unread.
    pub fn skip_section(&mut self) -> Result<()> {
        if !self.sectioned() {
            return Err(self.corrupt("a state of an earlier layout, whose parts cannot be skipped"));
        }
        self.pos = self.section_end()?;
        Ok(())
    }

    /// Reads a section's length: where it ends.
    fn section_end(&mut self) -> Result<usize> {
        let n: usize = self.get()?;
        match self.pos.checked_add(n) {
            Some(end) if end <= self.data.len() => Ok(end),
            _ => Err(self.corrupt("a section past the end of the state")),
        }
    }

    /// The byte the reader is at.
    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    /// Goes on from a [`position`](Self::position) that a copy of this
    /// reader reached.
    pub(crate) fn skip_to(&mut self, pos: usize) {
        self.pos = pos.clamp(self.pos, self.data.len());
    }

    /// Sets (or, with `None`, ends) the route of the state read next.
    pub(crate) fn set_route(&mut self, route: Option<Route>) {
        self.route = route;
    }

    /// Whether the state read next is a part of a re-split state: its
    /// keys are [`keeps`](Self::keeps)-filtered, and it may be
    /// [`merging`](Self::merging) into what was restored before.
    pub fn routed(&self) -> bool {
        self.route.is_some()
    }

    /// Whether the state read next keeps only some keys (a part of the
    /// state goes to each of several shards).
    pub fn filters(&self) -> bool {
        self.route.is_some_and(|r| r.keep.is_some())
    }

    /// The number of shards the state read next is split over (1 when it
    /// is not split), to share out counts that are not per key.
    pub fn shares(&self) -> usize {
        self.route
            .and_then(|r| r.keep)
            .map_or(1, |(_, of)| of.max(1))
    }

    /// Whether the state read next adds to the state restored so far
    /// rather than replacing it.
    pub fn merging(&self) -> bool {
        self.route.is_some_and(|r| r.merge)
    }

    /// Whether a key whose route is `route_key` (its partition key, as the
    /// operator routes its input's rows) is kept by the restore.
    pub fn keeps(&self, route_key: &[u8]) -> bool {
        match self.route.and_then(|r| r.keep) {
            Some((shard, of)) => crate::operator::shard_of(route_key, of) == shard,
            None => true,
        }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.data.len() - self.pos {
            return Err(self.corrupt("the state ends early"));
        }
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// Reads a value.
    pub fn get<T: Persist>(&mut self) -> Result<T> {
        T::load(self)
    }

    /// Reads a value in place.
    pub fn get_into<T: Persist>(&mut self, value: &mut T) -> Result<()> {
        *value = T::load(self)?;
        Ok(())
    }

    /// An error about the state file's contents.
    pub fn corrupt(&self, what: &str) -> Error {
        Error::Storage(format!(
            "{}: {what} (at byte {})",
            self.dir.join(&self.name).display(),
            self.pos
        ))
    }

    /// Fails unless every byte of the state was read.
    pub fn finish(&self) -> Result<()> {
        if self.pos != self.data.len() {
            return Err(self.corrupt("state left over: the checkpoint is of another circuit"));
        }
        Ok(())
    }

    /// The batch file `name` of the checkpoint, verified, and whether it
    /// belongs to the storage now (else the caller copies it into memory).
    pub(crate) fn batch(
        &self,
        name: &str,
        storage: Option<&Arc<Storage>>,
    ) -> Result<(Arc<FileBatch>, bool)> {
        if name.contains('/') || name.starts_with('.') {
            return Err(self.corrupt("a bad batch file name"));
        }
        let path = self.dir.join(name);
        let size = std::fs::metadata(&path)
            .map_err(|e| io_error(&path, e))?
            .len();
        match storage {
            Some(s) if size >= s.min_bytes() as u64 => Ok((s.adopt(&path)?, true)),
            _ => Ok((FileBatch::open(&path)?, false)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error of reading a state file whose bytes `damage` changed.
    fn damaged_state_error(damage: impl FnOnce(&mut Vec<u8>)) -> String {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StateWriter::create(dir.path()).unwrap();
        w.put(&vec![1u8; 100]).unwrap();
        w.finish().unwrap();
        let path = dir.path().join(STATE_FILE);
        let mut bytes = std::fs::read(&path).unwrap();
        damage(&mut bytes);
        std::fs::write(&path, bytes).unwrap();
        StateReader::open(dir.path()).err().unwrap().to_string()
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_that_names_it() {
        let e = damaged_state_error(|bytes| bytes[20] ^= 1);
        assert!(e.contains("state.bin") && e.contains("checksum"), "{e}");
    }

    #[test]
    fn a_state_file_of_another_layout_says_so() {
        for layout in [b'1', b'2', b'6'] {
            let e = damaged_state_error(|bytes| bytes[7] = layout);
            let said = format!("layout {}", layout as char);
            assert!(e.contains(&said) && e.contains("clear"), "{e}");
            assert_eq!(e.contains("newer Eddy"), layout == b'6', "{e}");
        }
    }

    #[test]
    fn state_files_of_layouts_3_and_4_are_still_read_as_one_stream() {
        for layout in [b'3', b'4'] {
            let dir = tempfile::tempdir().unwrap();
            let mut w = StateWriter::create(dir.path()).unwrap();
            w.put(&7u64).unwrap();
            w.put(&8u64).unwrap();
            w.finish().unwrap();
            let path = dir.path().join(STATE_FILE);
            let mut bytes = std::fs::read(&path).unwrap();
            assert_eq!(&bytes[..8], MAGIC);
            bytes[7] = layout;
            // The checksum covers the magic.
            let n = bytes.len();
            let crc = crc32fast::hash(&bytes[..n - 12]).to_le_bytes();
            bytes[n - 12..n - 8].copy_from_slice(&crc);
            std::fs::write(&path, bytes).unwrap();
            let mut r = StateReader::open(dir.path()).unwrap();
            assert!(!r.sectioned());
            // Earlier layouts have no sections: one reads on.
            assert_eq!(r.section(|r| r.get::<u64>()).unwrap(), 7);
            assert!(r.skip_section().is_err());
            assert_eq!(r.get::<u64>().unwrap(), 8);
            r.finish().unwrap();
        }
    }

    #[test]
    fn sections_nest_and_are_skipped_or_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = StateWriter::create(dir.path()).unwrap();
        w.section(|w| {
            w.put(&1u64)?;
            w.section(|w| w.put(&"inner".to_string()))?;
            w.put(&2u64)
        })
        .unwrap();
        w.section(|w| w.put(&vec![3u64; 10])).unwrap();
        w.put(&4u64).unwrap();
        w.finish().unwrap();
        let mut r = StateReader::open(dir.path()).unwrap();
        assert!(r.sectioned());
        let (a, inner, b) = r
            .section(|r| {
                let a: u64 = r.get()?;
                let inner: String = r.section(|r| r.get())?;
                Ok::<_, Error>((a, inner, r.get::<u64>()?))
            })
            .unwrap();
        assert_eq!((a, inner.as_str(), b), (1, "inner", 2));
        r.skip_section().unwrap();
        assert_eq!(r.get::<u64>().unwrap(), 4);
        r.finish().unwrap();
        // A section read short is an error, not a misread of what follows.
        let mut r = StateReader::open(dir.path()).unwrap();
        let e = r.section(|r| r.get::<u64>()).unwrap_err().to_string();
        assert!(e.contains("a section read to byte"), "{e}");
    }
}

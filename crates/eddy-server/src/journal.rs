//! The HTTP ingress journal of a pipeline under fault tolerance: every
//! change that arrives over HTTP is appended here and synced to disk before
//! it enters the pipeline, so that a crash loses none of it. A checkpoint
//! records the last journal record its state holds; recovery replays the
//! records after it, in the order they first entered, and the journal drops
//! what the checkpoint covers.
//!
//! Layout: segment files `<first record>.log` in the journal folder, each a
//! run of records `[length u32][crc32 u32][payload]`, the payload being the
//! record's number, its table and its change (Arrow IPC and the weights).
//! A new segment starts after each checkpoint, so whole segments are
//! removed. A record cut short at the end of the last segment is a write
//! that a crash interrupted before it was synced (and so before it was
//! acknowledged): it is cut off. A bad record anywhere else is corruption,
//! reported with the file's name.

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::path::{Path, PathBuf};

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::ipc::reader::StreamReader;
use datafusion::arrow::ipc::writer::StreamWriter;
use eddy_dbsp::ZSet;

/// Largest record read back: a record claiming more is corrupt.
const MAX_RECORD_BYTES: u64 = 1 << 32;

/// The journal of one pipeline, open for appending.
pub struct Journal {
    dir: PathBuf,
    /// The segment being appended to, and its first record number.
    file: File,
    first: u64,
    /// Bytes in the segment being appended to.
    len: u64,
    /// The number the next record gets.
    next: u64,
}

fn io(path: &Path, e: impl std::fmt::Display) -> String {
    format!("{}: {e}", path.display())
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.log")
}

/// The segments of a journal folder, by first record number.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>, String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let path = entry.map_err(|e| io(dir, e))?.path();
        let first = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(first) = first {
            found.push((first, path));
        }
    }
    found.sort();
    Ok(found)
}

fn encode(number: u64, table: &str, changes: &ZSet) -> Result<Vec<u8>, String> {
    let mut payload = Vec::with_capacity(64 + changes.len() * 16);
    payload.extend_from_slice(&number.to_le_bytes());
    payload.extend_from_slice(&(table.len() as u32).to_le_bytes());
    payload.extend_from_slice(table.as_bytes());
    let mut ipc = Vec::new();
    {
        let batch = changes.batch();
        let mut w = StreamWriter::try_new(&mut ipc, &batch.schema()).map_err(|e| e.to_string())?;
        w.write(batch).map_err(|e| e.to_string())?;
        w.finish().map_err(|e| e.to_string())?;
    }
    payload.extend_from_slice(&(ipc.len() as u64).to_le_bytes());
    payload.extend_from_slice(&ipc);
    payload.extend_from_slice(&(changes.weights().len() as u64).to_le_bytes());
    for w in changes.weights() {
        payload.extend_from_slice(&w.to_le_bytes());
    }
    let mut record = Vec::with_capacity(payload.len() + 8);
    record.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    Ok(record)
}

/// Reads a record's payload back.
fn decode(payload: &[u8]) -> Result<(u64, String, ZSet), String> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], String> {
        let bytes = payload
            .get(at..at.checked_add(n).ok_or("bad length")?)
            .ok_or("the record ends early")?;
        at += n;
        Ok(bytes)
    };
    let u64_of = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    let number = u64_of(take(8)?);
    let tlen = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
    let table = String::from_utf8(take(tlen)?.to_vec()).map_err(|_| "a table name not UTF-8")?;
    let ipc_len = usize::try_from(u64_of(take(8)?)).map_err(|_| "bad length")?;
    let ipc = take(ipc_len)?;
    let mut reader = StreamReader::try_new(std::io::Cursor::new(ipc), None)
        .map_err(|e| format!("the change: {e}"))?;
    let batch: RecordBatch = reader
        .next()
        .ok_or("a change without rows")?
        .map_err(|e| format!("the change: {e}"))?;
    let n = usize::try_from(u64_of(take(8)?)).map_err(|_| "bad length")?;
    if n != batch.num_rows() {
        return Err("weights and rows differ in number".into());
    }
    let weights = take(n.checked_mul(8).ok_or("bad length")?)?
        .chunks_exact(8)
        .map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect();
    Ok((number, table, ZSet::new(batch, weights)))
}

/// What reading a segment does with each record: its number and payload.
type Visit<'a> = dyn FnMut(u64, &[u8]) -> Result<(), String> + 'a;

/// Reads one segment's records, calling `f` for each; returns the bytes of
/// whole records (where a torn tail starts) and the last record number.
/// `last` says whether a torn tail is allowed (the last segment only).
fn read_segment(path: &Path, last: bool, f: &mut Visit<'_>) -> Result<(u64, Option<u64>), String> {
    let file = File::open(path).map_err(|e| io(path, e))?;
    let size = file.metadata().map_err(|e| io(path, e))?.len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut good = 0u64;
    let mut number = None;
    loop {
        let mut head = [0u8; 8];
        match reader.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => return Err(io(path, e)),
        }
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        let torn = || {
            if last {
                Ok(())
            } else {
                Err(io(path, format!("corrupt record at byte {good}")))
            }
        };
        if len > MAX_RECORD_BYTES || good + 8 + len > size {
            torn()?;
            break;
        }
        let mut payload = vec![0u8; len as usize];
        reader.read_exact(&mut payload).map_err(|e| io(path, e))?;
        if crc32fast::hash(&payload) != crc || payload.len() < 8 {
            torn()?;
            break;
        }
        let n = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
        f(n, &payload).map_err(|e| io(path, format!("record {n}: {e}")))?;
        number = Some(n);
        good += 8 + len;
    }
    Ok((good, number))
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, calling `replay` with every
    /// record numbered after `after`, in order, and cutting off a torn tail.
    /// `replay` returning an error stops the opening with that error.
    pub fn open(
        dir: &Path,
        after: u64,
        mut replay: impl FnMut(u64, String, ZSet) -> Result<(), String>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let found = segments(dir)?;
        let mut next = 1;
        let mut tail = None;
        for (i, (first, path)) in found.iter().enumerate() {
            let last = i + 1 == found.len();
            let mut visit = |n: u64, payload: &[u8]| {
                if n < next {
                    return Err("records out of order".to_string());
                }
                next = n + 1;
                if n > after {
                    let (_, table, changes) = decode(payload)?;
                    replay(n, table, changes)?;
                }
                Ok(())
            };
            let (good, _) = read_segment(path, last, &mut visit)?;
            next = next.max(*first);
            if last {
                tail = Some((*first, path.clone(), good));
            }
        }
        let (first, path, len) = match tail {
            Some(t) => t,
            None => (next, dir.join(segment_name(next)), 0),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io(&path, e))?;
        // Cut a torn tail (a write the crash interrupted).
        file.set_len(len).map_err(|e| io(&path, e))?;
        file.sync_all().map_err(|e| io(&path, e))?;
        eddy_dbsp::checkpoint::sync_dir(dir).map_err(|e| e.to_string())?;
        Ok(Self {
            dir: dir.to_path_buf(),
            file,
            first,
            len,
            next,
        })
    }

    /// Appends a change of `table` and syncs it to disk; returns its
    /// record number.
    pub fn append(&mut self, table: &str, changes: &ZSet) -> Result<u64, String> {
        let number = self.next;
        let record = encode(number, table, changes)?;
        let path = self.dir.join(segment_name(self.first));
        let written = self
            .file
            .write_all(&record)
            .and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            // Leave no half record behind for the next append.
            let _ = self.file.set_len(self.len);
            return Err(io(&path, e));
        }
        self.len += record.len() as u64;
        self.next += 1;
        Ok(number)
    }

    /// Drops the records up to `upto` (a checkpoint holds them): starts a
    /// new segment and removes the segments wholly before it.
    pub fn truncate(&mut self, upto: u64) -> Result<(), String> {
        if self.len > 0 {
            let path = self.dir.join(segment_name(self.next));
            self.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| io(&path, e))?;
            eddy_dbsp::checkpoint::sync_dir(&self.dir).map_err(|e| e.to_string())?;
            self.first = self.next;
            self.len = 0;
        }
        let found = segments(&self.dir)?;
        for pair in found.windows(2) {
            // A segment's records end where the next one's begin.
            if pair[1].0 <= upto + 1 {
                std::fs::remove_file(&pair[0].1).map_err(|e| io(&pair[0].1, e))?;
            }
        }
        Ok(())
    }

    /// The number of the last record appended (0: none yet).
    pub fn last(&self) -> u64 {
        self.next - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::array::Int64Array;
    use datafusion::arrow::datatypes::{DataType, Field, Schema};
    use std::sync::Arc;

    fn change(x: i64) -> ZSet {
        let schema = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, true)]));
        let batch =
            RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![x, x + 1]))]).unwrap();
        ZSet::new(batch, vec![1, -1])
    }

    fn replayed(dir: &Path, after: u64) -> Vec<(u64, String, i64)> {
        let mut out = Vec::new();
        Journal::open(dir, after, |n, t, z| {
            let x = z
                .batch()
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap()
                .value(0);
            assert_eq!(z.weights(), &[1, -1]);
            out.push((n, t, x));
            Ok(())
        })
        .unwrap();
        out
    }

    #[test]
    fn records_replay_in_order_after_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), 0, |_, _, _| Ok(())).unwrap();
        for x in 1..=5 {
            assert_eq!(j.append("t", &change(x * 10)).unwrap(), x as u64);
        }
        drop(j);
        let all = replayed(dir.path(), 0);
        assert_eq!(all.len(), 5);
        assert_eq!(all[4], (5, "t".to_string(), 50));
        assert_eq!(replayed(dir.path(), 3).len(), 2);
        // Numbers go on after a reopening.
        let mut j = Journal::open(dir.path(), 5, |_, _, _| Ok(())).unwrap();
        assert_eq!(j.append("u", &change(60)).unwrap(), 6);
    }

    #[test]
    fn a_torn_tail_is_cut_and_corruption_before_it_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), 0, |_, _, _| Ok(())).unwrap();
        for x in 1..=3 {
            j.append("t", &change(x)).unwrap();
        }
        drop(j);
        let (_, path) = segments(dir.path()).unwrap().pop().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        // A crash in the middle of the last record's write.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 5).unwrap();
        drop(f);
        assert_eq!(replayed(dir.path(), 0).len(), 2);
        let mut j = Journal::open(dir.path(), 0, |_, _, _| Ok(())).unwrap();
        assert_eq!(j.append("t", &change(9)).unwrap(), 3);
        // Corruption in a segment that is not the last.
        j.truncate(0).unwrap();
        j.append("t", &change(10)).unwrap();
        drop(j);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[20] ^= 0xff;
        std::fs::write(&path, bytes).unwrap();
        let e = Journal::open(dir.path(), 0, |_, _, _| Ok(()))
            .err()
            .unwrap();
        assert!(e.contains("corrupt record"), "{e}");
    }

    #[test]
    fn truncating_removes_whole_segments_a_checkpoint_covers() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = Journal::open(dir.path(), 0, |_, _, _| Ok(())).unwrap();
        j.append("t", &change(1)).unwrap();
        j.append("t", &change(2)).unwrap();
        j.truncate(1).unwrap(); // record 2 is not covered: its segment stays
        j.append("t", &change(3)).unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 2);
        assert_eq!(replayed(dir.path(), 1).len(), 2);
        j.truncate(3).unwrap();
        let left = segments(dir.path()).unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(replayed(dir.path(), 3).len(), 0);
        assert_eq!(j.last(), 3);
    }
}

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

/// Why a journal cannot be opened, or what replaying it met.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A record that does not read whole, with more after it: not a write
    /// a crash cut short, so acknowledged input would be lost past it.
    #[error("{}: a damaged record at byte {at} ({following} bytes of records follow it): {detail}", path.display())]
    Corrupt {
        path: PathBuf,
        at: u64,
        following: u64,
        detail: String,
    },
    /// Records that the state needs are not in the journal.
    #[error("records {from} to {to} are missing from the journal {} ({why}): the input they held would be lost", dir.display())]
    Missing {
        dir: PathBuf,
        from: u64,
        to: u64,
        why: String,
    },
    /// The journal folder holds nothing, though the state was taken while
    /// it held records.
    #[error("the journal {} is gone, though the checkpoint holds its records up to {after}: the input that came after it is unknown", dir.display())]
    Gone { dir: PathBuf, after: u64 },
    /// Writing a record failed.
    #[error("the change could not be encoded: {0}")]
    Encode(String),
    /// A record read whole (its checksum holds) whose content is not a
    /// change, or that replaying refused.
    #[error("{}: record {number}: {detail}", path.display())]
    Record {
        path: PathBuf,
        number: u64,
        detail: String,
    },
}

impl JournalError {
    fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// Whether starting anyway (accepting the loss) could get past it.
    pub fn is_loss(&self) -> bool {
        matches!(
            self,
            Self::Corrupt { .. } | Self::Missing { .. } | Self::Gone { .. }
        )
    }
}

type Result<T, E = JournalError> = std::result::Result<T, E>;

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
    /// Bytes of the last record appended to this segment (0: none since
    /// it was opened), for [`Journal::retract`].
    last_len: u64,
}

/// How a journal is opened: where the state it goes with stands, and what
/// may be given up.
#[derive(Debug, Clone, Copy, Default)]
pub struct Opening {
    /// The last record the state holds (0: none).
    pub after: u64,
    /// The state was taken while this journal was kept, so a journal with
    /// no segments at all has been lost (a kept journal always has one).
    pub expected: bool,
    /// Go on past missing and damaged records, reporting them, instead of
    /// refusing (the user's explicit choice to accept the loss).
    pub accept_loss: bool,
}

/// What opening a journal found besides the records it replayed.
#[derive(Debug, Default)]
pub struct Opened {
    /// Records replayed.
    pub replayed: u64,
    /// Bytes of a final record cut short by a crash (never synced, so
    /// never acknowledged), cut off.
    pub torn_bytes: u64,
    /// What was given up under [`Opening::accept_loss`].
    pub lost: Vec<String>,
}

fn segment_name(first: u64) -> String {
    format!("{first:020}.log")
}

/// The segments of a journal folder, by first record number.
fn segments(dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| JournalError::io(dir, e))? {
        let path = entry.map_err(|e| JournalError::io(dir, e))?.path();
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

fn encode(number: u64, table: &str, changes: &ZSet, key: Option<&str>) -> Result<Vec<u8>, String> {
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
    // Records from before idempotency keys end here.
    if let Some(key) = key {
        payload.extend_from_slice(&(key.len() as u32).to_le_bytes());
        payload.extend_from_slice(key.as_bytes());
    }
    let mut record = Vec::with_capacity(payload.len() + 8);
    // The length field is 32 bits: a larger change is refused before
    // anything is written (and so before it is acknowledged).
    let len = u32::try_from(payload.len())
        .map_err(|_| format!("a change of {} bytes is larger than a journal record holds (4 GiB): send it in smaller requests", payload.len()))?;
    record.extend_from_slice(&len.to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    record.extend_from_slice(&payload);
    Ok(record)
}

/// A journal record read back.
pub struct Record {
    pub number: u64,
    pub table: String,
    pub changes: ZSet,
    /// The idempotency key of the request it holds, if it had one.
    pub key: Option<String>,
}

/// Reads a record's payload back.
fn decode(payload: &[u8]) -> Result<Record, String> {
    let at = std::cell::Cell::new(0usize);
    let take = |n: usize| -> Result<&[u8], String> {
        let from = at.get();
        let bytes = payload
            .get(from..from.checked_add(n).ok_or("bad length")?)
            .ok_or("the record ends early")?;
        at.set(from + n);
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
    let key = match payload.len() > at.get() {
        false => None,
        true => {
            let klen = u32::from_le_bytes(take(4)?.try_into().expect("4 bytes")) as usize;
            let key = String::from_utf8(take(klen)?.to_vec()).map_err(|_| "a key not UTF-8")?;
            Some(key)
        }
    };
    Ok(Record {
        number,
        table,
        changes: ZSet::new(batch, weights),
        key,
    })
}

/// What reading a segment does with each record: its number and payload.
type Visit<'a> = dyn FnMut(u64, &[u8]) -> std::result::Result<(), String> + 'a;

/// What one segment held: the bytes of whole records, where they stop
/// being whole and why, and the record number after the last.
struct Segment {
    good: u64,
    bad: Option<(String, u64)>,
    next: u64,
}

/// Reads one segment's records from its start, calling `f` with each
/// record's number and payload. Reading stops at the first record that
/// does not read whole (its length past the end, its checksum wrong, its
/// number out of sequence): [`Segment::bad`] says why and how many bytes
/// follow it.
fn read_segment(path: &Path, first: u64, f: &mut Visit<'_>) -> Result<Segment> {
    let file = File::open(path).map_err(|e| JournalError::io(path, e))?;
    let size = file
        .metadata()
        .map_err(|e| JournalError::io(path, e))?
        .len();
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut seg = Segment {
        good: 0,
        bad: None,
        next: first,
    };
    while seg.good < size {
        let rest = size - seg.good;
        let mut head = [0u8; 8];
        if rest < 8 {
            seg.bad = Some(("a record header cut short".into(), rest));
            break;
        }
        reader
            .read_exact(&mut head)
            .map_err(|e| JournalError::io(path, e))?;
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(head[4..].try_into().expect("4 bytes"));
        if len > MAX_RECORD_BYTES || 8 + len > rest {
            seg.bad = Some((format!("a record of {len} bytes runs past the end"), rest));
            break;
        }
        let mut payload = vec![0u8; len as usize];
        reader
            .read_exact(&mut payload)
            .map_err(|e| JournalError::io(path, e))?;
        if crc32fast::hash(&payload) != crc || payload.len() < 8 {
            seg.bad = Some(("its checksum does not match".into(), rest));
            break;
        }
        let n = u64::from_le_bytes(payload[..8].try_into().expect("8 bytes"));
        if n != seg.next {
            seg.bad = Some((
                format!("record {n} where record {} was due", seg.next),
                rest,
            ));
            break;
        }
        f(n, &payload).map_err(|detail| JournalError::Record {
            path: path.to_path_buf(),
            number: n,
            detail,
        })?;
        seg.next = n + 1;
        seg.good += 8 + len;
    }
    Ok(seg)
}

/// Whether the bytes of `path` from `at` on are what a crash leaves of a
/// final write: one record cut short (its length runs past the end) or
/// space the file system allocated but never filled (zeros).
/// `next` is the number the bad record should have had: a whole record
/// numbered after it anywhere in the rest (a length field damaged in the
/// middle of the segment makes its record seem to run past the end) makes
/// it corruption.
fn torn_tail(path: &Path, at: u64, why: &str, next: u64) -> Result<bool> {
    let bytes = std::fs::read(path).map_err(|e| JournalError::io(path, e))?;
    let tail = bytes.get(at as usize..).unwrap_or_default();
    if tail.iter().all(|&b| b == 0) {
        return Ok(true);
    }
    if !(why.contains("runs past the end") || why.contains("cut short")) {
        return Ok(false);
    }
    Ok(!has_record_after(tail, next))
}

/// Whether `bytes` hold, at some offset past the first byte, a whole record
/// (its checksum holds) numbered above `next - 1`.
fn has_record_after(bytes: &[u8], next: u64) -> bool {
    let u32_at = |p: usize| u32::from_le_bytes(bytes[p..p + 4].try_into().expect("4 bytes"));
    (1..bytes.len().saturating_sub(16)).any(|p| {
        let number = u64::from_le_bytes(bytes[p + 8..p + 16].try_into().expect("8 bytes"));
        if number < next || number > next + (1 << 20) {
            return false;
        }
        // A record holds at least its number, its table's name and the
        // lengths of its change: an empty "record" of zeros is no record.
        let len = u32_at(p) as usize;
        if len < 21 {
            return false;
        }
        let Some(payload) = bytes.get(p + 8..(p + 8).saturating_add(len)) else {
            return false;
        };
        crc32fast::hash(payload) == u32_at(p + 4)
    })
}

impl Journal {
    /// Opens (or creates) the journal in `dir`, calling `replay` with every
    /// record numbered after `opening.after`, in order, and cutting off a
    /// torn tail. The records must follow on from the state without a
    /// gap and read whole: a missing segment, a damaged record or a lost
    /// journal is an error naming the file and what would be lost, unless
    /// `opening.accept_loss`. `replay` returning an error stops the
    /// opening with that error.
    pub fn open(
        dir: &Path,
        opening: Opening,
        mut replay: impl FnMut(Record) -> std::result::Result<(), String>,
    ) -> Result<(Self, Opened)> {
        std::fs::create_dir_all(dir).map_err(|e| JournalError::io(dir, e))?;
        let found = segments(dir)?;
        let after = opening.after;
        let mut opened = Opened::default();
        let lose = |e: JournalError, opened: &mut Opened| {
            if opening.accept_loss {
                tracing::warn!(error = %e, "journal: going on without what is lost, as asked");
                opened.lost.push(e.to_string());
                Ok(())
            } else {
                Err(e)
            }
        };
        if found.is_empty() && opening.expected && after > 0 {
            lose(
                JournalError::Gone {
                    dir: dir.to_path_buf(),
                    after,
                },
                &mut opened,
            )?;
        }
        // The number the next record must have: the state's first missing
        // one, then on from each segment.
        let mut next = None::<u64>;
        let mut tail = None;
        for (i, (first, path)) in found.iter().enumerate() {
            let last = i + 1 == found.len();
            // Records the state holds need not be there.
            let due = next.unwrap_or(0).max(after + 1);
            if *first > due {
                let why = match next {
                    None => format!(
                        "the state holds records up to {after}, the journal starts at {first}"
                    ),
                    Some(_) => format!("a segment is missing before {}", path.display()),
                };
                lose(
                    JournalError::Missing {
                        dir: dir.to_path_buf(),
                        from: due,
                        to: first - 1,
                        why,
                    },
                    &mut opened,
                )?;
            }
            let mut visit = |n: u64, payload: &[u8]| {
                if n > after {
                    replay(decode(payload)?)?;
                    opened.replayed += 1;
                }
                Ok(())
            };
            let seg = read_segment(path, *first, &mut visit)?;
            if let Some((why, rest)) = &seg.bad {
                if last && torn_tail(path, seg.good, why, seg.next)? {
                    tracing::warn!(
                        file = %path.display(),
                        bytes = rest,
                        record = seg.next,
                        "journal: cut off a final record that a crash left unfinished (it was never synced, so never acknowledged)"
                    );
                    opened.torn_bytes = *rest;
                } else if found.get(i + 1).is_some_and(|(f, _)| *f <= after + 1) {
                    // The next segment starts within what the state holds:
                    // the damage is in records it no longer needs.
                    tracing::warn!(file = %path.display(), at = seg.good, "journal: a damaged record that the checkpoint already holds");
                } else {
                    lose(
                        JournalError::Corrupt {
                            path: path.clone(),
                            at: seg.good,
                            following: *rest,
                            detail: why.clone(),
                        },
                        &mut opened,
                    )?;
                }
            }
            next = Some(seg.next);
            if last {
                tail = Some((*first, path.clone(), seg.good));
            }
        }
        // Never number a record at or below what the state holds, even
        // when the journal is gone.
        let next = next.unwrap_or(1).max(after + 1);
        let (first, path, len) = match tail {
            // A segment whose damage was accepted takes no more records:
            // the next ones start a segment of their own.
            Some((first, path, len)) if opened.lost.is_empty() || first == next => {
                (first, path, len)
            }
            _ => (next, dir.join(segment_name(next)), 0),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| JournalError::io(&path, e))?;
        // Cut a torn tail (a write the crash interrupted).
        file.set_len(len).map_err(|e| JournalError::io(&path, e))?;
        file.sync_all().map_err(|e| JournalError::io(&path, e))?;
        eddy_dbsp::checkpoint::sync_dir(dir).map_err(|e| JournalError::Io {
            path: dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        })?;
        Ok((
            Self {
                dir: dir.to_path_buf(),
                file,
                first,
                len,
                next,
                last_len: 0,
            },
            opened,
        ))
    }

    /// Appends a change of `table` (with the idempotency key of its
    /// request) and syncs it to disk; returns its record number.
    pub fn append(&mut self, table: &str, changes: &ZSet, key: Option<&str>) -> Result<u64> {
        let number = self.next;
        let record = encode(number, table, changes, key).map_err(JournalError::Encode)?;
        let path = self.dir.join(segment_name(self.first));
        let written = self
            .file
            .write_all(&record)
            .and_then(|_| self.file.sync_data());
        if let Err(e) = written {
            // Leave no half record behind for the next append.
            let _ = self.file.set_len(self.len);
            return Err(JournalError::io(&path, e));
        }
        self.len += record.len() as u64;
        self.last_len = record.len() as u64;
        self.next += 1;
        Ok(number)
    }

    /// Takes back record `number`, the last appended (its change was not
    /// taken after all): cut from the segment, its number given again.
    pub fn retract(&mut self, number: u64) -> Result<()> {
        if number + 1 != self.next || self.last_len == 0 {
            return Ok(());
        }
        let path = self.dir.join(segment_name(self.first));
        let len = self.last_len;
        self.file
            .set_len(self.len - len)
            .and_then(|_| self.file.sync_data())
            .map_err(|e| JournalError::io(&path, e))?;
        self.len -= len;
        self.last_len = 0;
        self.next -= 1;
        Ok(())
    }

    /// Drops the records up to `upto` (a checkpoint holds them): starts a
    /// new segment and removes the segments wholly before it.
    pub fn truncate(&mut self, upto: u64) -> Result<()> {
        if self.len > 0 {
            let path = self.dir.join(segment_name(self.next));
            self.file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| JournalError::io(&path, e))?;
            eddy_dbsp::checkpoint::sync_dir(&self.dir).map_err(|e| JournalError::Io {
                path: self.dir.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
            self.first = self.next;
            self.len = 0;
            self.last_len = 0;
        }
        let found = segments(&self.dir)?;
        for pair in found.windows(2) {
            // A segment's records end where the next one's begin.
            if pair[1].0 <= upto + 1 {
                std::fs::remove_file(&pair[0].1).map_err(|e| JournalError::io(&pair[0].1, e))?;
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

    fn at(after: u64) -> Opening {
        Opening {
            after,
            expected: true,
            accept_loss: false,
        }
    }

    /// Opens the journal of `dir` as `opening` says and lists what it
    /// replayed: (record, table, first value).
    /// What a replay saw: (record, table, first value) each.
    type Seen = Vec<(u64, String, i64)>;

    fn replay(dir: &Path, opening: Opening) -> Result<(Seen, Opened)> {
        let mut out = Vec::new();
        let (_, opened) = Journal::open(dir, opening, |r| {
            let (n, t, z) = (r.number, r.table, r.changes);
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
        })?;
        Ok((out, opened))
    }

    fn replayed(dir: &Path, after: u64) -> Vec<(u64, String, i64)> {
        replay(dir, at(after)).unwrap().0
    }

    fn open(dir: &Path, after: u64) -> Journal {
        Journal::open(dir, at(after), |_| Ok(())).unwrap().0
    }

    /// A journal of records 1 to 3 in one segment and 4 to 5 in a second.
    fn two_segments(dir: &Path) -> Vec<(u64, PathBuf)> {
        let mut j = open(dir, 0);
        for x in 1..=3 {
            j.append("t", &change(x), None).unwrap();
        }
        j.truncate(0).unwrap();
        for x in 4..=5 {
            j.append("t", &change(x), None).unwrap();
        }
        segments(dir).unwrap()
    }

    #[test]
    fn records_replay_in_order_after_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), 0);
        for x in 1..=5 {
            assert_eq!(j.append("t", &change(x * 10), None).unwrap(), x as u64);
        }
        drop(j);
        let all = replayed(dir.path(), 0);
        assert_eq!(all.len(), 5);
        assert_eq!(all[4], (5, "t".to_string(), 50));
        assert_eq!(replayed(dir.path(), 3).len(), 2);
        // Numbers go on after a reopening; a request's key is kept.
        let mut j = open(dir.path(), 5);
        assert_eq!(j.append("u", &change(60), Some("req-6")).unwrap(), 6);
        drop(j);
        let mut keys = Vec::new();
        Journal::open(dir.path(), at(4), |r| {
            keys.push(r.key);
            Ok(())
        })
        .unwrap();
        assert_eq!(keys, vec![None, Some("req-6".to_string())]);
    }

    #[test]
    fn a_torn_final_record_is_cut_off_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), 0);
        for x in 1..=3 {
            j.append("t", &change(x), None).unwrap();
        }
        drop(j);
        let (_, path) = segments(dir.path()).unwrap().pop().unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        // A crash in the middle of the last record's write.
        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.set_len(len - 5).unwrap();
        drop(f);
        let (records, opened) = replay(dir.path(), at(0)).unwrap();
        assert_eq!(records.len(), 2);
        assert!(
            opened.torn_bytes > 0 && opened.lost.is_empty(),
            "{opened:?}"
        );
        let mut j = open(dir.path(), 0);
        assert_eq!(j.append("t", &change(9), None).unwrap(), 3);
        drop(j);
        // Space allocated and never written (zeros) is a torn tail too.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(&[0u8; 4096]);
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(replayed(dir.path(), 0).len(), 3);
    }

    #[test]
    fn a_damaged_record_with_records_after_it_is_refused_by_name() {
        for last_segment in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let segs = two_segments(dir.path());
            // One flipped byte inside the first record's change.
            let path = &segs[if last_segment { 1 } else { 0 }].1;
            let mut bytes = std::fs::read(path).unwrap();
            bytes[40] ^= 0x01;
            std::fs::write(path, bytes).unwrap();
            let e = replay(dir.path(), at(0)).err().unwrap();
            let message = e.to_string();
            assert!(
                matches!(e, JournalError::Corrupt { at: 0, .. })
                    && message.contains(&path.display().to_string()),
                "{message}"
            );
            // Accepting the loss replays what reads whole and says what it
            // gave up.
            let (records, opened) = replay(
                dir.path(),
                Opening {
                    accept_loss: true,
                    ..at(0)
                },
            )
            .unwrap();
            let numbers: Vec<u64> = records.iter().map(|r| r.0).collect();
            let kept = if last_segment {
                vec![1, 2, 3]
            } else {
                vec![4, 5]
            };
            assert_eq!(numbers, kept);
            assert!(!opened.lost.is_empty(), "{opened:?}");
            if !last_segment {
                // Damage in records a checkpoint holds is of no concern.
                let (records, opened) = replay(dir.path(), at(3)).unwrap();
                assert_eq!(records.len(), 2);
                assert!(opened.lost.is_empty());
            }
        }
    }

    #[test]
    fn a_damaged_length_with_records_after_it_is_not_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), 0);
        for x in 1..=4 {
            j.append("t", &change(x), None).unwrap();
        }
        drop(j);
        let (_, path) = segments(dir.path()).unwrap().pop().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        // Record 1's length made to run past the end of the file.
        bytes[3] ^= 0x40;
        std::fs::write(&path, &bytes).unwrap();
        let e = replay(dir.path(), at(0)).err().unwrap();
        assert!(matches!(e, JournalError::Corrupt { at: 0, .. }), "{e}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing was cut");
    }

    #[test]
    fn records_the_state_needs_that_are_gone_are_refused() {
        // The first segment removed: records 1 to 3 are gone for a state
        // that holds none of them...
        let dir = tempfile::tempdir().unwrap();
        let segs = two_segments(dir.path());
        std::fs::remove_file(&segs[0].1).unwrap();
        let e = replay(dir.path(), at(0)).err().unwrap();
        assert!(
            matches!(e, JournalError::Missing { from: 1, to: 3, .. }),
            "{e}"
        );
        // ...and of no concern to one that holds them.
        assert_eq!(replayed(dir.path(), 3).len(), 2);

        // A segment missing between two others.
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), 0);
        for x in 1..=6 {
            j.append("t", &change(x), None).unwrap();
            if x % 2 == 0 {
                j.truncate(0).unwrap();
            }
        }
        drop(j);
        let segs = segments(dir.path()).unwrap();
        std::fs::remove_file(&segs[1].1).unwrap();
        let e = replay(dir.path(), at(0)).err().unwrap();
        assert!(
            matches!(e, JournalError::Missing { from: 3, to: 4, .. }),
            "{e}"
        );

        // The whole journal gone under a state that holds records of it.
        let dir = tempfile::tempdir().unwrap();
        let e = replay(dir.path(), at(7)).err().unwrap();
        assert!(matches!(e, JournalError::Gone { after: 7, .. }), "{e}");
        // Accepted, new records are numbered past what the state holds,
        // so that a later replay does not skip them.
        let (mut j, opened) = Journal::open(
            dir.path(),
            Opening {
                accept_loss: true,
                ..at(7)
            },
            |_| Ok(()),
        )
        .unwrap();
        assert_eq!(opened.lost.len(), 1);
        assert_eq!(j.append("t", &change(1), None).unwrap(), 8);
        drop(j);
        assert_eq!(replayed(dir.path(), 7).len(), 1);
    }

    #[test]
    fn truncating_removes_whole_segments_a_checkpoint_covers() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = open(dir.path(), 0);
        j.append("t", &change(1), None).unwrap();
        j.append("t", &change(2), None).unwrap();
        j.truncate(1).unwrap(); // record 2 is not covered: its segment stays
        j.append("t", &change(3), None).unwrap();
        assert_eq!(segments(dir.path()).unwrap().len(), 2);
        assert_eq!(replayed(dir.path(), 1).len(), 2);
        j.truncate(3).unwrap();
        let left = segments(dir.path()).unwrap();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(replayed(dir.path(), 3).len(), 0);
        assert_eq!(j.last(), 3);
    }
}

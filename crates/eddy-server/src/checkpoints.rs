//! The checkpoints of a pipeline: numbered folders in
//! `<storage>/checkpoints/`, each the state of every operator at a cut
//! between two steps (see [`eddy_dbsp::checkpoint`]) and a `manifest.json`.
//!
//! Protocol: a checkpoint is written into `<n>.tmp/` (state file and batch
//! files synced as they are written), then its manifest is written and
//! synced, the folder renamed to `<n>/` and the parent synced. A folder
//! without a manifest, or still named `.tmp`, is never read: a crash midway
//! leaves the previous checkpoint in force. The last two checkpoints are
//! kept; older ones (and unfinished ones) are removed, and with them the
//! last links to batch files the pipeline no longer uses.
//!
//! Beside the operators' state, `positions.json` records where each input
//! had read to at the cut ([`Positions`]): a resumed pipeline's connectors
//! go on from there, and the HTTP journal replays what came after.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// Why a checkpoint could not be written, or does not read whole.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file or folder that could not be read, written, synced or
    /// renamed.
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file that reads but is not what it should be (damaged).
    #[error("{}: {reason}", .path.display())]
    Damaged { path: PathBuf, reason: String },
    /// The operators' state or a folder's sync, as the engine reports it.
    #[error(transparent)]
    State(#[from] eddy_dbsp::Error),
}

impl CheckpointError {
    fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Self + '_ {
        move |source| Self::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    fn damaged(path: &Path, reason: impl Into<String>) -> Self {
        Self::Damaged {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// The file of a checkpoint that holds the inputs' and outputs' positions.
const POSITIONS: &str = "positions.json";

/// Where inputs and outputs stood at a checkpoint's cut: every change
/// before these positions is in the state, none after.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Positions {
    /// Input connectors: name → how far the state covers their input
    /// (each connector reads its own kind of position).
    #[serde(default)]
    pub inputs: BTreeMap<String, Value>,
    /// The last HTTP journal record in the state (0: none).
    #[serde(default)]
    pub journal: u64,
    /// Output connectors: name → how much of their output belongs to the
    /// state (a file's length), to cut back to on recovery.
    #[serde(default)]
    pub outputs: BTreeMap<String, Value>,
    /// The idempotency keys of the last keyed HTTP requests the state
    /// holds, oldest first, with the rows each applied (see
    /// [`crate::runner::Keys`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub keys: Vec<(String, u64)>,
}

impl Positions {
    /// Writes the positions into a checkpoint folder being written.
    pub fn write(&self, dir: &Path) -> Result<(), CheckpointError> {
        let path = dir.join(POSITIONS);
        let bytes = serde_json::to_vec_pretty(self).expect("positions are JSON");
        std::fs::write(&path, bytes)
            .and_then(|_| std::fs::File::open(&path)?.sync_all())
            .map_err(CheckpointError::io(&path))
    }

    /// The positions of a finished checkpoint (none recorded: all zero).
    pub fn read(dir: &Path) -> Result<Self, CheckpointError> {
        let path = dir.join(POSITIONS);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| CheckpointError::damaged(&path, format!("not a positions file: {e}"))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(CheckpointError::io(&path)(e)),
        }
    }
}

/// Checkpoints kept.
const KEEP: usize = 2;
const MANIFEST: &str = "manifest.json";

/// What a finished checkpoint says of itself (`manifest.json`), written
/// last: a folder is renamed to its number only once its manifest is
/// synced, so a numbered folder whose manifest does not read whole and
/// match its checksum is damaged, never unfinished.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub sequence_number: u64,
    #[serde(default)]
    pub created_at: String,
    /// The version of the program whose state it holds.
    #[serde(default)]
    pub program_version: u64,
    /// The program's text (a changed program is compared with it).
    #[serde(default)]
    pub program_code: Option<String>,
    #[serde(default)]
    pub steps: u64,
    #[serde(default)]
    pub written_bytes: u64,
    #[serde(default)]
    pub linked_bytes: u64,
    /// The last HTTP journal record in the state.
    #[serde(default)]
    pub journal: u64,
    /// The workers whose state it holds.
    #[serde(default = "one")]
    pub workers: u64,
    /// Whether the pipeline kept an HTTP journal when it was taken (then
    /// a journal with nothing in it has been lost).
    #[serde(default)]
    pub journaled: bool,
    /// The CRC-32 of `positions.json` (absent in checkpoints from before
    /// checksums).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub positions_crc32: Option<u32>,
    /// The CRC-32 of this manifest written without this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc32: Option<u32>,
}

fn one() -> u64 {
    1
}

impl Manifest {
    /// The checksum of the manifest's text without its own checksum.
    fn checksum(&self) -> u32 {
        let body = Self {
            crc32: None,
            ..self.clone()
        };
        crc32fast::hash(&serde_json::to_vec_pretty(&body).expect("a manifest is JSON"))
    }

    /// Reads and verifies the manifest of checkpoint folder `dir`, and
    /// the positions file it vouches for; an error names the file and
    /// what is wrong with it.
    pub fn read(dir: &Path) -> Result<Self, CheckpointError> {
        let path = dir.join(MANIFEST);
        let bytes = std::fs::read(&path).map_err(CheckpointError::io(&path))?;
        let manifest: Self = serde_json::from_slice(&bytes).map_err(|e| {
            CheckpointError::damaged(&path, format!("not a checkpoint manifest ({e})"))
        })?;
        if manifest.crc32.is_some_and(|crc| manifest.checksum() != crc) {
            return Err(CheckpointError::damaged(
                &path,
                "its checksum does not match its content",
            ));
        }
        if let Some(crc) = manifest.positions_crc32 {
            let path = dir.join(POSITIONS);
            let bytes = std::fs::read(&path).map_err(CheckpointError::io(&path))?;
            if crc32fast::hash(&bytes) != crc {
                return Err(CheckpointError::damaged(
                    &path,
                    "its checksum does not match the manifest's",
                ));
            }
        }
        Ok(manifest)
    }
}

/// The folder of a storage's checkpoints.
fn root(storage_dir: &Path) -> PathBuf {
    storage_dir.join("checkpoints")
}

/// The finished checkpoints of a storage folder (folders named by their
/// number), oldest first, whether or not they read whole.
pub fn list(storage_dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root(storage_dir)) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse::<u64>().ok()?;
            let path = e.path();
            path.is_dir().then_some((n, path))
        })
        .collect();
    found.sort();
    found
}

/// The latest finished checkpoint, if any (read or not).
pub fn latest(storage_dir: &Path) -> Option<(u64, PathBuf)> {
    list(storage_dir).pop()
}

/// A checkpoint that reads whole.
#[derive(Debug)]
pub struct Readable {
    pub n: u64,
    pub dir: PathBuf,
    pub manifest: Manifest,
}

/// The newest checkpoint that reads whole (its manifest, positions and
/// state file), and what is wrong with each finished checkpoint newer
/// than it (newest first).
pub fn newest_readable(storage_dir: &Path) -> (Option<Readable>, Vec<String>) {
    let mut damaged = Vec::new();
    for (n, dir) in list(storage_dir).into_iter().rev() {
        // The state file is read whole to check it (its restore reads it
        // again, from the page cache); batch files are checked as they
        // are restored.
        let read = Manifest::read(&dir).and_then(|manifest| {
            eddy_dbsp::checkpoint::StateReader::open(&dir)?;
            Ok(manifest)
        });
        match read {
            Ok(manifest) => {
                return (Some(Readable { n, dir, manifest }), damaged);
            }
            Err(e) => damaged.push(format!("checkpoint {n} is damaged: {e}")),
        }
    }
    (None, damaged)
}

/// Starts checkpoint `n`: an empty temporary folder to write it into.
pub fn begin(storage_dir: &Path, n: u64) -> Result<PathBuf, CheckpointError> {
    let dir = root(storage_dir).join(format!("{n}.tmp"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(CheckpointError::io(&dir))?;
    }
    std::fs::create_dir_all(&dir).map_err(CheckpointError::io(&dir))?;
    Ok(dir)
}

/// Finishes the checkpoint written into `tmp` (from [`begin`]): writes its
/// manifest (with the checksums of itself and of the positions file),
/// renames it into place and removes older checkpoints. Returns its
/// folder.
pub fn commit(
    storage_dir: &Path,
    tmp: &Path,
    n: u64,
    manifest: Manifest,
) -> Result<PathBuf, CheckpointError> {
    let mut manifest = Manifest {
        sequence_number: n,
        ..manifest
    };
    let positions = tmp.join(POSITIONS);
    manifest.positions_crc32 = match std::fs::read(&positions) {
        Ok(bytes) => Some(crc32fast::hash(&bytes)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(CheckpointError::io(&positions)(e)),
    };
    manifest.crc32 = Some(manifest.checksum());
    let path = tmp.join(MANIFEST);
    let bytes = serde_json::to_vec_pretty(&manifest).expect("a manifest is JSON");
    std::fs::write(&path, bytes)
        .and_then(|_| std::fs::File::open(&path)?.sync_all())
        .map_err(CheckpointError::io(&path))?;
    eddy_dbsp::checkpoint::sync_dir(tmp)?;
    let root = root(storage_dir);
    let done = root.join(n.to_string());
    std::fs::rename(tmp, &done).map_err(CheckpointError::io(&done))?;
    eddy_dbsp::checkpoint::sync_dir(&root)?;
    prune(storage_dir);
    Ok(done)
}

/// Removes the folders of checkpoints that never finished (`N.tmp`): at
/// a start and after a checkpoint fails, so that a failure leaves no
/// space taken.
pub fn remove_unfinished(storage_dir: &Path) {
    let Ok(entries) = std::fs::read_dir(root(storage_dir)) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        if e.file_name().to_string_lossy().ends_with(".tmp") {
            if let Err(err) = std::fs::remove_dir_all(e.path()) {
                tracing::warn!(folder = %e.path().display(), error = %err, "an unfinished checkpoint could not be removed");
            }
        }
    }
}

/// Removes unfinished checkpoints and all but the last [`KEEP`] finished
/// ones that read whole (best effort: a folder that cannot be removed now is retried at
/// the next checkpoint).
fn prune(storage_dir: &Path) {
    let finished = list(storage_dir);
    // The newest that read whole: a damaged one is not worth a place.
    let keep: Vec<&PathBuf> = finished
        .iter()
        .rev()
        .filter(|(_, p)| Manifest::read(p).is_ok())
        .take(KEEP)
        .map(|(_, p)| p)
        .collect();
    let Ok(entries) = std::fs::read_dir(root(storage_dir)) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let path = e.path();
        if !keep.contains(&&path) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

/// What became of the checkpoints requested of a pipeline (Feldera's
/// `checkpoint_status`).
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct CheckpointStatus {
    /// The last checkpoint that succeeded.
    pub success: Option<u64>,
    /// The last one that failed (or is in progress), and why.
    pub failure: Option<CheckpointFailure>,
}

/// A checkpoint that failed, or is being written.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CheckpointFailure {
    /// Its sequence number.
    pub sequence_number: u64,
    /// Why it failed (`in progress` while it is written).
    pub error: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_finished_checkpoints_count_and_two_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        for n in 1..=3 {
            let tmp = begin(dir.path(), n).unwrap();
            std::fs::write(tmp.join("state.bin"), b"x").unwrap();
            commit(dir.path(), &tmp, n, Manifest::default()).unwrap();
        }
        // A checkpoint that never finished.
        begin(dir.path(), 4).unwrap();
        assert_eq!(latest(dir.path()).unwrap().0, 3);
        remove_unfinished(dir.path());
        assert!(!root(dir.path()).join("4.tmp").exists());
        begin(dir.path(), 4).unwrap();
        let kept: Vec<u64> = list(dir.path()).iter().map(|(n, _)| *n).collect();
        assert_eq!(kept, vec![2, 3]);
        let tmp = begin(dir.path(), 5).unwrap();
        commit(dir.path(), &tmp, 5, Manifest::default()).unwrap();
        assert!(!root(dir.path()).join("4.tmp").exists());
        let kept: Vec<u64> = list(dir.path()).iter().map(|(n, _)| *n).collect();
        assert_eq!(kept, vec![3, 5]);
    }

    /// Writes checkpoint `n` with a positions file and its manifest.
    fn write(dir: &Path, n: u64) {
        let tmp = begin(dir, n).unwrap();
        let mut state = eddy_dbsp::checkpoint::StateWriter::create(&tmp).unwrap();
        state.put(&vec![n as u8; 10]).unwrap();
        state.finish().unwrap();
        Positions {
            journal: n * 10,
            ..Positions::default()
        }
        .write(&tmp)
        .unwrap();
        let manifest = Manifest {
            program_version: 3,
            journaled: true,
            ..Manifest::default()
        };
        commit(dir, &tmp, n, manifest).unwrap();
    }

    #[test]
    fn a_damaged_manifest_or_positions_file_is_named_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), 1);
        write(dir.path(), 2);
        let (found, damaged) = newest_readable(dir.path());
        let found = found.unwrap();
        assert_eq!((found.n, found.manifest.program_version), (2, 3));
        assert!(found.manifest.journaled && damaged.is_empty());
        let newest = root(dir.path()).join("2");
        let manifest = newest.join(MANIFEST);
        let text = std::fs::read_to_string(&manifest).unwrap();
        type Damage<'a> = Box<dyn Fn() + 'a>;
        let cases: Vec<(&str, Damage)> = vec![
            (
                "deleted",
                Box::new(|| std::fs::remove_file(&manifest).unwrap()),
            ),
            (
                "empty",
                Box::new(|| std::fs::write(&manifest, b"").unwrap()),
            ),
            (
                "garbage",
                Box::new(|| std::fs::write(&manifest, b"\x00\xff garbage").unwrap()),
            ),
            // Still JSON, one digit changed: only the checksum sees it.
            (
                "a digit changed",
                Box::new(|| {
                    let changed = text.replace("\"journal\": 0", "\"journal\": 9");
                    assert_ne!(changed, text);
                    std::fs::write(&manifest, changed).unwrap()
                }),
            ),
            (
                "positions changed",
                Box::new(|| std::fs::write(newest.join(POSITIONS), b"{\"journal\": 19}").unwrap()),
            ),
            (
                "state file cut",
                Box::new(|| {
                    let path = newest.join(eddy_dbsp::checkpoint::STATE_FILE);
                    let bytes = std::fs::read(&path).unwrap();
                    std::fs::write(&path, &bytes[..bytes.len() - 3]).unwrap()
                }),
            ),
        ];
        for (case, damage) in cases {
            let positions = std::fs::read(newest.join(POSITIONS)).unwrap();
            let state_path = newest.join(eddy_dbsp::checkpoint::STATE_FILE);
            let state = std::fs::read(&state_path).unwrap();
            damage();
            let (found, damaged) = newest_readable(dir.path());
            assert_eq!(found.unwrap().n, 1, "{case}");
            assert_eq!(damaged.len(), 1, "{case}");
            assert!(
                damaged[0].contains("checkpoint 2 is damaged")
                    && damaged[0].contains(&newest.display().to_string()),
                "{case}: {}",
                damaged[0]
            );
            std::fs::write(&manifest, &text).unwrap();
            std::fs::write(newest.join(POSITIONS), positions).unwrap();
            std::fs::write(&state_path, state).unwrap();
            assert_eq!(newest_readable(dir.path()).0.unwrap().n, 2, "{case}");
        }
    }
}

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
}

impl Positions {
    /// Writes the positions into a checkpoint folder being written.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(POSITIONS);
        let bytes = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, bytes)
            .and_then(|_| std::fs::File::open(&path)?.sync_all())
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The positions of a finished checkpoint (none recorded: all zero).
    pub fn read(dir: &Path) -> Result<Self, String> {
        let path = dir.join(POSITIONS);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("{}: not a positions file: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }
}

/// Checkpoints kept.
const KEEP: usize = 2;
const MANIFEST: &str = "manifest.json";

/// The folder of a storage's checkpoints.
fn root(storage_dir: &Path) -> PathBuf {
    storage_dir.join("checkpoints")
}

/// The finished checkpoints of a storage folder, oldest first.
pub fn list(storage_dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = std::fs::read_dir(root(storage_dir)) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let n = e.file_name().to_str()?.parse::<u64>().ok()?;
            let path = e.path();
            path.join(MANIFEST).is_file().then_some((n, path))
        })
        .collect();
    found.sort();
    found
}

/// The latest finished checkpoint, if any.
pub fn latest(storage_dir: &Path) -> Option<(u64, PathBuf)> {
    list(storage_dir).pop()
}

/// Starts checkpoint `n`: an empty temporary folder to write it into.
pub fn begin(storage_dir: &Path, n: u64) -> Result<PathBuf, String> {
    let dir = root(storage_dir).join(format!("{n}.tmp"));
    let io = |e: std::io::Error| format!("{}: {e}", dir.display());
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io)?;
    }
    std::fs::create_dir_all(&dir).map_err(io)?;
    Ok(dir)
}

/// Finishes the checkpoint written into `tmp` (from [`begin`]): writes its
/// manifest, renames it into place and removes older checkpoints. Returns
/// its folder.
pub fn commit(storage_dir: &Path, tmp: &Path, n: u64, manifest: &Value) -> Result<PathBuf, String> {
    let io = |p: &Path, e: std::io::Error| format!("{}: {e}", p.display());
    let path = tmp.join(MANIFEST);
    let bytes = serde_json::to_vec_pretty(manifest).map_err(|e| e.to_string())?;
    std::fs::write(&path, bytes).map_err(|e| io(&path, e))?;
    std::fs::File::open(&path)
        .and_then(|f| f.sync_all())
        .map_err(|e| io(&path, e))?;
    let sync = |d: &Path| eddy_dbsp::checkpoint::sync_dir(d).map_err(|e| e.to_string());
    sync(tmp)?;
    let root = root(storage_dir);
    let done = root.join(n.to_string());
    std::fs::rename(tmp, &done).map_err(|e| io(&done, e))?;
    sync(&root)?;
    prune(storage_dir);
    Ok(done)
}

/// Removes unfinished checkpoints and all but the last [`KEEP`] finished
/// ones (best effort: a folder that cannot be removed now is retried at
/// the next checkpoint).
fn prune(storage_dir: &Path) {
    let finished = list(storage_dir);
    let keep: Vec<&PathBuf> = finished.iter().rev().take(KEEP).map(|(_, p)| p).collect();
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
#[derive(Debug, Clone, Default)]
pub struct CheckpointStatus {
    /// The last checkpoint that succeeded.
    pub success: Option<u64>,
    /// The last one that failed, and why.
    pub failure: Option<(u64, String)>,
}

impl CheckpointStatus {
    /// As Feldera reports it.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "success": self.success,
            "failure": self.failure.as_ref().map(|(n, e)| serde_json::json!({
                "sequence_number": n,
                "error": e,
            })),
        })
    }
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
            commit(dir.path(), &tmp, n, &serde_json::json!({"n": n})).unwrap();
        }
        // A checkpoint that never finished.
        begin(dir.path(), 4).unwrap();
        assert_eq!(latest(dir.path()).unwrap().0, 3);
        let kept: Vec<u64> = list(dir.path()).iter().map(|(n, _)| *n).collect();
        assert_eq!(kept, vec![2, 3]);
        let tmp = begin(dir.path(), 5).unwrap();
        commit(dir.path(), &tmp, 5, &serde_json::json!({})).unwrap();
        assert!(!root(dir.path()).join("4.tmp").exists());
        let kept: Vec<u64> = list(dir.path()).iter().map(|(n, _)| *n).collect();
        assert_eq!(kept, vec![3, 5]);
    }
}

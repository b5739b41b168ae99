//! Bringing a pipeline up from its definition: its storage folder, the
//! checkpoint it resumes from (and the positions recorded there), its HTTP
//! journal under fault tolerance (replayed past the checkpoint before any
//! new input), its outputs, its worker and its input connectors.
//!
//! Storage layout, in the data directory's `pipelines/` folder:
//! `<name>.json` (the definition), `<name>.desired` (present while the
//! pipeline should run: a restarted server starts it again) and
//! `<name>.storage/`: batch files, `checkpoints/<n>/` and, under fault
//! tolerance, `journal-v<program version>/`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use eddy_dbsp::Storage;
use eddy_sql::Program;
use serde_json::{json, Value};

use crate::checkpoints::{self, Positions};
use crate::connector::{self, ConnectorSpec, FileAccess};
use crate::definition::{fault_tolerance, PipelineDef};
use crate::error::{ApiError, ApiResult};
use crate::journal::Journal;
use crate::runner::{Origin, Output, Runner, StateConfig};

/// Records the input buffer holds unless `runtime_config.max_buffered_records`
/// says otherwise.
const DEFAULT_BUFFER_RECORDS: usize = 1_000_000;

/// Bytes from which a state batch goes to disk unless
/// `runtime_config.storage.min_storage_bytes` says otherwise.
const DEFAULT_MIN_STORAGE_BYTES: u64 = 4 << 20;

/// The folder of a pipeline's storage, beside its definition (names are
/// letters, digits, `_` and `-`, so it stays inside the data directory).
pub fn storage_dir(pipelines_dir: &Path, name: &str) -> PathBuf {
    pipelines_dir.join(format!("{name}.storage"))
}

/// Whether a pipeline keeps its state in storage: unless
/// `runtime_config.storage` is `false` (the data directory always exists).
pub fn storage_enabled(def: &PipelineDef) -> bool {
    !matches!(def.runtime_config.get("storage"), Some(Value::Bool(false)))
}

/// The storage a pipeline's state uses, if it has one.
fn open_storage(def: &PipelineDef, pipelines_dir: &Path) -> Result<Option<Arc<Storage>>, String> {
    if !storage_enabled(def) {
        return Ok(None);
    }
    let config = def.runtime_config.get("storage");
    let min_bytes = config
        .and_then(|c| c.get("min_storage_bytes"))
        .and_then(Value::as_u64)
        .unwrap_or(DEFAULT_MIN_STORAGE_BYTES);
    let dir = storage_dir(pipelines_dir, &def.name);
    Storage::open(&dir, usize::try_from(min_bytes).unwrap_or(usize::MAX))
        .map(Some)
        .map_err(|e| e.to_string())
}

/// The checkpoint a start resumes from: the latest one, when the pipeline
/// has storage and the checkpoint is of its current program.
pub fn resume_point(def: &PipelineDef, pipelines_dir: &Path) -> Option<(u64, PathBuf)> {
    if !storage_enabled(def) {
        return None;
    }
    let latest = checkpoints::latest(&storage_dir(pipelines_dir, &def.name))?;
    let version = std::fs::read(latest.1.join("manifest.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|m| m["program_version"].as_u64());
    if version != Some(def.program_version) {
        tracing::warn!(pipeline = %def.name, "not resuming from checkpoint {}: the program changed since", latest.0);
        return None;
    }
    Some(latest)
}

/// Removes a pipeline's storage folder, if it has one.
pub fn remove_storage(pipelines_dir: &Path, name: &str) -> ApiResult<()> {
    let dir = storage_dir(pipelines_dir, name);
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ApiError::internal(format!(
            "clearing '{}': {e}",
            dir.display()
        ))),
        _ => Ok(()),
    }
}

/// The journal folder of a pipeline's current program; journals of other
/// versions (whose tables may differ) are removed.
fn journal_dir(storage: &Path, def: &PipelineDef) -> PathBuf {
    let current = format!("journal-v{}", def.program_version);
    remove_journals(storage, Some(&current));
    storage.join(current)
}

/// Removes the journal folders of a storage folder but `keep`.
fn remove_journals(storage: &Path, keep: Option<&str>) {
    let Ok(entries) = std::fs::read_dir(storage) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("journal-v") && Some(name.as_ref()) != keep {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Builds and starts a pipeline's runner: resumed from the checkpoint in
/// `resume` when given, with its journal replayed under fault tolerance.
pub fn start_runner(
    def: &PipelineDef,
    connectors: &[ConnectorSpec],
    paused: bool,
    files: &FileAccess,
    pipelines_dir: &Path,
    resume: Option<&Path>,
) -> Result<Runner, String> {
    let program = Program::parse(&def.program_code).map_err(|e| e.to_string())?;
    let ft = fault_tolerance(&def.runtime_config)?;
    if ft.is_some() && !storage_enabled(def) {
        return Err(
            "fault tolerance keeps checkpoints and a journal in storage: 'runtime_config.storage' cannot be false with it".into(),
        );
    }
    let storage = open_storage(def, pipelines_dir)?;
    let positions = match resume {
        Some(dir) => Positions::read(dir)?,
        None => Positions::default(),
    };
    // Resumed inputs go on from the checkpoint; under fault tolerance a
    // fresh start reads from each input's configured start (not from what
    // a Kafka group committed for a state that is gone).
    let exact = resume.is_some() || ft.is_some();
    let input_position =
        |name: &str| exact.then(|| positions.inputs.get(name).cloned().unwrap_or(json!({})));
    let max_rss_bytes = def
        .runtime_config
        .get("max_rss_mb")
        .and_then(Value::as_u64)
        .map(|mb| mb.saturating_mul(1 << 20));
    let buffer = def
        .runtime_config
        .get("max_buffered_records")
        .and_then(Value::as_u64)
        .map(|n| n as usize)
        .unwrap_or(DEFAULT_BUFFER_RECORDS);
    let stats = Arc::new(crate::stats::PipelineStats::default());
    let mut outputs = Vec::new();
    for spec in connectors.iter().filter(|c| !c.input) {
        let endpoint = stats.add_output(&spec.name, &spec.relation);
        let at = resume.zip(positions.outputs.get(&spec.name));
        let exactly_once = ft.is_some_and(|f| f.exactly_once);
        let sink = connector::open_output(spec, &def.name, files, at, exactly_once)
            .map_err(|e| format!("output connector '{}': {e}", spec.name))?;
        outputs.push(Output {
            view: spec.relation.clone(),
            sink,
            stats: endpoint,
            snapshot: false,
        });
    }
    let journal_after = positions.journal;
    let state = StateConfig {
        storage,
        max_rss_bytes,
        resume: resume.map(Path::to_path_buf),
        positions: positions.clone(),
    };
    let runner = Runner::start(&def.name, program, state, outputs, buffer, paused, stats)?;
    let storage_folder = storage_dir(pipelines_dir, &def.name);
    if ft.is_some() {
        let feeder = &runner.feeder;
        let mut replayed = 0u64;
        let journal = Journal::open(
            &journal_dir(&storage_folder, def),
            journal_after,
            |n, table, changes| {
                replayed += 1;
                let origin = Origin {
                    replayed: Some(n),
                    ..Origin::default()
                };
                feeder
                    .feed_blocking(&table, changes, origin)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .map_err(|e| format!("the input journal: {e}"))?;
        if replayed > 0 {
            tracing::info!(pipeline = %def.name, records = replayed, after = journal_after, "replayed the input journal");
        }
        feeder.set_journal(journal);
    } else {
        remove_journals(&storage_folder, None);
    }
    for spec in connectors.iter().filter(|c| c.input) {
        let thread = connector::start_input(
            spec,
            Arc::clone(&runner.feeder),
            &def.name,
            files,
            input_position(&spec.name).as_ref(),
        )
        .map_err(|e| format!("input connector '{}': {e}", spec.name))?;
        runner.add_input(thread);
    }
    Ok(runner)
}

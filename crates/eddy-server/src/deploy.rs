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

use eddy_dbsp::storage::DEFAULT_CACHE_BYTES;
use eddy_dbsp::Storage;
use eddy_sql::Program;
use serde_json::json;

use crate::bootstrap::{self, BootstrapPolicy, ProgramDiff};
use crate::checkpoints::{self, Manifest, Positions};
use crate::connector::{self, ConnectorSpec, FileAccess};
use crate::definition::PipelineDef;
use crate::error::{ApiError, ApiResult};
use crate::journal::{Journal, JournalError, Opening};
use crate::runner::{Bootstrap, Origin, Output, Runner, StateConfig};

/// Where a pipeline's state starts.
pub enum Start {
    /// Empty.
    Fresh,
    /// From checkpoint `n` in `dir`, of the same program or of one that
    /// differs only in its connectors.
    Resume {
        n: u64,
        dir: PathBuf,
        /// The version of the program that wrote it, when another (its
        /// journal is taken over: the same tables, numbered on).
        old_version: Option<u64>,
        /// Connectors whose config changed: they start afresh.
        changed: Vec<String>,
    },
    /// From checkpoint `n` in `dir`, of another program (see
    /// [`crate::bootstrap`]).
    Bootstrap {
        n: u64,
        dir: PathBuf,
        /// The program that wrote it, its version and its connectors.
        old_program: Box<Program>,
        old_version: u64,
        old_connectors: Vec<ConnectorSpec>,
        /// What changed.
        diff: ProgramDiff,
    },
}

impl Start {
    /// The checkpoint it starts from.
    pub fn checkpoint(&self) -> Option<u64> {
        match self {
            Start::Fresh => None,
            Start::Resume { n, .. } | Start::Bootstrap { n, .. } => Some(*n),
        }
    }

    /// What changed, when it bootstraps.
    pub fn diff(&self) -> Option<&ProgramDiff> {
        match self {
            Start::Bootstrap { diff, .. } => Some(diff),
            _ => None,
        }
    }

    fn dir(&self) -> Option<&Path> {
        match self {
            Start::Fresh => None,
            Start::Resume { dir, .. } | Start::Bootstrap { dir, .. } => Some(dir),
        }
    }
}

/// What a start does with state that does not read whole: a damaged
/// checkpoint, a journal with records missing or damaged (`?recover=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recover {
    /// Refuse to start, naming what is damaged and what would be lost
    /// (the default): nothing acknowledged is given up without being
    /// asked.
    #[default]
    Refuse,
    /// Start from the newest checkpoint that reads whole and what the
    /// journal still holds after it, giving up the rest; a checkpoint
    /// follows at once, so the loss is accepted once.
    AcceptLoss,
    /// Remove the pipeline's checkpoints and journal and start empty.
    FromScratch,
}

impl std::str::FromStr for Recover {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "refuse" => Ok(Self::Refuse),
            "accept_loss" => Ok(Self::AcceptLoss),
            "from_scratch" => Ok(Self::FromScratch),
            other => Err(format!(
                "unknown recover '{other}' (refuse, accept_loss, from_scratch)"
            )),
        }
    }
}

/// What the error of a start refused for damaged state adds.
const RECOVER_ADVICE: &str = "start it with ?recover=accept_loss to go on without what is lost, or ?recover=from_scratch to start empty";

/// What a start does.
pub enum Plan {
    /// Starts.
    Start(Start),
    /// The program changed since the checkpoint: waits for approval.
    AwaitApproval(ProgramDiff),
}

/// Decides where a pipeline with program `def` and `connectors` starts:
/// from its latest checkpoint, resumed when it is of the same tables and
/// views, otherwise as `policy` says (see [`crate::bootstrap`]); state
/// that does not read whole as `recover` says. Also returns what is
/// damaged in the checkpoints it passed over.
pub fn plan(
    def: &PipelineDef,
    connectors: &[ConnectorSpec],
    files: &FileAccess,
    pipelines_dir: &Path,
    policy: BootstrapPolicy,
    recover: Recover,
) -> ApiResult<(Plan, Vec<String>)> {
    if recover == Recover::FromScratch {
        tracing::warn!(pipeline = %def.name, "removing the checkpoints and journal, as asked, to start empty");
        remove_storage(pipelines_dir, &def.name)?;
        return Ok((Plan::Start(Start::Fresh), Vec::new()));
    }
    let (found, damaged) = resume_point(def, pipelines_dir, recover)?;
    let plan = match found {
        None => Plan::Start(Start::Fresh),
        Some(found) => plan_from(def, connectors, files, policy, found)?,
    };
    Ok((plan, damaged))
}

/// [`plan`] from checkpoint `found`.
fn plan_from(
    def: &PipelineDef,
    connectors: &[ConnectorSpec],
    files: &FileAccess,
    policy: BootstrapPolicy,
    found: checkpoints::Readable,
) -> ApiResult<Plan> {
    let checkpoints::Readable { n, dir, manifest } = found;
    // Each keyed operator's state is split by worker; another number of
    // workers re-splits it as the pipeline restores it (checkpoints from
    // before workers say nothing: one).
    let new_workers = def.runtime_config.get().workers() as u64;
    let old_workers = manifest.workers;
    if old_workers != new_workers {
        tracing::info!(
            pipeline = %def.name,
            checkpoint = n,
            "the checkpoint holds the state of {old_workers} worker(s): it is re-split over {new_workers}"
        );
    }
    let old_version = manifest.program_version;
    if old_version == def.program_version {
        return Ok(Plan::Start(Start::Resume {
            n,
            dir,
            old_version: None,
            changed: Vec::new(),
        }));
    }
    let old = manifest
        .program_code
        .as_deref()
        .and_then(|c| Program::parse(c).ok());
    let (Some(old), Ok(new)) = (old, Program::parse(&def.program_code)) else {
        tracing::warn!(pipeline = %def.name, "checkpoint {n} does not record its program: starting from nothing");
        return Ok(Plan::Start(Start::Fresh));
    };
    let diff = bootstrap::diff(&old, &new);
    let old_connectors = connector::specs(&old, files).unwrap_or_default();
    let same = |c: &ConnectorSpec| {
        old_connectors
            .iter()
            .any(|o| o.name == c.name && o.to_json() == c.to_json())
    };
    if !diff.is_change() {
        // Only connectors changed: the same circuit, resumed; the
        // connectors whose config changed start afresh.
        return Ok(Plan::Start(Start::Resume {
            n,
            dir,
            old_version: Some(old_version),
            changed: connectors
                .iter()
                .filter(|c| !same(c))
                .map(|c| c.name.clone())
                .collect(),
        }));
    }
    let name = &def.name;
    match policy {
        BootstrapPolicy::Reject => Err(ApiError::state(format!(
            "pipeline '{name}': the program changed since its last checkpoint ({}); start it with bootstrap_policy=allow to keep what did not change, or clear its storage",
            diff.describe()
        ))),
        BootstrapPolicy::AwaitApproval => Ok(Plan::AwaitApproval(diff)),
        BootstrapPolicy::Allow => {
            let obstacles = diff.obstacles(&old, &new);
            if !obstacles.is_empty() {
                return Err(ApiError::new(
                    axum::http::StatusCode::BAD_REQUEST,
                    "StartFailed",
                    format!(
                        "pipeline '{name}' cannot keep its state across this change: {}; clear its storage to start from nothing",
                        obstacles.join("; ")
                    ),
                ));
            }
            Ok(Plan::Start(Start::Bootstrap {
                n,
                dir,
                old_program: Box::new(old),
                old_version,
                old_connectors,
                diff,
            }))
        }
    }
}

/// Records the input buffer holds unless `runtime_config.max_buffered_records`
/// says otherwise: one step's worth (a step takes up to 100,000), which
/// sources refill while the step runs. More only holds rows in memory, and
/// makes steps larger, whose transient state grows with them: with
/// 1,000,000, Nexmark's q4, q7 and q15 used 175 to 235 MiB more at the
/// same speed; 200,000 instead of 100,000 cost up to 41% more peak memory
/// on the stateful queries (q5 202 against 149 MiB) at the same speed
/// (benches/RESULTS.md).
const DEFAULT_BUFFER_RECORDS: usize = 100_000;

/// Bytes from which a state batch goes to disk unless
/// `runtime_config.storage.min_storage_bytes` (or `min_spill_size`) says
/// otherwise.
const DEFAULT_MIN_STORAGE_BYTES: u64 = 4 << 20;

/// The folder of a pipeline's storage, beside its definition (names are
/// letters, digits, `_` and `-`, so it stays inside the data directory).
pub fn storage_dir(pipelines_dir: &Path, name: &str) -> PathBuf {
    pipelines_dir.join(format!("{name}.storage"))
}

/// Whether a pipeline keeps its state in storage: unless
/// `runtime_config.storage` is `false` (the data directory always exists).
pub fn storage_enabled(def: &PipelineDef) -> bool {
    def.runtime_config.get().storage_enabled()
}

/// The storage a pipeline's state uses, if it has one.
fn open_storage(def: &PipelineDef, pipelines_dir: &Path) -> Result<Option<Arc<Storage>>, String> {
    if !storage_enabled(def) {
        return Ok(None);
    }
    let min_bytes =
        (def.runtime_config.get().min_storage_bytes()).unwrap_or(DEFAULT_MIN_STORAGE_BYTES);
    let dir = storage_dir(pipelines_dir, &def.name);
    let storage = Storage::open(&dir, usize::try_from(min_bytes).unwrap_or(usize::MAX))
        .map_err(|e| e.to_string())?;
    storage.set_cache_bytes(cache_bytes(def));
    Ok(Some(storage))
}

/// The block cache's size: `runtime_config.storage.cache_mib`, else the
/// default, at most a quarter of the memory budget (`max_rss`) when one is
/// set (the cache is part of what the budget bounds).
fn cache_bytes(def: &PipelineDef) -> usize {
    let config = def.runtime_config.get();
    let bytes = match (config.storage_options().cache_mib, config.max_rss_bytes()) {
        (Some(cache), _) => cache.saturating_mul(1 << 20),
        (None, Some(budget)) => (DEFAULT_CACHE_BYTES as u64).min(budget / 4),
        (None, None) => DEFAULT_CACHE_BYTES as u64,
    };
    usize::try_from(bytes).unwrap_or(usize::MAX)
}

/// The checkpoint a start may resume from, when the pipeline has
/// storage: the newest one that reads whole. Unfinished checkpoints are
/// removed first. When newer ones are damaged, a pipeline with a journal
/// goes on from an older one (opening the journal then checks that it
/// holds everything after it); one without refuses unless `recover`
/// accepts the loss of what it took since.
fn resume_point(
    def: &PipelineDef,
    pipelines_dir: &Path,
    recover: Recover,
) -> ApiResult<(Option<checkpoints::Readable>, Vec<String>)> {
    if !storage_enabled(def) {
        return Ok((None, Vec::new()));
    }
    let storage = storage_dir(pipelines_dir, &def.name);
    checkpoints::remove_unfinished(&storage);
    let (found, damaged) = checkpoints::newest_readable(&storage);
    if damaged.is_empty() {
        return Ok((found, damaged));
    }
    let what = damaged.join("; ");
    let from = found
        .as_ref()
        .map_or("nothing".to_string(), |c| format!("checkpoint {}", c.n));
    let journaled = def.runtime_config.get().fault_tolerance().is_some();
    if journaled || recover == Recover::AcceptLoss {
        tracing::warn!(pipeline = %def.name, damaged = %what, "starting from {from}");
        return Ok((found, damaged));
    }
    Err(ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        "StartFailed",
        format!(
            "pipeline '{}': {what}; without fault tolerance it keeps no journal, so starting from {from} loses the input taken since: {RECOVER_ADVICE}",
            def.name
        ),
    ))
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
fn journal_dir(storage: &Path, version: u64) -> PathBuf {
    storage.join(journal_name(version))
}

fn journal_name(version: u64) -> String {
    format!("journal-v{version}")
}

/// Gives the journal of the program that wrote the checkpoint (version
/// `from`, the same tables, records numbered on) to version `to`. When a
/// start of another version took it over and did not get as far as a
/// checkpoint of its own, it is found under that version's name (the
/// newest other journal).
fn take_over_journal(storage: &Path, from: u64, to: u64) -> Result<(), String> {
    let new = journal_dir(storage, to);
    if new.exists() {
        return Ok(());
    }
    let old = journal_dir(storage, from);
    let old = if old.is_dir() {
        Some(old)
    } else {
        std::fs::read_dir(storage)
            .ok()
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name();
                let v = name
                    .to_str()?
                    .strip_prefix("journal-v")?
                    .parse::<u64>()
                    .ok()?;
                Some((v, e.path()))
            })
            .max()
            .map(|(_, p)| p)
    };
    if let Some(old) = old {
        std::fs::rename(&old, &new)
            .map_err(|e| format!("taking over the journal {}: {e}", old.display()))?;
    }
    Ok(())
}

/// Removes the journals of other programs than version `keep` (once a
/// checkpoint of `keep` holds what they had).
pub fn remove_other_journals(storage: &Path, keep: u64) {
    remove_journals(storage, Some(&journal_name(keep)));
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

/// Builds and starts a pipeline's runner from `start`, with its journal
/// replayed under fault tolerance.
pub fn start_runner(
    def: &PipelineDef,
    connectors: &[ConnectorSpec],
    paused: bool,
    files: &FileAccess,
    pipelines_dir: &Path,
    start: &Start,
    recover: Recover,
) -> Result<Runner, String> {
    let resume = match start {
        Start::Resume { dir, .. } => Some(dir.as_path()),
        _ => None,
    };
    let program = Program::parse(&def.program_code).map_err(|e| e.to_string())?;
    let config = def.runtime_config.checked().map_err(|e| e.to_string())?;
    let ft = config.fault_tolerance();
    if ft.is_some() && !storage_enabled(def) {
        return Err(
            "fault tolerance keeps checkpoints and a journal in storage: 'runtime_config.storage' cannot be false with it".into(),
        );
    }
    let storage = open_storage(def, pipelines_dir)?;
    let storage_folder = storage_dir(pipelines_dir, &def.name);
    let (positions, bootstrap) = match start {
        Start::Fresh => (Positions::default(), None),
        Start::Resume {
            dir,
            old_version,
            changed,
            ..
        } => {
            let mut positions = Positions::read(dir).map_err(|e| e.to_string())?;
            for name in changed {
                positions.inputs.remove(name);
                positions.outputs.remove(name);
            }
            if let Some(v) = old_version.filter(|&v| v != def.program_version) {
                take_over_journal(&storage_folder, v, def.program_version)?;
            }
            (positions, None)
        }
        Start::Bootstrap { .. } => prepare_bootstrap(start, connectors, &storage_folder, recover)?,
    };
    let at_checkpoint = !matches!(start, Start::Fresh);
    // Resumed inputs go on from the checkpoint; under fault tolerance a
    // fresh start reads from each input's configured start (not from what
    // a Kafka group committed for a state that is gone).
    let exact = at_checkpoint || ft.is_some();
    let input_position =
        |name: &str| exact.then(|| positions.inputs.get(name).cloned().unwrap_or(json!({})));
    let max_rss_bytes = config.max_rss_bytes();
    let buffer = config
        .max_buffered_records
        .map_or(DEFAULT_BUFFER_RECORDS, |n| {
            usize::try_from(n).unwrap_or(usize::MAX)
        });
    let stats = Arc::new(crate::stats::PipelineStats::default());
    let mut outputs = Vec::new();
    for spec in connectors.iter().filter(|c| !c.input) {
        let endpoint = stats.add_output(&spec.name, &spec.relation);
        let at = start.dir().zip(positions.outputs.get(&spec.name));
        let exactly_once = ft.is_some_and(|f| f.exactly_once);
        let columns = program
            .views
            .iter()
            .find(|v| v.name == spec.relation)
            .map(|v| v.schema.fields().clone())
            .unwrap_or_default();
        let cx = connector::OutputContext {
            pipeline: &def.name,
            files,
            resume: at,
            exactly_once,
            columns: &columns,
        };
        let sink = connector::open_output(spec, cx)
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
        bootstrap,
        workers: config.workers(),
    };
    let runner = Runner::start(&def.name, program, state, outputs, buffer, paused, stats)?;
    if ft.is_some() {
        if !matches!(start, Start::Bootstrap { .. }) {
            // The journals of older programs go once a checkpoint of this
            // one holds what they had (a bootstrap keeps them until then).
            remove_other_journals(&storage_folder, def.program_version);
        }
        let feeder = &runner.feeder;
        let opening = Opening {
            after: journal_after,
            expected: start
                .dir()
                .and_then(|d| Manifest::read(d).ok())
                .is_some_and(|m| m.journaled),
            accept_loss: recover == Recover::AcceptLoss,
        };
        let (journal, opened) = Journal::open(
            &journal_dir(&storage_folder, def.program_version),
            opening,
            |record| {
                let origin = Origin {
                    replayed: Some(record.number),
                    key: record.key,
                    ..Origin::default()
                };
                feeder
                    .feed_blocking(&record.table, record.changes, origin)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .map_err(|e| journal_error(&e))?;
        if opened.replayed > 0 || opened.torn_bytes > 0 {
            tracing::info!(pipeline = %def.name, records = opened.replayed, after = journal_after, torn_bytes = opened.torn_bytes, "replayed the input journal");
        }
        feeder.set_journal(journal);
    } else if !matches!(start, Start::Bootstrap { .. }) {
        remove_journals(&storage_folder, None);
    }
    for spec in connectors.iter().filter(|c| c.input) {
        let thread = connector::start_input(
            spec,
            connectors,
            Arc::clone(&runner.feeder),
            (&def.name, &def.id),
            files,
            input_position(&spec.name).as_ref(),
        )
        .map_err(|e| format!("input connector '{}': {e}", spec.name))?;
        if let Some(thread) = thread {
            runner.add_input(thread);
        }
    }
    Ok(runner)
}

/// A journal that cannot be opened, as a start's error: with what the
/// user can do when it is a loss.
fn journal_error(e: &JournalError) -> String {
    if e.is_loss() {
        format!("the input journal: {e}; {RECOVER_ADVICE}")
    } else {
        format!("the input journal: {e}")
    }
}

/// The positions and first steps of a changed program started from a
/// checkpoint (`start`, a bootstrap; see [`crate::bootstrap`]): unchanged
/// tables and views keep their state, then take what the old program's
/// journal took after the checkpoint; connectors unchanged on unchanged
/// relations keep their positions.
fn prepare_bootstrap(
    start: &Start,
    connectors: &[ConnectorSpec],
    storage_folder: &Path,
    recover: Recover,
) -> Result<(Positions, Option<Bootstrap>), String> {
    let Start::Bootstrap {
        dir,
        old_program,
        old_version,
        old_connectors,
        diff,
        ..
    } = start
    else {
        unreachable!("prepare_bootstrap is called for a bootstrap");
    };
    let (old_version, old_program) = (*old_version, old_program.as_ref());
    let old_positions = Positions::read(dir).map_err(|e| e.to_string())?;
    let kept = |relation: &str, unchanged: &[String]| unchanged.iter().any(|r| r == relation);
    let same_spec = |spec: &ConnectorSpec| {
        old_connectors
            .iter()
            .any(|o| o.name == spec.name && o.to_json() == spec.to_json())
    };
    let mut positions = Positions::default();
    for spec in connectors {
        let unchanged = if spec.input {
            kept(&spec.relation, &diff.tables.unchanged)
        } else {
            kept(&spec.relation, &diff.views.unchanged)
        };
        if !(unchanged && same_spec(spec)) {
            continue;
        }
        let old = if spec.input {
            old_positions.inputs.get(&spec.name)
        } else {
            old_positions.outputs.get(&spec.name)
        };
        if let Some(p) = old {
            let map = if spec.input {
                &mut positions.inputs
            } else {
                &mut positions.outputs
            };
            map.insert(spec.name.clone(), p.clone());
        }
    }
    let mut changes: Vec<(String, eddy_dbsp::ZSet)> = Vec::new();
    let old_journal = journal_dir(storage_folder, old_version);
    // A checkpoint taken with a journal needs it: one gone is refused by
    // the opening, not passed over.
    let expected = Manifest::read(dir).is_ok_and(|m| m.journaled);
    if expected || old_journal.is_dir() {
        let opening = Opening {
            after: old_positions.journal,
            expected,
            accept_loss: recover == Recover::AcceptLoss,
        };
        Journal::open(&old_journal, opening, |record| {
            if kept(&record.table, &diff.tables.unchanged) {
                changes.push((record.table, record.changes));
            }
            Ok(())
        })
        .map_err(|e| format!("the old program's {}", journal_error(&e)))?;
    }
    let announce = diff
        .views
        .added
        .iter()
        .chain(&diff.views.modified)
        .cloned()
        .collect();
    let kept = diff
        .tables
        .unchanged
        .iter()
        .chain(&diff.views.unchanged)
        .cloned()
        .collect();
    Ok((
        positions,
        Some(Bootstrap {
            old_program: old_program.clone(),
            checkpoint: dir.to_path_buf(),
            kept,
            changes,
            announce,
        }),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn journal_with(storage: &Path, version: u64, marker: &str) {
        let dir = journal_dir(storage, version);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(marker), b"").unwrap();
    }

    fn holds(storage: &Path, version: u64, marker: &str) -> bool {
        journal_dir(storage, version).join(marker).exists()
    }

    #[test]
    fn a_resumed_start_takes_over_the_journal_its_checkpoint_needs() {
        // The checkpoint's program's journal, when it is there.
        let d = tempfile::tempdir().unwrap();
        journal_with(d.path(), 1, "v1");
        journal_with(d.path(), 2, "v2");
        take_over_journal(d.path(), 1, 3).unwrap();
        assert!(holds(d.path(), 3, "v1") && holds(d.path(), 2, "v2"));
        // A start of version 2 took it over and failed before a checkpoint
        // of its own: version 3 finds it under version 2's name.
        let d = tempfile::tempdir().unwrap();
        journal_with(d.path(), 2, "v2");
        take_over_journal(d.path(), 1, 3).unwrap();
        assert!(holds(d.path(), 3, "v2") && !journal_dir(d.path(), 2).exists());
        // The new version's own journal is never replaced.
        journal_with(d.path(), 4, "v4");
        take_over_journal(d.path(), 4, 3).unwrap();
        assert!(holds(d.path(), 3, "v2") && holds(d.path(), 4, "v4"));
        // Nothing to take over: nothing happens.
        let d = tempfile::tempdir().unwrap();
        take_over_journal(d.path(), 1, 2).unwrap();
        assert!(!journal_dir(d.path(), 2).exists());
    }
}

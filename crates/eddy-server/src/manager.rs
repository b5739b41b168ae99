//! The pipelines of a server: their definitions (kept in the data
//! directory across restarts), their checked programs and their runners.
//!
//! Status follows Feldera's model so that its clients can poll it: a
//! pipeline's program is checked when it is defined (`program_status` is
//! `Success` or `SqlError`; there is no compile step), and its deployment is
//! `Stopped`, `Running`, `Paused` or `Stopping`, with the desired status and
//! the last deployment error beside it.
//!
//! A pipeline that should be running (or paused) has a `<name>.desired`
//! file beside its definition: a server that restarts, after a crash or a
//! shutdown, starts those pipelines again, each resuming from its latest
//! checkpoint. Under `runtime_config.fault_tolerance` a running pipeline
//! checkpoints every `checkpoint_interval_secs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use axum::http::StatusCode;
use eddy_sql::limits;
use serde_json::{json, Value};

pub use crate::bootstrap::BootstrapPolicy;
use crate::bootstrap::ProgramDiff;
use crate::checked::{check, program_error, sql_messages, Checked, Refused, SqlCompilation};
use crate::checkpoints::{self, CheckpointFailure, CheckpointStatus};
use crate::connector::FileAccess;
use crate::definition::{apply, RuntimeSettings};
pub use crate::definition::{check_name, PipelineDef, PipelineUpdate};
pub use crate::deploy::Recover;
use crate::deploy::{
    plan, remove_other_journals, remove_storage, start_runner, storage_dir, storage_enabled, Plan,
};
pub use crate::descriptor::Deployment;
use crate::descriptor::{
    PipelineDescriptor, ProgramError, ProgramStatus, ResourcesStatus, StorageStatus,
};
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::limits::Limits;
use crate::query::QueryLimits;
use crate::runner::Runner;

impl Deployment {
    fn as_str(self) -> &'static str {
        match self {
            Self::Stopped => "Stopped",
            Self::Running => "Running",
            Self::Replaying => "Replaying",
            Self::Paused => "Paused",
            Self::Stopping => "Stopping",
        }
    }
}

struct Entry {
    def: PipelineDef,
    checked: Result<Checked, Refused>,
    runner: Option<Arc<Runner>>,
    status: Deployment,
    desired: Deployment,
    error: Option<ErrorBody>,
    status_since: String,
    checkpoints: CheckpointStatus,
    /// Whether the last start resumed from a checkpoint.
    resumed_from: Option<u64>,
    /// Whether the pipeline has a storage folder (state kept while stopped).
    stored: bool,
    /// A changed program waiting for `approve`: whether to start paused,
    /// and what changed.
    awaiting: Option<(bool, ProgramDiff)>,
    /// What the last start kept and recomputed, when it bootstrapped.
    bootstrapped: Option<ProgramDiff>,
}

/// All pipelines of a server.
pub struct Manager {
    dir: PathBuf,
    pipelines: Mutex<BTreeMap<String, Entry>>,
    limits: Limits,
    files: FileAccess,
    /// Held while a checkpoint is written (one at a time per server).
    checkpointing: tokio::sync::Mutex<()>,
    /// The manager itself, for the tasks it starts (periodic checkpoints).
    me: Weak<Manager>,
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-4{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[16..20],
        &h[20..32]
    )
}

impl Entry {
    fn describe(&self, status_only: bool) -> PipelineDescriptor {
        let (program_status, sql_compilation) = match &self.checked {
            Ok(_) => (ProgramStatus::Success, SqlCompilation::success()),
            Err(e) => (ProgramStatus::SqlError, sql_messages(e)),
        };
        let storage_status = if self.status != Deployment::Stopped || self.stored {
            StorageStatus::InUse
        } else {
            StorageStatus::Cleared
        };
        let resources = |d: Deployment| {
            if d == Deployment::Stopped {
                ResourcesStatus::Stopped
            } else {
                ResourcesStatus::Provisioned
            }
        };
        // A running pipeline still taking its journal's steps says so.
        let replaying = self.runner.as_ref().is_some_and(|r| r.feeder.replaying());
        let status = match self.status {
            Deployment::Running if replaying => Deployment::Replaying,
            s => s,
        };
        let d = &self.def;
        let program = |v: Value| (!status_only).then_some(v);
        PipelineDescriptor {
            id: d.id.clone(),
            name: d.name.clone(),
            description: d.description.clone(),
            created_at: d.created_at.clone(),
            version: d.version,
            platform_version: env!("CARGO_PKG_VERSION").to_string(),
            program_version: d.program_version,
            program_status,
            program_status_since: d.created_at.clone(),
            program_error: ProgramError {
                sql_compilation,
                rust_compilation: None,
                system_error: None,
            },
            deployment_status: status,
            deployment_status_since: self.status_since.clone(),
            deployment_desired_status: self.desired,
            deployment_desired_status_since: self.status_since.clone(),
            deployment_error: self
                .runner
                .as_ref()
                .and_then(|r| r.feeder.failure())
                .map(|m| {
                    ErrorBody::new(
                        "WorkerFailed",
                        format!("the pipeline failed and takes no more steps: {m}"),
                    )
                })
                .or_else(|| self.error.clone()),
            deployment_runtime_status: if self.awaiting.is_some() {
                Some("AwaitingApproval".into())
            } else if status == Deployment::Stopped {
                None
            } else {
                Some(status.as_str().into())
            },
            deployment_runtime_status_details: self
                .awaiting
                .as_ref()
                .map(|(_, d)| d)
                .or(self.bootstrapped.as_ref())
                .map(ProgramDiff::to_json),
            deployment_id: None,
            deployment_initial: None,
            deployment_resources_status: resources(self.status),
            deployment_resources_desired_status: resources(self.desired),
            storage_status,
            storage_error: self
                .runner
                .as_ref()
                .and_then(|r| r.feeder.stats.degraded())
                .map(|m| {
                    ErrorBody::new(
                        "StorageDegraded",
                        format!("storage is degraded, {m}: the pipeline runs and answers reads, refuses input it cannot journal, and retries checkpoints"),
                    )
                }),
            checkpoint_resumed: self.resumed_from,
            refresh_version: d.version,
            tags: d.tags.clone(),
            program_code: (!status_only).then(|| d.program_code.clone()),
            udf_rust: (!status_only).then(|| d.udf_rust.clone()),
            udf_toml: (!status_only).then(|| d.udf_toml.clone()),
            program_config: program(d.program_config.clone()),
            runtime_config: program(d.runtime_config.raw().clone()),
            program_info: (!status_only).then(|| self.checked.as_ref().ok().map(|c| c.info.clone())),
        }
    }

    fn set_status(&mut self, status: Deployment) {
        self.status = status;
        self.status_since = now();
    }
}

impl Manager {
    /// Opens the data directory and loads the pipelines defined there, all
    /// stopped ([`Manager::recover`] starts those that were running). File
    /// connectors may use the folders `files` allows.
    pub fn open(dir: &Path, limits: Limits, files: FileAccess) -> std::io::Result<Arc<Self>> {
        let pipelines_dir = dir.join("pipelines");
        std::fs::create_dir_all(&pipelines_dir)?;
        let mut pipelines = BTreeMap::new();
        for entry in std::fs::read_dir(&pipelines_dir)? {
            let path = entry?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let def: PipelineDef = match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
            {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "skipping unreadable pipeline definition");
                    continue;
                }
            };
            crate::logs::open(&def.name);
            tracing::info!(pipeline = %def.name, "loaded pipeline definition");
            let stored = checkpoints::latest(&storage_dir(&pipelines_dir, &def.name)).is_some();
            pipelines.insert(
                def.name.clone(),
                Entry {
                    checked: check(&def.program_code, &files),
                    def,
                    runner: None,
                    status: Deployment::Stopped,
                    desired: Deployment::Stopped,
                    error: None,
                    status_since: now(),
                    checkpoints: CheckpointStatus::default(),
                    resumed_from: None,
                    stored,
                    awaiting: None,
                    bootstrapped: None,
                },
            );
        }
        Ok(Arc::new_cyclic(|me| Self {
            dir: pipelines_dir,
            pipelines: Mutex::new(pipelines),
            limits,
            files,
            checkpointing: tokio::sync::Mutex::new(()),
            me: me.clone(),
        }))
    }

    /// Starts the pipelines that were running (or paused) when the server
    /// last stopped or crashed, each from its latest checkpoint. A pipeline
    /// that fails to start says why in its deployment error. Blocks: call
    /// it on a blocking thread of the runtime.
    pub fn recover(&self) {
        let names: Vec<(String, bool)> = {
            let pipelines = self.pipelines.lock().unwrap();
            pipelines
                .keys()
                .filter_map(|n| {
                    let desired = std::fs::read_to_string(self.desired_path(n)).ok()?;
                    Some((n.clone(), desired.trim() == "Paused"))
                })
                .collect()
        };
        let rt = tokio::runtime::Handle::current();
        for (name, paused) in names {
            tracing::info!(pipeline = %name, paused, "restarting a pipeline that was running");
            // It ran this program already: a change was approved then.
            if let Err(e) =
                rt.block_on(self.launch(&name, paused, BootstrapPolicy::Allow, Recover::Refuse))
            {
                tracing::warn!(pipeline = %name, error = %e.message, "could not restart the pipeline");
            }
        }
    }

    fn desired_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.desired"))
    }

    /// Records whether a pipeline should run after a server restart.
    fn set_desired(&self, name: &str, desired: Deployment) {
        let path = self.desired_path(name);
        let written = match desired {
            Deployment::Running | Deployment::Paused => {
                let tmp = self.dir.join(format!(".{name}.desired.tmp"));
                std::fs::write(&tmp, desired.as_str())
                    .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
                    .and_then(|_| std::fs::rename(&tmp, &path))
            }
            _ => match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            },
        };
        let synced = written.and_then(|_| std::fs::File::open(&self.dir)?.sync_all());
        if let Err(e) = synced {
            tracing::warn!(pipeline = %name, error = %e, "could not record the desired status");
        }
    }

    fn save(&self, def: &PipelineDef) -> ApiResult<()> {
        let path = self.dir.join(format!("{}.json", def.name));
        let tmp = self.dir.join(format!(".{}.json.tmp", def.name));
        let bytes =
            serde_json::to_vec_pretty(def).map_err(|e| ApiError::internal(e.to_string()))?;
        std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| ApiError::internal(format!("saving pipeline '{}': {e}", def.name)))
    }

    /// Every pipeline's descriptor.
    pub fn list(&self, status_only: bool) -> Vec<PipelineDescriptor> {
        let pipelines = self.pipelines.lock().unwrap();
        pipelines
            .values()
            .map(|e| e.describe(status_only))
            .collect()
    }

    /// One pipeline's descriptor.
    pub fn get(&self, name: &str, status_only: bool) -> ApiResult<PipelineDescriptor> {
        let pipelines = self.pipelines.lock().unwrap();
        pipelines
            .get(name)
            .map(|e| e.describe(status_only))
            .ok_or_else(|| ApiError::unknown_pipeline(name))
    }

    /// Creates a pipeline or replaces a stopped one's definition. A program
    /// that does not check is stored as Feldera stores one that fails to
    /// compile: `program_status` is `SqlError`, `program_error` says where,
    /// and the pipeline cannot start until the program is fixed (Feldera's
    /// clients read the error from the stored pipeline, and remove it).
    /// Returns (descriptor, created).
    pub fn put(
        &self,
        name: &str,
        update: PipelineUpdate,
        create_only: bool,
    ) -> ApiResult<(PipelineDescriptor, bool)> {
        check_name(name)?;
        if let Some(n) = &update.name {
            if n != name {
                return Err(ApiError::bad_request(format!(
                    "the name in the body ('{n}') differs from the name in the path ('{name}')"
                )));
            }
        }
        for (field, value) in [
            ("runtime_config", &update.runtime_config),
            ("program_config", &update.program_config),
        ] {
            if value.as_ref().is_some_and(|v| !v.is_object()) {
                return Err(ApiError::bad_request(format!(
                    "'{field}' must be a JSON object"
                )));
            }
        }
        if let Some(config) = &update.runtime_config {
            RuntimeSettings::new(config.clone())
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
        }
        let code = update
            .program_code
            .clone()
            .ok_or_else(|| ApiError::bad_request("missing field 'program_code'"))?;
        if code.len() > self.limits.max_program_bytes {
            return Err(ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "PayloadTooLarge",
                format!(
                    "the program has {} bytes; this server takes programs of at most {} bytes (--max-program-bytes)",
                    code.len(),
                    self.limits.max_program_bytes
                ),
            ));
        }
        let checked = check(&code, &self.files);
        let mut pipelines = self.pipelines.lock().unwrap();
        let created = !pipelines.contains_key(name);
        if created && pipelines.len() >= self.limits.max_pipelines {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "TooManyPipelines",
                format!(
                    "this server holds at most {} pipelines (--max-pipelines); delete one first",
                    self.limits.max_pipelines
                ),
            ));
        }
        if !created && create_only {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "DuplicateName",
                format!("a pipeline named '{name}' already exists"),
            ));
        }
        let def = match pipelines.get(name) {
            Some(e) => {
                if e.status != Deployment::Stopped {
                    return Err(ApiError::state(format!(
                        "pipeline '{name}' is {}: stop it before changing it",
                        e.status.as_str()
                    )));
                }
                let mut def = e.def.clone();
                apply(&mut def, update);
                def
            }
            None => {
                let mut def = PipelineDef {
                    id: uuid(),
                    name: name.to_string(),
                    description: String::new(),
                    program_code: String::new(),
                    runtime_config: RuntimeSettings::default(),
                    program_config: json!({}),
                    udf_rust: String::new(),
                    udf_toml: String::new(),
                    tags: Vec::new(),
                    created_at: now(),
                    version: 0,
                    program_version: 0,
                };
                apply(&mut def, update);
                def
            }
        };
        self.save(&def)?;
        crate::logs::open(name);
        match &checked {
            Err(e) => {
                tracing::info!(pipeline = %name, error = %e, "program stored with an error: the pipeline cannot start until it is fixed");
            }
            Ok(_) => {
                tracing::info!(pipeline = %name, version = def.version, program_version = def.program_version, "pipeline defined: its program checked");
            }
        }
        let entry = Entry {
            def,
            checked,
            runner: None,
            status: Deployment::Stopped,
            desired: Deployment::Stopped,
            error: None,
            status_since: now(),
            checkpoints: CheckpointStatus::default(),
            resumed_from: None,
            stored: checkpoints::latest(&storage_dir(&self.dir, name)).is_some(),
            awaiting: None,
            bootstrapped: None,
        };
        let v = entry.describe(false);
        pipelines.insert(name.to_string(), entry);
        Ok((v, created))
    }

    /// Changes some fields of a stopped pipeline.
    pub fn patch(&self, name: &str, update: PipelineUpdate) -> ApiResult<PipelineDescriptor> {
        let current = {
            let pipelines = self.pipelines.lock().unwrap();
            let e = pipelines
                .get(name)
                .ok_or_else(|| ApiError::unknown_pipeline(name))?;
            e.def.program_code.clone()
        };
        if update.name.as_deref().is_some_and(|n| n != name) {
            return Err(ApiError::bad_request(
                "renaming a pipeline is not supported",
            ));
        }
        let update = PipelineUpdate {
            program_code: Some(update.program_code.clone().unwrap_or(current)),
            ..update
        };
        self.put(name, update, false).map(|(v, _)| v)
    }

    /// Deletes a stopped pipeline.
    pub fn delete(&self, name: &str) -> ApiResult<()> {
        let mut pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        if e.status != Deployment::Stopped {
            return Err(ApiError::state(format!(
                "pipeline '{name}' is {}: stop it before deleting it",
                e.status.as_str()
            )));
        }
        remove_storage(&self.dir, name)?;
        self.release_connectors(e);
        let path = self.dir.join(format!("{name}.json"));
        if let Err(e) = std::fs::remove_file(&path) {
            if e.kind() != std::io::ErrorKind::NotFound {
                return Err(ApiError::internal(format!(
                    "deleting '{}': {e}",
                    path.display()
                )));
            }
        }
        pipelines.remove(name);
        tracing::info!(pipeline = %name, "pipeline deleted, with its storage");
        crate::logs::forget(name);
        Ok(())
    }

    /// Starts a stopped pipeline (running, or paused when `paused`); a
    /// paused one is resumed unless `paused`. From a checkpoint of another
    /// program, `policy` says what to do. Returns whether it bootstrapped
    /// (a checkpoint of the new program should follow).
    pub fn start(
        &self,
        name: &str,
        paused: bool,
        policy: BootstrapPolicy,
        recover: Recover,
    ) -> ApiResult<bool> {
        let mut pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get_mut(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        match e.status {
            // (Replaying is only reported, never held.)
            Deployment::Running | Deployment::Paused | Deployment::Replaying => {
                let runner = e.runner.as_ref().expect("running pipelines have runners");
                runner.set_paused(paused);
                e.set_status(if paused {
                    Deployment::Paused
                } else {
                    Deployment::Running
                });
                e.desired = e.status;
                self.set_desired(name, e.desired);
                return Ok(false);
            }
            Deployment::Stopping => {
                return Err(ApiError::state(format!("pipeline '{name}' is stopping")));
            }
            Deployment::Stopped => {}
        }
        let checked = match &e.checked {
            Ok(c) => c,
            Err(err) => {
                let mut refused = program_error(err);
                refused.message = format!(
                    "pipeline '{name}' cannot start until its program is fixed: {}",
                    refused.message
                );
                return Err(refused);
            }
        };
        let planned = plan(
            &e.def,
            &checked.connectors,
            &self.files,
            &self.dir,
            policy,
            recover,
        );
        let start = match planned {
            Err(refused) => {
                // Damaged state the user must decide about: shown like a
                // start that failed.
                if refused.error_code == "StartFailed" {
                    e.error = Some(ErrorBody::new("StartFailed", refused.message.clone()));
                    e.desired = Deployment::Stopped;
                    self.set_desired(name, e.desired);
                }
                return Err(refused);
            }
            Ok(planned) => planned,
        };
        let (start, damaged) = start;
        let start = match start {
            Plan::AwaitApproval(diff) => {
                tracing::info!(pipeline = %name, changes = %diff.describe(), "awaiting approval of a changed program");
                e.awaiting = Some((paused, diff));
                return Ok(false);
            }
            Plan::Start(start) => start,
        };
        let started = limits::with_stack(limits::stack_for_text(e.def.program_code.len()), || {
            start_runner(
                &e.def,
                &checked.connectors,
                paused,
                &self.files,
                &self.dir,
                &start,
                recover,
            )
        });
        match started {
            Ok(runner) => {
                let runner = Arc::new(runner);
                if let Some(ft) = e.def.runtime_config.get().fault_tolerance() {
                    self.checkpoint_periodically(name, &runner, ft.checkpoint_interval_secs);
                }
                e.runner = Some(runner);
                e.resumed_from = start.checkpoint();
                e.awaiting = None;
                e.bootstrapped = start.diff().cloned();
                let bootstrapping = e.bootstrapped.is_some();
                e.stored = true;
                e.error = None;
                e.set_status(if paused {
                    Deployment::Paused
                } else {
                    Deployment::Running
                });
                e.desired = e.status;
                self.set_desired(name, e.desired);
                tracing::info!(pipeline = %name, paused, resumed_from = ?e.resumed_from, bootstrapped = bootstrapping, "pipeline started");
                // A start that gave up damaged state checkpoints at once,
                // so that the loss is accepted once.
                Ok(bootstrapping || recover == Recover::AcceptLoss)
            }
            Err(mut message) => {
                if !damaged.is_empty() {
                    message = format!("{message} ({})", damaged.join("; "));
                }
                tracing::warn!(pipeline = %name, error = %message, "pipeline failed to start");
                e.error = Some(ErrorBody::new("StartFailed", message.clone()));
                e.desired = Deployment::Stopped;
                e.set_status(Deployment::Stopped);
                Err(ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "StartFailed",
                    message,
                ))
            }
        }
    }

    /// [`Manager::start`], followed, when it bootstrapped a changed program,
    /// by a checkpoint of the new program, so that a crash does not compute
    /// it again.
    pub async fn launch(
        &self,
        name: &str,
        paused: bool,
        policy: BootstrapPolicy,
        recover: Recover,
    ) -> ApiResult<()> {
        if self.start(name, paused, policy, recover)? {
            if let Err(e) = self.checkpoint(name).await {
                tracing::warn!(pipeline = %name, error = %e.message, "checkpoint after bootstrapping failed");
            }
        }
        Ok(())
    }

    /// Starts a pipeline whose changed program awaits approval, keeping
    /// what did not change.
    pub async fn approve(&self, name: &str) -> ApiResult<()> {
        let paused = {
            let pipelines = self.pipelines.lock().unwrap();
            let e = pipelines
                .get(name)
                .ok_or_else(|| ApiError::unknown_pipeline(name))?;
            match &e.awaiting {
                Some((paused, _)) => *paused,
                None => {
                    return Err(ApiError::state(format!(
                        "pipeline '{name}' is not awaiting approval"
                    )))
                }
            }
        };
        self.launch(name, paused, BootstrapPolicy::Allow, Recover::Refuse)
            .await
    }

    /// Pauses a running pipeline.
    pub fn pause(&self, name: &str) -> ApiResult<()> {
        let mut pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get_mut(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        match (&e.runner, e.status) {
            (Some(r), Deployment::Running | Deployment::Paused) => {
                r.set_paused(true);
                e.set_status(Deployment::Paused);
                e.desired = Deployment::Paused;
                self.set_desired(name, e.desired);
                Ok(())
            }
            _ => Err(ApiError::state(format!(
                "pipeline '{name}' is {}: start it first",
                e.status.as_str()
            ))),
        }
    }

    /// Stops a pipeline: with `force`, after the current step; otherwise
    /// after processing the input already accepted, and with its state
    /// checkpointed when it has storage (a later start resumes from it).
    pub async fn stop(&self, name: &str, force: bool) -> ApiResult<()> {
        // In a task of its own: a client that goes away does not leave the
        // pipeline half stopped.
        let (me, name) = (self.me()?, name.to_string());
        tokio::spawn(async move { me.halt(&name, !force, true).await })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
    }

    fn me(&self) -> ApiResult<Arc<Manager>> {
        self.me
            .upgrade()
            .ok_or_else(|| ApiError::internal("the server is shutting down"))
    }

    /// Stops a pipeline; `graceful`: after the input already accepted, with
    /// a checkpoint; `forget`: it is not to run again after a restart.
    async fn halt(&self, name: &str, graceful: bool, forget: bool) -> ApiResult<()> {
        let runner = {
            let mut pipelines = self.pipelines.lock().unwrap();
            let e = pipelines
                .get_mut(name)
                .ok_or_else(|| ApiError::unknown_pipeline(name))?;
            if e.status == Deployment::Stopping {
                return Ok(());
            }
            if forget {
                e.awaiting = None;
                e.desired = Deployment::Stopped;
                self.set_desired(name, e.desired);
            }
            match e.runner.clone() {
                Some(r) => {
                    e.set_status(Deployment::Stopping);
                    r
                }
                None => return Ok(()),
            }
        };
        if graceful {
            runner.set_paused(false);
            let token = runner.feeder.token();
            runner.feeder.wait_processed(token).await;
            if self.has_storage(name) && runner.feeder.failure().is_none() {
                if let Err(e) = self.write_checkpoint(name, &runner).await {
                    tracing::warn!(pipeline = %name, error = %e.message, "checkpoint at stop failed");
                }
            }
        }
        let stopper = Arc::clone(&runner);
        let _ = tokio::task::spawn_blocking(move || stopper.stop()).await;
        let mut pipelines = self.pipelines.lock().unwrap();
        if let Some(e) = pipelines.get_mut(name) {
            if e.runner.as_ref().is_some_and(|r| Arc::ptr_eq(r, &runner)) {
                e.runner = None;
                e.set_status(Deployment::Stopped);
                tracing::info!(pipeline = %name, "pipeline stopped");
            }
        }
        Ok(())
    }

    /// Forgets the last deployment error.
    pub fn dismiss_error(&self, name: &str) -> ApiResult<()> {
        let mut pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get_mut(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        e.error = None;
        Ok(())
    }

    /// Clears a stopped pipeline's storage: its storage folder goes.
    pub fn clear(&self, name: &str) -> ApiResult<()> {
        let pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        if e.status != Deployment::Stopped {
            return Err(ApiError::state(format!(
                "pipeline '{name}' is {}: stop it before clearing its storage",
                e.status.as_str()
            )));
        }
        remove_storage(&self.dir, name)?;
        self.release_connectors(e);
        drop(pipelines);
        let mut pipelines = self.pipelines.lock().unwrap();
        if let Some(e) = pipelines.get_mut(name) {
            e.stored = false;
            e.checkpoints = CheckpointStatus::default();
            e.resumed_from = None;
            e.awaiting = None;
            e.bootstrapped = None;
        }
        tracing::info!(pipeline = %name, "storage cleared: the next start begins from nothing");
        Ok(())
    }

    /// Lets the connectors of a pipeline whose state was dropped release
    /// what they keep elsewhere for it (a replication slot).
    fn release_connectors(&self, e: &Entry) {
        if let Ok(checked) = &e.checked {
            crate::connector::release(
                checked.connectors.clone(),
                &e.def.name,
                &e.def.id,
                self.files.clone(),
            );
        }
    }

    /// Whether a pipeline keeps state in storage (`runtime_config.storage`
    /// is not `false`).
    fn has_storage(&self, name: &str) -> bool {
        let pipelines = self.pipelines.lock().unwrap();
        pipelines.get(name).is_some_and(|e| storage_enabled(&e.def))
    }

    /// Writes a checkpoint of a running pipeline (see [`checkpoints`]);
    /// returns its sequence number once it is durable.
    pub async fn checkpoint(&self, name: &str) -> ApiResult<u64> {
        let runner = self.runner(name)?;
        if !self.has_storage(name) {
            return Err(ApiError::state(format!(
                "pipeline '{name}' has no storage ('runtime_config.storage' is false): it cannot checkpoint"
            )));
        }
        // In a task of its own: a client that goes away does not cut the
        // checkpoint short.
        let (me, name) = (self.me()?, name.to_string());
        tokio::spawn(async move { me.write_checkpoint(&name, &runner).await })
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
    }

    /// The checkpoints requested of a pipeline and what became of them.
    pub fn checkpoint_status(&self, name: &str) -> ApiResult<CheckpointStatus> {
        let pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        Ok(e.checkpoints.clone())
    }

    /// Checkpoints a running pipeline every `secs` seconds while it runs.
    fn checkpoint_periodically(&self, name: &str, runner: &Arc<Runner>, secs: u64) {
        let (Some(me), Ok(rt)) = (self.me.upgrade(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (name, runner) = (name.to_string(), Arc::downgrade(runner));
        rt.spawn(async move {
            let period = std::time::Duration::from_secs(secs);
            // After a failure (a full disk), retried sooner: from 1 s,
            // doubling up to the period.
            let mut wait = period;
            loop {
                tokio::time::sleep(wait).await;
                let Some(runner) = runner.upgrade() else {
                    return;
                };
                let current = me.runner(&name).is_ok_and(|r| Arc::ptr_eq(&r, &runner));
                if !current || runner.feeder.is_stopping() {
                    return;
                }
                wait = match me.write_checkpoint(&name, &runner).await {
                    Ok(_) => period,
                    Err(e) => {
                        tracing::warn!(pipeline = %name, error = %e.message, "periodic checkpoint failed");
                        let retry = if wait == period {
                            std::time::Duration::from_secs(1)
                        } else {
                            wait * 2
                        };
                        retry.min(period)
                    }
                };
            }
        });
    }

    async fn write_checkpoint(&self, name: &str, runner: &Runner) -> ApiResult<u64> {
        let _one_at_a_time = self.checkpointing.lock().await;
        let storage = storage_dir(&self.dir, name);
        let (n, program_version, program_code, workers) = {
            let mut pipelines = self.pipelines.lock().unwrap();
            let e = pipelines
                .get_mut(name)
                .ok_or_else(|| ApiError::unknown_pipeline(name))?;
            let last = [
                checkpoints::latest(&storage).map(|(n, _)| n),
                e.checkpoints.success,
                e.checkpoints.failure.as_ref().map(|f| f.sequence_number),
            ];
            let n = last.into_iter().flatten().max().unwrap_or(0) + 1;
            e.checkpoints.failure = Some(CheckpointFailure {
                sequence_number: n,
                error: "in progress".into(),
            });
            let workers = e.def.runtime_config.get().workers();
            (
                n,
                e.def.program_version,
                e.def.program_code.clone(),
                workers,
            )
        };
        let started = std::time::Instant::now();
        let written = async {
            let tmp = checkpoints::begin(&storage, n).map_err(|e| e.to_string())?;
            let done = runner.checkpoint(tmp.clone()).await?;
            let manifest = checkpoints::Manifest {
                created_at: now(),
                program_version,
                program_code: Some(program_code),
                steps: runner
                    .feeder
                    .stats
                    .steps
                    .load(std::sync::atomic::Ordering::Relaxed),
                written_bytes: done.written,
                linked_bytes: done.linked,
                journal: done.positions.journal,
                workers: workers as u64,
                journaled: runner.feeder.journaled(),
                ..checkpoints::Manifest::default()
            };
            let folder =
                checkpoints::commit(&storage, &tmp, n, manifest).map_err(|e| e.to_string())?;
            runner.feeder.checkpointed(done.positions.inputs.clone());
            remove_other_journals(&storage, program_version);
            runner.committed(folder);
            // The checkpoint holds the journal's records up to here; the
            // journal keeps what the older kept checkpoint lacks as well,
            // so that a start from it (the newest damaged) loses nothing.
            let older = checkpoints::list(&storage)
                .iter()
                .rev()
                .nth(1)
                .map(|(_, dir)| checkpoints::Manifest::read(dir).map_or(0, |m| m.journal));
            let upto = older.map_or(0, |o| o.min(done.positions.journal));
            runner.feeder.truncate_journal(upto)
        }
        .await;
        runner
            .feeder
            .stats
            .checkpoint_written(written.as_ref().err().cloned(), started.elapsed());
        let mut pipelines = self.pipelines.lock().unwrap();
        let e = pipelines.get_mut(name);
        match written {
            Ok(()) => {
                tracing::info!(pipeline = %name, sequence_number = n, millis = started.elapsed().as_millis() as u64, "checkpoint done");
                if let Some(e) = e {
                    e.checkpoints.success = Some(n);
                    e.checkpoints.failure = None;
                    e.stored = true;
                }
                Ok(n)
            }
            Err(message) => {
                // What the failed checkpoint wrote takes no space.
                checkpoints::remove_unfinished(&storage);
                if let Some(e) = e {
                    e.checkpoints.failure = Some(CheckpointFailure {
                        sequence_number: n,
                        error: message.clone(),
                    });
                }
                Err(ApiError::internal(format!(
                    "checkpoint {n} failed: {message}"
                )))
            }
        }
    }

    /// The runner of a running or paused pipeline.
    pub fn runner(&self, name: &str) -> ApiResult<Arc<Runner>> {
        let pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        let runner = e.runner.clone().ok_or_else(|| {
            ApiError::state(format!(
                "pipeline '{name}' is {}: start it first",
                e.status.as_str()
            ))
        })?;
        match runner.feeder.failure() {
            None => Ok(runner),
            Some(m) => Err(ApiError::internal(format!(
                "pipeline '{name}' failed and takes no more steps: {m}; stop and start it again"
            ))),
        }
    }

    /// The server's limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// The limits of an ad-hoc query of a pipeline.
    pub fn query_limits(&self, name: &str) -> ApiResult<QueryLimits> {
        let pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        Ok(self.limits.query(e.def.runtime_config.get()))
    }

    /// Whether a pipeline is paused.
    pub fn is_paused(&self, name: &str) -> bool {
        let pipelines = self.pipelines.lock().unwrap();
        pipelines
            .get(name)
            .is_some_and(|e| e.status == Deployment::Paused)
    }

    /// The names of the tables and views of a pipeline's program.
    pub fn relations(&self, name: &str) -> ApiResult<(Vec<String>, Vec<String>)> {
        let pipelines = self.pipelines.lock().unwrap();
        let e = pipelines
            .get(name)
            .ok_or_else(|| ApiError::unknown_pipeline(name))?;
        let names = |views: bool| -> Vec<String> {
            e.checked
                .as_ref()
                .map(|c| {
                    c.info
                        .relations(views)
                        .iter()
                        .map(|r| r.name.clone())
                        .collect()
                })
                .unwrap_or_default()
        };
        Ok((names(false), names(true)))
    }

    /// The tables and views of a pipeline whose rows are not kept, so
    /// that ad-hoc queries cannot read them (not declared materialized).
    pub fn unmaterialized(&self, name: &str) -> Vec<Unmaterialized> {
        let pipelines = self.pipelines.lock().unwrap();
        let Some(Ok(checked)) = pipelines.get(name).map(|e| e.checked.as_ref()) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for view in [false, true] {
            out.extend(
                checked
                    .info
                    .relations(view)
                    .iter()
                    .filter(|r| !r.materialized)
                    .map(|r| Unmaterialized {
                        name: r.name.clone(),
                        view,
                    }),
            );
        }
        out
    }

    /// A query's error message, with the reason when it names a table or
    /// view of pipeline `name` that is not materialized (DataFusion says
    /// only "table … not found").
    pub fn explain_query_error(&self, name: &str, message: String) -> String {
        let hint = self.unmaterialized(name).into_iter().find(|r| {
            let t = &r.name;
            message.contains("not found")
                && (message.contains(&format!("'{t}'")) || message.contains(&format!(".{t}'")))
        });
        match hint {
            Some(r) => format!("{message} ({})", r.reason()),
            None => message,
        }
    }

    /// Stops every pipeline (server shutdown): each processes the input
    /// it accepted, checkpoints when it has storage and flushes its
    /// outputs; those running now start again when the server restarts.
    pub async fn shutdown(&self) {
        let names: Vec<String> = self.pipelines.lock().unwrap().keys().cloned().collect();
        for name in names {
            let _ = self.halt(&name, true, false).await;
        }
    }
}

/// A table or view whose rows a pipeline does not keep.
pub struct Unmaterialized {
    /// Its name.
    pub name: String,
    /// Whether it is a view (else a table).
    pub view: bool,
}

impl Unmaterialized {
    /// Why it cannot be read, and what to declare so that it can.
    pub fn reason(&self) -> String {
        match self.view {
            true => format!(
                "view '{}' is not materialized: declare it CREATE MATERIALIZED VIEW to read its rows",
                self.name
            ),
            false => format!(
                "table '{}' is not materialized: declare it WITH ('materialized' = 'true') to query it",
                self.name
            ),
        }
    }
}

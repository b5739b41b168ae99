//! A running pipeline's dataflow (`GET /v0/pipelines/{name}/circuit`): the
//! nodes of its circuit, the nodes each reads, the table or view whose
//! definition built it, and what it has cost — time and rows per
//! evaluation since the pipeline started, and the state it keeps. The
//! console draws it; a user reads where the time and the memory go.

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

use super::{PipelinePath, St};
use crate::error::ApiResult;
use crate::stats::{Dataflow, PipelineStats};

/// A pipeline's circuit, as of a recent step (measured after a step at
/// most once a second).
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitReport {
    /// Steps taken when it was measured.
    pub steps: u64,
    /// Every node, in evaluation order (a node reads only earlier ones).
    pub nodes: Vec<CircuitNode>,
}

/// One node of a circuit.
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitNode {
    pub id: u64,
    /// The operator (`join`, `aggregate`, `map`, …; `join×4` when split
    /// over four workers).
    pub operator: String,
    /// The nodes it reads.
    pub inputs: Vec<u64>,
    /// The table or view whose definition built it (null for none).
    pub relation: Option<String>,
    /// Steps that evaluated it (a step whose inputs are all empty may
    /// leave it quiet).
    pub evaluations: u64,
    /// Time its evaluations took, in microseconds.
    pub time_micros: u64,
    /// Rows of changes it read and produced.
    pub rows_in: u64,
    pub rows_out: u64,
    /// The state it keeps: entries, bytes in memory and in storage files
    /// (0 for a node that keeps none).
    pub state_entries: u64,
    pub memory_bytes: u64,
    pub storage_bytes: u64,
    /// The workers its state is split over.
    pub shards: u64,
}

impl CircuitReport {
    /// The circuit as `stats` last measured it.
    pub fn of(stats: &PipelineStats) -> Self {
        let Dataflow { steps, nodes } = stats.dataflow.lock().unwrap().clone();
        let state = stats.state.lock().unwrap().clone();
        let nodes = nodes
            .into_iter()
            .map(|(n, relation)| {
                // A node may keep an operator's state and a view's
                // contents both.
                let kept = state.iter().filter(|s| s.node == n.id);
                let (mut entries, mut memory, mut storage, mut shards) = (0, 0, 0, 1);
                for s in kept {
                    entries += s.entries as u64;
                    memory += s.bytes as u64;
                    storage += s.storage_bytes as u64;
                    shards = shards.max(s.shards as u64);
                }
                CircuitNode {
                    id: n.id as u64,
                    operator: n.operator,
                    inputs: n.inputs.iter().map(|&i| i as u64).collect(),
                    relation,
                    evaluations: n.profile.evaluations,
                    time_micros: n.profile.time.as_micros() as u64,
                    rows_in: n.profile.rows_in,
                    rows_out: n.profile.rows_out,
                    state_entries: entries,
                    memory_bytes: memory,
                    storage_bytes: storage,
                    shards,
                }
            })
            .collect();
        Self { steps, nodes }
    }
}

/// The pipeline's dataflow.
///
/// The nodes of a running or paused pipeline's circuit, what each reads,
/// which table or view it belongs to, and its costs. A stopped pipeline is
/// a 400 `IllegalPipelineAction`.
#[utoipa::path(get, path = "/v0/pipelines/{name}/circuit", tag = "Metrics", params(PipelinePath),
    responses((status = 200, description = "The circuit.", body = CircuitReport)))]
pub async fn circuit(State(s): St, Path(name): Path<String>) -> ApiResult<Json<CircuitReport>> {
    let runner = s.manager.runner(&name)?;
    Ok(Json(CircuitReport::of(&runner.feeder.stats)))
}
